"""Pure DataFrame -> DataFrame transforms of the replication job (no I/O, no session).

Pipeline (`jobs/replication/job.py` composes it)::

    planned offset ranges --(writer.copy_ranges, JVM copy tasks)--> one summary row per
                                                                     (partition, audit window)
               --replication_stats--> one row per (batch, source partition)
               --replication_audit--> one row per (batch, partition, audit window)

Summary rows (`writer.SUMMARY_SCHEMA`): counts of records read, replicated and already
present (the destination held them), value and key+value bytes written, first and last
offset, record age min/sum/max, `replication_latency_ms`, the latency of every record
written, as an array, and the row's source and destination topic (a copy of many topics has
many of each).

Metrics follow MirrorMaker 2 (`MirrorSourceTask`): record-age-ms = read time - source
timestamp; replication-latency-ms = ack time - source timestamp; byte counts are value bytes.
"""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from jobs.runtime.delta import kll_quantiles

# Where a summary row's records came from and went: its keys, with the partition.
_TOPICS = ("source_topic", "destination_topic")


def _labels(labels: Mapping[str, str], summaries: DataFrame) -> list[Column]:
    """The labels as constant columns, but for those the rows carry themselves (the topics)."""
    return [F.lit(v).alias(k) for k, v in labels.items() if k not in summaries.columns]


def replication_stats(
    summaries: DataFrame, batch_id: int, batch_time: Column, labels: Mapping[str, str]
) -> DataFrame:
    """One row per source topic and partition of a micro-batch: counts, bytes, age and
    latency.

    `labels` become string columns (job_group_id, clusters). Latency
    min/avg/max are exact; p99 is read from the partition's KLL sketch (bigint, mergeable
    across batches with kll_merge_agg_bigint).
    """
    sketch = "replication_latency_kll_sketch"
    latencies = (
        summaries.select(
            "source_topic", "partition", F.explode("replication_latency_ms").alias("latency")
        )
        .groupBy("source_topic", "partition")
        .agg(
            F.min("latency").alias("replication_latency_ms_min"),
            F.avg("latency").alias("replication_latency_ms_avg"),
            F.max("latency").alias("replication_latency_ms_max"),
            # Never empty: a partition without latencies has no row here.
            F.kll_sketch_agg_bigint("latency").alias(sketch),
        )
        # The percentile is the sketch's own, so it agrees with any merge of the sketches.
        .withColumns(kll_quantiles(sketch, "bigint", {"replication_latency_ms_p99": 0.99}))
    )
    counts = summaries.groupBy(*_TOPICS, "partition", "destination_partition").agg(
        *(
            F.sum(name).alias(name)
            for name in (
                "records_read",
                "records_replicated",
                "records_already_present",
                "bytes_replicated",
                "record_bytes_replicated",
            )
        ),
        F.min("first_offset").alias("first_offset"),
        F.max("last_offset").alias("last_offset"),
        F.min("record_age_ms_min").alias("record_age_ms_min"),
        (F.sum("record_age_ms_sum") / F.sum("records_read")).alias("record_age_ms_avg"),
        F.max("record_age_ms_max").alias("record_age_ms_max"),
    )
    # A partition whose records were all present already has no latency: nulls, as in MM2.
    return counts.join(latencies, ["source_topic", "partition"], "left").select(
        *_labels(labels, summaries),
        F.lit(batch_id).cast("long").alias("batch_id"),
        batch_time.alias("batch_time"),
        "*",
    )


def replication_audit(
    summaries: DataFrame, interval_seconds: int, batch_id: int, labels: Mapping[str, str]
) -> DataFrame:
    """Per source-timestamp window, topic and partition: records read, written, already
    present.

    The writer's summaries are already per window of `interval_seconds`. This is the audit
    hook for AUDIT_TYPE_REPLICATION: summing a window's rows over all batches gives what the
    job read from the source and what the destination holds from it (written +
    already_present), to compare with independent counts of both topics.
    """
    interval_ms = interval_seconds * 1000
    return (
        summaries.groupBy(*_TOPICS, "partition", "window_start_ms")
        .agg(
            F.sum("records_read").alias("records_read"),
            F.sum("records_replicated").alias("records_written"),
            F.sum("records_already_present").alias("records_already_present"),
        )
        .select(
            *_labels(labels, summaries),
            *_TOPICS,
            F.lit(batch_id).cast("long").alias("batch_id"),
            "partition",
            F.timestamp_millis("window_start_ms").alias("window_start"),
            F.timestamp_millis(F.col("window_start_ms") + interval_ms).alias("window_end"),
            "records_read",
            "records_written",
            "records_already_present",
        )
    )
