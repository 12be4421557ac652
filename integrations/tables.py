"""The jobs' Delta tables, read with delta-rs (`deltalake`): no Spark, no JVM.

Every table a job writes has a name and a default path, `<warehouse>/<name>` (the defaults
of `conf/uatu.yaml`'s warehouse and `extension.output`). `find_tables` lists those present.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable

# name -> the job that writes it (docs/audit.md, replication.md, availability.md); the
# verdict table is read through integrations/verdicts.py
TABLES = {
    "audit_counts": "audit",
    "audit_verdicts": "audit (cross-tier AuditTypes)",
    "replication_gaps": "audit (the REPLICATION check)",
    "replication_stats": "replication",
    "replication_audit": "replication",
    "availability_probes": "availability",
    "topic_availability": "availability",
    "consumer_offset_commits": "availability",
    "consumer_group_status": "availability",
}


def find_tables(warehouse: Path | str) -> dict[str, str]:
    """{name: path} of every known table present under `warehouse`."""
    root = Path(warehouse)
    return {name: str(root / name) for name in TABLES if DeltaTable.is_deltatable(str(root / name))}


def read(
    path: str,
    columns: Sequence[str] | None = None,
    filters: list[tuple[str, str, Any]] | None = None,
) -> pa.Table:
    """The table (optionally some columns, rows matching `filters`) as Arrow."""
    return DeltaTable(path).to_pyarrow_table(
        columns=list(columns) if columns else None, filters=filters
    )


def rows(path: str, columns: Sequence[str] | None = None) -> list[dict[str, Any]]:
    return read(path, columns).to_pylist()
