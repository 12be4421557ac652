"""A dispatcher query's `dispatch_stats` rows, appended after Spark's commit of their batch.

One `StatsWriter` per topic query (the source, each retry tier, the resq: each has its own
checkpoint). `submit` (in foreachBatch, once every record of the batch is done) saves the
batch's rows under `<checkpoint>/dispatch-stats/N` and returns; a thread appends them once
Spark has committed the batch, off the batch's path (`jobs.runtime.after_commit`: the steps
and the guarantee; `recover` before the queries, `finish` after them). Batches committed
meanwhile go into one append per idempotent-write id.

The id is saved with the rows: a batch a crash cut short is dispatched again, and its rows
must land beside the first attempt's (`marker`). A crash after the rows were saved and before
Spark's commit therefore leaves both attempts' rows, as a crash after an in-line append did;
one after Spark's commit and before the append is repaired from the file alone.

Fault points (core/faults.py), scoped by the query's topic: `dispatch.before_checkpoint` (the
rows saved, Spark's commit to come), `dispatch.stats_writing` (committed, not appended).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import reduce
from itertools import groupby
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from core.faults import fault_point
from jobs.dispatch import tables
from jobs.runtime.after_commit import (
    STATS_WRITE_SLOTS,
    AfterCommitWriter,
    Ready,
    tables_held_through,
)
from jobs.runtime.delta import append_once
from jobs.runtime.saved_rows import decode_rows, encode_values

log = logging.getLogger("uatu.dispatch")

FOLDER = "dispatch-stats"


@dataclass(frozen=True)
class BatchStats:
    """One batch's dispatch_stats rows (a local relation, fixed when the batch was done) and
    the idempotent-write id they are appended under."""

    rows: DataFrame
    app_id: str


def marker(query_app_id: str, redelivered: bool, application_id: str) -> str:
    """The idempotent-write id of a batch's dispatch_stats append. A redelivered batch was
    dispatched again, so its rows must land even when the cut-short attempt's rows were saved
    or written (a crash between the save and the checkpoint): they get an id of this
    application run, under which a batch id is still written once."""
    if not redelivered:
        return query_app_id
    return f"{query_app_id}-redelivery-{application_id}"


class StatsWriter:
    """Saves a topic query's batch rows under its checkpoint and appends them to
    dispatch_stats after Spark's commit."""

    def __init__(self, table_path: str, checkpoint: str, topic: str) -> None:
        self.table_path = table_path
        self.topic = topic
        self.batches: AfterCommitWriter[BatchStats] = AfterCommitWriter(
            checkpoint,
            FOLDER,
            f"dispatch_stats of {topic}",
            self._write,
            _decode,
            log,
            at_saved=self._saved,
            at_writing=self._writing,
            write_slots=STATS_WRITE_SLOTS,  # with the other stats writers of the application
            held_through=self._held_through,
        )

    def submit(
        self,
        spark: SparkSession,
        batch_id: int,
        stats: Sequence[Mapping[str, Any]],
        app_id: str,
    ) -> list[dict[str, Any]]:
        """In foreachBatch: save the batch's rows (`transforms.dispatch_stats_rows`, computed
        now: their batch_time is the batch's), durable on return, and queue their append; the
        rows, as saved (timestamps in epoch microseconds, binary in base64)."""
        rows = encode_values(tables.STATS_SCHEMA, stats)
        self.batches.submit(spark, batch_id, {"app_id": app_id, "rows": rows})
        return list(rows["rows"])

    def _write(self, spark: SparkSession, ready: Ready[BatchStats]) -> str:
        """One append per run of batches under the same id, marked with its newest batch."""
        appends = 0
        for app_id, same in groupby(ready, key=lambda b: b[1].app_id):
            batches = list(same)
            rows = reduce(DataFrame.unionByName, (b.rows for _, b in batches))
            # One file per append: the rows are few, and each extra file costs more than it.
            append_once(
                rows.coalesce(1), tables.DISPATCH_STATS, self.table_path, app_id, batches[-1][0]
            )
            appends += 1
        return f"{appends} append(s)"

    def _held_through(self, spark: SparkSession, ready: Ready[BatchStats]) -> list[tuple[int, int]]:
        """What the table holds of a crashed run's batches, each under its own write id
        (after_commit.HeldThrough)."""
        held: dict[str, tuple[int, int]] = {}
        for _, batch in ready:
            if batch.app_id not in held:
                held[batch.app_id] = tables_held_through(spark, [self.table_path], batch.app_id)
        return [held[batch.app_id] for _, batch in ready]

    def _saved(self) -> None:
        fault_point("dispatch.before_checkpoint", self.topic)  # core/faults.py: tests only

    def _writing(self) -> None:
        fault_point("dispatch.stats_writing", self.topic)  # core/faults.py: tests only


def _decode(spark: SparkSession, saved: dict[str, Any]) -> BatchStats:
    return BatchStats(decode_rows(spark, saved["rows"]), saved["app_id"])
