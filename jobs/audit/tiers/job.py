"""KAFKA_AUDIT entry module for the cross-tier AuditTypes: tier reports, XDC, REPLICATION,
RETENTION and AVAILABILITY -> Delta `audit_verdicts` (and the tables in `tables.py`).

Source: Spark's Kafka source, from the earliest offsets, on the reports topic (the group's
kafka_consumer_task_group topic, when SERVICE/KRP aggregations are configured) and on every
REPLICATION source and destination topic (headers included, values never read), united with
Spark's `rate` source so that a micro-batch runs every trigger even when no record arrives: a
window is decided by time, not by traffic. failOnDataLoss is off: records deleted before they
were read are exactly what REPLICATION and RETENTION report, not a reason to stop.

Every micro-batch, in order (`TierBatchWriter`; each step's module in brackets):
1. AuditReports read -> parsed on the driver, repeated (instance_id, sequence) dropped, the
   rest folded into `tier_counts` (counts added, HLL unioned, KLL merged) [`reports.py`];
2. REPLICATION: contiguous source offset ranges per source window, and stamped (`uatu.src`)
   ranges with their copies at the destination -> `replication_ledger`
   [`checks/replication.py`];
3. RETENTION / AVAILABILITY: the audited topic's metadata sampled [`sampling.py`] ->
   `retention_audit`, `availability_audit` [`checks/retention.py`, `checks/availability.py`];
4. every check's windows within the horizon decided (rules: `verdicts.py`) against
   `audit_counts`, `tier_counts` and the ledger, as candidate rows [`checks/`, shared window
   arithmetic in `windows.py`]; the changed verdicts are saved under the checkpoint as the
   batch's decision, then appended to `audit_verdicts` as new revisions (missing ranges to
   `replication_gaps`) [`verdict_writer.py`]. A replayed batch appends its saved decision,
   not a new one: a verdict is a decision of its batch's time, and a second decision could
   leave a revision without its gaps.

Guarantee: every table is exactly-once per checkpoint: a job killed at any step and
restarted on its checkpoint folds each report once, records each range once, and writes each
verdict revision once with all its gaps (tests/jobs/audit/test_tier_faults.py crashes it at
every step between two writes); every write is idempotent per (query id, batch id).
Verdicts are decisions of their batch's time: a window is decided at the first trigger after
its end + grace period, and revised when later data changes its counts or verdict.

Trigger: every trigger interval (default 10 s); AvailableNow with --once.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from core.faults import fault_point
from core.provenance import STAMP
from jobs.audit.tables import AUDIT_COUNTS
from jobs.audit.tiers import metrics as tier_metrics
from jobs.audit.tiers import reports, tables, verdict_writer
from jobs.audit.tiers.checks import availability, replication, retention, tier, xdc
from jobs.audit.tiers.sampling import RetentionState, TopicSampler
from jobs.audit.tiers.spec import (
    AVAILABILITY,
    KRP,
    REPLICATION,
    RETENTION,
    SERVICE,
    XDC,
    TierAuditSpec,
)
from jobs.audit.tiers.windows import Round
from jobs.runtime import metrics as runtime_metrics
from jobs.runtime.delta import ensure_tables
from jobs.runtime.kafka_source import kafka_read_options
from jobs.runtime.template import StreamingJob, WriteId

log = logging.getLogger("uatu.tiers")


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


class TierBatchWriter:
    """foreachBatch function of the cross-tier audit: the steps of the module docstring, in
    order, every write idempotent per (query id, batch id)."""

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
                reports.fold(spark, self.spec, batch, app_id, batch_id)
            if self.spec.of_type(REPLICATION):
                replication.record(self.spec, batch, app_id, batch_id)
        finally:
            batch.unpersist()
        if self.sampler is not None:
            self.sample(spark, now, app_id, batch_id)
            fault_point("tiers.samples_appended")
        at = Round.of(self.spec, now)
        rows, gaps = verdict_writer.decide_once(
            spark, self.spec, at, batch_id, lambda: self.decide(spark, at)
        )
        verdict_writer.append(spark, self.spec, rows, gaps, app_id, batch_id)
        if runtime_metrics.serving():
            tier_metrics.verdicts(rows)

    def sample(self, spark: SparkSession, now: int, app_id: str, batch_id: int) -> None:
        """Sample the audited topic into `retention_audit` and `availability_audit`."""
        spec = self.spec
        assert self.sampler is not None
        try:
            sample = self.sampler.sample(now)
        except Exception as e:  # a broker that does not answer is an outage, not a crash
            log.warning("sampling %s failed: %s", spec.audited.label, e)
            return
        if sample is None:
            return
        watched = spec.of_type(RETENTION)
        if watched:
            if not self._restored:
                self._restored = True
                retention.restore(spark, spec, self.retention)
            rows = retention.sample_rows(sample, spec.audited, watched[0], self.retention)
            retention.write(spark, spec, rows, app_id, batch_id)
        watched = spec.of_type(AVAILABILITY)
        if watched:
            last = self._last_sample_ms
            rows = availability.sample_rows(sample, spec.audited, watched[0], last)
            availability.write(spark, spec, rows, app_id, batch_id)
        self._last_sample_ms = now

    def decide(
        self, spark: SparkSession, at: Round
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Every check's candidate verdict rows, and the REPLICATION gap rows."""
        candidates: list[dict[str, Any]] = []
        gaps: list[dict[str, Any]] = []
        for check in self.spec.checks:
            if check.audit_type in (SERVICE, KRP):
                candidates += tier.verdicts(spark, self.spec, check, at)
            elif check.audit_type == XDC:
                candidates += xdc.verdicts(spark, self.spec, check, at)
            elif check.audit_type == REPLICATION:
                rows, found = replication.verdicts(spark, self.spec, check, at)
                candidates += rows
                gaps += found
            elif check.audit_type == RETENTION:
                candidates += retention.verdicts(spark, self.spec, check, at)
        return candidates, gaps


class TierAuditJob(StreamingJob[TierAuditSpec]):
    """The cross-tier audit in the shared template."""

    write_id_prefix = "uatu-tiers"

    def ensure_tables(self, spark: SparkSession) -> None:
        ensure_tables(spark, tables.locations(self.spec))
        # Comparisons read audit_counts, which the counting audits write; an empty table until
        # they do keeps every read valid.
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
