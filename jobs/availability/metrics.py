"""The availability job's Prometheus series, served by the driver's endpoint
(jobs/runtime/metrics.py), under the names existing dashboards and alerts use.

Burrow's names and labels (`burrow_kafka_consumer_status`, `burrow_kafka_consumer_lag_total`,
`burrow_kafka_consumer_partition_lag`, `burrow_kafka_consumer_current_offset`,
`burrow_kafka_topic_partition_offset`), lag in seconds under kafka-lag-exporter's
(`kafka_consumergroup_group_lag_seconds`, `kafka_consumergroup_group_max_lag_seconds`, ...),
groups without commits (`uatu_consumer_group_without_commits`), and the probes in KMinion's
`kminion_end_to_end_*` shape.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from prometheus_client import Gauge

from jobs.runtime.metrics import counter, gauge, histogram

_lock = threading.Lock()

_GROUP = ("cluster", "consumer_group")
_GROUP_PARTITION = (*_GROUP, "topic", "partition")
BURROW_STATUS = gauge(
    "burrow_kafka_consumer_status",
    "The status of the consumer group. It is calculated from the highest status for the "
    "individual partitions. Statuses are an index list from NOTFOUND, OK, WARN, ERR, STOP, "
    "STALL, REWIND",
    _GROUP,
)
BURROW_LAG_TOTAL = gauge(
    "burrow_kafka_consumer_lag_total",
    "The sum of all partition current lag values for the group",
    _GROUP,
)
BURROW_PARTITION_LAG = gauge(
    "burrow_kafka_consumer_partition_lag",
    "Number of messages the consumer group is behind by for a partition",
    _GROUP_PARTITION,
)
BURROW_CURRENT_OFFSET = gauge(
    "burrow_kafka_consumer_current_offset",
    "Latest offset stored for this partition (complete windows only, as Burrow)",
    _GROUP_PARTITION,
)
BURROW_TOPIC_OFFSET = gauge(
    "burrow_kafka_topic_partition_offset",
    "Latest broker offset of the partition",
    ("cluster", "topic", "partition"),
)
WITHOUT_COMMITS = gauge(
    "uatu_consumer_group_without_commits",
    "1 for a group the coordinator lists that has committed no offset the job read",
    _GROUP,
)
_KLE = ("cluster_name", "group", "topic", "partition", "member_host", "consumer_id", "client_id")
_KLE_GROUP = ("cluster_name", "group", "is_simple_consumer")
KLE_LAG_SECONDS = gauge(
    "kafka_consumergroup_group_lag_seconds", "Extrapolated lag in seconds for a group member", _KLE
)
KLE_LAG = gauge("kafka_consumergroup_group_lag", "Group offset lag of a partition", _KLE)
KLE_MAX_LAG_SECONDS = gauge(
    "kafka_consumergroup_group_max_lag_seconds", "Max extrapolated lag in seconds", _KLE_GROUP
)
KLE_MAX_LAG = gauge("kafka_consumergroup_group_max_lag", "Max group offset lag", _KLE_GROUP)
KLE_SUM_LAG = gauge("kafka_consumergroup_group_sum_lag", "Sum of group offset lag", _KLE_GROUP)

_PARTITION_ID = ("partition_id",)
_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0)
KMINION_PRODUCED = counter(
    "kminion_end_to_end_messages_produced",
    "Probe messages produced (acked or failed)",
    _PARTITION_ID,
)
KMINION_PRODUCE_FAILED = counter(
    "kminion_end_to_end_messages_produced_failed",
    "Probe messages that failed to produce or missed the ack SLA",
    _PARTITION_ID,
)
KMINION_RECEIVED = counter(
    "kminion_end_to_end_messages_received",
    "Probe messages read back within the round-trip SLA",
    _PARTITION_ID,
)
KMINION_LOST = counter(
    "kminion_end_to_end_messages_lost",
    "Probe messages produced but not read back within the round-trip SLA",
    _PARTITION_ID,
)
KMINION_PRODUCE_LATENCY = histogram(
    "kminion_end_to_end_produce_latency_seconds",
    "Time until a probe was acknowledged",
    _PARTITION_ID,
    _LATENCY_BUCKETS,
)
KMINION_ROUNDTRIP_LATENCY = histogram(
    "kminion_end_to_end_roundtrip_latency_seconds",
    "Time from producing a probe to reading it back",
    _PARTITION_ID,
    _LATENCY_BUCKETS,
)


_group_labels: dict[str, set[tuple[str, ...]]] = {}


def consumer_groups(cluster: str, rows: Sequence[Mapping[str, Any]]) -> None:
    """One evaluation's `consumer_group_status` rows -> Burrow and kafka-lag-exporter gauges.

    Like Burrow's /metrics, NOTFOUND groups are left out; groups without commits get
    `uatu_consumer_group_without_commits` instead. Label sets of groups gone since the last
    evaluation are removed.
    """
    seen: dict[str, set[tuple[str, ...]]] = {name: set() for name in _GAUGES_BY_NAME}

    def put(gauge: Gauge, labels: tuple[str, ...], value: float) -> None:
        gauge.labels(*labels).set(value)
        seen[gauge._name].add(labels)

    for row in rows:
        group, status = row["group"], row["status"]
        if status == "NO_COMMITS":
            put(WITHOUT_COMMITS, (cluster, group), 1)
            continue
        if status == "NOTFOUND":
            continue
        put(BURROW_STATUS, (cluster, group), _STATUS_INDEX.get(status, 0))
        put(BURROW_LAG_TOTAL, (cluster, group), row.get("total_lag") or 0)
        time_lags = []
        lags = []
        for p in row.get("partitions") or []:
            labels = (cluster, group, p["topic"], str(p["partition"]))
            put(BURROW_PARTITION_LAG, labels, p.get("current_lag") or 0)
            if p.get("complete") == 1.0 and p.get("end_offset") is not None:
                put(BURROW_CURRENT_OFFSET, labels, p["end_offset"])
            kle = (cluster, group, p["topic"], str(p["partition"]), "", "", "")
            lag = p.get("current_lag") or 0
            seconds = (p.get("time_lag_ms") or 0) / 1000
            put(KLE_LAG, kle, lag)
            put(KLE_LAG_SECONDS, kle, seconds)
            lags.append(lag)
            time_lags.append(seconds)
        group_labels = (cluster, group, "")
        put(KLE_MAX_LAG, group_labels, max(lags, default=0))
        put(KLE_SUM_LAG, group_labels, sum(lags))
        put(KLE_MAX_LAG_SECONDS, group_labels, max(time_lags, default=0.0))
    with _lock:
        for name, gauge in _GAUGES_BY_NAME.items():
            for stale in _group_labels.get(name, set()) - seen[name]:
                gauge.remove(*stale)
            _group_labels[name] = seen[name]


_STATUS_INDEX = {
    name: i for i, name in enumerate(("NOTFOUND", "OK", "WARN", "ERR", "STOP", "STALL", "REWIND"))
}
_GAUGES_BY_NAME: dict[str, Gauge] = {
    g._name: g
    for g in (
        BURROW_STATUS,
        BURROW_LAG_TOTAL,
        BURROW_PARTITION_LAG,
        BURROW_CURRENT_OFFSET,
        WITHOUT_COMMITS,
        KLE_LAG,
        KLE_LAG_SECONDS,
        KLE_MAX_LAG,
        KLE_SUM_LAG,
        KLE_MAX_LAG_SECONDS,
    )
}


def topic_offsets(cluster: str, heads: Mapping[tuple[str, int], int]) -> None:
    """Broker head offsets -> `burrow_kafka_topic_partition_offset`."""
    for (topic, partition), offset in heads.items():
        BURROW_TOPIC_OFFSET.labels(cluster, topic, str(partition)).set(offset)


def probes(rows: Iterable[Mapping[str, Any]]) -> None:
    """Final probe outcomes (`probes/stats.PROBE_OUTCOME_DDL` rows) -> kminion_end_to_end_*."""
    for row in rows:
        partition = str(row["partition"])
        KMINION_PRODUCED.labels(partition).inc()
        if not row["produced"]:
            KMINION_PRODUCE_FAILED.labels(partition).inc()
            continue
        if row.get("ack_latency_ms") is not None:
            KMINION_PRODUCE_LATENCY.labels(partition).observe(row["ack_latency_ms"] / 1000)
        if row.get("copies"):
            KMINION_RECEIVED.labels(partition).inc()
            if row.get("e2e_latency_ms") is not None:
                KMINION_ROUNDTRIP_LATENCY.labels(partition).observe(row["e2e_latency_ms"] / 1000)
        else:
            KMINION_LOST.labels(partition).inc()
