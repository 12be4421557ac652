"""Pure DataFrame -> DataFrame transforms of the replication job (no I/O, no session).

Pipeline (`jobs/replication/job.py` composes it)::

    Kafka rows --source_records--> key, value, partition, offset, timestamp_ms, headers
               --(writer.PartitionWriter via mapInArrow)--> one ack row per record
               --replication_stats--> one row per (batch, source partition)
               --replication_audit--> one row per (batch, partition, audit window)

Ack rows (`writer.ACK_SCHEMA`): partition, offset, timestamp_ms (source record timestamp),
destination_partition, value_bytes, record_bytes (key + value), replicated (false: the
destination already held it), read_ms (when the writer received the record), acked_ms (when
the destination acknowledged it; null when not replicated).

Metrics follow MirrorMaker 2 (`MirrorSourceTask`): record-age-ms = read time - source
timestamp; replication-latency-ms = ack time - source timestamp; byte counts are value bytes.
"""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from jobs.replication.writer import INPUT_COLUMNS


def source_records(df: DataFrame, end_offsets: Mapping[int, int] | None = None) -> DataFrame:
    """Kafka source rows -> the writer's input columns; drop offsets at or past the end."""
    out = df.select(
        "key",
        "value",
        "partition",
        "offset",
        F.unix_millis("timestamp").alias("timestamp_ms"),
        "headers",
    )
    if end_offsets is not None:
        ends = F.create_map(*[F.lit(v) for kv in sorted(end_offsets.items()) for v in kv])
        # A partition without an end (not part of the copy) gets null and is dropped too.
        out = out.where(F.col("offset") < ends[F.col("partition")])
    return out.select(*INPUT_COLUMNS)


def _labels(labels: Mapping[str, str]) -> list[Column]:
    return [F.lit(v).alias(k) for k, v in labels.items()]


def replication_stats(
    acks: DataFrame, batch_id: int, batch_time: Column, labels: Mapping[str, str]
) -> DataFrame:
    """One row per source partition of a micro-batch: counts, bytes, age and latency.

    `labels` become leading string columns (job_group_id, clusters and topics).
    """
    replicated = F.col("replicated")
    age = F.col("read_ms") - F.col("timestamp_ms")
    latency = F.when(replicated, F.col("acked_ms") - F.col("timestamp_ms"))
    return (
        acks.groupBy("partition", "destination_partition")
        .agg(
            F.count(F.lit(1)).alias("records_read"),
            F.count(F.when(replicated, 1)).alias("records_replicated"),
            F.count(F.when(~replicated, 1)).alias("records_already_present"),
            F.coalesce(F.sum(F.when(replicated, F.col("value_bytes"))), F.lit(0)).alias(
                "bytes_replicated"
            ),
            F.coalesce(F.sum(F.when(replicated, F.col("record_bytes"))), F.lit(0)).alias(
                "record_bytes_replicated"
            ),
            F.min("offset").alias("first_offset"),
            F.max("offset").alias("last_offset"),
            F.min(age).alias("record_age_ms_min"),
            F.avg(age).alias("record_age_ms_avg"),
            F.max(age).alias("record_age_ms_max"),
            F.min(latency).alias("replication_latency_ms_min"),
            F.avg(latency).alias("replication_latency_ms_avg"),
            F.max(latency).alias("replication_latency_ms_max"),
            F.percentile_approx(latency, 0.99).alias("replication_latency_ms_p99"),
            F.when(F.count(latency) > 0, F.kll_sketch_agg_bigint(latency)).alias(
                "replication_latency_kll_sketch"
            ),
        )
        .select(
            *_labels(labels),
            F.lit(batch_id).cast("long").alias("batch_id"),
            batch_time.alias("batch_time"),
            "*",
        )
    )


def replication_audit(
    acks: DataFrame, interval_seconds: int, batch_id: int, labels: Mapping[str, str]
) -> DataFrame:
    """Per source-timestamp window and partition: records read, written, already present.

    The audit hook for AUDIT_TYPE_REPLICATION: summing a window's rows over all batches gives
    what the job read from the source and what the destination holds from it
    (written + already_present), to compare with independent counts of both topics.
    """
    interval_ms = interval_seconds * 1000
    start_ms = F.col("timestamp_ms") - F.pmod(F.col("timestamp_ms"), F.lit(interval_ms))
    replicated = F.col("replicated")
    return (
        acks.withColumn("window_start_ms", start_ms)
        .groupBy("partition", "window_start_ms")
        .agg(
            F.count(F.lit(1)).alias("records_read"),
            F.count(F.when(replicated, 1)).alias("records_written"),
            F.count(F.when(~replicated, 1)).alias("records_already_present"),
        )
        .select(
            *_labels(labels),
            F.lit(batch_id).cast("long").alias("batch_id"),
            "partition",
            F.timestamp_millis("window_start_ms").alias("window_start"),
            F.timestamp_millis(F.col("window_start_ms") + interval_ms).alias("window_end"),
            "records_read",
            "records_written",
            "records_already_present",
        )
    )
