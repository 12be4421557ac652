"""The audit's micro-batch data path: Spark-planned Kafka offset ranges folded in JVM tasks.

Spark's Kafka source plans each micro-batch (offsets, maxOffsetsPerTrigger, the checkpoint),
but the batch's rows are never read. JVM tasks, about one per core with the partitions' ranges
packed into them (`dev.uatu.fold.RangeFolds.packed`), read the ranges with byte-array Kafka
consumers, and a fold per range (`dev.uatu.audit.AuditFold`, in build/uatu-jvm.jar) folds
every record into the partial aggregate of its window: counts, bytes, untimed and late
records, an HLL_8 sketch of the dedupe keys and a KLL sketch of the latencies, in the formats
Spark's `hll_sketch_agg` and `kll_sketch_agg_double` write, and, for exact audits, the number
of keys new to the window. A record's own fields (event time, dedupe hash, placement, latency) come
from `transforms.audit_records` itself: the fold evaluates Spark's compiled expressions of that
transform on each record, so the SQL stays the one definition of what is audited. For the
default configuration (event time = Kafka timestamp, dedupe key = key and value) the fold
computes the same fields directly (`dev.uatu.audit.KafkaTimestampFields`), held to the SQL by
the tests; that saves the expressions' share of the fold's CPU (docs/audit.md).

Exact audits keep their keys per (partition, window) in the executor's memory and under the
checkpoint (`<checkpoint>/audit-keys`, `dev.uatu.audit.PartitionKeys`; a job that audits a
topic selection keeps each topic's apart, `<checkpoint>/audit-keys/topics/<topic>`, so the
state is per topic partition, while a one-topic job's checkpoints keep their layout): O(1)
per key, windows leave memory once the partition's watermark passes their end plus the
allowed lateness, and a late record still finds its window's keys on disk. A batch reads only
earlier batches' keys and writes its own before the counts MERGE, so a replayed batch
computes the same increments. A window's keys are dropped, from memory and disk, once its end
is `key_retention_seconds` behind the partition's watermark as of the batches before (never
the clock, so a replay drops the same windows); a later record of the window is still
counted, its uniqueness left to the window's sketch (`unique_estimated_count`,
`jobs/audit/tables.py`).

Why not Spark rows: turning Kafka records into rows alone is slower than the audit's target
against Kafka's own consumer (docs/benchmarks.md, audit job).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.classic.dataframe import DataFrame as ClassicDataFrame

from core import kafka_admin
from core.faults import fault_point
from jobs.audit import metrics
from jobs.audit.spec import AuditSpec, FieldRef
from jobs.audit.transforms import audit_records, fold_partials
from jobs.runtime import metrics as runtime_metrics
from jobs.runtime.kafka_source import RANGE_TIMEOUT_MS, range_consumer_config
from jobs.runtime.py4j import java_list, java_map, jvm_package
from jobs.runtime.source_failure import LostRange, SourceGaps, read_past, record_lost
from jobs.runtime.tables import data_loss_path

log = logging.getLogger("uatu.audit")

FOLD_PACKAGE = "dev.uatu.audit"
# The columns the fold's record projection yields, in order (dev.uatu.audit.RecordProjection).
PROJECTED = ["bytes", "dedupe_key", "event_ms", "placed_ms", "latency_ms"]


def consumer_config(spec: AuditSpec) -> dict[str, str]:
    """The fold tasks' Java consumer (`range_consumer_config`)."""
    return range_consumer_config(spec.source.cluster, read_committed=spec.source.read_committed)


def uses_kafka_timestamp_defaults(spec: AuditSpec) -> bool:
    """Whether the fold may compute a record's fields directly (`KafkaTimestampFields`)
    instead of evaluating `audit_records`' compiled expressions: the default event time (the
    Kafka timestamp) and dedupe key (key and value), whose SQL is a few comparisons and one
    hash. The tests hold both ways to the same partials."""
    return spec.event_time == FieldRef("kafka_timestamp") and spec.dedupe_key == FieldRef(
        "key_and_value"
    )


def record_projection(spark: SparkSession, spec: AuditSpec, batch: Any) -> DataFrame:
    """`audit_records` over an empty frame of the Kafka source's columns, selecting the fields
    the fold reads (`dev.uatu.audit.RecordProjection` compiles its expressions)."""
    return (
        spark.createDataFrame(spark.sparkContext.emptyRDD(), batch.projectionInputSchema())
        .transform(
            audit_records,
            cluster=spec.audited_cluster,
            topic=spec.audited_topic,
            event_time=spec.event_time,
            dedupe_key=spec.dedupe_key,
            max_future_skew_seconds=spec.max_future_skew_seconds,
        )
        .select(*PROJECTED)
    )


def keys_dir(spec: AuditSpec) -> str:
    """Where exact audits keep their keys: under the checkpoint, so they go with it."""
    return f"{spec.output.checkpoint}/audit-keys"


@dataclass(frozen=True)
class FoldedBatch:
    """One micro-batch, folded. `partials` is the counts MERGE's source (window_partials'
    columns plus new_unique_count); the rest is what the batch's log line and metrics say."""

    partials: DataFrame
    records: int
    bytes: int
    state: Mapping[tuple[str, int], Mapping[str, Any]]  # exact keys per (topic, partition)

    @property
    def mean_record_bytes(self) -> float:
        return self.bytes / self.records if self.records else 0.0

    def state_line(self) -> str:
        """The exact keys' state after the batch, summed over partitions ("" without one)."""
        return state_line(self.state)


# The exact keys' figures of a partition after a batch (AuditFold.ROW_SCHEMA's state_*).
STATE_FIELDS = (
    "state_windows",
    "state_keys",
    "state_memory_bytes",
    "state_windows_read",
    "state_bytes_written",
    "state_windows_dropped",
    "state_oldest_window_ms",
    "state_window_keys",
)
_SUMMED = STATE_FIELDS[:6]


def window_keys_line(state: Mapping[tuple[str, int], Mapping[str, Any]]) -> str:
    """Keys per window in memory, per topic partition (the DEBUG detail of `state_line`)."""
    return "; ".join(
        f"{t}/p{p}: {s['state_window_keys'] or '-'}" for (t, p), s in sorted(state.items())
    )


def state_line(state: Mapping[tuple[str, int], Mapping[str, Any]]) -> str:
    """`state` (per topic partition, STATE_FIELDS) summed over partitions for the batch's log line;
    the oldest window kept is the oldest of any partition. "" without state."""
    if not state:
        return ""
    total = {k: sum(s[k] or 0 for s in state.values()) for k in _SUMMED}
    starts = [s["state_oldest_window_ms"] for s in state.values()]
    known = [ms for ms in starts if ms is not None]
    oldest = (
        datetime.fromtimestamp(min(known) / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        if known
        else "none"
    )
    mib = 2**20
    return (
        f"exact keys in memory: {total['state_keys']:,} in {total['state_windows']} windows "
        f"({total['state_memory_bytes'] / mib:.1f} MiB), "
        f"written {total['state_bytes_written'] / mib:.1f} MiB, "
        f"windows read back {total['state_windows_read']}, "
        f"dropped by retention {total['state_windows_dropped']}, oldest kept {oldest}"
    )


class AuditFolder:
    """Folds the micro-batches of one audit job (built once per run, on the driver)."""

    def __init__(
        self, spark: SparkSession, spec: AuditSpec, gaps: Mapping[str, SourceGaps] | None = None
    ) -> None:
        self.spec = spec
        self.gaps = dict(gaps or {})  # lost ranges to read past, by topic (--skip-lost-records)
        self._batch = _jvm(spark).AuditBatch
        direct = uses_kafka_timestamp_defaults(spec)
        self._settings = self._batch.settings(
            spark._jsparkSession,
            java_list(spark, [w.audit_type for w in spec.windows]),
            java_list(spark, [w.interval_seconds for w in spec.windows]),
            -1 if spec.allowed_lateness_seconds is None else spec.allowed_lateness_seconds,
            spec.hll_lg_config_k,
            None if direct else record_projection(spark, spec, self._batch)._jdf,
            spec.needs_headers,
            direct,
            spec.max_future_skew_seconds,
            keys_dir(spec),
            spec.key_retention_seconds,
            spec.many_topics,
        )
        self._consumer = java_map(spark, consumer_config(spec))

    def fields_kind(self) -> str:
        """How the fold computes a record's fields: "kafka_timestamp" (directly, for the
        default configuration) or "projection" (Spark's compiled expressions)."""
        return str(self._batch.fieldsKind(self._settings))

    def fold(self, batch: DataFrame, batch_id: int) -> FoldedBatch | None:
        """Read and fold the batch's planned offset ranges now (of every topic it read, for a
        topic selection); None when it has none."""
        spark = batch.sparkSession
        selection = self.spec.source.selection
        ranges = self._batch.planned(
            batch._jdf, None if selection is not None else self.spec.source.topic
        )
        fault_point("audit.ranges_planned")  # core/faults.py: tests only
        if selection is not None and selection.pattern:
            ranges = self._of_existing_topics(spark, ranges, batch_id)
        if self.gaps:
            ranges = past_gaps(spark, ranges, self.gaps, batch_id)
        if ranges.isEmpty():
            return None
        audit_ms = self._batch.batchTimestampMs(
            spark._jsparkSession, self.spec.output.checkpoint, batch_id
        )
        return self.fold_ranges(spark, ranges, batch_id, audit_ms)

    def _of_existing_topics(self, spark: SparkSession, ranges: Any, batch_id: int) -> Any:
        """The planned `ranges` of topics the cluster still lists. A pattern's topic deleted
        after Spark planned the batch would otherwise stall its range's reader until
        RANGE_TIMEOUT_MS and fail the batch; its range is logged and recorded as lost."""
        existing = kafka_admin.topic_partitions(self.spec.source.cluster)
        gone: dict[str, list[LostRange]] = {}
        kept = []
        for r in ranges:
            if r.topic() in existing:
                kept.append(r)
            else:
                unread = LostRange(r.partition(), r.fromOffset(), r.untilOffset())
                gone.setdefault(r.topic(), []).append(unread)
        if not gone:
            return ranges
        spec = self.spec
        loss_table = data_loss_path(spec.output.table("audit_counts"))
        for topic, lost in gone.items():
            log.warning(
                "batch %d: %s/%s was deleted before its planned ranges were read (%s); "
                "recorded as lost in %s, the job goes on",
                batch_id,
                spec.source.cluster.name,
                topic,
                ", ".join(map(str, lost)),
                loss_table,
            )
            record_lost(
                spark, loss_table, spec.group_of(topic), spec.source.cluster.name, topic, lost
            )
        return java_list(spark, kept)

    def fold_ranges(
        self, spark: SparkSession, ranges: object, batch_id: int, audit_ms: int
    ) -> FoldedBatch:
        """Fold `ranges` (a java.util.List of dev.uatu.fold.FoldRange) as batch `batch_id`
        audited at `audit_ms` (epoch ms). The exact keys of the batch are written on return."""
        rows = ClassicDataFrame(
            self._batch.fold(
                spark._jsparkSession,
                ranges,
                self._consumer,
                self._settings,
                batch_id,
                audit_ms,
                RANGE_TIMEOUT_MS,
            ),
            spark,
        )
        summaries = rows.where(F.col("audit_type").isNull()).collect()
        state = {
            (r["topic"], r["partition"]): {k: r[k] for k in STATE_FIELDS}
            for r in summaries
            if r["state_keys"] is not None
        }
        if state and runtime_metrics.serving():
            metrics.key_state(self.spec.audited_cluster, state)
        if state and log.isEnabledFor(logging.DEBUG):
            log.debug("batch %d exact keys per window: %s", batch_id, window_keys_line(state))
        return FoldedBatch(
            partials=rows.where(F.col("audit_type").isNotNull()).transform(
                fold_partials,
                self.spec.audited_cluster,
                None if self.spec.many_topics else self.spec.audited_topic,
                audit_ms,
            ),
            records=sum(r["records_read"] for r in summaries),
            bytes=sum(r["bytes_read"] for r in summaries),
            state=state,
        )

    def close(self) -> None:
        """Let go of the exact keys this JVM holds for the job."""
        self._batch.release(keys_dir(self.spec))


def past_gaps(
    spark: SparkSession, ranges: Any, gaps: Mapping[str, SourceGaps], batch_id: int
) -> Any:
    """The planned `ranges` (java FoldRanges) read from past the lost ranges of their topic
    they start in (`source_failure.read_past`)."""
    planned: dict[str, list[tuple[int, int, int]]] = {}
    for r in ranges:
        planned.setdefault(r.topic(), []).append((r.partition(), r.fromOffset(), r.untilOffset()))
    if not planned:
        return ranges
    fold_range = jvm_package(spark, "dev.uatu.fold", "the audit fold").FoldRange
    kept: list[Any] = []
    for topic, topic_ranges in planned.items():
        gap = gaps.get(topic)
        moved = read_past(gap, topic_ranges, f"batch {batch_id}, {topic}") if gap else topic_ranges
        kept.extend(fold_range(topic, *r) for r in moved)
    return java_list(spark, kept)


def _jvm(spark: SparkSession):  # a py4j package view
    return jvm_package(spark, FOLD_PACKAGE, "the audit fold")
