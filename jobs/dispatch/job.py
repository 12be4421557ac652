"""KAFKA_CONSUMER_TO_RPC_DISPATCHER entry module: a Kafka topic -> a gRPC service, with
uForwarder's routing to retry tiers, a DLQ and a resilience queue; plus the Delta table
`dispatch_stats`.

Sources: one streaming query per topic, all in this one application: the JobGroup's topic,
every retry tier of retry_config and the resq topic (none of these for a DLQ redrive, which
reads only its DLQ range). Each query has its own checkpoint (`<checkpoint>/topics/<topic>`)
and plans, every trigger (1 s by default), the offset ranges whose records are due: older than
their timestamp plus the topic's processing delay (`dev.uatu.dispatch.DueRangeSource`). So a
tier's delay is waited out by not planning the record yet; it holds no task slot and blocks no
other partition, tier or query.

Sink: the service at rpc_dispatcher_task_group.uri, by uForwarder's wire contract (the method
`procedure`, the value as the request, the `kafka-*` metadata and the record's headers). The
calls are made from JVM tasks, one per topic partition and micro-batch
(`jobs/dispatch/dispatcher.py`, `dev.uatu.dispatch.PartitionRun`); every answer is routed as
uForwarder routes it (`jobs/dispatch/routing.py`): commit, skip, a retry tier, the DLQ, the resq
(records written there carry a DLQMetadata key, value and headers unchanged, acks=all, retried
until acknowledged), or an in-memory retry.

Why JVM tasks: grpc-java clients in the executors' JVMs make far more calls per second than
Python's grpc.aio, and the records never become Spark rows (the replication job's lesson);
docs/dispatch.md ("Why JVM tasks") has the measurements.

Guarantee: at-least-once. A micro-batch returns only when every record of it is committed,
skipped, or acknowledged by the topic it was written to, and only then does Spark checkpoint
its offsets. A crash loses nothing; the batch it cut short is dispatched again on restart, and
dispatch_stats counts those records as `redelivered`. The fault hook (core/faults.py) proves
it: `dispatch.after_tier_produce` and `dispatch.after_dispatch` in the JVM tasks
(`PartitionRun`), `dispatch.before_checkpoint` and `dispatch.stats_writing` in the stats
writer (`jobs/dispatch/stats.py`: the rows appended after Spark's commit), each scoped by the
query's topic.
Records deleted before they were dispatched, from the source, a retry tier or the resq alike
(a tier's records have not had their last call either), stop the application (exit 1, the
range in `source_data_loss` under that topic); a `--skip-lost-records` run reads past exactly
those ranges (`jobs/runtime/source_failure.py`).

Consumer group: each batch's end offsets are committed to the JobGroup's consumer_group once
its records are done (before the checkpoint), so lag monitors see the dispatcher; a new
checkpoint starts from the group's commits where they exist (`offsets.start_from_commits`).

Trigger: processing time: `extension.trigger.interval_seconds` (1 s) for the source,
`extension.dispatch.tier_trigger_seconds` (5 s) for the tiers and the resq. With `--once`, or for a
bounded source (partition_offset_ranges, end_timestamp), the application stops by itself, exit
0, once the source is read to its end and every tier and the resq are empty of records to
dispatch, waiting out their delays.

Metrics: with `UATU_METRICS_PORT` set, each batch's dispatch_stats rows also update the driver's
Prometheus series under uForwarder's names (`jobs.dispatch.metrics.dispatch`), and every query,
tiers and resq included, gets `uatu_query_*`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from core import kafka_admin
from core.errors import UatuError
from jobs.dispatch import dispatcher, metrics, tables
from jobs.dispatch.offsets import (
    Bounds,
    Watermarks,
    is_drained,
    main_bounds,
    resolved_start,
    start_from_commits,
    starts_from_group,
)
from jobs.dispatch.routing import Kind
from jobs.dispatch.spec import DispatchSpec, TopicQuery
from jobs.dispatch.stats import StatsWriter, marker
from jobs.dispatch.transforms import dispatch_stats_rows
from jobs.runtime import metrics as runtime_metrics
from jobs.runtime import source_failure
from jobs.runtime.checkpoint_files import read_offset_log
from jobs.runtime.delta import ensure_tables
from jobs.runtime.group_offsets import GroupOffsetCommitter, committed_offsets
from jobs.runtime.reporting import Reporting
from jobs.runtime.runner import QueryPlan, run_queries
from jobs.runtime.session import listening
from jobs.runtime.source_failure import NO_GAPS, SourceGaps, read_past
from jobs.runtime.tables import data_loss_path
from jobs.runtime.template import StreamingJob, WriteId

log = logging.getLogger("uatu.dispatch")

SESSION_CONF = {
    # Each query's batches run in their own pool, so the tiers and the source share the slots.
    "spark.scheduler.mode": "FAIR",
    # A second attempt of a dispatch task would call the service again for the same records.
    "spark.speculation": "false",
    # Each batch's stats are a handful of rows; nothing here needs a wide shuffle.
    "spark.sql.shuffle.partitions": "2",
}


@dataclass
class DispatchBatchWriter:
    """foreachBatch function of one topic's query: dispatch the batch's ranges, write stats."""

    spec: DispatchSpec
    query: TopicQuery
    config: str
    replay_batch: int | None
    write_id: WriteId
    stats: StatsWriter  # the query's dispatch_stats rows, appended after Spark's commit
    gaps: SourceGaps = NO_GAPS  # lost ranges of the query's topic to read past
    group_offsets: GroupOffsetCommitter | None = None  # the JobGroup's consumer group
    last_record_bytes: float = 0.0

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        planned = [
            (r["topic"], r["partition"], r["from_offset"], r["until_offset"])
            for r in batch.collect()
        ]
        ranges = planned
        if self.gaps:
            label = f"{self.query.topic} batch {batch_id}"
            kept = read_past(self.gaps, [r[1:] for r in ranges], label)
            ranges = [(self.query.topic, *r) for r in kept]
        spark = batch.sparkSession
        dispatched = self._dispatch(spark, ranges, batch_id) if ranges else None
        if self.group_offsets is not None:
            # Only now is every record of the batch done (committed, skipped, or acknowledged
            # by the tier, DLQ or resq it went to), so lag monitors never see a record as
            # consumed before it is.
            ends = {partition: until for _, partition, _, until in planned}
            self.group_offsets.commit(ends, topic=self.query.topic)
        if dispatched is not None:
            self._record(spark, batch_id, *dispatched)

    def _dispatch(
        self, spark: SparkSession, ranges: list[tuple[str, int, int, int]], batch_id: int
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]], bool, float]:
        """Dispatch the ranges; (the summaries, the batch's dispatch_stats rows, whether it
        is a redelivery, the dispatch's seconds)."""
        redelivered = self.replay_batch is not None and batch_id <= self.replay_batch
        if redelivered:
            log.warning(
                "%s batch %d was cut short by a crash; dispatching its records again",
                self.query.topic,
                batch_id,
            )
        started = time.monotonic()
        # The dispatch is a side effect of its one Spark job, run once here: its summary rows
        # (one per task and window) come to the driver, which computes the stats from them.
        summaries = dispatcher.summary_rows(spark, ranges, self.config)
        dispatched = time.monotonic()
        stats = dispatch_stats_rows(
            summaries,
            labels=self._labels(),
            tiers={q.topic: q.label for q in self.spec.queries()},
            batch_id=batch_id,
            batch_time=datetime.now(UTC),
            window_ms=self.spec.stats_window_seconds * 1000,
            redelivered=redelivered,
        )
        return summaries, stats, redelivered, dispatched - started

    def _record(
        self, spark: SparkSession, batch_id: int, summaries: list[dict[str, Any]],
        stats: list[dict[str, Any]], redelivered: bool, dispatch_s: float,
    ) -> None:  # fmt: skip
        """Save the batch's stats rows for their append after Spark's commit (stats.py)."""
        started = time.monotonic()
        app_id = marker(self.write_id.of(spark), redelivered, spark.sparkContext.applicationId)
        rows = self.stats.submit(spark, batch_id, stats, app_id)
        self._log(batch_id, summaries, dispatch_s, time.monotonic() - started)
        if runtime_metrics.serving():
            metrics.dispatch(self._metric_labels(), self._adaptive(), rows)

    def _labels(self) -> Mapping[str, str]:
        return {
            "job_group_id": self.spec.job_group_id,
            "cluster": self.spec.source.cluster.name,
            "source_topic": self.spec.source.topic,
        }

    def _metric_labels(self) -> Mapping[str, str]:
        return {
            "kafka_cluster": self.spec.source.cluster.name,
            "kafka_group": self.spec.source.consumer_group,
            "uri": self.spec.uri,
        }

    def _adaptive(self) -> bool:
        flow = self.spec.resq_flow if self.query.kind is Kind.RESQ else None
        return (flow or self.spec.flow).max_inflight == 0

    def _log(
        self, batch_id: int, summaries: list[dict[str, Any]], dispatch_s: float, stats_s: float
    ) -> None:
        names = ("records", "value_bytes", "committed", "skipped", "retried", "dlq", "resq")
        totals = dict.fromkeys(names, 0)
        for row in summaries:
            for n in names:
                totals[n] += int(row[n] or 0)
        if totals["records"]:
            self.last_record_bytes = totals["value_bytes"] / totals["records"]
        log.info(
            "%s batch %d: %d records in %.1f s (stats %.1f s): %d committed, %d skipped, "
            "%d to retry tiers, %d to the DLQ, %d to the resq",
            self.query.topic,
            batch_id,
            totals["records"],
            dispatch_s,
            stats_s,
            totals["committed"],
            totals["skipped"],
            totals["retried"],
            totals["dlq"],
            totals["resq"],
        )


class DispatchJob(StreamingJob[DispatchSpec]):
    """The dispatcher in the shared template. The template's query is the source topic's; the
    tiers and the resq run beside it in the same application, so `run_stream` starts them all
    (`runner.run_queries`) and returns the run's exit status."""

    write_id_prefix = "uatu-dispatch"

    session_conf = SESSION_CONF

    def __init__(self, spec: DispatchSpec) -> None:
        super().__init__(spec)
        self._bounds: Bounds | None = None
        self._config = ""
        self._max_message_bytes: int | None = None
        self._writers: dict[str, DispatchBatchWriter] = {}
        self._spark: SparkSession | None = None
        self._gaps: dict[str, SourceGaps] = {}  # by topic (--skip-lost-records)
        self._starts: dict[str, dict[int, int]] = {}  # by topic: new checkpoints' group starts
        self._group_offsets = GroupOffsetCommitter(
            spec.source.cluster.client_config(), spec.source.consumer_group, spec.source.topic
        )

    def check(self) -> None:
        """The topics the job writes must exist (their smallest `max.message.bytes` sizes the
        tier producer's batches); a bounded source's partitions too."""
        produced = self.spec.produced_topics()
        for field_name, topic in produced:
            kafka_admin.partition_count(self.spec.source.cluster, topic, field_name)
        self._max_message_bytes = kafka_admin.smallest_max_message_bytes(
            self.spec.source.cluster, [topic for _, topic in produced]
        )
        if self.spec.bounded:
            marks = Watermarks(self.spec.source.cluster)
            try:
                main_bounds(self.spec, marks, None)
            finally:
                marks.close()

    @classmethod
    def warm_up(cls, spark: SparkSession) -> None:
        dispatcher.warm_up_clients(spark)

    def check_session(self, spark: SparkSession) -> None:
        self._spark = spark
        self._config = dispatcher.config_json(
            self.spec, _executor_share(spark), self._max_message_bytes
        )
        if not dispatcher.check_clients(spark, self._config, self.spec.source.cluster.name):
            log.warning("the service at %s does not answer yet; dispatching anyway", self.spec.uri)

    def ensure_tables(self, spark: SparkSession) -> None:
        ensure_tables(spark, tables.locations(self.spec))

    def _source_query(self) -> TopicQuery:
        return self.spec.queries()[0]

    def stream(self, spark: SparkSession) -> DataFrame:
        return self._stream(spark, self._source_query())

    def _stream(self, spark: SparkSession, query: TopicQuery) -> DataFrame:
        options = dispatcher.source_options(self.spec, query.topic, query.delay_ms)
        if query.kind in (Kind.MAIN, Kind.DLQ) and self._bounds is not None:
            bounds = self._bounds
            if isinstance(bounds.start, Mapping):
                options["startingOffsets"] = dispatcher.offsets_json(query.topic, bounds.start)
            else:
                options["startingOffsets"] = bounds.start
            if bounds.end is not None:
                options["endingOffsets"] = dispatcher.offsets_json(query.topic, bounds.end)
        elif query.topic in self._starts:
            options["startingOffsets"] = dispatcher.offsets_json(
                query.topic, self._starts[query.topic]
            )
        else:
            options["startingOffsets"] = "earliest"  # a tier or the resq: nothing is skipped
        return spark.readStream.format(dispatcher.SOURCE_FORMAT).options(**options).load()

    def batch_writer(self, spark: SparkSession) -> DispatchBatchWriter:
        return self._writer(spark, self._source_query())

    def _writer(self, spark: SparkSession, query: TopicQuery) -> DispatchBatchWriter:
        replay = read_offset_log(spark, self.spec.checkpoint_of(query)).replay_batch
        write_id = self.write_id(self.spec.checkpoint_of(query))
        checkpoint = self.spec.checkpoint_of(query)
        stats = StatsWriter(self.spec.output.table("dispatch_stats"), checkpoint, query.topic)
        writer = DispatchBatchWriter(
            self.spec,
            query,
            self._config,
            replay,
            write_id,
            stats,
            self._gaps.get(query.topic, NO_GAPS),
            self._group_offsets,
        )
        self._writers[query.topic] = writer
        return writer

    def run_stream(
        self, spark: SparkSession, *, once: bool, stop_file: str | None, reporting: Reporting | None
    ) -> int:
        spec = self.spec
        began = time.monotonic()
        marks = Watermarks(spec.source.cluster)
        try:
            once_ends = dispatcher.end_offsets(spark, spec, spec.source.topic) if once else None
            self._starts = self._group_starts(spark, marks)
            self._bounds = main_bounds(spec, marks, once_ends, self._starts.get(spec.source.topic))
            plans = [
                QueryPlan(
                    spec.query_name_of(q),
                    spec.checkpoint_of(q),
                    self.stream(spark) if i == 0 else self._stream(spark, q),
                    self.batch_writer(spark) if i == 0 else self._writer(spark, q),
                    spec.trigger_interval_seconds if i == 0 else spec.tier_trigger_seconds,
                )
                for i, q in enumerate(spec.queries())
            ]
            log.info(
                "dispatching %s/%s to %s %s; queries: %s (starts, bounds and plans in %.2f s)",
                spec.source.cluster.name,
                spec.source.topic,
                spec.uri,
                spec.procedure,
                ", ".join(f"{q.topic} ({q.label}, delay {q.delay_ms} ms)" for q in spec.queries()),
                time.monotonic() - began,
            )
            tier_metrics = (  # the template listens to the source's query only
                [
                    runtime_metrics.QueryMetricsListener(spec.query_name_of(q))
                    for q in spec.queries()[1:]
                ]
                if runtime_metrics.serving()
                else []
            )
            finished = None
            if self._bounds.end is not None:
                finished = _Drain(spark, spec, self._bounds, marks).check
            source_writer = self._writers[spec.source.topic]
            for writer in self._writers.values():  # what a crashed run saved, first
                writer.stats.batches.recover(spark, in_background=True)
            with listening(spark, *tier_metrics):
                status = run_queries(
                    spark,
                    plans,
                    stop_file=stop_file,
                    reporting=reporting,
                    record_bytes=lambda: source_writer.last_record_bytes,
                    finished=finished,
                )
            for writer in self._writers.values():  # every batch of the run in the table
                status = writer.stats.batches.finish(status)
            return status
        finally:
            marks.close()

    def _group_starts(self, spark: SparkSession, marks: Watermarks) -> dict[str, dict[int, int]]:
        """Where each query on a new checkpoint starts, by topic, when the JobGroup's consumer
        group committed offsets on its topic (`starts_from_group`, `start_from_commits`). The
        part of a commit below a partition's log start is recorded as lost."""
        spec = self.spec
        group = spec.source.consumer_group
        starts = {}
        for q in spec.queries():
            if not starts_from_group(spec, q.kind):
                continue
            if read_offset_log(spark, spec.checkpoint_of(q)).planned:
                continue  # Spark resumes from the checkpoint
            commits = committed_offsets(spec.source.cluster, group, q.topic)
            ranges = {p: marks.range_of(q.topic, p) for p in marks.partitions(q.topic)}
            policy = spec.source.starting_offsets if q.kind is Kind.MAIN else "earliest"
            start = start_from_commits(policy, commits, ranges)
            if start is None:
                continue
            lows = {p: low for p, (low, _) in ranges.items()}
            lost = source_failure.lost_ranges(commits, lows)
            if lost:
                loss_table = data_loss_path(spec.output.table("dispatch_stats"))
                source_failure.record_lost(
                    spark, loss_table, spec.job_group_id, spec.source.cluster.name, q.topic, lost
                )
                log.warning(
                    "consumer group %s committed %s below its log start: %s deleted before "
                    "the group read them (recorded in %s)",
                    group, q.topic, ", ".join(map(str, lost)), loss_table,
                )  # fmt: skip
            log.info("%s starts where consumer group %s left off: %s", q.topic, group, start)
            starts[q.topic] = start
        return starts

    def skip_lost_records(self, spark: SparkSession, *, once: bool) -> None:
        """The lost ranges of every topic the application reads: the source, the retry tiers
        and the resq, whose records have not had their last call either."""
        spec = self.spec
        self._gaps = {
            q.topic: source_failure.skip_lost(
                spark,
                job_group_id=spec.job_group_id,
                cluster=spec.source.cluster,
                source=source_failure.Source(q.topic, spec.checkpoint_of(q)),
                loss_table=data_loss_path(spec.output.table("dispatch_stats")),
            )
            for q in spec.queries()
        }

    def explain_failure(self, spark: SparkSession) -> UatuError | None:
        """A query failed: a deleted topic, or records deleted before they were dispatched, of
        the source or of a retry tier or the resq alike (`source_failure.explain_sources`)."""
        spec = self.spec
        return source_failure.explain_sources(
            spark,
            job_group_id=spec.job_group_id,
            cluster=spec.source.cluster,
            sources=[source_failure.Source(q.topic, spec.checkpoint_of(q)) for q in spec.queries()],
            loss_table=data_loss_path(spec.output.table("dispatch_stats")),
        )

    def close(self) -> None:
        for writer in self._writers.values():
            writer.stats.batches.close()
        self._group_offsets.close()
        if self._spark is not None:
            dispatcher.close(self._spark, self.spec.job_group_id)


@dataclass
class _Drain:
    """A bounded run is over when the source is read to its ends and every tier and the resq
    to their current ends, twice in a row (positions read before the high watermarks)."""

    spark: SparkSession
    spec: DispatchSpec
    bounds: Bounds
    marks: Watermarks
    _streak: int = 0

    def check(self) -> bool:
        spec = self.spec
        queries = spec.queries()
        logs = {q.topic: read_offset_log(self.spark, spec.checkpoint_of(q)) for q in queries}
        if any(o.replay_batch is not None for o in logs.values()):
            self._streak = 0  # a batch is planned and not committed: it is running
            return False
        assert self.bounds.end is not None
        source = queries[0]
        position = logs[source.topic].committed_offsets(source.topic)
        if position is None:
            position = resolved_start(self.bounds, self.marks, source.topic, self.bounds.end)
        others = {}
        for q in queries[1:]:
            partitions = self.marks.partitions(q.topic)
            others[q.topic] = (
                logs[q.topic].committed_offsets(q.topic) or {},
                {p: self.marks.range_of(q.topic, p) for p in partitions},
            )
        if is_drained(position, self.bounds.end, others):
            self._streak += 1
        else:
            self._streak = 0
        return self._streak >= 2


def _executor_share(spark: SparkSession) -> float:
    """This application's share of the group's flow control per executor JVM: all of it in
    local mode (one JVM), else an even split over the executors asked for."""
    sc = spark.sparkContext
    if (sc.master or "").startswith("local"):
        return 1.0
    executors = int(sc.getConf().get("spark.executor.instances", "0") or 0)
    return 1.0 / executors if executors > 0 else 1.0
