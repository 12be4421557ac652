"""Prometheus metrics of a job's driver, under the names existing dashboards and alerts use.

Off unless `UATU_METRICS_PORT` is set (0 picks a free port). Then the driver serves
`http://<host>:<port>/metrics` (prometheus_client) with:

* every job: `uatu_query_*` from a StreamingQueryListener (batches, input and processing
  rates, batch duration, end offsets per partition, last progress time);
* the audit job: per topic and partition `uatu_audit_messages_total` (and duplicates, late,
  no event time, bytes), and per window `uatu_audit_window_messages` with
  `uatu_audit_window_complete` (window end + allowed lateness has passed) for the newest
  windows;
* the availability job: Burrow's names and labels (`burrow_kafka_consumer_status`,
  `burrow_kafka_consumer_lag_total`, `burrow_kafka_consumer_partition_lag`,
  `burrow_kafka_consumer_current_offset`, `burrow_kafka_topic_partition_offset`), lag in
  seconds under kafka-lag-exporter's (`kafka_consumergroup_group_lag_seconds`,
  `kafka_consumergroup_group_max_lag_seconds`, ...), groups without commits
  (`uatu_consumer_group_without_commits`), and the probes in KMinion's
  `kminion_end_to_end_*` shape;
* the replication job: MirrorMaker 2's source-connector metrics as Strimzi's JMX exporter
  names them (`kafka_connect_mirror_mirrorsourceconnector_record_age_ms`,
  `..._replication_latency_ms`, `..._record_count`, `..._byte_count`, ...), plus
  `uatu_replication_records_total` and `uatu_replication_records_already_present_total`;
* the dispatcher job: uForwarder's names where it has one (its tally names, dots as
  underscores: `dispatcher_grpc_call_total`, `processor_dispatch_grpc_bytes_total`,
  `processor_outbound_cache_limit`, `processor_outbound_cache_adaptive_limit`; tags
  `kafka_cluster`, `kafka_group`, `kafka_topic`, `kafka_partition`, `uri`), and
  `uatu_dispatch_*` for the outcomes (`uatu_dispatch_messages_total{code}` with uForwarder's
  DispatcherResponse codes commit, skip, retry, dlq, resq), timeouts, in-memory retries,
  head-of-line reroutes, redeliveries, rate-limited time, peak inflight and RPC latency
  quantiles of each partition's last batch.

`UATU_METRICS_SD_DIR`, when set, gets a Prometheus file_sd target file per application
(`<job_group_id>.json`, removed on stop): one target for these metrics, one for Spark's own
(the PrometheusServlet on the Spark UI, `/metrics/prometheus`). Spark's streaming metrics
(`spark.sql.streaming.metricsEnabled`) are switched on by `SESSION_CONF`.

Everything here runs on the driver; executors never touch it. The update functions are cheap
no-ops for work the caller skips while not serving (`serving()`).
"""

from __future__ import annotations

import json
import logging
import socket
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    start_http_server,
)
from pyspark.sql.streaming import StreamingQueryListener

from core.errors import ConfigError

log = logging.getLogger("uatu.metrics")

ENV_PORT = "UATU_METRICS_PORT"
ENV_SD_DIR = "UATU_METRICS_SD_DIR"

# Spark settings every job session gets: streaming metrics in Spark's metrics system, and the
# PrometheusServlet sink on the UI, with a fixed namespace instead of the app id in every name.
SESSION_CONF = {
    "spark.sql.streaming.metricsEnabled": "true",
    "spark.metrics.namespace": "uatu",
    "spark.metrics.conf.*.sink.prometheusServlet.class": (
        "org.apache.spark.metrics.sink.PrometheusServlet"
    ),
    "spark.metrics.conf.*.sink.prometheusServlet.path": "/metrics/prometheus",
}

REGISTRY = CollectorRegistry()
ProcessCollector(registry=REGISTRY)

_lock = threading.Lock()
_serving = False


def serving() -> bool:
    """True once `start` has started the HTTP endpoint in this driver."""
    return _serving


def _gauge(name: str, doc: str, labels: Sequence[str]) -> Gauge:
    return Gauge(name, doc, labels, registry=REGISTRY)


def _counter(name: str, doc: str, labels: Sequence[str]) -> Counter:
    return Counter(name, doc, labels, registry=REGISTRY)


# --- every job: the streaming query ---------------------------------------------------------

_Q = ("query",)
QUERY_BATCHES = _counter("uatu_query_batches", "Micro-batches completed", _Q)
QUERY_INPUT_ROWS = _counter("uatu_query_input_rows", "Rows read by completed micro-batches", _Q)
QUERY_INPUT_RATE = _gauge(
    "uatu_query_input_rows_per_second", "Input rate of the last micro-batch", _Q
)
QUERY_PROCESS_RATE = _gauge(
    "uatu_query_processed_rows_per_second", "Processing rate of the last micro-batch", _Q
)
QUERY_BATCH_SECONDS = _gauge(
    "uatu_query_batch_duration_seconds", "Wall time of the last micro-batch", _Q
)
QUERY_LAST_PROGRESS = _gauge(
    "uatu_query_last_progress_timestamp_seconds", "When the last micro-batch finished", _Q
)
QUERY_END_OFFSET = _gauge(
    "uatu_query_source_end_offset",
    "End offset of the last micro-batch per Kafka partition",
    ("query", "topic", "partition"),
)

# --- the audit job --------------------------------------------------------------------------

_AUDIT = ("cluster", "topic", "partition", "audit_type")
AUDIT_COUNTS = {
    column: _counter(f"uatu_audit_{name}", doc, _AUDIT)
    for column, name, doc in (
        ("message_count", "messages", "Messages audited"),
        ("duplicate_count", "duplicates", "Duplicates found (exact audits)"),
        ("late_count", "late_messages", "Messages later than window end + allowed lateness"),
        ("no_event_time_count", "no_event_time_messages", "Messages without a usable event time"),
        ("bytes", "bytes", "Key + value bytes audited"),
    )
}
_WINDOW = (*_AUDIT, "window_start")
AUDIT_WINDOW_MESSAGES = _gauge(
    "uatu_audit_window_messages", "Messages in the window so far (newest windows only)", _WINDOW
)
AUDIT_WINDOW_COMPLETE = _gauge(
    "uatu_audit_window_complete",
    "1 once window end + allowed lateness has passed (the window's count is final)",
    _WINDOW,
)
AUDIT_WINDOWS_KEPT = 4  # per partition and audit type: label sets stay bounded

# --- the availability job: Burrow, kafka-lag-exporter, KMinion ------------------------------

_GROUP = ("cluster", "consumer_group")
_GROUP_PARTITION = (*_GROUP, "topic", "partition")
BURROW_STATUS = _gauge(
    "burrow_kafka_consumer_status",
    "The status of the consumer group. It is calculated from the highest status for the "
    "individual partitions. Statuses are an index list from NOTFOUND, OK, WARN, ERR, STOP, "
    "STALL, REWIND",
    _GROUP,
)
BURROW_LAG_TOTAL = _gauge(
    "burrow_kafka_consumer_lag_total",
    "The sum of all partition current lag values for the group",
    _GROUP,
)
BURROW_PARTITION_LAG = _gauge(
    "burrow_kafka_consumer_partition_lag",
    "Number of messages the consumer group is behind by for a partition",
    _GROUP_PARTITION,
)
BURROW_CURRENT_OFFSET = _gauge(
    "burrow_kafka_consumer_current_offset",
    "Latest offset stored for this partition (complete windows only, as Burrow)",
    _GROUP_PARTITION,
)
BURROW_TOPIC_OFFSET = _gauge(
    "burrow_kafka_topic_partition_offset",
    "Latest broker offset of the partition",
    ("cluster", "topic", "partition"),
)
WITHOUT_COMMITS = _gauge(
    "uatu_consumer_group_without_commits",
    "1 for a group the coordinator lists that has committed no offset the job read",
    _GROUP,
)
_KLE = ("cluster_name", "group", "topic", "partition", "member_host", "consumer_id", "client_id")
_KLE_GROUP = ("cluster_name", "group", "is_simple_consumer")
KLE_LAG_SECONDS = _gauge(
    "kafka_consumergroup_group_lag_seconds", "Extrapolated lag in seconds for a group member", _KLE
)
KLE_LAG = _gauge("kafka_consumergroup_group_lag", "Group offset lag of a partition", _KLE)
KLE_MAX_LAG_SECONDS = _gauge(
    "kafka_consumergroup_group_max_lag_seconds", "Max extrapolated lag in seconds", _KLE_GROUP
)
KLE_MAX_LAG = _gauge("kafka_consumergroup_group_max_lag", "Max group offset lag", _KLE_GROUP)
KLE_SUM_LAG = _gauge("kafka_consumergroup_group_sum_lag", "Sum of group offset lag", _KLE_GROUP)

_PARTITION_ID = ("partition_id",)
_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0)
KMINION_PRODUCED = _counter(
    "kminion_end_to_end_messages_produced",
    "Probe messages produced (acked or failed)",
    _PARTITION_ID,
)
KMINION_PRODUCE_FAILED = _counter(
    "kminion_end_to_end_messages_produced_failed",
    "Probe messages that failed to produce or missed the ack SLA",
    _PARTITION_ID,
)
KMINION_RECEIVED = _counter(
    "kminion_end_to_end_messages_received",
    "Probe messages read back within the round-trip SLA",
    _PARTITION_ID,
)
KMINION_LOST = _counter(
    "kminion_end_to_end_messages_lost",
    "Probe messages produced but not read back within the round-trip SLA",
    _PARTITION_ID,
)
KMINION_PRODUCE_LATENCY = Histogram(
    "kminion_end_to_end_produce_latency_seconds",
    "Time until a probe was acknowledged",
    _PARTITION_ID,
    buckets=_LATENCY_BUCKETS,
    registry=REGISTRY,
)
KMINION_ROUNDTRIP_LATENCY = Histogram(
    "kminion_end_to_end_roundtrip_latency_seconds",
    "Time from producing a probe to reading it back",
    _PARTITION_ID,
    buckets=_LATENCY_BUCKETS,
    registry=REGISTRY,
)

# --- the replication job: MirrorMaker 2 (Strimzi's JMX exporter names) ----------------------

_MM2 = ("source", "target", "topic", "partition")
MM2 = {
    attribute: _gauge(
        f"kafka_connect_mirror_mirrorsourceconnector_{attribute}",
        f"MirrorMaker 2 MirrorSourceConnector {attribute.replace('_', '-')} (last batch)",
        _MM2,
    )
    for attribute in (
        "record_age_ms",
        "record_age_ms_min",
        "record_age_ms_max",
        "record_age_ms_avg",
        "replication_latency_ms",
        "replication_latency_ms_min",
        "replication_latency_ms_max",
        "replication_latency_ms_avg",
        "record_count",
        "byte_count",
    )
}
_REPLICATION = ("job_group_id", "source_topic", "destination_topic", "partition")
REPLICATION_RECORDS = _counter(
    "uatu_replication_records", "Records written to the destination", _REPLICATION
)
REPLICATION_PRESENT = _counter(
    "uatu_replication_records_already_present",
    "Records skipped because the destination already held them (a retried batch)",
    _REPLICATION,
)
REPLICATION_BATCHES = _counter(
    "uatu_replication_batches", "Replication micro-batches with records", ("job_group_id",)
)

# --- the dispatcher job: uForwarder's tally names (dots as underscores) ----------------------

_UF = ("kafka_cluster", "kafka_group", "kafka_topic", "kafka_partition", "uri")
DISPATCH_CALLS = _counter(
    "dispatcher_grpc_call",
    "gRPC calls made, in-memory retries included (uForwarder's dispatcher.grpc.call, "
    "without its result and code tags)",
    _UF,
)
DISPATCH_BYTES = _counter(
    "processor_dispatch_grpc_bytes",
    "Value bytes of the records dispatched (uForwarder's processor.dispatch.grpc.bytes)",
    _UF,
)
DISPATCH_INFLIGHT_LIMIT = _gauge(
    "processor_outbound_cache_limit",
    "Fixed inflight limit of the partition (flow_control.max_inflight_messages share)",
    _UF,
)
DISPATCH_ADAPTIVE_LIMIT = _gauge(
    "processor_outbound_cache_adaptive_limit",
    "Adaptive (Vegas) inflight limit of the partition at the end of its last batch",
    _UF,
)
# dispatch_stats column -> uForwarder's DispatcherResponse code (lowercase)
DISPATCH_OUTCOME_CODES = {
    "committed": "commit",
    "skipped": "skip",
    "retried": "retry",
    "dlq": "dlq",
    "resq": "resq",
}
DISPATCH_MESSAGES = _counter(
    "uatu_dispatch_messages",
    "Records resolved, by uForwarder's DispatcherResponse code (commit, skip, retry = written "
    "to a retry tier, dlq, resq)",
    (*_UF, "code"),
)
DISPATCH_EVENTS = {
    column: _counter(f"uatu_dispatch_{column}", doc, _UF)
    for column, doc in (
        ("timeouts", "Calls past their deadline"),
        ("in_memory_retries", "Calls retried in memory (UNAVAILABLE, INTERNAL, ...)"),
        ("hol_rerouted", "Records cancelled as head-of-line blocking and rerouted"),
        ("redelivered", "Records dispatched again after a crash cut their batch short"),
        ("produce_retries", "Failed writes to a retry, DLQ or resq topic, retried"),
        ("undecodable", "Records of a retry/DLQ/resq topic whose key is no DLQMetadata"),
    )
}
DISPATCH_RATE_LIMITED = _counter(
    "uatu_dispatch_rate_limited_seconds",
    "Time records waited for the messages/bytes per second limits",
    _UF,
)
DISPATCH_PEAK_INFLIGHT = _gauge(
    "uatu_dispatch_inflight_peak", "Most calls in flight at once in the partition's last batch", _UF
)
DISPATCH_LATENCY = _gauge(
    "uatu_dispatch_rpc_latency_seconds",
    "RPC latency quantile of the partition's last batch (from its KLL sketch)",
    (*_UF, "quantile"),
)
_DISPATCH_QUANTILES = (
    ("0.5", "latency_p50_ms"),
    ("0.95", "latency_p95_ms"),
    ("0.99", "latency_p99_ms"),
)


# --- serving --------------------------------------------------------------------------------


@dataclass
class MetricsEndpoint:
    """The driver's metrics endpoint and, with a service-discovery dir, its target file."""

    host: str
    port: int
    sd_file: Path | None = None

    def stop(self) -> None:
        if self.sd_file is not None:
            self.sd_file.unlink(missing_ok=True)


def start(
    env: Mapping[str, str], job_group_id: str, ui_port: int | None = None
) -> MetricsEndpoint | None:
    """Serve /metrics when `UATU_METRICS_PORT` is set; write the file_sd target if asked."""
    global _serving
    raw = env.get(ENV_PORT, "").strip()
    if not raw:
        return None
    if not raw.isdigit() or int(raw) > 65535:
        raise ConfigError(ENV_PORT, f"{raw!r} is not a port (0 picks a free one)")
    host = env.get("UATU_METRICS_HOST", "0.0.0.0")
    server, _thread = start_http_server(int(raw), addr=host, registry=REGISTRY)
    port = int(server.server_address[1])
    with _lock:
        _serving = True
    advertised = socket.gethostname() if host == "0.0.0.0" else host
    endpoint = MetricsEndpoint(advertised, port)
    sd_dir = env.get(ENV_SD_DIR, "").strip()
    if sd_dir:
        endpoint.sd_file = write_sd_file(Path(sd_dir), job_group_id, advertised, port, ui_port)
    log.info("metrics on http://%s:%d/metrics", advertised, port)
    return endpoint


def sd_targets(
    job_group_id: str, host: str, port: int, ui_port: int | None
) -> list[dict[str, Any]]:
    """Prometheus file_sd target groups for one application (pure)."""
    groups: list[dict[str, Any]] = [
        {"targets": [f"{host}:{port}"], "labels": {"job_group_id": job_group_id}}
    ]
    if ui_port:
        groups.append(
            {
                "targets": [f"{host}:{ui_port}"],
                "labels": {"job_group_id": job_group_id, "__metrics_path__": "/metrics/prometheus"},
            }
        )
    return groups


def write_sd_file(
    sd_dir: Path, job_group_id: str, host: str, port: int, ui_port: int | None
) -> Path:
    sd_dir.mkdir(parents=True, exist_ok=True)
    target = sd_dir / f"{job_group_id}.json"
    partial = target.with_suffix(".json.partial")  # Prometheus reads *.json only
    partial.write_text(json.dumps(sd_targets(job_group_id, host, port, ui_port)))
    partial.replace(target)
    return target


class QueryMetricsListener(StreamingQueryListener):
    """`uatu_query_*` from each progress event of the named query."""

    def __init__(self, query_name: str) -> None:
        self.query_name = query_name

    def onQueryStarted(self, event: Any) -> None:
        pass

    def onQueryProgress(self, event: Any) -> None:
        progress = json.loads(event.progress.json)
        if progress.get("name") != self.query_name:
            return
        query_progress(self.query_name, progress)

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        pass


def query_progress(query: str, progress: Mapping[str, Any]) -> None:
    """Update `uatu_query_*` from one StreamingQueryProgress (as JSON)."""
    QUERY_BATCHES.labels(query).inc()
    QUERY_INPUT_ROWS.labels(query).inc(progress.get("numInputRows") or 0)
    QUERY_INPUT_RATE.labels(query).set(progress.get("inputRowsPerSecond") or 0.0)
    QUERY_PROCESS_RATE.labels(query).set(progress.get("processedRowsPerSecond") or 0.0)
    QUERY_BATCH_SECONDS.labels(query).set((progress.get("batchDuration") or 0) / 1000)
    stamp = progress.get("timestamp")
    if isinstance(stamp, str):
        when = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
        QUERY_LAST_PROGRESS.labels(query).set(when.timestamp())
    for source in progress.get("sources", []):
        end = source.get("endOffset")
        if isinstance(end, str) and end.startswith("{"):
            end = json.loads(end)
        if not isinstance(end, dict):
            continue
        for topic, partitions in end.items():
            if isinstance(partitions, dict):
                for partition, offset in partitions.items():
                    QUERY_END_OFFSET.labels(query, topic, str(partition)).set(offset)


# --- domain updates -------------------------------------------------------------------------

_audit_windows: dict[tuple[str, ...], list[str]] = {}


def audit_windows(
    rows: Iterable[Mapping[str, Any]], lateness_seconds: Mapping[int, int], now: datetime
) -> None:
    """One batch's per-window increments (the audit partials): counters and window gauges.

    `lateness_seconds` maps a window length to its allowed lateness. Only the newest
    AUDIT_WINDOWS_KEPT windows per (cluster, topic, partition, audit type) keep a gauge.
    """
    for row in rows:
        labels = (row["cluster"], row["topic"], str(row["partition"]), row["audit_type"])
        for column, counter in AUDIT_COUNTS.items():
            value = row.get(column)
            if value:
                counter.labels(*labels).inc(value)
        start = row["window_start"].isoformat()
        window = (*labels, start)
        AUDIT_WINDOW_MESSAGES.labels(*window).inc(row.get("message_count") or 0)
        closes = row["window_end"].timestamp() + lateness_seconds.get(
            row["audit_interval_seconds"], row["audit_interval_seconds"]
        )
        AUDIT_WINDOW_COMPLETE.labels(*window).set(1 if now.timestamp() >= closes else 0)
        kept = _audit_windows.setdefault(labels, [])
        if start not in kept:
            kept.append(start)
            kept.sort()
            while len(kept) > AUDIT_WINDOWS_KEPT:
                old = kept.pop(0)
                for gauge in (AUDIT_WINDOW_MESSAGES, AUDIT_WINDOW_COMPLETE):
                    gauge.remove(*labels, old)


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


def replication(labels: Mapping[str, str], rows: Iterable[Mapping[str, Any]]) -> None:
    """One batch's `replication_stats` rows -> MirrorMaker 2 gauges and uatu counters."""
    REPLICATION_BATCHES.labels(labels["job_group_id"]).inc()
    for row in rows:
        mm2 = (
            labels["source_cluster"],
            labels["destination_cluster"],
            labels["destination_topic"],
            str(row["destination_partition"]),
        )
        values = {
            "record_age_ms": row.get("record_age_ms_max"),
            "record_age_ms_min": row.get("record_age_ms_min"),
            "record_age_ms_max": row.get("record_age_ms_max"),
            "record_age_ms_avg": row.get("record_age_ms_avg"),
            "replication_latency_ms": row.get("replication_latency_ms_max"),
            "replication_latency_ms_min": row.get("replication_latency_ms_min"),
            "replication_latency_ms_max": row.get("replication_latency_ms_max"),
            "replication_latency_ms_avg": row.get("replication_latency_ms_avg"),
        }
        for attribute, value in values.items():
            if value is not None:
                MM2[attribute].labels(*mm2).set(value)
        MM2["record_count"].labels(*mm2).inc(row.get("records_replicated") or 0)
        MM2["byte_count"].labels(*mm2).inc(row.get("bytes_replicated") or 0)
        partition = (
            labels["job_group_id"],
            labels["source_topic"],
            labels["destination_topic"],
            str(row["partition"]),
        )
        REPLICATION_RECORDS.labels(*partition).inc(row.get("records_replicated") or 0)
        REPLICATION_PRESENT.labels(*partition).inc(row.get("records_already_present") or 0)


def dispatch(labels: Mapping[str, str], adaptive: bool, rows: Iterable[Mapping[str, Any]]) -> None:
    """One batch's `dispatch_stats` rows -> uForwarder-named and `uatu_dispatch_*` series.

    `labels`: `kafka_cluster`, `kafka_group` (the JobGroup's consumer group) and `uri`; each
    row's `topic` and `partition` complete them. `adaptive`: the inflight limit is adaptive
    (max_inflight_messages 0), so `inflight_limit` goes to the adaptive-limit gauge. A batch
    has a row per partition and stats window: counters add every row, gauges keep the
    partition's last row with a value (its latency quantiles, peak inflight, limit).
    """
    limit_gauge = DISPATCH_ADAPTIVE_LIMIT if adaptive else DISPATCH_INFLIGHT_LIMIT
    for row in rows:
        uf = (
            labels["kafka_cluster"],
            labels["kafka_group"],
            row["topic"],
            str(row["partition"]),
            labels["uri"],
        )
        DISPATCH_CALLS.labels(*uf).inc(row.get("attempts") or 0)
        DISPATCH_BYTES.labels(*uf).inc(row.get("value_bytes") or 0)
        for column, code in DISPATCH_OUTCOME_CODES.items():
            DISPATCH_MESSAGES.labels(*uf, code).inc(row.get(column) or 0)
        for column, counter in DISPATCH_EVENTS.items():
            counter.labels(*uf).inc(row.get(column) or 0)
        DISPATCH_RATE_LIMITED.labels(*uf).inc((row.get("rate_limited_ms") or 0.0) / 1000)
        if row.get("peak_inflight") is not None:
            DISPATCH_PEAK_INFLIGHT.labels(*uf).set(row["peak_inflight"])
        if row.get("inflight_limit") is not None:
            limit_gauge.labels(*uf).set(row["inflight_limit"])
        for quantile, column in _DISPATCH_QUANTILES:
            if row.get(column) is not None:
                DISPATCH_LATENCY.labels(*uf, quantile).set(row[column] / 1000)


def ui_port_of(url: str | None) -> int | None:
    port = (url or "").rpartition(":")[2]
    return int(port) if port.isdigit() else None


__all__ = [
    "ENV_PORT",
    "ENV_SD_DIR",
    "REGISTRY",
    "SESSION_CONF",
    "MetricsEndpoint",
    "QueryMetricsListener",
    "audit_windows",
    "consumer_groups",
    "dispatch",
    "probes",
    "query_progress",
    "replication",
    "sd_targets",
    "serving",
    "start",
    "topic_offsets",
    "ui_port_of",
]
