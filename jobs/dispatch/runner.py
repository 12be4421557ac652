"""The dispatcher application's lifecycle: several streaming queries (the source, each retry
tier, the resq), started together, watched together, stopped together.

`jobs.runtime.runner.run_query` runs one query; this is its multi-query twin with the same
contract: exit 0 when finished or stopped (stop file, SIGTERM/SIGINT to the driver, CANCEL from
the control plane), 1 when any query fails (the others are stopped). Each query runs in its own
FAIR scheduler pool, so a long batch of one topic never starves the others of task slots.
`finished`, when given, is polled every `poll_seconds`: a bounded or `--once` run ends when it
returns True. With `reporting`, the run's last heartbeat, after its queries stopped, carries the
source's committed offsets from its checkpoint.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from core.errors import EXIT_FAILED, EXIT_OK
from jobs.runtime.reporting import Reporting, committed_offsets
from jobs.runtime.runner import BatchWriter

log = logging.getLogger("uatu.dispatch.runner")


@dataclass(frozen=True)
class QueryPlan:
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
    """Start every plan's query; return the exit status when they are done or stopped. The
    first plan is the one reported to the control plane."""
    heartbeater = None
    if reporting is not None:
        heartbeater = reporting.start(spark, plans[0].name, plans[0].checkpoint, record_bytes)
    queries: list[StreamingQuery] = []
    stop_requested: list[str] = []

    def request_stop(signum: int, _frame: object) -> None:
        stop_requested.append(signal.Signals(signum).name)

    previous = {}
    if threading.current_thread() is threading.main_thread():
        previous = {s: signal.signal(s, request_stop) for s in (signal.SIGTERM, signal.SIGINT)}
    sc = spark.sparkContext
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
        sc.setLocalProperty("spark.scheduler.pool", None)  # type: ignore[arg-type]
        while True:
            time.sleep(poll_seconds)
            for query in queries:
                if not query.isActive:
                    error = query.exception()
                    if error is not None:
                        log.error("query %s failed: %s", query.name, error)
                        return EXIT_FAILED
                    stop_requested.append(f"query {query.name} ended")
            if stop_file and os.path.exists(stop_file):
                stop_requested.append(f"stop file {stop_file}")
            if heartbeater is not None and heartbeater.stop_requested.is_set():
                stop_requested.append("CANCEL from the control plane")
            if not stop_requested and finished is not None and finished():
                stop_requested.append("the end of the bounded run: every record is resolved")
            if stop_requested:
                log.info("%s: stopping %d queries", stop_requested[0], len(queries))
                return EXIT_OK
    except StreamingQueryException as e:
        log.error("a query failed: %s", e)
        return EXIT_FAILED
    finally:
        _stop_all(queries, stop_grace_seconds)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if heartbeater is not None:
            heartbeater.stop()
            # The last word: the source's committed offsets from its checkpoint, so a bounded
            # run reports where it ended even if Spark's progress events are still on their way.
            committed = committed_offsets(spark, plans[0].checkpoint)
            if committed is not None:
                heartbeater.listener.settle(committed)
            heartbeater.beat_once()


def _stop_all(queries: Sequence[StreamingQuery], grace_seconds: float) -> None:
    """Stop every query between two micro-batches (a batch cut short would be dispatched again
    on the next start: correct, but avoidable)."""
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
