"""Shared lifecycle of a streaming job: query name, checkpoint, trigger, progress, exit status.

`run_query` starts a `foreachBatch` query, logs each micro-batch's progress, and turns the
outcome into an exit status (0 finished or stopped, 1 failed). With `once=True` the trigger
is AvailableNow: everything available when the query starts is processed, then the query ends
by itself. `run_queries` runs several queries of one application together (the dispatcher's
source, retry tiers and resq), each in its own FAIR scheduler pool, with the same contract:
when any fails the others are stopped and the run exits 1.

`StopRequests` is the one place that decides a run should stop, for one query or many.

Graceful stop: the query is stopped between two micro-batches (within STOP_POLL_SECONDS, and
waiting up to `stop_grace_seconds` for a running batch to finish) when the stop file appears
(`spark-submit.sh` creates it when it receives SIGTERM or SIGINT) or when the Python driver
itself is sent SIGTERM/SIGINT; a micro-batch cut short is replayed on the next start. A signal
to the whole process group also reaches the driver's JVM, which then dies at once; that is
safe too (every write is exactly-once), only not clean.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import DataStreamWriter, StreamingQuery

from core.errors import EXIT_FAILED, EXIT_OK
from jobs.runtime.checkpoint_files import read_offset_log
from jobs.runtime.reporting import Heartbeater, Reporting
from jobs.runtime.session import session_conf

log = logging.getLogger("uatu.runner")

BatchWriter = Callable[[DataFrame, int], None]
# How often a running query looks for a reason to stop (a file's existence: cheap); its
# progress is read every `poll_seconds`.
STOP_POLL_SECONDS = 0.5


@dataclass(frozen=True)
class QuerySettings:
    name: str
    checkpoint: str
    once: bool
    trigger_interval_seconds: int = 10
    poll_seconds: int = 2
    stop_file: str | None = None
    # Stop once this returns True for the latest progress record (a bounded copy's end).
    until: Callable[[Mapping], bool] | None = None
    # How long a graceful stop waits for the running micro-batch to finish.
    stop_grace_seconds: float = 60.0
    # Mean key+value bytes of the last batch's records, for heartbeats of a query that does not
    # read its batches' rows itself (so has no observed source metric).
    record_bytes: Callable[[], float] | None = None
    # Log each batch's input rows from Spark's progress. Off for a job whose batches do not read
    # their rows (replication): it would log 0 records; that job logs its own batch line.
    log_batches: bool = True
    # The records of a batch (by id) for a query that reads them itself, not through Spark's
    # rows (the audit fold): they replace Spark's numInputRows, which is 0, in the batch line.
    batch_records: Callable[[int], int | None] | None = None
    # SQL settings the query runs with (`StreamingJob.query_conf`). Spark copies the session's
    # settings into a query as it starts, so they are set on the session only while this one
    # starts: a worker's other queries keep the session's.
    conf: Mapping[str, str] = field(default_factory=dict)


class StopRequests:
    """Why a running job should stop, if it should: its stop file appeared, the Python driver
    got SIGTERM or SIGINT, the control plane sent CANCEL (`heartbeater`), or the job itself
    asked (`request`).

    Used as a context manager: while inside, SIGTERM and SIGINT raise a flag instead of
    interrupting (a signal handler must not call into the JVM: it can fire while the main
    thread is in the middle of a py4j call). Python only lets the main thread install
    handlers; a job run in another thread (a test, an embedding application) is stopped by
    the stop file or the control plane instead.
    """

    def __init__(self, stop_file: str | None, heartbeater: Heartbeater | None = None) -> None:
        self.stop_file = stop_file
        self.heartbeater = heartbeater
        self._reasons: list[str] = []
        self._previous: dict = {}

    def __enter__(self) -> StopRequests:
        if threading.current_thread() is threading.main_thread():
            self._previous = {
                s: signal.signal(s, self._on_signal) for s in (signal.SIGTERM, signal.SIGINT)
            }
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous = {}

    def _on_signal(self, signum: int, _frame: object) -> None:
        self._reasons.append(signal.Signals(signum).name)

    def request(self, why: str) -> None:
        self._reasons.append(why)

    def reason(self) -> str | None:
        """The first reason to stop, checking the stop file and the control plane now."""
        if self.stop_file and os.path.exists(self.stop_file):
            self._reasons.append(f"stop file {self.stop_file}")
        if self.heartbeater is not None and self.heartbeater.stop_requested.is_set():
            self._reasons.append("CANCEL from the control plane")
        return self._reasons[0] if self._reasons else None


# Serialises the starts that set a query's own SQL settings on the shared session.
_OWN_CONF_START = threading.Lock()


def _start(
    writer: DataStreamWriter, spark: SparkSession, conf: Mapping[str, str]
) -> StreamingQuery:
    """`writer.start()`, with `conf` set on the session while it starts (QuerySettings.conf).
    Another thread's query that starts meanwhile without settings of its own may take them
    too; a job's `query_conf` is what it needs, never what the others must not have."""
    if not conf:
        return writer.start()
    with _OWN_CONF_START, session_conf(spark, conf):
        return writer.start()


def run_query(
    stream: DataFrame,
    write_batch: BatchWriter,
    settings: QuerySettings,
    reporting: Reporting | None = None,
) -> int:
    """Run the query to its end; with `reporting`, heartbeat to the control plane meanwhile."""
    heartbeater = None
    if reporting is not None:
        heartbeater = reporting.start(
            stream.sparkSession, settings.name, settings.checkpoint, settings.record_bytes
        )
    writer = (
        stream.writeStream.queryName(settings.name)
        .option("checkpointLocation", settings.checkpoint)
        .foreachBatch(write_batch)
    )
    if settings.once:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{settings.trigger_interval_seconds} seconds")
    query = _start(writer, stream.sparkSession, settings.conf)
    log.info(
        "started query %s (id %s), checkpoint %s, %s",
        settings.name,
        query.id,
        settings.checkpoint,
        "bounded run (AvailableNow)"
        if settings.once
        else "streaming until stopped"
        if settings.until is None
        else "streaming until the job's own bound or a stop",
    )
    try:
        with StopRequests(settings.stop_file, heartbeater) as stop:
            last_batch = -1
            progress_due = time.monotonic() + settings.poll_seconds
            # PySpark takes a float here (it waits timeout * 1000 ms); its annotation says int.
            while not query.awaitTermination(STOP_POLL_SECONDS):  # type: ignore[arg-type]
                if time.monotonic() >= progress_due:
                    progress_due = time.monotonic() + settings.poll_seconds
                    last_batch = _follow_progress(query, settings, stop, last_batch)
                reason = stop.reason()
                if reason is not None:
                    log.info("received %s, stopping query %s", reason, settings.name)
                    _wait_between_batches(query, settings.stop_grace_seconds)
                    query.stop()
            if settings.log_batches:
                _log_batches(query, last_batch, settings.batch_records)
    except StreamingQueryException as e:
        log.error("query %s failed: %s", settings.name, e)
        return EXIT_FAILED
    finally:
        if heartbeater is not None:
            heartbeater.stop()
    log.info("query %s finished", settings.name)
    return EXIT_OK


@dataclass(frozen=True)
class QueryPlan:
    """One query of an application that runs several: its name (also its FAIR scheduler
    pool), checkpoint, stream, batch writer and trigger."""

    name: str
    checkpoint: str
    stream: DataFrame
    writer: BatchWriter
    trigger_seconds: float


def run_queries(
    spark: SparkSession,
    plans: Sequence[QueryPlan],
    *,
    stop_file: str | None = None,
    reporting: Reporting | None = None,
    record_bytes: Callable[[], float] | None = None,
    finished: Callable[[], bool] | None = None,
    poll_seconds: float = 1.0,
    stop_grace_seconds: float = 120.0,
) -> int:
    """Start every plan's query; return the exit status when they are done or stopped.

    The first plan is the one reported to the control plane; the run's last heartbeat, after
    its queries stopped, carries that query's committed offsets from its checkpoint.
    `finished`, polled every `poll_seconds`, ends a bounded run when it returns True."""
    heartbeater = None
    if reporting is not None:
        heartbeater = reporting.start(spark, plans[0].name, plans[0].checkpoint, record_bytes)
    queries: list[StreamingQuery] = []
    try:
        with StopRequests(stop_file, heartbeater) as stop:
            queries = _start_in_pools(spark, plans)
            while True:
                time.sleep(poll_seconds)
                for query in queries:
                    if not query.isActive:
                        error = query.exception()
                        if error is not None:
                            log.error("query %s failed: %s", query.name, error)
                            return EXIT_FAILED
                        stop.request(f"query {query.name} ended")
                if stop.reason() is None and finished is not None and finished():
                    stop.request("the end of the bounded run: every record is resolved")
                reason = stop.reason()
                if reason is not None:
                    log.info("%s: stopping %d queries", reason, len(queries))
                    return EXIT_OK
    except StreamingQueryException as e:
        log.error("a query failed: %s", e)
        return EXIT_FAILED
    finally:
        _stop_all(queries, stop_grace_seconds)
        if heartbeater is not None:
            heartbeater.stop()
            # The last word: the offsets of the first query's last committed batch, so a
            # bounded run reports where it ended even if progress events are still coming.
            committed = read_offset_log(spark, plans[0].checkpoint).committed_progress()
            if committed is not None:
                heartbeater.listener.settle(committed)
            heartbeater.beat_once()


def _start_in_pools(spark: SparkSession, plans: Sequence[QueryPlan]) -> list[StreamingQuery]:
    """Start each plan's query in a FAIR scheduler pool of its own name, so a long batch of
    one never starves the others of task slots."""
    sc = spark.sparkContext
    queries = []
    try:
        for plan in plans:
            sc.setLocalProperty("spark.scheduler.pool", plan.name)
            query = (
                plan.stream.writeStream.queryName(plan.name)
                .option("checkpointLocation", plan.checkpoint)
                .foreachBatch(plan.writer)
                .trigger(processingTime=f"{plan.trigger_seconds} seconds")
                .start()
            )
            queries.append(query)
            log.info(
                "started query %s (id %s), checkpoint %s", plan.name, query.id, plan.checkpoint
            )
    finally:
        sc.setLocalProperty("spark.scheduler.pool", None)  # type: ignore[arg-type]
    return queries


def _stop_all(queries: Sequence[StreamingQuery], grace_seconds: float) -> None:
    """Stop every query between two micro-batches (a batch cut short would run again on the
    next start: correct, but avoidable)."""
    deadline = time.monotonic() + grace_seconds
    for query in queries:
        while query.isActive and time.monotonic() < deadline:
            if not query.status.get("isTriggerActive", False):
                break
            time.sleep(0.1)
        try:
            query.stop()
        except Exception as e:  # a failed query may refuse a clean stop; it is over either way
            log.warning("stopping %s: %s", query.name, e)


def _follow_progress(
    query: StreamingQuery, settings: QuerySettings, stop: StopRequests, last_batch: int
) -> int:
    """Log the batches finished since `last_batch` and ask for the stop at a bounded run's
    end; the newest batch logged."""
    progress = query.lastProgress
    log.debug("query %s: %s", settings.name, query.status)
    if settings.log_batches:
        last_batch = _log_batches(query, last_batch, settings.batch_records)
    if settings.until is not None and progress and settings.until(progress):
        stop.request("the end of the bounded range")
    return last_batch


def _wait_between_batches(query: StreamingQuery, grace_seconds: float) -> None:
    """Wait until the running micro-batch has finished, so stop() does not cut it short.

    A batch cut short is replayed on the next start, which is correct, but its side outputs
    (the replication job's stats rows) would then describe the replay, not the first write.
    Returns when no batch runs, or when a batch newer than the one running at the call has
    started: a query whose batches outlast the trigger runs them back to back, and stopping
    one that has only just started costs nothing. After `grace_seconds` the query is stopped
    regardless.
    """
    deadline = time.monotonic() + grace_seconds
    running = _current_batch(query)
    while query.isActive and time.monotonic() < deadline:
        if not query.status.get("isTriggerActive", False) or _current_batch(query) != running:
            return
        time.sleep(0.1)


def _current_batch(query: StreamingQuery) -> int:
    """The id of the batch now running or last run (the one after the last progress)."""
    progress = query.lastProgress
    return int(progress["batchId"]) + 1 if progress else 0


def _log_batches(
    query: StreamingQuery,
    last_batch: int,
    batch_records: Callable[[int], int | None] | None = None,
) -> int:
    """Log every batch that finished since `last_batch` (several may between two polls).

    The newest progress is one py4j call; the retained ones (up to
    `spark.sql.streaming.numRecentProgressUpdates`, 100 by default, each a call of its own)
    are read only when more than one batch finished since the last poll: a long-running
    query is polled every few seconds, and a worker application polls each of its queries."""
    newest = query.lastProgress
    if not newest or newest.get("batchId", -1) <= last_batch:
        return last_batch
    finished = [newest] if newest["batchId"] == last_batch + 1 else query.recentProgress
    for progress in finished:
        if progress.get("batchId", -1) > last_batch:
            last_batch = _log_progress(progress, last_batch, batch_records)
    return last_batch


def _log_progress(
    progress: dict | None,
    last_batch: int,
    batch_records: Callable[[int], int | None] | None = None,
) -> int:
    if not progress or progress.get("batchId", -1) == last_batch:
        return last_batch
    seconds = progress.get("batchDuration", 0) / 1000
    records = progress.get("numInputRows", 0)
    rate = progress.get("processedRowsPerSecond") or 0.0
    counted = batch_records(int(progress["batchId"])) if batch_records is not None else None
    if counted is not None:
        records = counted
        rate = counted / seconds if seconds else 0.0
    # A worker application runs many queries: the line names its query.
    log.info(
        "%sbatch %s: %s records in %.1f s (%.0f records/s)%s",
        f"{progress['name']} " if progress.get("name") else "",
        progress["batchId"],
        records,
        seconds,
        rate,
        batch_phases(progress.get("durationMs") or {}),
    )
    return int(progress["batchId"])


# Spark's parts of a trigger (StreamingQueryProgress.durationMs), in the order they run, as
# the batch line names them.
_PHASES = (
    ("latestOffset", "latest offsets"),
    ("walCommit", "offset log"),
    ("queryPlanning", "planning"),
    ("addBatch", "the batch"),
    ("commitOffsets", "commit"),
)


def batch_phases(duration_ms: Mapping[str, int]) -> str:
    """The trigger's phases Spark timed (`durationMs`) -> ": latest offsets 0.1 s, ..." for
    the batch line, those present only, in the order they run; "" when none is. Where a slow
    batch's time went: the source's offsets, its plan or the job's own work."""
    parts = [
        f"{name} {duration_ms[key] / 1000:.1f} s" for key, name in _PHASES if key in duration_ms
    ]
    return f": {', '.join(parts)}" if parts else ""
