"""Read an append-only Delta table's rows without Spark (pyarrow over its live files), for the
demo and benches that only need to print or sum a small table."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def read_append_only(path: Path) -> list[dict[str, Any]]:
    """Every row of the table at `path`. Only for tables that are never updated or deleted
    from (every file a commit adds is live), such as dispatch_stats."""
    import pyarrow.parquet as pq

    rows: list[dict[str, Any]] = []
    for commit in sorted((path / "_delta_log").glob("*.json")):
        for line in commit.read_text().splitlines():
            action = json.loads(line)
            if "remove" in action:
                raise ValueError(f"{path} is not append-only: {commit.name} removes a file")
            if "add" in action:
                rows.extend(pq.read_table(path / action["add"]["path"]).to_pylist())
    return rows
