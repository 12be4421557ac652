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

`consumer_group_status`, one row per trigger and consumer group (Burrow's group status):
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

from pyspark.sql import SparkSession
from pyspark.sql.types import StructType

from jobs.runtime.delta import ensure_table

TOPIC_COLUMNS = (
    "topic string, partition int, leader int, replication_factor int, isr_size int, "
    "replicas array<int>, isr array<int>, offline_replicas array<int>, has_leader boolean, "
    "offline boolean, under_replicated boolean"
)
TOPIC_DDL = f"cluster string, sampled_at timestamp, {TOPIC_COLUMNS}"
COMMITS_DDL = (
    "cluster string, group string, topic string, partition int, offset long, "
    "commit_time timestamp, lag long"
)
PARTITION_STATUS_DDL = (
    "topic string, partition int, status string, current_lag long, time_lag_ms long, "
    "complete double, start_offset long, end_offset long, end_commit_time timestamp, rule string"
)
STATUS_DDL = (
    "cluster string, evaluated_at timestamp, group string, status string, complete double, "
    "total_lag long, max_lag_topic string, max_lag_partition int, max_lag long, "
    "max_time_lag_ms long, total_partitions int, "
    f"partitions array<struct<{PARTITION_STATUS_DDL}>>, reason string"
)

PROBES_DDL = (
    "cluster string, window_start timestamp, window_end timestamp, probe_type string, "
    "broker int, zone string, partitions array<int>, probes long, produced long, "
    "produce_failed long, produce_success_ratio double, consumed long, "
    "consume_success_ratio double, lost long, duplicated long, sample_error string, "
    "ack_latency_p50_ms double, ack_latency_p99_ms double, ack_latency_p999_ms double, "
    "e2e_latency_p50_ms double, e2e_latency_p99_ms double, e2e_latency_p999_ms double, "
    "ack_latency_kll binary, e2e_latency_kll binary"
)


def schema(spark: SparkSession, ddl: str) -> StructType:
    return spark.createDataFrame([], ddl).schema


def ensure_tables(spark: SparkSession, paths_and_ddls: list[tuple[str, str]]) -> None:
    for path, ddl in paths_and_ddls:
        ensure_table(spark, path, schema(spark, ddl))
