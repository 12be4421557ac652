"""A micro-batch's table writes, moved off the batch's path and made durable first.

Why: a Delta commit has a fixed cost of a second or more, and many times that on loaded
cores. Run in foreachBatch, it stands between every two batches of the query, and a new
query's first batch is not committed by Spark before its first table write is.

How, for batch N (one `AfterCommitWriter` per run of a query):
1. `submit` (in foreachBatch) saves what the batch is to write to `<checkpoint>/<folder>/N`
   (JSON through Hadoop's FileSystem, atomic for a reader: `saved_rows.encode_rows` makes a
   DataFrame of a few rows JSON-able) and queues it. Once the file is written the batch's results
   survive a crash, so foreachBatch returns and Spark commits N's offsets while the next
   batch runs.
2. A thread writes queued batches once Spark has committed them (`<checkpoint>/commits/N`
   exists), so the tables do not run ahead of the query; or at once when the job is about
   to wait between batches (`release`). Batches ready meanwhile are written together, by
   the owner's `write` (one call for all of them, whose idempotent-write marker is the newest
   batch's id); their files are then deleted.
3. `drain` (after the query) writes everything still queued; `recover` (before the query)
   has every file a crashed run left written, in batch order, so a batch the tables already
   hold is skipped by its marker (`jobs.runtime.delta.append_once`, `merge_once`). An owner
   that can read its tables' markers (`held_through`) has them written together: the batches
   no table holds in one write, only those some tables hold and others not one at a time
   (`recovery_writes`). With `in_background` the thread writes them, before any batch of the
   new run, while the query starts: a moved group's first batch does not wait for them. A
   batch of the new run not above the newest recovered one (Spark's replay of a batch the
   crashed run saved) is written alone, so its marker decides for it alone.

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
places its own fault points (core/faults.py): the batch saved, and the thread about to write;
the audit's a third, the thread's write committed and its files not yet deleted. The stats
writers of an application share STATS_WRITE_SLOTS: a bound on their Delta writes at once, so
many groups' stats do not crowd out their queries and the audit's MERGEs; a draining writer
takes the next free slot first (jobs/runtime/write_slots.py).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from functools import partial
from typing import Any, Generic, TypeVar

from pyspark.sql import SparkSession

from core.errors import EXIT_FAILED, EXIT_OK
from jobs.runtime.checkpoint_files import CheckpointFiles
from jobs.runtime.delta import written_through
from jobs.runtime.write_slots import WriteSlots

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
# The write slots of the stats writers of one application (replication_stats and
# replication_audit, dispatch_stats): at most this many of their Delta writes at once, however
# many groups it runs. Each Delta commit costs the driver's cores a second or more; a hundred
# writers each committing as soon as it can would starve the queries and the audit's MERGEs
# (which CANCEL and a move wait for). A writer that waits for a slot writes everything that
# became ready meanwhile in one write, so fewer slots mean fewer, larger commits.
# A draining writer (its query ended: someone waits for its last writes) takes the next free
# slot before the others (jobs/runtime/write_slots.py).
STATS_WRITE_SLOTS = WriteSlots(2)
# The FAIR scheduler pool (`spark.scheduler.pool`) of every after-commit write's Spark jobs. An
# application that declares it in its allocation file (the worker: jobs/worker/main.py) gives
# the writes a share ahead of the queries' pools, so the rows users query are not queued
# behind every query's next batch; elsewhere Spark makes it a default pool, or ignores it.
WRITES_POOL = "uatu-writes"


class AfterCommitWriter(Generic[Batch]):
    """Saves each batch under the checkpoint and writes it in a thread of its own once Spark
    has committed it.

    `what` names the writes in logs and errors (a table's name), `log` is the owner's logger;
    `write(spark, ready)` writes the batches of `ready` (one or more, in batch order)
    idempotently under the newest's id and returns a few words for the log; `decode(spark,
    saved)` turns a saved file back into a batch; `at_saved`, `at_writing` and `at_written`
    place the owner's fault points (core/faults.py): a batch's file written, the thread about
    to write, and the thread's write done with its files not yet deleted. Writers given the same
    `write_slots` write at most its count at a time; `held_through` (HeldThrough) lets
    `recover` write a crashed run's batches together."""

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
        at_written: Callable[[], None] = lambda: None,
        write_slots: WriteSlots | None = None,
        held_through: HeldThrough | None = None,
    ):
        self.checkpoint = checkpoint
        self.folder = folder
        self.what = what
        self._write = write
        self._decode = decode
        self._log = log
        self._at_saved, self._at_writing, self._at_written = at_saved, at_writing, at_written
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
        # A crashed run's batches, written before this run's (`recover`).
        self._crashed: CrashedRunBatches[Batch] = CrashedRunBatches(
            self._changed, what, write, decode, log, held_through
        )

    def recover(self, spark: SparkSession, *, in_background: bool = False) -> list[int]:
        """Before the query: write the batches a previous run saved and did not delete, in
        batch order (a batch already written is skipped by its marker), in as few writes as
        the owner's markers allow (`recovery_writes`); their ids. With `in_background`, the
        writer's thread writes them before anything else and this returns at once (a failure
        then surfaces as a failed write does: at the next `submit`, or at `drain`)."""
        saved = self._crashed.read(spark, CheckpointFiles(spark, self.checkpoint, self.folder))
        if not saved or not in_background:
            self._crashed.write(spark)
            return saved
        if self._thread is None:
            self._start(spark)
        self._log.info(
            "%s: the saved batches %s (a run before ended before writing them) are written "
            "before this run's, beside its query",
            self.what,
            _ids(saved),
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
        self._crashed.note_saving(batch_id)
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
            while (self._queued or self._crashed.pending) and self._error is None:
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
        spark.sparkContext.setLocalProperty("spark.scheduler.pool", WRITES_POOL)
        while True:
            with self._changed:
                if self._stopping:
                    return
                crashed = bool(self._crashed.pending)
                if not self._queued and not crashed:
                    self._changed.wait()
                    continue
            if crashed:
                if not self._in_a_slot(partial(self._crashed.write, spark)):
                    return
                continue
            if not self._ready(commits):
                with self._changed:
                    self._changed.wait(COMMIT_POLL_SECONDS)
                continue
            written: list[tuple[int, Any]] = []
            if not self._in_a_slot(partial(self._write_ready, spark, commits, written)):
                return
            with self._changed:
                del self._queued[: len(written)]
                self._written_through = written[-1][0]
                self._changed.notify_all()

    def _in_a_slot(self, write: Callable[[], None]) -> bool:
        """Run `write` in one of `write_slots` (if the writer has them); False when the thread
        is to end: closed while waiting, or the write failed (its error goes to the query's
        thread through `submit` and `drain`)."""
        if self._write_slots is not None and not self._take_slot():
            return False
        try:
            write()
        except Exception as error:
            self._log.error("%s: a write failed: %s", self.what, error)
            with self._changed:
                self._error = error
                self._changed.notify_all()
            return False
        finally:
            if self._write_slots is not None:
                self._write_slots.give_back()
        return True

    def _ready(self, commits: CheckpointFiles) -> list[tuple[int, Any]]:
        """The queued batches to write now: all when draining, else those Spark committed (or
        released), a prefix of the queue; a batch not above the newest recovered one alone."""
        with self._changed:
            queued = list(self._queued)
            draining = self._draining
            released = self._released_through
        ready = queued if draining else _committed_prefix(queued, commits, released)
        if ready and ready[0][0] <= self._crashed.through:
            return ready[:1]  # a replay of a saved batch: its marker decides for it alone
        return ready

    def _take_slot(self) -> bool:
        """Wait for one of `write_slots`, ahead of the writers that are not draining while
        this one is; False if closed first."""
        assert self._write_slots is not None
        return self._write_slots.take(urgent=lambda: self._draining, give_up=lambda: self._stopping)

    def _write_ready(
        self, spark: SparkSession, commits: CheckpointFiles, written: list[tuple[int, Any]]
    ) -> None:
        """Write the batches ready now (what became ready while a slot was awaited goes in
        the same write); `written` is set to them first."""
        written[:] = queued = self._ready(commits)
        started = time.monotonic()
        ids = [batch_id for batch_id, _ in queued]
        self._at_writing()
        how = self._write(spark, [(b, self._decode(spark, saved)) for b, saved in queued])
        self._at_written()
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


class CrashedRunBatches(Generic[Batch]):
    """The batches a crashed run of an AfterCommitWriter saved and did not delete: `read`
    before the query, written by `write` (in batch order, together where the owner's
    `held_through` allows: `recovery_writes`) before any batch of the new run. `lock` is the
    writer's: `pending` and `note_saving` are read and called under it, or take it."""

    def __init__(
        self,
        lock: threading.Condition,
        what: str,
        write: Callable[[SparkSession, Ready[Batch]], str],
        decode: Callable[[SparkSession, dict[str, Any]], Batch],
        log: logging.Logger,
        held_through: HeldThrough | None,
    ) -> None:
        self._lock = lock
        self._what, self._write, self._decode, self._log = what, write, decode, log
        self._held_through = held_through
        self.pending: list[tuple[int, Any]] = []  # (batch id, saved form) not written yet
        self.through = -1  # the newest batch id the crashed run saved
        self._saving_from: int | None = None  # the first batch id the new run saved
        self._files: CheckpointFiles | None = None

    def read(self, spark: SparkSession, files: CheckpointFiles) -> list[int]:
        """The saved batches in `files` become `pending`; their ids."""
        saved = files.numbers()
        with self._lock:
            self._files = files
            self.pending = [(b, files.read(str(b))) for b in saved]
            self.through = saved[-1] if saved else -1
        return saved

    def note_saving(self, batch_id: int) -> None:
        """The new run is about to save `batch_id`'s file (a replay of a pending one keeps
        its file: its own write deletes it)."""
        with self._lock:
            if self._saving_from is None:
                self._saving_from = batch_id

    def write(self, spark: SparkSession) -> None:
        """Write the pending batches, delete their files, and clear `pending`."""
        with self._lock:
            saved = list(self.pending)
        if not saved:
            return
        batches = [(b, self._decode(spark, data)) for b, data in saved]
        if self._held_through is None:
            writes = [[batch] for batch in batches]
        else:
            writes = recovery_writes(batches, self._held_through(spark, batches))
        for ready in writes:
            self._write(spark, ready)
            self._delete([b for b, _ in ready])
        self._delete([b for b, _ in saved])  # and those every table held already
        self._log.info(
            "%s: wrote the saved batches %s in %d write(s) (a run before ended before "
            "writing them)",
            self._what,
            _ids([b for b, _ in saved]),
            len(writes),
        )
        with self._lock:
            self.pending = []
            self._lock.notify_all()

    def _delete(self, batch_ids: list[int]) -> None:
        """Delete written batches' files, but not one the new run saved again (Spark's replay
        of it): under the lock `note_saving` takes before the new run saves its first."""
        assert self._files is not None
        with self._lock:
            for batch_id in batch_ids:
                if self._saving_from is None or batch_id < self._saving_from:
                    self._files.delete(str(batch_id))


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
