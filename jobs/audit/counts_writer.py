"""The audit's counts MERGE, moved off the micro-batch's path and made durable first.

Why: a Delta MERGE into `audit_counts` has a fixed cost per batch, whatever its size, of the
order of what the JVM fold spends on a large batch (docs/benchmarks.md has the figures). Run
in line, it would stand between every two batches of the fold.

How: through the one owner of writes after Spark's commit (`jobs.runtime.after_commit`,
whose docstring has the steps and the guarantee). For batch N, `submit` (in foreachBatch)
saves N's partials to `<checkpoint>/audit-partials/N` (sketches in base64) and queues them;
the writer's thread MERGEs them once Spark has committed N, or at once when the job is about
to wait between batches (flow control, `release`). Batches ready meanwhile are combined
(`transforms.combine_partials`) into one MERGE whose idempotent-write marker is the newest
batch's id. While the table holds no row of the query's groups (a new table,
`delta.never_written`, or new groups: `delta.holds_rows_of` their partitions), the write is a
plain append of what the MERGE would insert: the MERGE's matching pass is its costliest part,
most of all in a cold JVM or for a pack of many new groups (a file read and rewritten per
group). `drain` (after the query) MERGEs everything still queued; `recover` (before the
query) has every file a crashed run left MERGEd, before any batch of the new run, a batch
the table already holds skipped by its marker (`jobs.runtime.delta.merge_once`).

Guarantee: exactly-once per checkpoint, as with an in-line MERGE: a batch Spark replays
computes the same partials, whose second MERGE commits nothing.

Visibility: a batch's counts are in the table one MERGE after Spark commits it, not when
foreachBatch returns.

Fault points (core/faults.py): `audit.partials_saved`, `audit.counts_merging`,
`audit.counts_merged`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from functools import reduce

from pyspark.sql import DataFrame, SparkSession

from core.faults import fault_point
from jobs.audit import tables
from jobs.audit.transforms import combine_partials
from jobs.runtime.after_commit import AfterCommitWriter, Ready, tables_held_through
from jobs.runtime.delta import ensure, holds_rows_of, never_written
from jobs.runtime.saved_rows import decode_rows, encode_rows

log = logging.getLogger("uatu.audit")

FOLDER = "audit-partials"


class CountsWriter:
    """Saves each batch's partials under the checkpoint, MERGEs them into `audit_counts` in a
    thread of its own once Spark has committed the batch. One per run of the audit job."""

    def __init__(
        self,
        counts_path: str,
        checkpoint: str,
        app_id: Callable[[SparkSession], str],
        job_group_id: str,
        routes: tables.Routes = (),
    ):
        self.counts_path = counts_path
        # Whose rows of audit_counts these are: the group's, or a pack's members' by topic.
        self.job_group_id = job_group_id
        self.routes = routes
        self.checkpoint = checkpoint
        self._app_id = app_id
        self.batches: AfterCommitWriter[DataFrame] = AfterCommitWriter(
            checkpoint,
            FOLDER,
            tables.AUDIT_COUNTS.name,
            self._write,
            decode_rows,
            log,
            at_saved=_partials_saved,
            at_writing=_counts_merging,
            at_written=_counts_merged,
            held_through=self._held_through,
        )
        # until seen: a table without rows of the query's groups is appended to, not MERGEd
        self._table_has_rows = False
        self._table_created: Future[None] | None = None

    def create_table_beside(self, spark: SparkSession) -> None:
        """Create the (new) counts table in the background: the first Delta operation of a
        session takes seconds, and nothing needs the table before the first write, which
        waits for it. A failure surfaces there, as a failed MERGE would."""
        creating = ThreadPoolExecutor(1, thread_name_prefix="audit-counts-table")
        self._table_created = creating.submit(ensure, spark, tables.AUDIT_COUNTS, self.counts_path)
        creating.shutdown(wait=False)

    def recover(self, spark: SparkSession, *, in_background: bool = False) -> list[int]:
        """Before the query: MERGE the partials a previous run saved and did not delete
        (`AfterCommitWriter.recover`: in batch order, together where the table's marker
        allows; with `in_background`, beside the query, before its own); the batch ids."""
        return self.batches.recover(spark, in_background=in_background)

    def submit(self, spark: SparkSession, batch_id: int, partials: DataFrame) -> None:
        """In foreachBatch: save batch `batch_id`'s partials (durable on return) and queue
        their MERGE (`AfterCommitWriter.submit`: raises an earlier MERGE's error)."""
        self.batches.submit(spark, batch_id, encode_rows(partials))

    def release(self, batch_id: int) -> None:
        """MERGE the batches through `batch_id` without waiting for Spark's commit (the query
        is about to wait)."""
        self.batches.release(batch_id)

    def drain(self) -> int:
        """After the query: MERGE every queued batch now; the newest batch id in the table
        (-1 if none was written by this run). Raises the error of a failed MERGE."""
        return self.batches.drain()

    def close(self) -> None:
        """Stop the thread; queued batches that were not MERGEd stay saved for `recover`."""
        self.batches.close()

    def _held_through(self, spark: SparkSession, ready: Ready[DataFrame]) -> list[tuple[int, int]]:
        """What audit_counts holds of a crashed run's batches (after_commit.HeldThrough)."""
        return [tables_held_through(spark, [self.counts_path], self._app_id(spark))] * len(ready)

    def _write(self, spark: SparkSession, ready: Ready[DataFrame]) -> str:
        """MERGE the batches' partials, combined, under the newest batch's marker; or append
        to a table without rows of the query's groups (the module docstring); says which."""
        if len(ready) == 1:
            source = ready[0][1]
        else:
            source = reduce(DataFrame.unionByName, (p for _, p in ready)).transform(
                combine_partials
            )
        app_id = self._app_id(spark)
        batch_id = ready[-1][0]
        if self._table_created is not None:
            self._table_created.result()
        looked = ""
        if not self._table_has_rows:
            since = time.monotonic()
            self._table_has_rows = not never_written(spark, self.counts_path) and holds_rows_of(
                spark,
                self.counts_path,
                tables.AUDIT_COUNTS.writer_column,
                tables.writers(self.job_group_id, self.routes),
            )
            looked = f"; its groups' rows looked for in {time.monotonic() - since:.1f} s"
        if self._table_has_rows:
            tables.merge_counts(
                source, self.counts_path, app_id, batch_id, self.job_group_id, self.routes
            )
            return "MERGE" + looked
        tables.insert_counts(
            source, self.counts_path, app_id, batch_id, self.job_group_id, self.routes
        )
        self._table_has_rows = True
        return "append" + looked


def _partials_saved() -> None:
    fault_point("audit.partials_saved")  # core/faults.py: tests only


def _counts_merging() -> None:
    fault_point("audit.counts_merging")  # core/faults.py: tests only


def _counts_merged() -> None:
    fault_point("audit.counts_merged")  # core/faults.py: tests only
