"""KAFKA_AUDIT entry module: Kafka topic -> Delta tables `audit_counts` and `audit_keys`.

Source: the JobGroup's kafka_consumer_task_group topic, every partition, read by Spark's Kafka
source from `starting_offsets` (earliest unless auto_offset_reset_policy is LATEST), at most
flow_control.messages_per_sec on average (maxOffsetsPerTrigger = rate x trigger interval).

Sink: Delta MERGE into `audit_counts` (schema in `jobs/audit/tables.py`), one row per cluster,
topic, partition, audit type, interval and window. Every micro-batch updates the windows its
records fall in, so late records update their window (and are counted in late_count) instead
of being dropped.

Guarantee: exactly-once per checkpoint. Offsets are in the checkpoint; each batch's writes are
idempotent Delta transactions keyed by (query id, batch id). Killing the driver at any point
and restarting on the same checkpoint yields the same counts as an uninterrupted run.
Latency columns are the one exception by nature: they are measured against the wall clock of
the batch that audited the record.

Trigger: AvailableNow with --once (process what is there, write, exit 0), else every
trigger interval until stopped.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from core.errors import UatuError
from core.faults import fault_point
from jobs.audit import tables
from jobs.audit.spec import AuditSpec
from jobs.audit.transforms import (
    WINDOW_KEY,
    assign_windows,
    audit_records,
    new_keys,
    window_keys,
    window_partials,
    with_new_unique_counts,
)
from jobs.runtime import metrics, source_failure
from jobs.runtime.delta import ensure_tables
from jobs.runtime.kafka_source import kafka_read_options
from jobs.runtime.reporting import observe_source
from jobs.runtime.runner import streaming_query_id
from jobs.runtime.tables import data_loss_path
from jobs.runtime.template import StreamingJob

log = logging.getLogger("uatu.audit")


def build_stream(spark: SparkSession, spec: AuditSpec) -> DataFrame:
    options = kafka_read_options(
        spec.source_cluster,
        spec.source_topic,
        starting_offsets=spec.starting_offsets,
        read_committed=spec.read_committed,
        max_offsets_per_trigger=spec.max_offsets_per_trigger(),
        group_id_prefix=spec.consumer_group,
        include_headers=spec.needs_headers,
    )
    # current_timestamp() in a streaming plan is the micro-batch timestamp, which the offset
    # log stores: a batch replayed after a crash gets the same audit time.
    return (
        spark.readStream.format("kafka")
        .options(**options)
        .load()
        .transform(observe_source)
        .withColumn("audit_ts", F.current_timestamp())
        .transform(
            audit_records,
            cluster=spec.audited_cluster,
            topic=spec.audited_topic,
            event_time=spec.event_time,
            dedupe_key=spec.dedupe_key,
            max_future_skew_seconds=spec.max_future_skew_seconds,
        )
    )


class AuditBatchWriter:
    """foreachBatch function: fold one micro-batch into the audit tables, exactly once."""

    def __init__(self, spec: AuditSpec) -> None:
        self.spec = spec
        self._app_id: str | None = None

    def app_id(self, spark: SparkSession) -> str:
        if self._app_id is None:
            self._app_id = f"uatu-audit-{streaming_query_id(spark, self.spec.checkpoint_path)}"
        return self._app_id

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        spark = batch.sparkSession
        spec = self.spec
        app_id = self.app_id(spark)
        phases = PhaseTimes()
        with cache_scope() as keep:
            # Exact audits read the batch twice (totals, then keys): cache it so Kafka is read
            # once. Approximate-only audits need a single pass and skip the cache.
            source = keep(batch) if spec.has_exact_audit else batch
            windowed = source.transform(assign_windows, spec.windows, spec.allowed_lateness_seconds)
            partials = window_partials(windowed, spec.hll_lg_config_k)
            if spec.has_exact_audit:
                with phases("keys"):
                    partials = keep(partials)
                    known = tables.known_keys(spark, spec.audit_keys_path, partials, batch_id)
                    fresh = keep(new_keys(window_keys(windowed), known))
                    tables.append_keys(fresh, spec.audit_keys_path, app_id, batch_id)
                    fault_point("audit.keys_committed")  # core/faults.py: tests only
                partials = with_new_unique_counts(partials, fresh)
            else:
                partials = partials.withColumn("new_unique_count", F.lit(0).cast("long"))
            with phases("aggregate"):
                # Delta's MERGE re-plans its source, which bypasses Spark's cache and would
                # recompute the whole batch; a local checkpoint hands it the computed rows.
                computed = partials.localCheckpoint()
            with phases("merge"):
                tables.merge_counts(computed, spec.audit_counts_path, app_id, batch_id)
            if metrics.serving():
                self._publish(computed)
        log.info("batch %d written: %s", batch_id, phases)

    def _publish(self, computed: DataFrame) -> None:
        """The batch's per-window increments -> the driver's Prometheus metrics."""
        exact = F.col("audit_type") == "AUDIT_TYPE_EXACT_UNIQ"
        rows = computed.select(
            *WINDOW_KEY,
            "window_end",
            "message_count",
            "bytes",
            "no_event_time_count",
            "late_count",
            F.when(exact, F.col("message_count") - F.col("new_unique_count")).alias(
                "duplicate_count"
            ),
        ).collect()
        lateness = self.spec.allowed_lateness_seconds
        metrics.audit_windows(
            [r.asDict() for r in rows],
            {w.interval_seconds: lateness or w.interval_seconds for w in self.spec.windows},
            datetime.now(UTC),
        )


class PhaseTimes:
    """Wall time per named phase of a batch, for the progress log."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        started = time.monotonic()
        try:
            yield
        finally:
            self.seconds[name] = time.monotonic() - started

    def __str__(self) -> str:
        return ", ".join(f"{name} {s:.1f} s" for name, s in self.seconds.items())


@contextmanager
def cache_scope() -> Iterator[Callable[[DataFrame], DataFrame]]:
    """Yield `keep(df)`, which persists df until the scope ends."""
    cached: list[DataFrame] = []

    def keep(df: DataFrame) -> DataFrame:
        cached.append(df.persist())
        return df

    try:
        yield keep
    finally:
        for df in cached:
            df.unpersist()


class AuditJob(StreamingJob[AuditSpec]):
    """The audit job in the shared template: its tables, its stream, its batch writer."""

    def ensure_tables(self, spark: SparkSession) -> None:
        ensure_tables(spark, tables.locations(self.spec))
        spec = self.spec
        log.info(
            "auditing %s/%s (%s) into %s: %s",
            spec.source_cluster.name,
            spec.source_topic,
            spec.source_cluster.bootstrap_servers,
            spec.audit_counts_path,
            ", ".join(f"{w.audit_type}/{w.interval_seconds}s" for w in spec.windows),
        )

    def stream(self, spark: SparkSession) -> DataFrame:
        return build_stream(spark, self.spec)

    def batch_writer(self, spark: SparkSession) -> AuditBatchWriter:
        return AuditBatchWriter(self.spec)

    def explain_failure(self, spark: SparkSession) -> UatuError | None:
        spec = self.spec
        return source_failure.explain(
            spark,
            job_group_id=spec.job_group_id,
            checkpoint=spec.checkpoint_path,
            cluster=spec.source_cluster,
            topic=spec.source_topic,
            loss_table=data_loss_path(spec.audit_counts_path),
        )
