"""The replication job's Delta tables and their exactly-once appends.

`replication_stats`: one row per micro-batch, source topic and partition.

===============================  =========  ================================================
column                           type       meaning
===============================  =========  ================================================
job_group_id                     string     the JobGroup
source_cluster, source_topic     string     where records were read (a copy of many
                                            topics has rows of each of its topics)
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
                                            - source timestamp (min, avg, max; p99 read
                                            from the batch's KLL sketch below)
replication_latency_kll_sketch   binary     KLL sketch of the latencies; merge across batches
                                            with kll_merge_agg_bigint for any percentile
===============================  =========  ================================================

`replication_audit`: per batch, source topic and partition and window of source timestamps
(extension.replication.audit_interval_seconds): records_read, records_written,
records_already_present. Sum over batches for a window's totals.

Exactly-once: both appends carry Delta's idempotent-write marker (txnAppId = the streaming
query id, txnVersion = batch id; `jobs.runtime.delta.append_once`), so a batch replayed after
a crash is not recorded twice.
"""

from __future__ import annotations

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

from jobs.replication.spec import ReplicationSpec
from jobs.runtime.delta import DeltaTableSpec, located

LABELS = (
    "job_group_id",
    "source_cluster",
    "source_topic",
    "destination_cluster",
    "destination_topic",
)
# The leading columns of both tables: which copy a row is about.
_LABEL_FIELDS = [StructField(name, StringType(), True) for name in LABELS]

REPLICATION_STATS = DeltaTableSpec(
    name="replication_stats",
    description="Kafka replication: counts, bytes, record age and latency per batch and partition",
    schema=StructType(
        [
            *_LABEL_FIELDS,
            StructField("batch_id", LongType(), True),
            StructField("batch_time", TimestampType(), True),
            StructField("partition", IntegerType(), True),
            StructField("destination_partition", IntegerType(), True),
            StructField("records_read", LongType(), True),
            StructField("records_replicated", LongType(), True),
            StructField("records_already_present", LongType(), True),
            StructField("bytes_replicated", LongType(), True),
            StructField("record_bytes_replicated", LongType(), True),
            StructField("first_offset", LongType(), True),
            StructField("last_offset", LongType(), True),
            StructField("record_age_ms_min", LongType(), True),
            StructField("record_age_ms_avg", DoubleType(), True),
            StructField("record_age_ms_max", LongType(), True),
            StructField("replication_latency_ms_min", LongType(), True),
            StructField("replication_latency_ms_avg", DoubleType(), True),
            StructField("replication_latency_ms_max", LongType(), True),
            StructField("replication_latency_ms_p99", LongType(), True),
            StructField("replication_latency_kll_sketch", BinaryType(), True),
        ]
    ),
)

REPLICATION_AUDIT = DeltaTableSpec(
    name="replication_audit",
    description="Kafka replication: records read and written per batch, partition and window",
    schema=StructType(
        [
            *_LABEL_FIELDS,
            StructField("batch_id", LongType(), True),
            StructField("partition", IntegerType(), True),
            StructField("window_start", TimestampType(), True),
            StructField("window_end", TimestampType(), True),
            StructField("records_read", LongType(), True),
            StructField("records_written", LongType(), True),
            StructField("records_already_present", LongType(), True),
        ]
    ),
)


# The first part of a replication query's idempotent-write ids (ReplicationJob's). Never change
# it: a batch replayed after the change would carry a new id and be written twice.
WRITE_ID_PREFIX = "uatu-replication"


def locations(spec: ReplicationSpec) -> list[tuple[DeltaTableSpec, str]]:
    """The replication job's tables and where the JobGroup puts them."""
    return located([REPLICATION_STATS, REPLICATION_AUDIT], spec.output)
