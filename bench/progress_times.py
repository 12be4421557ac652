"""When the bench saw a group's progress: its checkpoint's commits (Spark's), and the first
rows of each value of a partition column in a Delta table, read from the table's add
actions (delta-rs, no Spark): for the worker-pool bench, when each audit group's counts could
first be queried in `audit_counts` (partitioned by job_group_id), as against Spark's commit
of its first batch.

A MERGE replaces the files it rewrites, so the current files of a value may all be newer than
its first write: `FirstRows` polls from before the first write and keeps the earliest file
time it ever saw per value.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError

from jobs.runtime.pack_generations import LEDGER


def commits(checkpoints: Path, group_id: str) -> list[Path]:
    """The commit files of the group's checkpoint: its own, the pack generation its ledger
    names (a group in a pack), or its topics' queries' (a dispatcher's `topics/<topic>`)."""
    folder = checkpoints / group_id
    ledger = folder / LEDGER
    if ledger.exists():
        folder = Path(json.loads(ledger.read_text())["checkpoint"])
    return [*folder.glob("commits/[0-9]*"), *folder.glob("topics/*/commits/[0-9]*")]


def committed_after(checkpoints: Path, group_id: str, since: float) -> bool:
    return any(p.stat().st_mtime > since for p in commits(checkpoints, group_id))


def file_times(table: Path, column: str) -> dict[str, float]:
    """Each value of partition column `column` among the table's current files -> the
    earliest modification time of those files (POSIX seconds); empty before the table
    exists."""
    try:
        actions = pa.table(DeltaTable(str(table)).get_add_actions(flatten=True))
    except TableNotFoundError:
        return {}
    values = actions.column(f"partition.{column}").to_pylist()
    times = actions.column("modification_time").to_pylist()
    earliest: dict[str, float] = {}
    for value, millis in zip(values, times, strict=True):
        earliest[value] = min(earliest.get(value, float("inf")), millis / 1000)
    return earliest


class FirstRows(threading.Thread):
    """Polls `table` every `every` seconds until stopped; `seen` holds, per value of
    `column`, the earliest file time seen."""

    def __init__(self, table: Path, column: str, every: float = 2.0) -> None:
        super().__init__(name="first-rows", daemon=True)
        self.table, self.column, self.every = table, column, every
        self.seen: dict[str, float] = {}
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.wait(self.every):
            self.look()

    def look(self) -> None:
        """One poll: the table's file times now, the earliest kept."""
        for value, at in file_times(self.table, self.column).items():
            self.seen[value] = min(self.seen.get(value, at), at)

    def since(self, added: dict[str, float]) -> list[float]:
        """Seconds from each added value's time to its first rows, for those seen."""
        return [self.seen[v] - at for v, at in added.items() if v in self.seen]
