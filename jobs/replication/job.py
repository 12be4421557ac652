"""KAFKA_REPLICATION entry module: Kafka topic -> Kafka topic, plus Delta tables
`replication_stats` and `replication_audit`.

Source: the JobGroup's kafka_consumer_task_group topic (every partition, or those of
partition_offset_ranges). Spark's Kafka source plans each micro-batch and keeps the
checkpoint: from the offsets `preflight` resolved, at most `max_offsets_per_trigger` records
per batch. The batch's rows are never read: `writer.copy_ranges` copies the offset ranges
the source planned (`writer.planned_ranges`, `ranges.batch_ranges`) from a Kafka consumer
straight to a Kafka producer in JVM tasks. Spark's progress therefore reports 0 input rows;
`replication_stats` has the counts.

Sink: the kafka_dispatcher_task_group topic (each source partition's range copied by one
Spark task, which may copy others too; partition N -> N, or N % count with the modulo
mapping). Key, value, headers and the source timestamp are kept; every record gets a
provenance stamp (`core.provenance.STAMP`).

Guarantee: no loss (a failed delivery fails the batch, which is replayed), order kept per
partition, and no duplicate from restarts or task retries: each task skips what its
destination partition already holds. Stats and audit rows are idempotent Delta appends.
Source records deleted before they were copied stop the job (exit 1, the range in
`source_data_loss`); a `--skip-lost-records` run copies on past exactly that range
(`jobs/runtime/source_failure.py`), as the low-latency copy does.

Many topics (`extension.topics`): one query reads them all and copies each to its own
destination topic, created as MirrorMaker 2 creates it (`many.py`).

Trigger: every trigger interval; AvailableNow with --once. A bounded copy stops by itself
once every partition has been read up to its end offset, and exits 0.

A continuous JobGroup with extension.replication.low_latency (and no --once) does not copy in
micro-batches: `continuous.py` copies every record as it arrives, with the same sink, tables
and guarantees, and keeps its progress under `<checkpoint>/continuous/`.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import astuple, dataclass

from pyspark.sql import DataFrame, SparkSession
from uber.data.kafka.datatransfer.job_pb2 import FlowControl

from core.errors import ConfigError, InvalidJobGroup, UatuError
from core.jobgroup import check_flow_control
from jobs.replication import tables
from jobs.replication.continuous import logged_positions, run_low_latency
from jobs.replication.many import ManyTopicsWriter, Plans, many_topics_stream, preflight_topics
from jobs.replication.packs import (
    InheritedStats,
    alone_spec,
    form_pack,
    pack_key,
    refuse_moved_copy,
)
from jobs.replication.preflight import (
    ReplicationPlan,
    caps_apply_in_place,
    cover_new_partitions,
    preflight,
    warn_if_copies_queue,
)
from jobs.replication.ranges import SourceRange, batch_ranges
from jobs.replication.spec import ReplicationSpec
from jobs.replication.stats import StatsWriter
from jobs.replication.writer import (
    ENCODED_FORMAT,
    ENCODED_SCHEMA_VERSION,
    DestinationConfig,
    check_clients,
    copy_ranges,
    planned_ranges,
    summary_rows,
)
from jobs.runtime import source_failure
from jobs.runtime.checkpoint_files import read_offset_log
from jobs.runtime.delta import any_table_exists, ensure_tables
from jobs.runtime.kafka_source import range_consumer_config, source_read_options
from jobs.runtime.progress import end_offsets
from jobs.runtime.reporting import Reporting
from jobs.runtime.runner import QuerySettings
from jobs.runtime.source_failure import NO_GAPS, SourceGaps, read_past
from jobs.runtime.tables import data_loss_path
from jobs.runtime.template import Packing, StreamingJob

log = logging.getLogger("uatu.replication")

SESSION_CONF = {
    # One task per Kafka partition and no second attempt racing the first keep order.
    "spark.speculation": "false",
    # The stats are a few rows a batch. Their Delta jobs run beside the low-latency copy's
    # epochs, and every task they queue can take a slot an epoch's task frees at its end,
    # before the next epoch's job is submitted: one task per stage keeps that to one.
    "spark.sql.shuffle.partitions": "1",
    "spark.databricks.delta.snapshotPartitions": "1",
}


# A task of a copy of many topics takes a pooled consumer whose last fetch (past the end of
# the range it read before) is still waiting at the broker for records; the new range's first
# fetch queues behind it for up to fetch.max.wait.ms (500 ms by default), once per topic and
# partition. The records of a planned range exist, so a short wait costs nothing there. The
# cluster's own properties still win.
MANY_TOPICS_FETCH = {"fetch.max.wait.ms": "50"}


def destination_config(
    spec: ReplicationSpec, plan: ReplicationPlan, source_topic: str | None = None
) -> DestinationConfig:
    """The copy's settings for the source topic (default: the spec's one topic)."""
    topic = spec.source.topic if source_topic is None else source_topic
    extra: tuple[tuple[str, str], ...] = ()
    if spec.encoded_format is not None:
        name, version = spec.encoded_format
        extra = ((ENCODED_FORMAT, name), (ENCODED_SCHEMA_VERSION, str(version)))
    return DestinationConfig(
        source_cluster=spec.source.cluster.name,
        source_topic=topic,
        destination_cluster=spec.destination_cluster.name,
        topic=spec.destination_of(topic),
        producer_config=spec.producer_config(),
        # Both consumers read by assignment: no group, nothing committed (the checkpoint holds
        # the source offsets).
        consumer_config={
            **spec.destination_cluster.java_client_config(),
            "enable.auto.commit": "false",
        },
        source_consumer_config={
            **(MANY_TOPICS_FETCH if spec.many_topics else {}),
            **range_consumer_config(spec.source.cluster, read_committed=spec.source.read_committed),
        },
        partition_map={p: plan.destination_partition(p) for p in plan.source_partitions},
        extra_headers=extra,
        audit_interval_ms=spec.audit_interval_seconds * 1000,
        flow_key=spec.group_of(topic),
        max_records_per_sec=float(spec.max_messages_per_sec),
        max_bytes_per_sec=float(spec.max_bytes_per_sec),
    )


def build_stream(spark: SparkSession, spec: ReplicationSpec, plan: ReplicationPlan) -> DataFrame:
    options = source_read_options(
        spec.source,
        starting_offsets=plan.spark_starting_offsets(spec.source.topic),
        max_offsets_per_trigger=plan.max_offsets_per_trigger,
        include_headers=True,
    )
    if spec.source.offset_ranges:
        del options["subscribe"]
        options["assign"] = plan.spark_assign(spec.source.topic)
    return spark.readStream.format("kafka").options(**options).load()


@dataclass
class ReplicationBatchWriter:
    """foreachBatch function of the micro-batch copy: copy one micro-batch's planned ranges,
    then record its stats."""

    plan: ReplicationPlan
    destination: DestinationConfig
    stats: StatsWriter
    gaps: SourceGaps = NO_GAPS  # lost ranges to copy past (--skip-lost-records)

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        started = time.time()
        spark = batch.sparkSession
        spec = self.stats.spec
        planned = planned_ranges(batch, spec.source.topic)
        ranges = batch_ranges(planned, self.plan.end_offsets)
        if self.gaps:
            kept = read_past(self.gaps, [astuple(r) for r in ranges], f"batch {batch_id}")
            ranges = [SourceRange(*r) for r in kept]
        self._cover_new_partitions(ranges)
        if not ranges:  # an idle topic, or a bounded copy past its ends
            log.info("batch %d: no records", batch_id)
            return
        # The copy is a side effect of its one Spark job, run once here: its summary rows come
        # to the driver, which computes the stats from them. The copy paces itself to the
        # JobGroup's flow control (FlowLimiter.java).
        summaries = summary_rows(copy_ranges(spark, ranges, self.destination))
        copied = time.time()
        if not summaries:
            # Nothing read (the range held only transaction markers or aborted records): no
            # rows to record, and two Delta commits of nothing would cost a second or two.
            log.info("batch %d: no records", batch_id)
            return
        # Saved here, appended after Spark's commit of the batch (stats.py).
        ends = {spec.source.topic: {r.partition: r.until_offset for r in ranges}}
        totals = self.stats.submit(spark, summaries, batch_id, ends)
        log.info(
            "batch %d: %d records replicated (%d bytes) in %.1f s, stats saved in %.1f s",
            batch_id,
            totals.records,
            totals.bytes,
            copied - started,
            time.time() - copied,
        )

    def retune(self, max_records_per_sec: float, max_bytes_per_sec: float) -> None:
        """Pace the copy at these caps from the next batch on (one assignment: safe from
        another thread while a batch runs)."""
        self.destination = dataclasses.replace(
            self.destination,
            max_records_per_sec=max_records_per_sec,
            max_bytes_per_sec=max_bytes_per_sec,
        )

    def _cover_new_partitions(self, ranges: Sequence[SourceRange]) -> None:
        """Partitions added to the source while the job runs (Spark's source reads them from
        their start): extend the plan, growing the destination, before they are copied."""
        new = {r.partition for r in ranges} - set(self.plan.source_partitions)
        if new:
            spec = self.stats.spec
            caps = self.destination.max_records_per_sec, self.destination.max_bytes_per_sec
            self.plan = cover_new_partitions(spec, self.plan, new)
            self.destination = destination_config(spec, self.plan)
            self.retune(*caps)  # the caps in effect, which a retune may have changed


def _what_it_copies(spec: ReplicationSpec) -> str:
    """The log line that says what the copy of `spec` replicates, and where its stats go."""
    acks, stats = ("all" if spec.acks_all else "1"), spec.output.table("replication_stats")
    if spec.many_topics:
        return (
            f"replicating {spec.source.selection} of {spec.source.cluster.name} -> "
            f"{spec.destination_cluster.name} ({spec.naming}, acks={acks}), stats in {stats}"
        )
    return (
        f"replicating {spec.source.cluster.name}/{spec.source.topic} -> "
        f"{spec.destination_cluster.name}/{spec.destination_topic} (acks={acks}), "
        f"stats in {stats}"
    )


class ReplicationJob(StreamingJob[ReplicationSpec]):
    """The replication job in the shared template."""

    write_id_prefix = tables.WRITE_ID_PREFIX

    session_conf = SESSION_CONF

    def __init__(self, spec: ReplicationSpec) -> None:
        super().__init__(spec)
        self._plan: ReplicationPlan | None = None
        self._plans: Plans = {}  # many topics: source topic -> plan
        self._writer: ReplicationBatchWriter | None = None
        self._stats: StatsWriter | None = None
        self._low_latency_run = False
        self._tables_ready: Future[None] | None = None
        self._gaps = NO_GAPS
        self._inherited = InheritedStats()  # a generation's, a pack's or one alone: packs.py

    @property
    def plan(self) -> ReplicationPlan:
        if self._plan is None:
            raise RuntimeError("the replication plan is made by check()")
        return self._plan

    def check(self) -> None:
        """Broker checks (destination topic, partitions, offsets) before any record moves;
        with many topics, every selected topic's destination is created here."""
        if self.spec.many_topics:
            self._plans = preflight_topics(self.spec)
            self._plan = ReplicationPlan((), 0, modulo=False)  # no topic of its own
            return
        self._plan = preflight(self.spec)

    @classmethod
    def packing(cls, spec: ReplicationSpec) -> Packing | None:
        """A replication that packs (`packs.pack_key`) shares a query with the others of its
        key, each topic in one member of a pack (jobs/replication/packs.py)."""
        key = pack_key(spec)
        if key is None:
            return None
        return Packing(key, spec.source.topic, form_pack, _pack_query_name, cls)

    @classmethod
    def alone_spec(
        cls, spark: SparkSession, spec: ReplicationSpec, checkpoints: str
    ) -> ReplicationSpec:
        return alone_spec(spark, spec, checkpoints)  # packs.py

    def check_session(self, spark: SparkSession) -> None:
        # The Java clients are built once on the driver, so a refused setting is a ConfigError
        # before anything is written.
        some_topic = self.spec.routes[0][0] if self.spec.routes else None
        check_clients(spark, destination_config(self.spec, self.plan, some_topic))
        partitions = len(self.plan.source_partitions) + sum(
            len(plan.source_partitions) for plan in self._plans.values()
        )
        warn_if_copies_queue(
            spark.sparkContext.master or "",
            spark.sparkContext.defaultParallelism,
            partitions,
            self.spec.low_latency,
        )

    def ensure_tables(self, spark: SparkSession) -> None:
        located = tables.locations(self.spec)
        if any_table_exists(spark, [path for _, path in located]):
            # An existing table is checked against its schema before any record moves.
            ensure_tables(spark, located)
            return
        # New tables are created beside the copy's first batch or epoch (the first Delta
        # operation of a session takes seconds); its first stats write waits for them
        # (StatsWriter.tables_ready).
        creating = ThreadPoolExecutor(1, thread_name_prefix="ensure-tables")
        self._tables_ready = creating.submit(ensure_tables, spark, located)
        creating.shutdown(wait=False)

    def copy_complete(self, progress: Mapping) -> bool:
        return self.plan.is_done(end_offsets(progress, self.spec.source.topic))

    def before_query(self, spark: SparkSession) -> int | None:
        """Write the stats a crashed micro-batch run saved and did not append, before
        anything else (stats.py); end a bounded copy that was already complete. A group
        whose copy went on in a replication pack is refused (`packs.refuse_moved_copy`). A
        generation (a pack's, or a group's alone) appends the stats it inherited beside its
        query (`InheritedStats`)."""
        spec = self.spec
        refuse_moved_copy(spark, spec)
        self._stats = StatsWriter(spec, self.write_id(), tables_ready=self._tables_ready)
        # Beside the query, before its own batches, for an endless micro-batch copy (a moved
        # group's first batch does not wait for them); else now: a bounded copy may end here,
        # and the low-latency copy writes its stats without the writer's thread.
        endless = self.plan.end_offsets is None and not spec.low_latency
        self._stats.batches.recover(spark, in_background=endless)
        self._inherited.start(spark, spec, self._tables_ready)
        if not spec.many_topics:
            already = read_offset_log(spark, spec.output.checkpoint).committed_offsets(
                spec.source.topic
            )
            if already is not None and self.plan.is_done(already):
                log.info("bounded copy %s was already complete; nothing to do", spec.job_group_id)
                return 0
        log.info("%s", _what_it_copies(spec))
        return None

    def stream(self, spark: SparkSession) -> DataFrame:
        if self.spec.many_topics:
            return many_topics_stream(spark, self.spec)
        return build_stream(spark, self.spec, self.plan)

    @property
    def stats(self) -> StatsWriter:
        if self._stats is None:
            raise RuntimeError("the stats writer is made by before_query()")
        return self._stats

    def batch_writer(self, spark: SparkSession) -> ReplicationBatchWriter | ManyTopicsWriter:
        if self.spec.many_topics:
            return ManyTopicsWriter(
                self.spec,
                self._plans,
                lambda plan, topic: destination_config(self.spec, plan, topic),
                self.stats,
            )
        self._writer = ReplicationBatchWriter(
            self.plan,
            destination_config(self.spec, self.plan),
            self.stats,
            self._gaps,
        )
        return self._writer

    def run_stream(
        self, spark: SparkSession, *, once: bool, stop_file: str | None, reporting: Reporting | None
    ) -> int:
        """The micro-batch copy (`runner.run_query`), or, for a continuous JobGroup with
        extension.replication.low_latency that is not a bounded --once run, the low-latency
        copy (`continuous.py`)."""
        if once or not self.spec.low_latency:
            status = super().run_stream(spark, once=once, stop_file=stop_file, reporting=reporting)
            return self._inherited.finish(self.stats.batches.finish(status))
        self._low_latency_run = True
        status = run_low_latency(
            spark,
            self.spec,
            self.plan,
            lambda plan: destination_config(self.spec, plan),
            self.stats,
            write_id_prefix=self.write_id_prefix,
            stop_file=stop_file,
            reporting=reporting,
            gaps=self._gaps,
        )
        return self._inherited.finish(status)

    def query_settings(self, *, once: bool, stop_file: str | None) -> QuerySettings:
        writer = self._writer
        return dataclasses.replace(
            super().query_settings(once=once, stop_file=stop_file),
            until=None if self.plan.end_offsets is None else self.copy_complete,
            record_bytes=(lambda: writer.stats.last_record_bytes) if writer is not None else None,
            log_batches=False,
        )

    def retune(self, flow: FlowControl) -> bool:
        """In place for the micro-batch copy of one topic, when the caps fit the batches Spark
        plans (`preflight.caps_apply_in_place`): the next batch's copy tasks pace at them
        (FlowLimiter.java). The low-latency copy and a copy of many topics restart."""
        writer = self._writer
        if writer is None or self.spec.many_topics or self._low_latency_run:
            return False
        try:
            check_flow_control("flow_control", flow)
        except InvalidJobGroup:
            return False  # the restart refuses it, with its one line
        rates = flow.messages_per_sec, flow.bytes_per_sec
        if not caps_apply_in_place(writer.plan, self.spec.trigger_interval_seconds, *rates):
            return False
        self.spec = dataclasses.replace(
            self.spec, max_messages_per_sec=rates[0], max_bytes_per_sec=rates[1]
        )
        writer.retune(*rates)
        log.info(
            "%s: flow control now %s msgs/s, %s bytes/s, from the next batch (in place)",
            self.spec.job_group_id,
            rates[0] or "unlimited",
            rates[1] or "unlimited",
        )
        return True

    def skip_lost_records(self, spark: SparkSession, *, once: bool) -> None:
        """The lost ranges from where this run's copy resumes: Spark's checkpoint for the
        micro-batch copy, the progress log for the low-latency one."""
        spec = self.spec
        if spec.many_topics:
            raise ConfigError("--skip-lost-records", "not with extension.topics (one topic only)")
        low_latency = spec.low_latency and not once
        self._gaps = source_failure.skip_lost(
            spark,
            job_group_id=spec.job_group_id,
            cluster=spec.source.cluster,
            source=source_failure.Source(
                spec.source.topic,
                spec.output.checkpoint,
                logged_positions(spark, spec.output.checkpoint) if low_latency else None,
            ),
            loss_table=data_loss_path(spec.output.table("replication_stats")),
        )

    def explain_failure(self, spark: SparkSession) -> UatuError | None:
        spec = self.spec
        if spec.many_topics:
            return source_failure.explain_sources(
                spark,
                job_group_id=spec.job_group_id,
                cluster=spec.source.cluster,
                sources=[
                    source_failure.Source(topic, spec.output.checkpoint)
                    for topic in sorted(self._plans)
                ],
                loss_table=data_loss_path(spec.output.table("replication_stats")),
            )
        return source_failure.explain(
            spark,
            job_group_id=spec.job_group_id,
            checkpoint=spec.output.checkpoint,
            cluster=spec.source.cluster,
            topic=spec.source.topic,
            loss_table=data_loss_path(spec.output.table("replication_stats")),
            # The low-latency copy keeps its progress in its own log, not in Spark's
            # checkpoint; a lost range is counted from the last logged batch's end.
            resumes_at=(
                logged_positions(spark, spec.output.checkpoint) if self._low_latency_run else None
            ),
        )

    def close(self) -> None:
        self._inherited.close()
        if self._stats is not None:
            self._stats.close()
        tables_ready = self._tables_ready
        if tables_ready is not None and tables_ready.done() and tables_ready.exception():
            log.error("the Delta tables could not be created: %s", tables_ready.exception())


def _pack_query_name(name: str) -> str:
    return f"replication-{name}"
