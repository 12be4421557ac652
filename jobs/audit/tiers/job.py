"""KAFKA_AUDIT entry module for the cross-tier AuditTypes: tier reports, XDC, REPLICATION,
RETENTION and AVAILABILITY -> Delta `audit_verdicts` (and the tables in `tables.py`).

Source: Spark's Kafka source, from the earliest offsets, on the reports topic (the group's
kafka_consumer_task_group topic, when SERVICE/KRP aggregations are configured) and on every
REPLICATION source and destination topic (headers included, values never read), united with
Spark's `rate` source so that a micro-batch runs every trigger even when no record arrives: a
window is decided by time, not by traffic. failOnDataLoss is off: records deleted before they
were read are exactly what REPLICATION and RETENTION report, not a reason to stop.

Every micro-batch, in order:
1. AuditReports read -> parsed on the driver, repeated (instance_id, sequence) dropped, the
   rest folded into `tier_counts` (counts added, HLL unioned, KLL merged);
2. REPLICATION: contiguous source offset ranges per source window, and stamped (`uatu.src`)
   ranges with their copies at the destination -> `replication_ledger`;
3. RETENTION / AVAILABILITY: the audited topic's metadata sampled -> `retention_audit`,
   `availability_audit`;
4. every check's windows within the horizon decided (`verdicts.py`) against `audit_counts`,
   `tier_counts` and the ledger; a changed verdict is appended to `audit_verdicts` as a new
   revision (missing ranges to `replication_gaps`).

Guarantee: `tier_counts` is exactly-once per checkpoint (a killed job restarted on its
checkpoint folds each report once); every write is idempotent per (query id, batch id).
Verdicts are decisions of their batch's time: a window is decided at the first trigger after
its end + grace period, and revised when later data changes its counts or verdict.

Trigger: every trigger interval (default 10 s); AvailableNow with --once.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StructField, StructType
from uatu.v1 import audit_report_pb2

from core.provenance import STAMP
from jobs.audit.tiers import tables
from jobs.audit.tiers.sampling import NO_LEADER, RetentionState, TopicSample, TopicSampler
from jobs.audit.tiers.spec import (
    AVAILABILITY,
    KRP,
    REPLICATION,
    RETENTION,
    SERVICE,
    XDC,
    Check,
    TierAuditSpec,
    TopicRef,
)
from jobs.audit.tiers.verdicts import (
    INCOMPLETE,
    LOSS,
    OK,
    Side,
    Span,
    decide,
    decide_replication,
    replication_outcome,
    revise,
    side_from_sketches,
    with_relative,
)
from jobs.runtime.delta import DeltaTableSpec, append_once, ensure_tables, kll_quantiles, merge_once
from jobs.runtime.kafka_source import kafka_read_options
from jobs.runtime.template import StreamingJob, WriteId

log = logging.getLogger("uatu.tiers")

_TIER_NAMES = {v: k.removeprefix("TIER_") for k, v in audit_report_pb2.Tier.items()}
_EXACT = "AUDIT_TYPE_EXACT_UNIQ"


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def build_stream(spark: SparkSession, spec: TierAuditSpec) -> DataFrame:
    """Rate ticks united with every Kafka topic the checks read, as (cluster, topic,
    partition, offset, timestamp, value: reports only, stamp: the last `uatu.src` header)."""
    parts = [
        spark.readStream.format("rate")
        .option("rowsPerSecond", 1)
        .load()
        .select(
            F.lit(None).cast("string").alias("cluster"),
            F.lit(None).cast("string").alias("topic"),
            F.lit(None).cast("int").alias("partition"),
            F.lit(None).cast("long").alias("offset"),
            F.col("timestamp"),
            F.lit(None).cast("binary").alias("value"),
            F.lit(None).cast("string").alias("stamp"),
        )
    ]
    reads = spec.replication_topics()
    if spec.reads_reports:
        topics = reads.setdefault(spec.source.cluster.name, [])
        if spec.source.topic not in topics:
            topics.append(spec.source.topic)
    for cluster_name, topics in sorted(reads.items()):
        options = kafka_read_options(
            spec.clusters[cluster_name],
            ",".join(topics),
            starting_offsets="earliest",
            max_offsets_per_trigger=spec.max_offsets_per_trigger,
            group_id_prefix=spec.source.consumer_group or f"uatu-tiers-{spec.job_group_id}",
            include_headers=True,
        )
        options["failOnDataLoss"] = "false"
        reports_here = spec.reads_reports and cluster_name == spec.source.cluster.name
        value = (
            F.when(F.col("topic") == spec.source.topic, F.col("value"))
            if reports_here
            else F.lit(None).cast("binary")
        )
        stamps = F.filter("headers", lambda h: h["key"] == F.lit(STAMP))
        stamp = F.try_element_at(stamps, F.lit(-1))["value"].cast("string")
        parts.append(
            spark.readStream.format("kafka")
            .options(**options)
            .load()
            .select(
                F.lit(cluster_name).alias("cluster"),
                "topic",
                "partition",
                "offset",
                "timestamp",
                value.alias("value"),
                stamp.alias("stamp"),
            )
        )
    stream = parts[0]
    for part in parts[1:]:
        stream = stream.unionByName(part)
    return stream


def _frame(spark: SparkSession, table: DeltaTableSpec, rows: Sequence[dict[str, Any]]) -> DataFrame:
    """Rows (timestamps as epoch ms) -> a DataFrame of `table`'s schema."""
    fields = [
        StructField(f.name, LongType(), True) if f.dataType.typeName() == "timestamp" else f
        for f in table.schema.fields
    ]
    ts = [f.name for f in table.schema.fields if f.dataType.typeName() == "timestamp"]
    df = spark.createDataFrame(
        [tuple(r.get(f.name) for f in fields) for r in rows], StructType(fields)
    )
    return df.withColumns({c: F.timestamp_millis(c) for c in ts})


def _ms(column: str) -> Any:
    return F.unix_millis(column).alias(column)


def _window(ms: int, interval_s: int) -> int:
    return ms - ms % (interval_s * 1000)


class TierBatchWriter:
    """foreachBatch function of the cross-tier audit."""

    def __init__(self, spec: TierAuditSpec, write_id: WriteId) -> None:
        self.spec = spec
        self.write_id = write_id
        audited = spec.audited
        self.sampler: TopicSampler | None = None
        if spec.of_type(RETENTION, AVAILABILITY):
            self.sampler = TopicSampler(
                spec.clusters[audited.cluster], audited.topic, spec.source.consumer_group
            )
        self.retention = RetentionState()
        self._restored = False
        self._last_sample_ms: int | None = None

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        spark = batch.sparkSession
        app_id = self.write_id.of(spark)
        now = _now_ms()
        batch = batch.where(F.col("topic").isNotNull()).persist()
        try:
            if self.spec.reads_reports:
                self.fold_reports(spark, batch, app_id, batch_id)
            if self.spec.of_type(REPLICATION):
                self.record_offsets(batch, app_id, batch_id)
        finally:
            batch.unpersist()
        if self.sampler is not None:
            self.sample(spark, now, app_id, batch_id)
        verdicts: list[dict[str, Any]] = []
        gaps: list[dict[str, Any]] = []
        for check in self.spec.checks:
            if check.audit_type in (SERVICE, KRP):
                verdicts += self.tier_verdicts(spark, check, now)
            elif check.audit_type == XDC:
                verdicts += self.xdc_verdicts(spark, check, now)
            elif check.audit_type == REPLICATION:
                rows, found = self.replication_verdicts(spark, check, now)
                verdicts += rows
                gaps += found
            elif check.audit_type == RETENTION:
                verdicts += self.retention_verdicts(spark, check, now)
        self.write_verdicts(spark, verdicts, gaps, now, app_id, batch_id)

    # --- 1. tier reports ----------------------------------------------------------------

    def fold_reports(
        self, spark: SparkSession, batch: DataFrame, app_id: str, batch_id: int
    ) -> None:
        spec = self.spec
        values = batch.where(F.col("value").isNotNull()).select("value").collect()
        reports: dict[tuple[str, int], audit_report_pb2.AuditReport] = {}
        for row in values:
            try:
                report = audit_report_pb2.AuditReport.FromString(bytes(row.value))
            except Exception:  # not an AuditReport: skipped, the audit topic is shared
                continue
            r = report.reporter
            if not r.instance_id or report.sequence <= 0 or report.window_seconds <= 0:
                continue
            if r.tier not in _TIER_NAMES or r.tier == audit_report_pb2.TIER_INVALID:
                continue
            reports.setdefault((r.instance_id, report.sequence), report)
        if not reports:
            return
        instances = sorted({i for i, _ in reports})
        known = {
            (r.instance_id, r.sequence)
            for r in spark.read.format("delta")
            .load(spec.output.table("tier_report_ids"))
            .where(F.col("first_batch_id") < batch_id)
            .where(F.col("instance_id").isin(instances))
            .select("instance_id", "sequence")
            .collect()
        }
        new = {k: v for k, v in reports.items() if k not in known}
        ids = [
            {
                "instance_id": i,
                "sequence": s,
                "first_batch_id": batch_id,
                "service": r.reporter.service,
                "host": r.reporter.host,
                "tier": _TIER_NAMES[r.reporter.tier],
            }
            for (i, s), r in sorted(new.items())
        ]
        if ids:
            append_once(
                _frame(spark, tables.TIER_REPORT_IDS, ids),
                tables.TIER_REPORT_IDS,
                spec.output.table("tier_report_ids"),
                app_id,
                batch_id,
            )
        rows = []
        for r in new.values():
            tier = _TIER_NAMES[r.reporter.tier]
            rows.append(
                (
                    tier,
                    r.cluster,
                    r.topic,
                    r.reporter.consumer_group if tier == "CONSUMER" else "",
                    r.window_seconds,
                    r.window_start_ms,
                    r.message_count,
                    r.byte_count,
                    r.failed_count,
                    bytes(r.hll_sketch) or None,
                    bytes(r.latency_kll_sketch) or None,
                )
            )
        if not rows:
            return
        partial = (
            spark.createDataFrame(
                rows,
                "tier string, cluster string, topic string, consumer_group string, "
                "window_seconds int, start_ms long, message_count long, bytes long, "
                "failed_count long, hll binary, kll binary",
            )
            .groupBy("tier", "cluster", "topic", "consumer_group", "window_seconds", "start_ms")
            .agg(
                F.sum("message_count").alias("message_count"),
                F.sum("bytes").alias("bytes"),
                F.sum("failed_count").alias("failed_count"),
                F.count(F.lit(1)).alias("reports"),
                F.hll_union_agg("hll", True).alias("hll_sketch"),
                # No report of the group measured latency: null, not an empty sketch (an empty
                # one makes kll_sketch_get_quantile_double fail the batch).
                F.when(F.count("kll") > 0, F.kll_merge_agg_double("kll")).alias(
                    "latency_kll_sketch"
                ),
            )
            .withColumn("window_start", F.timestamp_millis("start_ms"))
            .withColumn(
                "window_end",
                F.timestamp_millis(F.col("start_ms") + F.col("window_seconds") * 1000),
            )
            .withColumn("updated_at", F.current_timestamp())
            .drop("start_ms")
        ).localCheckpoint()
        merged_hll = "hll_union(t.hll_sketch, s.hll_sketch, true)"
        merged_kll = (
            "CASE WHEN t.latency_kll_sketch IS NULL THEN s.latency_kll_sketch "
            "WHEN s.latency_kll_sketch IS NULL THEN t.latency_kll_sketch "
            "ELSE kll_sketch_merge_double(t.latency_kll_sketch, s.latency_kll_sketch) END"
        )
        quantiles = {"latency_p50_ms": 0.5, "latency_p99_ms": 0.99}
        merge_once(
            partial,
            tables.TIER_COUNTS,
            spec.output.table("tier_counts"),
            app_id,
            batch_id,
            update={
                "message_count": "t.message_count + s.message_count",
                "bytes": "t.bytes + s.bytes",
                "failed_count": "t.failed_count + s.failed_count",
                "reports": "t.reports + s.reports",
                "unique_count": f"hll_sketch_estimate({merged_hll})",
                "hll_sketch": merged_hll,
                "latency_kll_sketch": merged_kll,
                **kll_quantiles(F.expr(merged_kll), "double", quantiles),
                "updated_at": "s.updated_at",
            },
            insert={
                **{c: f"s.{c}" for c in tables.TIER_KEY},
                "window_end": "s.window_end",
                "message_count": "s.message_count",
                "bytes": "s.bytes",
                "failed_count": "s.failed_count",
                "reports": "s.reports",
                "unique_count": "hll_sketch_estimate(s.hll_sketch)",
                "hll_sketch": "s.hll_sketch",
                "latency_kll_sketch": "s.latency_kll_sketch",
                **kll_quantiles(F.col("s.latency_kll_sketch"), "double", quantiles),
                "updated_at": "s.updated_at",
            },
        )
        log.info(
            "batch %d: %d new audit reports (%d repeated)",
            batch_id,
            len(new),
            len(reports) - len(new),
        )

    # --- 2. replication ledger ----------------------------------------------------------

    def record_offsets(self, batch: DataFrame, app_id: str, batch_id: int) -> None:
        frames = []
        for check in self.spec.of_type(REPLICATION):
            frames += _ledger_frames(batch, check)
        if not frames:
            return
        rows = frames[0]
        for frame in frames[1:]:
            rows = rows.unionByName(frame)
        append_once(
            rows.withColumn("batch_id", F.lit(batch_id).cast("long")),
            tables.REPLICATION_LEDGER,
            self.spec.output.table("replication_ledger"),
            app_id,
            batch_id,
        )

    # --- 3. samples ---------------------------------------------------------------------

    def sample(self, spark: SparkSession, now: int, app_id: str, batch_id: int) -> None:
        spec = self.spec
        assert self.sampler is not None
        try:
            sample = self.sampler.sample(now)
        except Exception as e:  # a broker that does not answer is an outage, not a crash
            log.warning("sampling %s failed: %s", spec.audited.label, e)
            return
        if sample is None:
            return
        retention = spec.of_type(RETENTION)
        if retention:
            if not self._restored:
                self._restore_retention(spark)
            self._write_retention(spark, sample, retention[0], app_id, batch_id)
        availability = spec.of_type(AVAILABILITY)
        if availability:
            self._write_availability(spark, sample, availability[0], app_id, batch_id)
        self._last_sample_ms = now

    def _restore_retention(self, spark: SparkSession) -> None:
        self._restored = True
        a = self.spec.audited
        for r in (
            spark.read.format("delta")
            .load(self.spec.output.table("retention_audit"))
            .where((F.col("cluster") == a.cluster) & (F.col("topic") == a.topic))
            .groupBy("partition")
            .agg(F.max("lost_last_offset").alias("lost"), F.max("log_start_offset").alias("start"))
            .collect()
        ):
            if r.lost is not None:
                self.retention.lost_through[r.partition] = r.lost
            if r.start is not None:
                self.retention.log_start[r.partition] = r.start

    def _write_retention(
        self, spark: SparkSession, sample: TopicSample, check: Check, app_id: str, batch_id: int
    ) -> None:
        a = self.spec.audited
        start = _window(sample.sampled_ms, check.interval_seconds)
        rows = []
        for p, s in sorted(sample.partitions.items()):
            deleted, first, last = self.retention.step(p, s)
            rows.append(
                {
                    "cluster": a.cluster,
                    "topic": a.topic,
                    "partition": p,
                    "window_start": start,
                    "window_end": start + check.interval_seconds * 1000,
                    "log_start_offset": s.log_start,
                    "end_offset": s.end,
                    "committed_offset": s.committed,
                    "deleted_count": deleted,
                    "lost_count": (last - first + 1)
                    if first is not None and last is not None
                    else 0,
                    "lost_first_offset": first,
                    "lost_last_offset": last,
                    "partition_count": len(sample.partitions),
                    "expected_partition_count": check.partition_count,
                    "retention_ms": sample.retention_ms,
                    "retention_bytes": sample.retention_bytes,
                    "cleanup_policy": sample.cleanup_policy,
                    "samples": 1,
                    "updated_at": sample.sampled_ms,
                }
            )
        keep_latest = (
            "log_start_offset",
            "end_offset",
            "committed_offset",
            "partition_count",
            "expected_partition_count",
            "retention_ms",
            "retention_bytes",
            "cleanup_policy",
            "updated_at",
            "window_end",
        )
        merge_once(
            _frame(spark, tables.RETENTION_AUDIT, rows),
            tables.RETENTION_AUDIT,
            self.spec.output.table("retention_audit"),
            app_id,
            batch_id,
            update={
                **{c: f"s.{c}" for c in keep_latest},
                "deleted_count": "t.deleted_count + s.deleted_count",
                "lost_count": "t.lost_count + s.lost_count",
                "lost_first_offset": "coalesce(t.lost_first_offset, s.lost_first_offset)",
                "lost_last_offset": "coalesce(s.lost_last_offset, t.lost_last_offset)",
                "samples": "t.samples + 1",
            },
            insert={c: f"s.{c}" for c in tables.RETENTION_AUDIT.columns},
        )

    def _write_availability(
        self, spark: SparkSession, sample: TopicSample, check: Check, app_id: str, batch_id: int
    ) -> None:
        a = self.spec.audited
        start = _window(sample.sampled_ms, check.interval_seconds)
        last = self._last_sample_ms
        seconds = 0.0 if last is None else max(0.0, (sample.sampled_ms - last) / 1000)
        rows = [
            {
                "cluster": a.cluster,
                "topic": a.topic,
                "partition": p,
                "window_start": start,
                "window_end": start + check.interval_seconds * 1000,
                "sampled_seconds": seconds,
                "offline_seconds": seconds if s.leader == NO_LEADER else 0.0,
                "under_replicated_seconds": seconds if s.isr < s.replicas else 0.0,
                "under_min_isr_seconds": seconds if s.isr < sample.min_isr else 0.0,
                "samples": 1,
                "updated_at": sample.sampled_ms,
            }
            for p, s in sorted(sample.partitions.items())
        ]
        added = (
            "sampled_seconds",
            "offline_seconds",
            "under_replicated_seconds",
            "under_min_isr_seconds",
            "samples",
        )
        merge_once(
            _frame(spark, tables.AVAILABILITY_AUDIT, rows),
            tables.AVAILABILITY_AUDIT,
            self.spec.output.table("availability_audit"),
            app_id,
            batch_id,
            update={**{c: f"t.{c} + s.{c}" for c in added}, "updated_at": "s.updated_at"},
            insert={c: f"s.{c}" for c in tables.AVAILABILITY_AUDIT.columns},
        )

    # --- 4. verdicts --------------------------------------------------------------------

    def _horizon(self, now: int) -> int:
        return now - self.spec.horizon_seconds * 1000

    def _kafka_side(
        self, spark: SparkSession, refs: Iterable[TopicRef], interval: int, now: int
    ) -> tuple[dict[tuple[TopicRef, int], list[Any]], dict[TopicRef, int]]:
        """audit_counts rows per (topic, check window), one audit per topic (the largest
        interval dividing the check's, EXACT preferred), and each topic's latest update."""
        refs = list(dict.fromkeys(refs))
        if not refs:
            return {}, {}
        counts = spark.read.format("delta").load(self.spec.output.table("audit_counts"))
        mine = counts.where(_any_of(refs))
        until = {
            TopicRef(r.cluster, r.topic): r.until
            for r in mine.groupBy("cluster", "topic")
            .agg(F.max(F.unix_millis("updated_at")).alias("until"))
            .collect()
        }
        rows = (
            mine.where(F.col("window_start") >= F.timestamp_millis(F.lit(self._horizon(now))))
            .where(F.lit(interval) % F.col("audit_interval_seconds") == 0)
            .select(
                "cluster",
                "topic",
                "audit_type",
                "audit_interval_seconds",
                _ms("window_start"),
                "message_count",
                "hll_sketch",
            )
            .collect()
        )
        chosen: dict[TopicRef, tuple[int, int]] = {}
        for r in rows:
            rank = (r.audit_interval_seconds, 1 if r.audit_type == _EXACT else 0)
            ref = TopicRef(r.cluster, r.topic)
            chosen[ref] = max(chosen.get(ref, rank), rank)
        out: dict[tuple[TopicRef, int], list[Any]] = defaultdict(list)
        for r in rows:
            ref = TopicRef(r.cluster, r.topic)
            rank = (r.audit_interval_seconds, 1 if r.audit_type == _EXACT else 0)
            if rank == chosen[ref]:
                out[(ref, _window(r.window_start, interval))].append(r)
        return out, until

    def _candidate(
        self,
        check: Check,
        window: int,
        cluster: str,
        topic: str,
        left: Side,
        right: Side,
        now: int,
        name: str | None = None,
    ) -> dict[str, Any]:
        due = now >= window + (check.interval_seconds + check.grace_seconds) * 1000
        verdict, detail = decide(due, left, right, check.threshold)
        return with_relative(
            {
                "check_type": check.audit_type,
                "check_name": name or check.name,
                "job_group_id": self.spec.job_group_id,
                "cluster": cluster,
                "topic": topic,
                "window_start": window,
                "window_end": window + check.interval_seconds * 1000,
                "left_label": left.label,
                "right_label": right.label,
                "left_count": left.count,
                "right_count": right.count,
                "left_unique": left.unique,
                "right_unique": right.unique,
                "threshold": check.threshold,
                "verdict": verdict,
                "detail": detail,
                "missing_count": None,
                "decided_at": now,
            }
        )

    def tier_verdicts(self, spark: SparkSession, check: Check, now: int) -> list[dict[str, Any]]:
        interval = check.interval_seconds
        tiers = [check.tier] + (["CONSUMER"] if check.tier == "SERVICE" else [])
        reported = (
            spark.read.format("delta")
            .load(self.spec.output.table("tier_counts"))
            .where(F.col("tier").isin(tiers))
            .where(F.col("window_start") >= F.timestamp_millis(F.lit(self._horizon(now))))
            .where(F.lit(interval) % F.col("window_seconds") == 0)
        )
        if self.spec.audited_topic_filter:
            reported = reported.where(F.col("topic") == self.spec.audited_topic_filter)
        rows = reported.select(
            "tier",
            "cluster",
            "topic",
            "consumer_group",
            _ms("window_start"),
            "message_count",
            "hll_sketch",
        ).collect()
        by_window: dict[tuple[str, str, TopicRef, int], list[Any]] = defaultdict(list)
        for r in rows:
            key = (
                r.tier,
                r.consumer_group,
                TopicRef(r.cluster, r.topic),
                _window(r.window_start, interval),
            )
            by_window[key].append(r)
        topics = {k[2] for k in by_window}
        kafka, until = self._kafka_side(spark, topics, interval, now)
        out = []
        pairs: set[tuple[str, str, TopicRef, int]] = set(by_window)
        for ref, window in kafka:
            if ref in topics:
                pairs.add((check.tier, "", ref, window))
        for tier, group, ref, window in sorted(pairs, key=lambda k: (k[0], k[1], k[2].label, k[3])):
            mine = by_window.get((tier, group, ref, window), [])
            theirs = kafka.get((ref, window), [])
            close = window + (interval + check.grace_seconds) * 1000
            tier_side = side_from_sketches(
                f"{tier} {ref.label}" + (f" group {group}" if group else ""),
                sum(r.message_count for r in mine),
                (r.hll_sketch for r in mine),
            )
            if not mine:
                tier_side = Side(tier_side.label, reported=False, why_not=f"no {tier} reports")
            kafka_side = side_from_sketches(
                f"kafka {ref.label}",
                sum(r.message_count for r in theirs),
                (r.hll_sketch for r in theirs),
            )
            if not theirs and until.get(ref, 0) < close:
                kafka_side = Side(
                    kafka_side.label,
                    reported=False,
                    why_not=f"audit_counts has no row for it and was updated last at "
                    f"{until.get(ref)} (epoch ms)",
                )
            if tier == "CONSUMER":
                out.append(
                    self._candidate(
                        check,
                        window,
                        ref.cluster,
                        ref.topic,
                        kafka_side,
                        tier_side,
                        now,
                        name=f"kafka->consumer:{group}",
                    )
                )
            else:
                out.append(
                    self._candidate(
                        check, window, ref.cluster, ref.topic, tier_side, kafka_side, now
                    )
                )
        return out

    def xdc_verdicts(self, spark: SparkSession, check: Check, now: int) -> list[dict[str, Any]]:
        interval = check.interval_seconds
        rows, until = self._kafka_side(spark, (*check.source, *check.destination), interval, now)
        windows = sorted({w for _, w in rows})
        out = []
        for window in windows:
            close = window + (interval + check.grace_seconds) * 1000
            sides = []
            for refs in (check.source, check.destination):
                mine = [r for ref in refs for r in rows.get((ref, window), [])]
                label = "+".join(r.label for r in refs)
                side = side_from_sketches(
                    label, sum(r.message_count for r in mine), (r.hll_sketch for r in mine)
                )
                silent = [
                    ref.label
                    for ref in refs
                    if not rows.get((ref, window)) and until.get(ref, 0) < close
                ]
                if silent:
                    side = Side(label, reported=False, why_not=f"{silent} not audited past it yet")
                sides.append(side)
            out.append(
                self._candidate(
                    check,
                    window,
                    ",".join(sorted({r.cluster for r in check.destination})),
                    ",".join(sorted({r.topic for r in check.destination})),
                    sides[0],
                    sides[1],
                    now,
                )
            )
        return out

    def replication_verdicts(
        self, spark: SparkSession, check: Check, now: int
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        interval = check.interval_seconds
        ledger = (
            spark.read.format("delta")
            .load(self.spec.output.table("replication_ledger"))
            .where(F.col("check_name") == check.name)
        )
        source = (
            ledger.where(F.col("side") == "source")
            .where(F.col("window_start") >= F.timestamp_millis(F.lit(self._horizon(now))))
            .select(
                "cluster", "topic", "partition", _ms("window_start"), "first_offset", "last_offset"
            )
            .collect()
        )
        if not source:
            return [], []
        low = min(r.first_offset for r in source)
        destination = (
            ledger.where(F.col("side") == "destination")
            .where(F.col("last_offset") >= low)
            .select("cluster", "topic", "partition", "first_offset", "last_offset", "copies")
            .collect()
        )
        high = {
            (r.cluster, r.topic, r.partition): r.high
            for r in ledger.where(F.col("side") == "destination")
            .groupBy("cluster", "topic", "partition")
            .agg(F.max("last_offset").alias("high"))
            .collect()
        }
        copies: dict[tuple[str, str, int], list[Span]] = defaultdict(list)
        for r in destination:
            copies[(r.cluster, r.topic, r.partition)].append(
                Span(r.first_offset, r.last_offset, r.copies)
            )
        windows: dict[int, dict[tuple[str, str, int], list[Span]]] = defaultdict(
            lambda: defaultdict(list)
        )
        for r in source:
            windows[r.window_start][(r.cluster, r.topic, r.partition)].append(
                Span(r.first_offset, r.last_offset)
            )
        verdicts, gaps = [], []
        destination_label = "+".join(r.label for r in check.destination)
        for window, parts in sorted(windows.items()):
            outcomes = {
                key: replication_outcome(spans, copies.get(key, []), high.get(key))
                for key, spans in parts.items()
            }
            due = now >= window + (interval + check.grace_seconds) * 1000
            by_partition = {f"{k[1]}/{k[2]}": o for k, o in outcomes.items()}
            verdict, detail, left, right, unique, missing = decide_replication(due, by_partition)
            if verdict == LOSS:
                detail = f"{missing} source offsets never arrived (see replication_gaps)"
            verdicts.append(
                with_relative(
                    {
                        "check_type": REPLICATION,
                        "check_name": check.name,
                        "job_group_id": self.spec.job_group_id,
                        "cluster": ",".join(sorted({r.cluster for r in check.destination})),
                        "topic": ",".join(sorted({r.topic for r in check.destination})),
                        "window_start": window,
                        "window_end": window + interval * 1000,
                        "left_label": "source " + "+".join(r.label for r in check.source),
                        "right_label": f"destination {destination_label}",
                        "left_count": left,
                        "right_count": right,
                        "left_unique": left,
                        "right_unique": unique,
                        "threshold": 0.0,
                        "verdict": verdict,
                        "detail": detail,
                        "missing_count": missing,
                        "decided_at": now,
                    }
                )
            )
            for (cluster, topic, partition), outcome in sorted(outcomes.items()):
                for span in outcome.missing if verdict == LOSS else []:
                    gaps.append(
                        {
                            "check_name": check.name,
                            "job_group_id": self.spec.job_group_id,
                            "source_cluster": cluster,
                            "source_topic": topic,
                            "partition": partition,
                            "window_start": window,
                            "first_offset": span.first,
                            "last_offset": span.last,
                            "missing_count": span.size,
                            "destination": destination_label,
                            "decided_at": now,
                        }
                    )
        return verdicts, gaps

    def retention_verdicts(
        self, spark: SparkSession, check: Check, now: int
    ) -> list[dict[str, Any]]:
        a = self.spec.audited
        rows = (
            spark.read.format("delta")
            .load(self.spec.output.table("retention_audit"))
            .where((F.col("cluster") == a.cluster) & (F.col("topic") == a.topic))
            .where(F.col("window_start") >= F.timestamp_millis(F.lit(self._horizon(now))))
            .select(
                _ms("window_start"),
                "partition",
                "deleted_count",
                "lost_count",
                "committed_offset",
                "partition_count",
                "expected_partition_count",
            )
            .collect()
        )
        by_window: dict[int, list[Any]] = defaultdict(list)
        for r in rows:
            by_window[r.window_start].append(r)
        out = []
        for window, mine in sorted(by_window.items()):
            deleted = sum(r.deleted_count for r in mine)
            lost = sum(r.lost_count for r in mine)
            count = max(r.partition_count for r in mine)
            row = self._candidate(
                check,
                window,
                a.cluster,
                a.topic,
                Side(f"deleted by retention from {a.label}", deleted),
                Side(
                    f"consumed by {self.spec.source.consumer_group or '(no group)'} first",
                    deleted - lost,
                ),
                now,
            )
            if row["verdict"] == OK or row["verdict"] == LOSS:
                if lost:
                    row["verdict"] = LOSS
                    row["detail"] = f"{lost} records deleted by retention before they were consumed"
                elif count != check.partition_count:
                    row["verdict"] = INCOMPLETE
                    row["detail"] = f"{count} partitions, expected {check.partition_count}"
                elif not self.spec.source.consumer_group or any(
                    r.committed_offset is None for r in mine
                ):
                    row["verdict"] = INCOMPLETE
                    row["detail"] = "the group has no committed offset on every partition"
                else:
                    row["verdict"] = OK
                    row["detail"] = f"{deleted} records deleted, all consumed first"
            row["missing_count"] = lost
            out.append(row)
        return out

    def write_verdicts(
        self,
        spark: SparkSession,
        candidates: list[dict[str, Any]],
        gaps: list[dict[str, Any]],
        now: int,
        app_id: str,
        batch_id: int,
    ) -> None:
        if not candidates:
            return
        latest = (
            spark.read.format("delta")
            .load(self.spec.output.table("audit_verdicts"))
            .where(F.col("job_group_id") == self.spec.job_group_id)
            .where(F.col("window_start") >= F.timestamp_millis(F.lit(self._horizon(now))))
            .withColumn(
                "newest",
                F.max("revision").over(
                    Window.partitionBy("check_type", "check_name", "topic", "window_start")
                ),
            )
            .where(F.col("revision") == F.col("newest"))
            .select(
                "check_type",
                "check_name",
                "topic",
                _ms("window_start"),
                "verdict",
                "revision",
                "left_count",
                "right_count",
                "left_unique",
                "right_unique",
                "missing_count",
            )
            .collect()
        )
        rows = revise(candidates, [r.asDict() for r in latest])
        if not rows:
            return
        append_once(
            _frame(spark, tables.AUDIT_VERDICTS, rows),
            tables.AUDIT_VERDICTS,
            self.spec.output.table("audit_verdicts"),
            app_id,
            batch_id,
        )
        revision = {(r["check_name"], r["window_start"]): r["revision"] for r in rows}
        found = [
            {**g, "revision": revision[(g["check_name"], g["window_start"])]}
            for g in gaps
            if (g["check_name"], g["window_start"]) in revision
        ]
        if found:
            append_once(
                _frame(spark, tables.REPLICATION_GAPS, found),
                tables.REPLICATION_GAPS,
                self.spec.output.table("replication_gaps"),
                app_id,
                batch_id,
            )
        counts: dict[str, int] = defaultdict(int)
        for r in rows:
            counts[r["verdict"]] += 1
        log.info("batch %d: %d verdict rows written: %s", batch_id, len(rows), dict(counts))


def _any_of(refs: Iterable[TopicRef]) -> Column:
    """A filter matching the rows of any of `refs` (false for none)."""
    match = F.lit(False)
    for ref in refs:
        match = match | ((F.col("cluster") == ref.cluster) & (F.col("topic") == ref.topic))
    return match


def _ledger_frames(batch: DataFrame, check: Check) -> list[DataFrame]:
    """This batch's contiguous offset ranges of one REPLICATION check: source records per
    (partition, source window), destination stamps of its sources with their copies."""
    interval_ms = check.interval_seconds * 1000
    frames = []
    source = _any_of(check.source)
    ts = F.unix_millis("timestamp")
    src = batch.where(source).select(
        "cluster",
        "topic",
        "partition",
        "offset",
        (ts - F.pmod(ts, F.lit(interval_ms))).alias("start_ms"),
    )
    rank = F.row_number().over(
        Window.partitionBy("cluster", "topic", "partition", "start_ms").orderBy("offset")
    )
    frames.append(
        src.withColumn("island", F.col("offset") - rank)
        .groupBy("cluster", "topic", "partition", "start_ms", "island")
        .agg(F.min("offset").alias("first_offset"), F.max("offset").alias("last_offset"))
        .select(
            F.lit(check.name).alias("check_name"),
            F.lit("source").alias("side"),
            "cluster",
            "topic",
            "partition",
            F.timestamp_millis("start_ms").alias("window_start"),
            "first_offset",
            "last_offset",
            F.lit(1).cast("long").alias("copies"),
        )
    )
    destination = _any_of(check.destination)
    pattern = r"^(.*)/([^/]+)/(\d+)/(\d+)$"
    stamped = (
        batch.where(destination & F.col("stamp").isNotNull())
        .select(
            F.regexp_extract("stamp", pattern, 1).alias("cluster"),
            F.regexp_extract("stamp", pattern, 2).alias("topic"),
            F.regexp_extract("stamp", pattern, 3).alias("p"),
            F.regexp_extract("stamp", pattern, 4).alias("o"),
        )
        .where(F.col("p") != "")
        .select(
            "cluster",
            "topic",
            F.col("p").cast("int").alias("partition"),
            F.col("o").cast("long").alias("offset"),
        )
    )
    per_offset = (
        stamped.where(_any_of(check.source))
        .groupBy("cluster", "topic", "partition", "offset")
        .agg(F.count(F.lit(1)).alias("copies"))
    )
    rank = F.row_number().over(
        Window.partitionBy("cluster", "topic", "partition", "copies").orderBy("offset")
    )
    frames.append(
        per_offset.withColumn("island", F.col("offset") - rank)
        .groupBy("cluster", "topic", "partition", "copies", "island")
        .agg(F.min("offset").alias("first_offset"), F.max("offset").alias("last_offset"))
        .select(
            F.lit(check.name).alias("check_name"),
            F.lit("destination").alias("side"),
            "cluster",
            "topic",
            "partition",
            F.lit(None).cast("timestamp").alias("window_start"),
            "first_offset",
            "last_offset",
            "copies",
        )
    )
    return frames


class TierAuditJob(StreamingJob[TierAuditSpec]):
    """The cross-tier audit in the shared template."""

    write_id_prefix = "uatu-tiers"

    def ensure_tables(self, spark: SparkSession) -> None:
        ensure_tables(spark, tables.locations(self.spec))
        # Comparisons read audit_counts, which the counting audits write; an empty table until
        # they do keeps every read valid.
        from jobs.audit.tables import AUDIT_COUNTS

        if self.spec.of_type(SERVICE, KRP, XDC):
            ensure_tables(spark, [(AUDIT_COUNTS, self.spec.output.table("audit_counts"))])
        log.info(
            "cross-tier audit %s: %s",
            self.spec.job_group_id,
            ", ".join(
                f"{c.audit_type.removeprefix('AUDIT_TYPE_')} {c.name}" for c in self.spec.checks
            ),
        )

    def stream(self, spark: SparkSession) -> DataFrame:
        return build_stream(spark, self.spec)

    def batch_writer(self, spark: SparkSession) -> TierBatchWriter:
        return TierBatchWriter(self.spec, self.write_id())
