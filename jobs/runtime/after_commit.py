"""A micro-batch's table writes, moved off the batch's path and made durable first.

Why: a Delta commit has a fixed cost of a second or more, and many times that on loaded
cores. Run in foreachBatch, it stands between every two batches of the query, and a new
query's first batch is not committed by Spark before its first table write is.

How, for batch N (one `AfterCommitWriter` per run of a query):
1. `submit` (in foreachBatch) saves what the batch is to write to `<checkpoint>/<folder>/N`
   (JSON through Hadoop's FileSystem, atomic for a reader: `encode_rows` makes a DataFrame
   of a few rows JSON-able) and queues it. Once the file is written the batch's results
   survive a crash, so foreachBatch returns and Spark commits N's offsets while the next
   batch runs.
2. A thread writes queued batches once Spark has committed them (`<checkpoint>/commits/N`
   exists), so the tables do not run ahead of the query; or at once when the job is about
   to wait between batches (`release`). Batches ready meanwhile are written together, by
   the owner's `write` (one call for all of them, whose idempotent-write marker is the newest
   batch's id); their files are then deleted.
3. `drain` (after the query) writes everything still queued; `recover` (before the query)
   writes every file a crashed run left, in batch order, so a batch the tables already hold
   is skipped by its marker (`jobs.runtime.delta.append_once`, `merge_once`). An owner that
   can read its tables' markers (`held_through`) has them written in one write, which is what
   a moved group waits for before its query starts: the batches no table holds go together,
   only those some tables hold and others not go one at a time (`recovery_writes`).

Guarantee: exactly-once per checkpoint, as a write in foreachBatch has, provided the owner's
`write` is idempotent per (writer, batch id) and a batch's file holds what any replay of the
batch would write, or what the replay's marker skips. A batch's file exists before Spark
commits it; its rows reach the tables once, whether the crash came before the commit (the
restart writes the file, the replay's write is skipped by its marker), between the commit and
the write (`recover` writes the file), or between the write and the file's deletion (the
marker skips it). A failed write fails the query at its next batch, or the run at `drain`;
its files stay for the next start.

Visibility: a batch's rows are in the tables one write after Spark commits it, not when
foreachBatch returns.

Owners: the audit's counts (`jobs/audit/counts_writer.py`), the micro-batch replication's
stats (`jobs/replication/stats.py`), the dispatcher's stats (`jobs/dispatch/stats.py`). Each
places its own two fault points (core/faults.py): the batch saved, and the thread about to
write. The stats writers of an application share STATS_WRITE_SLOTS: a bound on their Delta
writes at once, so many groups' stats do not crowd out their queries and the audit's MERGEs.
"""

from __future__ import annotations

import base64
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Generic, TypeVar

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    LongType,
    StringType,
    StructType,
    TimestampType,
)

from core.errors import EXIT_FAILED, EXIT_OK
from jobs.runtime.checkpoint_files import CheckpointFiles
from jobs.runtime.delta import written_through

Batch = TypeVar("Batch")
# A batch id and what the batch writes, in batch order.
Ready = list[tuple[int, Batch]]
# Per batch of `ready` (in its order): (lo, hi), the newest batch id held, under that batch's
# idempotent-write id, by the owner's table that holds the fewest and by the one that holds
# the most (-1 for none). A table holds exactly the batches up to its marker, as every write
# is in batch order and marked with its newest batch.
HeldThrough = Callable[[SparkSession, "Ready[Any]"], list[tuple[int, int]]]

# How often the writer's thread looks for Spark's commit of a queued batch.
COMMIT_POLL_SECONDS = 0.05
# Batches queued before `submit` waits for the writes to catch up (bounds driver memory).
MAX_QUEUED = 16
# How often a writer waiting for a write slot looks whether it is being closed.
SLOT_POLL_SECONDS = 0.2
# The write slots of the stats writers of one application (replication_stats and
# replication_audit, dispatch_stats): at most this many of their Delta writes at once, however
# many groups it runs. Each Delta commit costs the driver's cores a second or more; a hundred
# writers each committing as soon as it can would starve the queries and the audit's MERGEs
# (which CANCEL and a move wait for). A writer that waits for a slot writes everything that
# became ready meanwhile in one write, so fewer slots mean fewer, larger commits.
STATS_WRITE_SLOTS = threading.BoundedSemaphore(2)


class AfterCommitWriter(Generic[Batch]):
    """Saves each batch under the checkpoint and writes it in a thread of its own once Spark
    has committed it.

    `what` names the writes in logs and errors (a table's name), `log` is the owner's logger;
    `write(spark, ready)` writes the batches of `ready` (one or more, in batch order)
    idempotently under the newest's id and returns a few words for the log; `decode(spark,
    saved)` turns a saved file back into a batch; `at_saved` and `at_writing` place the
    owner's fault points (core/faults.py): a batch's file written, and the thread about to
    write. Writers given the same `write_slots` write at most its count at a time;
    `held_through` (HeldThrough) lets `recover` write a crashed run's batches together."""

    def __init__(
        self,
        checkpoint: str,
        folder: str,
        what: str,
        write: Callable[[SparkSession, Ready[Batch]], str],
        decode: Callable[[SparkSession, dict[str, Any]], Batch],
        log: logging.Logger,
        *,
        at_saved: Callable[[], None],
        at_writing: Callable[[], None],
        write_slots: threading.Semaphore | None = None,
        held_through: HeldThrough | None = None,
    ):
        self.checkpoint = checkpoint
        self._held_through = held_through
        self.folder = folder
        self.what = what
        self._write = write
        self._decode = decode
        self._log = log
        self._at_saved = at_saved
        self._at_writing = at_writing
        self._write_slots = write_slots
        self._changed = threading.Condition()
        self._queued: list[tuple[int, Any]] = []  # (batch id, its saved form), in batch order
        self._draining = False
        self._released_through = -1  # batches written without waiting for Spark's commit
        self._stopping = False
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        self._files: CheckpointFiles | None = None  # <checkpoint>/<folder>, from _start
        self._written_through = -1

    def recover(self, spark: SparkSession) -> list[int]:
        """Before the query: write the batches a previous run saved and did not delete, in
        batch order (a batch already written is skipped by its marker), in as few writes as
        the owner's markers allow (`recovery_writes`); their ids."""
        files = CheckpointFiles(spark, self.checkpoint, self.folder)
        saved = files.numbers()
        if not saved:
            return saved
        started = time.monotonic()
        batches = [(b, self._decode(spark, files.read(str(b)))) for b in saved]
        if self._held_through is None:
            writes = [[batch] for batch in batches]
        else:
            writes = recovery_writes(batches, self._held_through(spark, batches))
        for ready in writes:
            self._write(spark, ready)
            for batch_id, _ in ready:
                files.delete(str(batch_id))
        for batch_id in saved:  # those every table held already
            files.delete(str(batch_id))
        self._log.info(
            "%s: wrote the saved batches %s in %d write(s), %.1f s (a run before ended before "
            "writing them)",
            self.what,
            _ids(saved),
            len(writes),
            time.monotonic() - started,
        )
        return saved

    def submit(self, spark: SparkSession, batch_id: int, saved: Any) -> None:
        """In foreachBatch: save `saved` (a batch's JSON-able form, which `decode` turns into
        the batch in the writer's thread) as batch `batch_id`'s file, durable on return, and
        queue it.

        Raises the error of an earlier write, if one failed: the query then fails before Spark
        commits this batch. Waits while MAX_QUEUED batches are queued."""
        self._raise_if_failed()
        if self._thread is None:
            self._start(spark)
        assert self._files is not None
        self._files.write(str(batch_id), saved)
        self._at_saved()
        with self._changed:
            if len(self._queued) >= MAX_QUEUED:
                self._log.info(
                    "%s: %d batches wait for their write; the query waits too",
                    self.what,
                    len(self._queued),
                )
            while len(self._queued) >= MAX_QUEUED and self._error is None:
                self._changed.wait()
            self._queued.append((batch_id, saved))
            self._changed.notify_all()
        self._raise_if_failed()

    def release(self, batch_id: int) -> None:
        """Write the batches through `batch_id` without waiting for Spark's commit: the query
        is about to wait (flow control), so the commit would come late. Safe: a replay of the
        batch writes nothing its marker has seen."""
        with self._changed:
            self._released_through = max(self._released_through, batch_id)
            self._changed.notify_all()

    def drain(self) -> int:
        """After the query: write every queued batch now, committed or not; the newest batch
        id written (-1 if this run wrote none). Raises the error of a failed write."""
        with self._changed:
            self._draining = True
            self._changed.notify_all()
            while self._queued and self._error is None:
                self._changed.wait()
        self._raise_if_failed()
        return self._written_through

    def finish(self, status: int) -> int:
        """After a query that ended with `status`: when it ended well, `drain`, so the run
        ends with every batch it ran in the tables; EXIT_FAILED if a write failed (its
        batches stay saved for the next start)."""
        if status != EXIT_OK:
            return status
        started = time.monotonic()
        try:
            through = self.drain()
        except RuntimeError as error:
            self._log.error("%s", error)
            return EXIT_FAILED
        self._log.info(
            "%s holds every batch of the run (through batch %d; the last writes took %.1f s "
            "after the query ended)",
            self.what,
            through,
            time.monotonic() - started,
        )
        return status

    def close(self) -> None:
        """Stop the thread; queued batches that were not written stay saved for `recover`."""
        with self._changed:
            self._stopping = True
            self._changed.notify_all()
        if self._thread is not None:
            self._thread.join()

    # --- the thread -------------------------------------------------------------------------

    def _start(self, spark: SparkSession) -> None:
        commits = CheckpointFiles(spark, self.checkpoint, "commits")
        self._files = CheckpointFiles(spark, self.checkpoint, self.folder)
        self._thread = threading.Thread(
            target=self._loop, args=(spark, commits), name=f"{self.what}-writer", daemon=True
        )
        self._thread.start()

    def _loop(self, spark: SparkSession, commits: CheckpointFiles) -> None:
        while True:
            with self._changed:
                if self._stopping:
                    return
                if not self._queued:
                    self._changed.wait()
                    continue
            ready = self._ready(commits)
            if not ready:
                with self._changed:
                    self._changed.wait(COMMIT_POLL_SECONDS)
                continue
            if self._write_slots is not None:
                if not self._take_slot():
                    return  # closed while waiting
                # What became ready while the slot was awaited goes in the same write.
                ready = self._ready(commits)
            try:
                self._write_ready(spark, ready)
            except Exception as error:  # handed to the query's thread by submit and drain
                self._log.error(
                    "%s: writing batches %s failed: %s",
                    self.what,
                    _ids([b for b, _ in ready]),
                    error,
                )
                with self._changed:
                    self._error = error
                    self._changed.notify_all()
                return
            finally:
                if self._write_slots is not None:
                    self._write_slots.release()
            with self._changed:
                del self._queued[: len(ready)]
                self._written_through = ready[-1][0]
                self._changed.notify_all()

    def _ready(self, commits: CheckpointFiles) -> list[tuple[int, Any]]:
        """The queued batches to write now: all when draining, else those Spark committed (or
        released), a prefix of the queue."""
        with self._changed:
            queued = list(self._queued)
            draining = self._draining
            released = self._released_through
        return queued if draining else _committed_prefix(queued, commits, released)

    def _take_slot(self) -> bool:
        """Wait for one of `write_slots`; False if closed first."""
        assert self._write_slots is not None
        while not self._write_slots.acquire(timeout=SLOT_POLL_SECONDS):
            with self._changed:
                if self._stopping:
                    return False
        return True

    def _write_ready(self, spark: SparkSession, queued: list[tuple[int, Any]]) -> None:
        started = time.monotonic()
        ids = [batch_id for batch_id, _ in queued]
        self._at_writing()
        how = self._write(spark, [(b, self._decode(spark, saved)) for b, saved in queued])
        assert self._files is not None
        for batch_id in ids:
            self._files.delete(str(batch_id))
        self._log.info(
            "%s: batch %s written in %.1f s (%s)",
            self.what,
            _ids(ids),
            time.monotonic() - started,
            how,
        )

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            raise RuntimeError(
                f"writing {self.what} failed: {self._error}; the batches not written stay "
                f"saved under {self.checkpoint}/{self.folder} and are written at the next start"
            ) from self._error


def recovery_writes(batches: Ready[Batch], held: list[tuple[int, int]]) -> list[Ready[Batch]]:
    """The writes of a crashed run's saved `batches` (in batch order), given what the tables
    hold of each (HeldThrough): a batch every table holds is left out; one that some tables
    hold and others not is written alone (each table's marker then skips it where it is); all
    the others, which no table holds, go in one write after those. Pure."""
    alone: list[Ready[Batch]] = []
    together: Ready[Batch] = []
    for batch, (lo, hi) in zip(batches, held, strict=True):
        if batch[0] <= lo:
            continue
        if batch[0] <= hi:
            alone.append([batch])
        else:
            together.append(batch)
    return alone + ([together] if together else [])


def tables_held_through(spark: SparkSession, paths: Iterable[str], app_id: str) -> tuple[int, int]:
    """(lo, hi) of HeldThrough for the Delta tables at `paths` under `app_id`: their markers'
    lowest and highest (-1 for a table without one, or not there yet)."""
    marks = [written_through(spark, path, app_id) for path in paths]
    held = [-1 if mark is None else mark for mark in marks]
    return min(held), max(held)


def _committed_prefix(
    queued: list[tuple[int, Any]], commits: CheckpointFiles, released_through: int
) -> list[tuple[int, Any]]:
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


# --- a saved file's rows ---------------------------------------------------------------------


def encode_rows(rows: DataFrame) -> dict[str, Any]:
    """A DataFrame of a few rows as plain JSON: timestamps as epoch microseconds, binary as
    base64 (collecting a local relation runs no job; any other runs one)."""
    encoded = rows.select(*(_encode(f.name, f.dataType) for f in rows.schema.fields))
    return {
        "schema": rows.schema.jsonValue(),
        "rows": [row.asDict() for row in encoded.collect()],
    }


def encode_values(schema: StructType, rows: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Rows computed in Python (datetimes, bytes) as `encode_rows` keeps a DataFrame's: the
    same JSON, read back by `decode_rows`. Each row holds `schema`'s columns (None: null)."""
    codecs = [(f.name, _VALUE_CODECS.get(type(f.dataType), _plain_value)) for f in schema.fields]
    return {
        "schema": schema.jsonValue(),
        "rows": [{name: encode(row.get(name)) for name, encode in codecs} for row in rows],
    }


def timestamp_millis(epoch_ms: int) -> datetime:
    """The UTC timestamp of epoch milliseconds, exactly (also before 1970): a timestamp column's
    value in rows computed in Python, as Spark's timestamp_millis gives it."""
    return _EPOCH + timedelta(milliseconds=epoch_ms)


def decode_rows(spark: SparkSession, data: dict[str, Any]) -> DataFrame:
    """`encode_rows`' value -> the DataFrame it was made from. Built in the JVM from the rows'
    JSON (`from_json` over one row of `range`), never from a Python list: that would ship the
    rows to Python workers, which executors on hosts without the project's venv cannot start.
    Every column comes back nullable (a Delta table's NOT NULL columns still check the
    values)."""
    schema = StructType.fromJson(data["schema"])
    plain = StructType(
        [f.__class__(f.name, _plain_type(f.dataType), f.nullable) for f in schema.fields]
    )
    rows = spark.range(1).select(
        F.explode(F.from_json(F.lit(json.dumps(data["rows"])), ArrayType(plain))).alias("row")
    )
    return rows.select(*(_decode(f"row.{f.name}", f.dataType, f.name) for f in schema.fields))


# How a column type is kept in the file: (the JSON-able type, encode, decode).
_CODECS: dict[type, tuple[Any, Callable[[str], Column], Callable[[str], Column]]] = {
    TimestampType: (LongType(), F.unix_micros, F.timestamp_micros),
    BinaryType: (StringType(), F.base64, F.unbase64),
}


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _plain_value(value: Any) -> Any:
    return value


def _micros(value: datetime | None) -> int | None:
    return None if value is None else (value - _EPOCH) // timedelta(microseconds=1)


def _base64(value: bytes | None) -> str | None:
    return None if value is None else base64.b64encode(value).decode("ascii")


# The same forms for values computed in Python (`encode_values`).
_VALUE_CODECS: dict[type, Callable[[Any], Any]] = {TimestampType: _micros, BinaryType: _base64}


def _plain_type(kind: Any) -> Any:
    codec = _CODECS.get(type(kind))
    return kind if codec is None else codec[0]


def _encode(name: str, kind: Any) -> Column:
    codec = _CODECS.get(type(kind))
    return F.col(name) if codec is None else codec[1](name).alias(name)


def _decode(column: str, kind: Any, name: str) -> Column:
    codec = _CODECS.get(type(kind))
    return (F.col(column) if codec is None else codec[2](column)).alias(name)
