"""The audit's counts MERGE, moved off the micro-batch's path and made durable first.

Why: a Delta MERGE into `audit_counts` has a fixed cost per batch, whatever its size, of the
order of what the JVM fold spends on a large batch (docs/benchmarks.md has the figures). Run
in line, it would stand between every two batches of the fold.

How, for batch N:
1. `submit` (in foreachBatch) saves N's partials to `<checkpoint>/audit-partials/N` (JSON,
   sketches in base64, through Hadoop's FileSystem; atomic for a reader) and queues them.
   Once the file is written the batch's counts survive a crash, so foreachBatch returns and
   Spark commits N's offsets while the next batch is planned and folded.
2. A thread of the writer MERGEs queued batches once Spark has committed them
   (`<checkpoint>/commits/N` exists), so the counts table does not run ahead of the query;
   or at once when the job is about to wait between batches (flow control, `release`), so
   the wait does not delay the counts. Batches ready meanwhile are combined
   (`transforms.combine_partials`) into one MERGE whose idempotent-write marker is the newest
   batch's id; their files are then deleted.
   While the table holds no row of the query's groups (a new table, `delta.never_written`,
   or new groups: `delta.holds_rows_of` their partitions), the write is a plain append of
   what the MERGE would insert: the MERGE's matching pass is its costliest part, most of all
   in a cold JVM or for a pack of many new groups (a file read and rewritten per group).
3. `drain` (after the query) MERGEs everything still queued; `recover` (before the query)
   MERGEs every file a crashed run left, one batch at a time in batch order, so a batch the
   table already holds is skipped by its marker (`jobs.runtime.delta.merge_once`).

Guarantee: exactly-once per checkpoint, as with an in-line MERGE. A batch's file exists
before Spark commits it; its counts reach the table once (marker), whether the crash came
before the commit (Spark replays the batch, which computes the same partials), between the
commit and the MERGE (`recover` merges the file), or between the MERGE and the file's
deletion (the marker skips it). A failed MERGE fails the query at its next batch, or the run
at `drain`; its files stay for the next start.

Visibility: a batch's counts are in the table one MERGE after Spark commits it, not when
foreachBatch returns.

Fault points (core/faults.py): `audit.partials_saved`, `audit.counts_merging`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from functools import reduce
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import BinaryType, LongType, StringType, StructType, TimestampType

from core.faults import fault_point
from jobs.audit import tables
from jobs.audit.transforms import combine_partials
from jobs.runtime.checkpoint_files import CheckpointFiles
from jobs.runtime.delta import ensure, holds_rows_of, never_written

log = logging.getLogger("uatu.audit")

FOLDER = "audit-partials"
# How often the writer's thread looks for Spark's commit of a queued batch.
COMMIT_POLL_SECONDS = 0.05
# Batches queued before `submit` waits for the MERGEs to catch up (bounds driver memory).
MAX_QUEUED = 16


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
        self._changed = threading.Condition()
        self._queued: list[tuple[int, DataFrame]] = []  # in batch order
        self._draining = False
        self._released_through = -1  # batches MERGEd without waiting for Spark's commit
        self._stopping = False
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        self._files: CheckpointFiles | None = None  # <checkpoint>/audit-partials, from _start
        self._merged_through = -1
        # until seen: a table without rows of the query's groups is appended to, not MERGEd
        self._table_has_rows = False
        self._table_created: Future[None] | None = None

    # --- before the query -------------------------------------------------------------------

    def create_table_beside(self, spark: SparkSession) -> None:
        """Create the (new) counts table in the background: the first Delta operation of a
        session takes seconds, and nothing needs the table before the first write, which
        waits for it. A failure surfaces there, as a failed MERGE would."""
        creating = ThreadPoolExecutor(1, thread_name_prefix="audit-counts-table")
        self._table_created = creating.submit(ensure, spark, tables.AUDIT_COUNTS, self.counts_path)
        creating.shutdown(wait=False)

    def recover(self, spark: SparkSession) -> list[int]:
        """MERGE the partials a previous run saved and did not delete, one batch at a time in
        batch order (a batch already in the table is skipped by its marker); the batch ids."""
        files = CheckpointFiles(spark, self.checkpoint, FOLDER)
        saved = files.numbers()
        if not saved:
            return []
        app_id = self._app_id(spark)
        for batch_id in saved:
            data = files.read(str(batch_id))
            self._write(spark, decode_partials(spark, data), app_id, batch_id)
            files.delete(str(batch_id))
        log.info(
            "audit_counts: merged the saved partials of batches %s (a run before ended "
            "before writing them)",
            _ids(saved),
        )
        return saved

    # --- in foreachBatch --------------------------------------------------------------------

    def submit(self, spark: SparkSession, batch_id: int, partials: DataFrame) -> None:
        """Save batch `batch_id`'s partials (durable on return) and queue their MERGE.

        Raises the error of an earlier MERGE, if one failed: the query then fails before
        Spark commits this batch. Waits while MAX_QUEUED batches are queued."""
        self._raise_if_failed()
        if self._thread is None:
            self._start(spark)
        assert self._files is not None
        self._files.write(str(batch_id), encode_partials(partials))
        fault_point("audit.partials_saved")  # core/faults.py: tests only
        with self._changed:
            if len(self._queued) >= MAX_QUEUED:
                log.info(
                    "audit_counts: %d batches wait for their MERGE; folding waits too",
                    len(self._queued),
                )
            while len(self._queued) >= MAX_QUEUED and self._error is None:
                self._changed.wait()
            self._queued.append((batch_id, partials))
            self._changed.notify_all()
        self._raise_if_failed()

    def release(self, batch_id: int) -> None:
        """MERGE the batches through `batch_id` without waiting for Spark's commit: the query
        is about to wait (flow control), so the commit would come late. Safe: a batch Spark
        replays computes the same partials, and its second MERGE commits nothing."""
        with self._changed:
            self._released_through = max(self._released_through, batch_id)
            self._changed.notify_all()

    # --- after the query --------------------------------------------------------------------

    def drain(self) -> int:
        """MERGE every queued batch now, committed or not; the newest batch id in the table
        (-1 if none was written by this run). Raises the error of a failed MERGE."""
        with self._changed:
            self._draining = True
            self._changed.notify_all()
            while self._queued and self._error is None:
                self._changed.wait()
        self._raise_if_failed()
        return self._merged_through

    def close(self) -> None:
        """Stop the thread; queued batches that were not MERGEd stay saved for `recover`."""
        with self._changed:
            self._stopping = True
            self._changed.notify_all()
        if self._thread is not None:
            self._thread.join()

    # --- the thread -------------------------------------------------------------------------

    def _start(self, spark: SparkSession) -> None:
        commits = CheckpointFiles(spark, self.checkpoint, "commits")
        self._files = CheckpointFiles(spark, self.checkpoint, FOLDER)
        app_id = self._app_id(spark)
        self._thread = threading.Thread(
            target=self._loop, args=(spark, commits, app_id), name="audit-counts", daemon=True
        )
        self._thread.start()

    def _loop(self, spark: SparkSession, commits: CheckpointFiles, app_id: str) -> None:
        while True:
            with self._changed:
                if self._stopping:
                    return
                if not self._queued:
                    self._changed.wait()
                    continue
                queued = list(self._queued)
                draining = self._draining
                released = self._released_through
            ready = queued if draining else _committed_prefix(queued, commits, released)
            if not ready:
                with self._changed:
                    self._changed.wait(COMMIT_POLL_SECONDS)
                continue
            try:
                self._merge(spark, app_id, ready)
            except Exception as error:  # handed to the query's thread by submit and drain
                log.error(
                    "audit_counts: MERGE of batches %s failed: %s",
                    _ids([b for b, _ in ready]),
                    error,
                )
                with self._changed:
                    self._error = error
                    self._changed.notify_all()
                return
            with self._changed:
                del self._queued[: len(ready)]
                self._merged_through = ready[-1][0]
                self._changed.notify_all()

    def _merge(self, spark: SparkSession, app_id: str, ready: list[tuple[int, DataFrame]]) -> None:
        started = time.monotonic()
        ids = [batch_id for batch_id, _ in ready]
        if len(ready) == 1:
            source = ready[0][1]
        else:
            source = reduce(DataFrame.unionByName, (p for _, p in ready)).transform(
                combine_partials
            )
        fault_point("audit.counts_merging")  # core/faults.py: tests only
        how = self._write(spark, source, app_id, ids[-1])
        assert self._files is not None
        for batch_id in ids:
            self._files.delete(str(batch_id))
        log.info(
            "audit_counts: batch %s merged in %.1f s (%s)",
            _ids(ids),
            time.monotonic() - started,
            how,
        )

    def _write(self, spark: SparkSession, source: DataFrame, app_id: str, batch_id: int) -> str:
        """MERGE, or append to a table without rows of the query's groups (the module
        docstring, step 2); says which, for the log."""
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

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            raise RuntimeError(
                f"writing audit_counts failed: {self._error}; the batches not written stay "
                f"saved under {self.checkpoint}/{FOLDER} and are written at the next start"
            ) from self._error


def _committed_prefix(
    queued: list[tuple[int, DataFrame]], commits: CheckpointFiles, released_through: int
) -> list[tuple[int, DataFrame]]:
    """The queued batches Spark has committed (a prefix, since it commits them in order),
    and those released before their commit."""
    ready = []
    for batch in queued:
        if batch[0] > released_through and not commits.exists(str(batch[0])):
            break
        ready.append(batch)
    return ready


def _ids(ids: list[int]) -> str:
    return str(ids[0]) if len(ids) == 1 else f"{ids[0]}-{ids[-1]}"


# --- the saved file --------------------------------------------------------------------------


def encode_partials(partials: DataFrame) -> dict[str, Any]:
    """The partials as plain JSON: timestamps as epoch microseconds, binary as base64 (the
    partials are a local relation of a few rows a window, so collecting them runs no job)."""
    encoded = partials.select(*(_encode(f.name, f.dataType) for f in partials.schema.fields))
    return {
        "schema": partials.schema.jsonValue(),
        "rows": [row.asDict() for row in encoded.collect()],
    }


def decode_partials(spark: SparkSession, data: dict[str, Any]) -> DataFrame:
    """`encode_partials`' value -> the partials DataFrame it was made from."""
    schema = StructType.fromJson(data["schema"])
    plain = StructType(
        [f.__class__(f.name, _plain_type(f.dataType), f.nullable) for f in schema.fields]
    )
    rows = spark.createDataFrame(
        [tuple(row[f.name] for f in schema.fields) for row in data["rows"]], plain
    )
    return rows.select(*(_decode(f.name, f.dataType) for f in schema.fields))


# How a column type is kept in the file: (the JSON-able type, encode, decode).
_CODECS: dict[type, tuple[Any, Callable[[str], Column], Callable[[str], Column]]] = {
    TimestampType: (LongType(), F.unix_micros, F.timestamp_micros),
    BinaryType: (StringType(), F.base64, F.unbase64),
}


def _plain_type(kind: Any) -> Any:
    codec = _CODECS.get(type(kind))
    return kind if codec is None else codec[0]


def _encode(name: str, kind: Any) -> Column:
    codec = _CODECS.get(type(kind))
    return F.col(name) if codec is None else codec[1](name).alias(name)


def _decode(name: str, kind: Any) -> Column:
    codec = _CODECS.get(type(kind))
    return F.col(name) if codec is None else codec[2](name).alias(name)
