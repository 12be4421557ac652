"""The continuous copy's own progress log, in `<checkpoint>/continuous/` (Hadoop file system).

The continuous copy runs outside Spark's micro-batch engine, so it keeps what Spark's
checkpoint keeps for a query, in the same shape (`offsets/N` written before batch N's stats,
`commits/N` after them):

======================  =================================================================
file                    content (JSON)
======================  =================================================================
metadata                {"id": ...}: the run-independent id of this copy, the Delta txnAppId
                        of its stats (so a replayed batch is not recorded twice)
start                   {"offsets": {partition: offset}}: where the copy started, resolved
                        once (latest and timestamps become offsets), so a restart before the
                        first stats batch starts at the same place
offsets/N               {"from": {...}, "until": {...}}: the source offsets stats batch N
                        covers, written once its records are all acknowledged
commits/N               {}: batch N's stats are in both Delta tables
======================  =================================================================

What the destination holds is not read from here: every restart reads the destination's
provenance stamps (DestinationTail.java) and sends nothing the destination already has. The
log only says where the stats stand, so that every source offset is counted once in
`replication_stats` even across crashes: a restart re-reads from the last committed batch's
end and counts what the destination holds already as `records_already_present`.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from pyspark.sql import SparkSession

from jobs.runtime.checkpoint_files import CheckpointFiles

FOLDER = "continuous"


@dataclass(frozen=True)
class LoggedBatch:
    """Stats batch `batch_id`: source offsets [starts[p], ends[p]) of every partition."""

    batch_id: int
    starts: Mapping[int, int]
    ends: Mapping[int, int]
    committed: bool


def resume_offsets(
    partitions: tuple[int, ...],
    last: LoggedBatch | None,
    logged_start: Mapping[int, int] | None,
    earlier_run: Mapping[int, int] | None,
    planned: Mapping[int, int],
    earliest: Mapping[int, int],
) -> dict[int, int]:
    """Where each partition's copy resumes (pure).

    The last logged batch's ends, if any; else the start logged by the first run; else the end
    of a micro-batch query that ran from the same checkpoint before (`earlier_run`); else the
    planned starts (the JobGroup's starting point, resolved to offsets). A partition the log
    does not know (the topic grew) starts at its earliest offset, as Spark's source does.
    """
    known: Mapping[int, int] | None = None
    if last is not None:
        known = last.ends
    elif logged_start is not None:
        known = logged_start
    elif earlier_run:
        known = earlier_run
    if known is None:
        return {p: planned[p] for p in partitions}
    return {p: known[p] if p in known else earliest[p] for p in partitions}


class ProgressLog:
    """The files of the log under `<checkpoint>/continuous` (`jobs.runtime.checkpoint_files`:
    Hadoop's FileSystem, each write atomic for a reader)."""

    def __init__(self, spark: SparkSession, checkpoint: str) -> None:
        self._files = CheckpointFiles(spark, checkpoint, FOLDER)

    # --- reading ----------------------------------------------------------------------------

    def app_id(self) -> str:
        """The copy's id, created on the first call for a new checkpoint."""
        metadata = self._files.read("metadata")
        if metadata is None:
            metadata = {"id": str(uuid.uuid4())}
            self._files.write("metadata", metadata)
        return str(metadata["id"])

    def start(self) -> dict[int, int] | None:
        data = self._files.read("start")
        return None if data is None else _offsets(data["offsets"])

    def last(self) -> LoggedBatch | None:
        """The newest batch in offsets/, and whether commits/ has it."""
        batches = self._files.numbers("offsets")
        if not batches:
            return None
        batch_id = batches[-1]
        data = self._files.read(f"offsets/{batch_id}")
        assert data is not None
        return LoggedBatch(
            batch_id,
            _offsets(data["from"]),
            _offsets(data["until"]),
            self._files.exists(f"commits/{batch_id}"),
        )

    # --- writing ----------------------------------------------------------------------------

    def write_start(self, offsets: Mapping[int, int]) -> None:
        self._files.write("start", {"offsets": _json_offsets(offsets)})

    def write_batch(
        self, batch_id: int, starts: Mapping[int, int], ends: Mapping[int, int]
    ) -> None:
        self._files.write(
            f"offsets/{batch_id}", {"from": _json_offsets(starts), "until": _json_offsets(ends)}
        )

    def write_commit(self, batch_id: int) -> None:
        self._files.write(f"commits/{batch_id}", {})


def _offsets(data: Mapping[str, int]) -> dict[int, int]:
    return {int(p): int(o) for p, o in data.items()}


def _json_offsets(offsets: Mapping[int, int]) -> dict[str, int]:
    return {str(p): int(o) for p, o in sorted(offsets.items())}
