"""The replication job's Delta tables and their exactly-once appends.

`replication_stats`: one row per micro-batch and source partition.

===============================  =========  ================================================
column                           type       meaning
===============================  =========  ================================================
job_group_id                     string     the JobGroup
source_cluster, source_topic     string     where records were read
destination_cluster/_topic       string     where they were written
batch_id, batch_time             long, ts   the micro-batch and when it was written
partition, destination_partition int        source partition and where it went
records_read                     long       records of the batch in the copy's range
records_replicated               long       records written (and acknowledged) by this batch
records_already_present          long       skipped: the destination held them already
                                            (written by a run that crashed)
bytes_replicated                 long       value bytes written (MM2's byte-count)
record_bytes_replicated          long       key + value bytes written
first_offset, last_offset        long       source offsets of the batch
record_age_ms_min/_avg/_max      num        MM2 record-age-ms: read time - source timestamp
replication_latency_ms_min/...   num        MM2 replication-latency-ms: destination ack time
                                            - source timestamp (min, avg, max, p99)
replication_latency_kll_sketch   binary     KLL sketch of the latencies; merge across batches
                                            with kll_merge_agg_bigint for any percentile
===============================  =========  ================================================

`replication_audit`: per batch, source partition and window of source timestamps
(extension.replication.audit_interval_seconds): records_read, records_written,
records_already_present. Sum over batches for a window's totals.

Exactly-once: both appends carry Delta's idempotent-write marker (txnAppId = the streaming
query id, txnVersion = batch id), so a batch replayed after a crash is not recorded twice.
"""

from __future__ import annotations

from pyspark.sql import SparkSession
from pyspark.sql.types import (
    BinaryType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from jobs.runtime.delta import ensure_table

LABELS = (
    "job_group_id",
    "source_cluster",
    "source_topic",
    "destination_cluster",
    "destination_topic",
)


def _fields(*specs: tuple[str, object]) -> list[StructField]:
    return [StructField(name, kind, True) for name, kind in specs]  # type: ignore[arg-type]


_LABEL_FIELDS = _fields(*[(name, StringType()) for name in LABELS])

STATS_SCHEMA = StructType(
    _LABEL_FIELDS
    + _fields(
        ("batch_id", LongType()),
        ("batch_time", TimestampType()),
        ("partition", IntegerType()),
        ("destination_partition", IntegerType()),
        ("records_read", LongType()),
        ("records_replicated", LongType()),
        ("records_already_present", LongType()),
        ("bytes_replicated", LongType()),
        ("record_bytes_replicated", LongType()),
        ("first_offset", LongType()),
        ("last_offset", LongType()),
        ("record_age_ms_min", LongType()),
        ("record_age_ms_avg", DoubleType()),
        ("record_age_ms_max", LongType()),
        ("replication_latency_ms_min", LongType()),
        ("replication_latency_ms_avg", DoubleType()),
        ("replication_latency_ms_max", LongType()),
        ("replication_latency_ms_p99", LongType()),
        ("replication_latency_kll_sketch", BinaryType()),
    )
)

AUDIT_SCHEMA = StructType(
    _LABEL_FIELDS
    + _fields(
        ("batch_id", LongType()),
        ("partition", IntegerType()),
        ("window_start", TimestampType()),
        ("window_end", TimestampType()),
        ("records_read", LongType()),
        ("records_written", LongType()),
        ("records_already_present", LongType()),
    )
)


def ensure_tables(spark: SparkSession, stats_path: str, audit_path: str) -> None:
    for path, schema in ((stats_path, STATS_SCHEMA), (audit_path, AUDIT_SCHEMA)):
        ensure_table(spark, path, schema)
