"""The availability job's Delta tables: one row per sample, appended exactly once per batch.

`topic_availability`, one row per trigger and partition of the cluster:

=====================  ===========  ==========================================================
cluster, sampled_at    string, ts   the cluster and when its metadata was read
topic, partition       string, int
leader                 int          broker id; null when the partition is offline
replication_factor     int          replicas assigned
isr_size               int          replicas in sync
replicas, isr          array<int>   broker ids
offline_replicas       array<int>   assigned replicas on brokers that are not alive
has_leader, offline    boolean      offline = no leader: nobody can produce or consume
under_replicated       boolean      isr_size < replication_factor
=====================  ===========  ==========================================================

`consumer_offset_commits`: every commit the job read from `__consumer_offsets` (cluster, group,
topic, partition, offset, commit_time, lag = broker head - offset when the job saw it, null
when unknown). It is the persisted lag window: a restarted job replays it.

`consumer_group_status`, one row per evaluation and consumer group (Burrow's group status;
the job evaluates every group at each micro-batch, but not twice within
`LagSettings.status_interval_ms`, at most 1 s):
cluster, evaluated_at, group, status (NOTFOUND, OK, WARN, ERR), complete, total_lag,
max_lag_topic/_partition, max_lag, max_time_lag_ms (now - timestamp of the oldest unconsumed
record, over the group's partitions), total_partitions, and `partitions`: topic, partition,
status (OK, WARN, STOP, STALL, REWIND), current_lag, time_lag_ms, complete, the window's
start/end offsets and end commit time, and `rule`: which rule decided the status
(`lag.rules.RULES`). `reason` says why the group has its status: its worst partition and
rule, or why it is NOTFOUND. A group the broker knows but that has committed nothing has
status NO_COMMITS (listed, not hidden) and no partitions.

`availability_probes`, one row per probe window, broker and zone (`probes/stats.py`), plus
roll-ups with broker null (per zone when zone-isolated, else the whole cluster):

========================  ===========  ======================================================
cluster, probe_type       string       probe_type: the JobGroup's availability_job_type
window_start, window_end  timestamp    the window of the probes' send times
broker, zone              int, string  the probe partitions' preferred leader and its rack
partitions                array<int>   the probe partitions of the row
probes, produced          long         probes sent; acknowledged within the ack SLA
produce_failed            long         probes - produced
produce_success_ratio     double       produced / probes
consumed, lost            long         produced probes read back / not read back within the
                                       round-trip SLA
consume_success_ratio     double       consumed / produced; null when nothing was produced
duplicated                long         probes read back more than once
sample_error              string       one produce error of the row, for the operator
ack_latency_p50/p99/p999  double       ms from send to acknowledgement
e2e_latency_p50/p99/p999  double       ms from send to first read back
ack/e2e_latency_kll       binary       the KLL doubles sketches behind them (mergeable)
========================  ===========  ======================================================
"""

from __future__ import annotations

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from jobs.availability.spec import AvailabilitySpec
from jobs.runtime.delta import DeltaTableSpec, located

TOPIC_AVAILABILITY = DeltaTableSpec(
    name="topic_availability",
    description="Kafka availability: leader, ISR and replicas per partition and sample",
    schema=StructType(
        [
            StructField("cluster", StringType(), True),
            StructField("sampled_at", TimestampType(), True),
            StructField("topic", StringType(), True),
            StructField("partition", IntegerType(), True),
            StructField("leader", IntegerType(), True),
            StructField("replication_factor", IntegerType(), True),
            StructField("isr_size", IntegerType(), True),
            StructField("replicas", ArrayType(IntegerType(), True), True),
            StructField("isr", ArrayType(IntegerType(), True), True),
            StructField("offline_replicas", ArrayType(IntegerType(), True), True),
            StructField("has_leader", BooleanType(), True),
            StructField("offline", BooleanType(), True),
            StructField("under_replicated", BooleanType(), True),
        ]
    ),
)

CONSUMER_OFFSET_COMMITS = DeltaTableSpec(
    name="consumer_offset_commits",
    description="Kafka availability: every consumer offset commit read, with its lag",
    schema=StructType(
        [
            StructField("cluster", StringType(), True),
            StructField("group", StringType(), True),
            StructField("topic", StringType(), True),
            StructField("partition", IntegerType(), True),
            StructField("offset", LongType(), True),
            StructField("commit_time", TimestampType(), True),
            StructField("lag", LongType(), True),
        ]
    ),
)

CONSUMER_GROUP_STATUS = DeltaTableSpec(
    name="consumer_group_status",
    description="Kafka availability: Burrow's status of each consumer group per evaluation",
    schema=StructType(
        [
            StructField("cluster", StringType(), True),
            StructField("evaluated_at", TimestampType(), True),
            StructField("group", StringType(), True),
            StructField("status", StringType(), True),
            StructField("complete", DoubleType(), True),
            StructField("total_lag", LongType(), True),
            StructField("max_lag_topic", StringType(), True),
            StructField("max_lag_partition", IntegerType(), True),
            StructField("max_lag", LongType(), True),
            StructField("max_time_lag_ms", LongType(), True),
            StructField("total_partitions", IntegerType(), True),
            StructField(
                "partitions",
                ArrayType(
                    StructType(
                        [
                            StructField("topic", StringType(), True),
                            StructField("partition", IntegerType(), True),
                            StructField("status", StringType(), True),
                            StructField("current_lag", LongType(), True),
                            StructField("time_lag_ms", LongType(), True),
                            StructField("complete", DoubleType(), True),
                            StructField("start_offset", LongType(), True),
                            StructField("end_offset", LongType(), True),
                            StructField("end_commit_time", TimestampType(), True),
                            StructField("rule", StringType(), True),
                        ]
                    ),
                    True,
                ),
                True,
            ),
            StructField("reason", StringType(), True),
        ]
    ),
)

AVAILABILITY_PROBES = DeltaTableSpec(
    name="availability_probes",
    description="Kafka availability: round-trip probe outcomes and latency per window",
    schema=StructType(
        [
            StructField("cluster", StringType(), True),
            StructField("window_start", TimestampType(), True),
            StructField("window_end", TimestampType(), True),
            StructField("probe_type", StringType(), True),
            StructField("broker", IntegerType(), True),
            StructField("zone", StringType(), True),
            StructField("partitions", ArrayType(IntegerType(), True), True),
            StructField("probes", LongType(), True),
            StructField("produced", LongType(), True),
            StructField("produce_failed", LongType(), True),
            StructField("produce_success_ratio", DoubleType(), True),
            StructField("consumed", LongType(), True),
            StructField("consume_success_ratio", DoubleType(), True),
            StructField("lost", LongType(), True),
            StructField("duplicated", LongType(), True),
            StructField("sample_error", StringType(), True),
            StructField("ack_latency_p50_ms", DoubleType(), True),
            StructField("ack_latency_p99_ms", DoubleType(), True),
            StructField("ack_latency_p999_ms", DoubleType(), True),
            StructField("e2e_latency_p50_ms", DoubleType(), True),
            StructField("e2e_latency_p99_ms", DoubleType(), True),
            StructField("e2e_latency_p999_ms", DoubleType(), True),
            StructField("ack_latency_kll", BinaryType(), True),
            StructField("e2e_latency_kll", BinaryType(), True),
        ]
    ),
)


def locations(spec: AvailabilitySpec) -> list[tuple[DeltaTableSpec, str]]:
    """The availability job's tables and where the JobGroup puts them (all four, whichever
    samplers run, so a table is there to query from the start)."""
    return located(
        [AVAILABILITY_PROBES, TOPIC_AVAILABILITY, CONSUMER_OFFSET_COMMITS, CONSUMER_GROUP_STATUS],
        spec.output,
    )
