"""Every Delta table the jobs write keeps its schema: the declarations in jobs/**/tables.py
against a committed golden (tests/jobs/golden/table_schemas.json).

A renamed, retyped, reordered, re-nulled or dropped column, a changed partitioning or MERGE
key, and a new table without a golden entry all fail here: users' SQL and the integrations
read these columns by name. A deliberate change regenerates the golden, whose diff then shows
the change for review:

    UATU_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/jobs/test_table_schemas.py

No JVM: the declarations are pyspark types, not tables.
"""

from __future__ import annotations

import importlib
import json
import os
from pathlib import Path

from core.paths import ROOT
from integrations.tables import TABLES
from jobs.runtime.delta import DeltaTableSpec

GOLDEN = Path(__file__).parent / "golden" / "table_schemas.json"


def declared_tables() -> dict[str, DeltaTableSpec]:
    """{name: spec} of every DeltaTableSpec at the top level of a jobs/**/tables.py module."""
    found: dict[str, DeltaTableSpec] = {}
    for path in sorted((ROOT / "jobs").glob("**/tables.py")):
        package = ".".join(path.parent.relative_to(ROOT).parts)
        module = importlib.import_module(f"{package}.tables")
        for value in vars(module).values():
            if isinstance(value, DeltaTableSpec):
                assert value.name not in found, f"two tables named {value.name}"
                found[value.name] = value
    return found


def pinned(table: DeltaTableSpec) -> dict:
    return {
        "partition_by": list(table.partition_by),
        "keys": list(table.keys),
        # Spark's own JSON form of the schema: names, types (nested ones too), nullability.
        "schema": table.schema.jsonValue(),
    }


def test_every_table_the_jobs_write_matches_its_golden_schema() -> None:
    declared = {name: pinned(t) for name, t in sorted(declared_tables().items())}
    if os.environ.get("UATU_UPDATE_GOLDEN") == "1":
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_text(json.dumps(declared, indent=1, sort_keys=True) + "\n")
    assert GOLDEN.exists(), f"no golden {GOLDEN}; run with UATU_UPDATE_GOLDEN=1"
    golden = json.loads(GOLDEN.read_text())
    assert sorted(declared) == sorted(golden), "a table was added or removed"
    for name, want in golden.items():
        have = declared[name]
        assert have["partition_by"] == want["partition_by"], f"{name}: partitioning changed"
        assert have["keys"] == want["keys"], f"{name}: MERGE keys changed"
        assert _columns(have) == _columns(want), f"{name}: columns changed"
        assert have["schema"] == want["schema"], f"{name}: nested types or metadata changed"


def test_the_golden_covers_every_table_users_query() -> None:
    """integrations/ (reports, notifier, SQL helpers) knows tables by name: each is pinned."""
    assert set(TABLES) <= set(json.loads(GOLDEN.read_text()))


def _columns(entry: dict) -> list[tuple[str, object, bool]]:
    """(name, type, nullable) per top-level column, in order: the readable part of a diff."""
    return [(f["name"], f["type"], f["nullable"]) for f in entry["schema"]["fields"]]
