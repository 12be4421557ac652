"""The cross-tier audit's Delta tables.

`tier_counts` (one row per JobGroup, tier, cluster, topic, consumer group and report window),
the union of every AuditReport read once:

=====================  =========  ==========================================================
column                 type       meaning
=====================  =========  ==========================================================
job_group_id           string     the cross-tier JobGroup that read the reports
tier                   string     SERVICE, KRP or CONSUMER
cluster, topic         string     the cluster and topic the reporters wrote to (read from)
consumer_group         string     CONSUMER: the reporters' group; "" for SERVICE and KRP
window_seconds         int        the reports' window length
window_start/_end      timestamp  epoch-aligned window of the records' Kafka timestamps
message_count          bigint     acknowledged (SERVICE, KRP) or consumed (CONSUMER) records
bytes                  bigint     key + value bytes of those records
failed_count           bigint     sends the reporters saw fail
reports                bigint     distinct reports folded in
unique_count           bigint     HLL estimate of distinct dedupe keys
hll_sketch             binary     DataSketches HLL of the dedupe keys (unions with
                                  audit_counts.hll_sketch)
latency_kll_sketch     binary     DataSketches KLL doubles of latency ms (ack or consume
                                  time - record timestamp)
latency_p50/p99_ms     double     read from the KLL sketch
updated_at             timestamp  time of the batch that last changed the row
=====================  =========  ==========================================================

`audit_verdicts` (append-only; one row per check, window and revision):

=====================  =========  ==========================================================
column                 type       meaning
=====================  =========  ==========================================================
check_type             string     the AuditType (AUDIT_TYPE_SERVICE_AUDIT_AGGREGATION, ...)
check_name             string     service->kafka, krp->kafka, kafka->consumer:<group>,
                                  udq_test_name (XDC), replication:<src>-><dst>, retention:..
job_group_id           string     the JobGroup that decided it
cluster, topic         string     the right-hand (downstream) side's cluster and topic(s)
window_start/_end      timestamp  the check's window (audit_interval_in_seconds)
left_label             string     the upstream side, e.g. "SERVICE local/orders"
right_label            string     the downstream side, e.g. "kafka local/orders"
left_count             bigint     records the upstream side counted
right_count            bigint     records the downstream side counted
left_unique            bigint     distinct records upstream (HLL estimate; exact offsets for
right_unique           bigint     REPLICATION)
difference             bigint     right_count - left_count
relative_difference    double     |difference| / left_count (null when left_count is 0)
threshold              double     the relative mismatch that fails (0 unless configured)
verdict                string     OK, LOSS, DUPLICATION or INCOMPLETE
detail                 string     why, in words (which side has not reported, sketch bounds)
missing_count          bigint     REPLICATION: source offsets that never arrived
decided_at             timestamp  time of the batch that wrote the row
revision               int        1 for the first row of a (check, window), +1 per change
=====================  =========  ==========================================================

`replication_gaps`: for a REPLICATION verdict with missing offsets, one row per missing range:
check_name, job_group_id, source_cluster, source_topic, partition, window_start, first_offset,
last_offset (inclusive), missing_count, destination (labels), decided_at, revision (of the
verdict row it belongs to).

`retention_audit` (per JobGroup, cluster, topic, partition and window of sample times): the latest
log_start_offset, end_offset and committed_offset (of kafka_consumer_task_group.consumer_group),
deleted_count (log start advance seen in the window), lost_count with lost_first_offset /
lost_last_offset (records deleted before the group had consumed them), partition_count,
expected_partition_count, retention_ms, retention_bytes, cleanup_policy, samples, updated_at.

`availability_audit` (per JobGroup, cluster, topic, partition and window of sample times):
sampled_seconds, offline_seconds (no leader), under_replicated_seconds (ISR < replicas),
under_min_isr_seconds (ISR < min.insync.replicas), samples, updated_at.

Internal: `tier_report_ids` (instance_id, sequence, first_batch_id: the reports already folded,
so a report read twice counts once) and `replication_ledger` (per check, side and source
partition: contiguous offset ranges seen, with source window or number of copies).

The three tables above are MERGEd and partitioned by job_group_id, so many cross-tier JobGroups
share them without conflicts (jobs/runtime/delta.py).

Exactly-once: each write of batch N carries Delta's idempotent-write marker (txnAppId = the
streaming query id, txnVersion = N). Reports new in batch N are those whose (instance_id,
sequence) is not recorded with first_batch_id < N, so a replayed batch folds the same reports.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
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

from jobs.audit.tiers.spec import TierAuditSpec
from jobs.runtime.delta import DeltaTableSpec, located


def _fields(spec: str) -> list[StructField]:
    kinds = {
        "string": StringType(),
        "int": IntegerType(),
        "bigint": LongType(),
        "double": DoubleType(),
        "timestamp": TimestampType(),
        "binary": BinaryType(),
    }
    fields = []
    for item in spec.split(","):
        name, kind = item.split()
        fields.append(StructField(name, kinds[kind], True))
    return fields


TIER_KEY = ("tier", "cluster", "topic", "consumer_group", "window_seconds", "window_start")

TIER_COUNTS = DeltaTableSpec(
    name="tier_counts",
    description="Cross-tier audit: AuditReports of producing and consuming tiers per window",
    keys=TIER_KEY,
    partition_by=("job_group_id",),
    writer_column="job_group_id",
    schema=StructType(
        _fields(
            "job_group_id string, "
            "tier string, cluster string, topic string, consumer_group string, "
            "window_seconds int, window_start timestamp, window_end timestamp, "
            "message_count bigint, bytes bigint, failed_count bigint, reports bigint, "
            "unique_count bigint, hll_sketch binary, latency_kll_sketch binary, "
            "latency_p50_ms double, latency_p99_ms double, updated_at timestamp"
        )
    ),
)

TIER_REPORT_IDS = DeltaTableSpec(
    name="tier_report_ids",
    description="Cross-tier audit: the AuditReports already folded into tier_counts",
    schema=StructType(
        _fields(
            "instance_id string, sequence bigint, first_batch_id bigint, service string, "
            "host string, tier string"
        )
    ),
)

AUDIT_VERDICTS = DeltaTableSpec(
    name="audit_verdicts",
    description="Cross-tier audit: OK / LOSS / DUPLICATION / INCOMPLETE per check and window",
    schema=StructType(
        _fields(
            "check_type string, check_name string, job_group_id string, cluster string, "
            "topic string, window_start timestamp, window_end timestamp, left_label string, "
            "right_label string, left_count bigint, right_count bigint, left_unique bigint, "
            "right_unique bigint, difference bigint, relative_difference double, "
            "threshold double, verdict string, detail string, missing_count bigint, "
            "decided_at timestamp, revision int"
        )
    ),
)

REPLICATION_GAPS = DeltaTableSpec(
    name="replication_gaps",
    description="Cross-tier audit: source offset ranges that never reached the destination",
    schema=StructType(
        _fields(
            "check_name string, job_group_id string, source_cluster string, "
            "source_topic string, partition int, window_start timestamp, first_offset bigint, "
            "last_offset bigint, missing_count bigint, destination string, "
            "decided_at timestamp, revision int"
        )
    ),
)

REPLICATION_LEDGER = DeltaTableSpec(
    name="replication_ledger",
    description="Cross-tier audit: contiguous source offset ranges seen at source and destination",
    schema=StructType(
        _fields(
            "check_name string, side string, cluster string, topic string, partition int, "
            "window_start timestamp, first_offset bigint, last_offset bigint, copies bigint, "
            "batch_id bigint"
        )
    ),
)

RETENTION_AUDIT = DeltaTableSpec(
    name="retention_audit",
    description="Cross-tier audit: retention deletions against the group's committed offsets",
    keys=("cluster", "topic", "partition", "window_start"),
    partition_by=("job_group_id",),
    writer_column="job_group_id",
    schema=StructType(
        _fields(
            "job_group_id string, "
            "cluster string, topic string, partition int, window_start timestamp, "
            "window_end timestamp, log_start_offset bigint, end_offset bigint, "
            "committed_offset bigint, deleted_count bigint, lost_count bigint, "
            "lost_first_offset bigint, lost_last_offset bigint, partition_count int, "
            "expected_partition_count int, retention_ms bigint, retention_bytes bigint, "
            "cleanup_policy string, samples bigint, updated_at timestamp"
        )
    ),
)

AVAILABILITY_AUDIT = DeltaTableSpec(
    name="availability_audit",
    description="Cross-tier audit: offline, under-replicated and under-min-ISR time per window",
    keys=("cluster", "topic", "partition", "window_start"),
    partition_by=("job_group_id",),
    writer_column="job_group_id",
    schema=StructType(
        _fields(
            "job_group_id string, "
            "cluster string, topic string, partition int, window_start timestamp, "
            "window_end timestamp, sampled_seconds double, offline_seconds double, "
            "under_replicated_seconds double, under_min_isr_seconds double, samples bigint, "
            "updated_at timestamp"
        )
    ),
)


# Every table this job writes, in the order it ensures them; its spec places those its checks
# use (`spec.tables_of`). audit_counts, which it reads, is the counting audit's.
WRITTEN = (
    AUDIT_VERDICTS,
    TIER_COUNTS,
    TIER_REPORT_IDS,
    REPLICATION_LEDGER,
    REPLICATION_GAPS,
    RETENTION_AUDIT,
    AVAILABILITY_AUDIT,
)


def locations(spec: TierAuditSpec) -> list[tuple[DeltaTableSpec, str]]:
    """The tables the spec's checks write, and where."""
    return located(WRITTEN, spec.output)


def frame(
    spark: SparkSession, table: DeltaTableSpec, rows: Sequence[Mapping[str, Any]]
) -> DataFrame:
    """Rows of `table` as plain values (timestamps as epoch ms) -> a DataFrame of its schema,
    but the writer column (`merge_once` and `append_once` set it)."""
    fields = [
        StructField(f.name, LongType(), True) if f.dataType.typeName() == "timestamp" else f
        for f in table.schema.fields
        if f.name != table.writer_column
    ]
    ts = [f.name for f in table.schema.fields if f.dataType.typeName() == "timestamp"]
    df = spark.createDataFrame(
        [tuple(r.get(f.name) for f in fields) for r in rows], StructType(fields)
    )
    return df.withColumns({c: F.timestamp_millis(c) for c in ts})


def epoch_ms(column: str) -> Column:
    """A timestamp column read back as epoch ms, under its own name (rows as plain values)."""
    return F.unix_millis(column).alias(column)
