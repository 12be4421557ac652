"""The dispatcher job's Prometheus series, served by the driver's endpoint
(jobs/runtime/metrics.py).

uForwarder's names where it has one (its tally names, dots as underscores:
`dispatcher_grpc_call_total`, `processor_dispatch_grpc_bytes_total`,
`processor_outbound_cache_limit`, `processor_outbound_cache_adaptive_limit`; tags
`kafka_cluster`, `kafka_group`, `kafka_topic`, `kafka_partition`, `uri`), and
`uatu_dispatch_*` for the outcomes (`uatu_dispatch_messages_total{code}` with uForwarder's
DispatcherResponse codes commit, skip, retry, dlq, resq), timeouts, in-memory retries,
head-of-line reroutes, redeliveries, rate-limited time, peak inflight and RPC latency
quantiles of each partition's last batch.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from jobs.runtime.metrics import counter, gauge

_UF = ("kafka_cluster", "kafka_group", "kafka_topic", "kafka_partition", "uri")
DISPATCH_CALLS = counter(
    "dispatcher_grpc_call",
    "gRPC calls made, in-memory retries included (uForwarder's dispatcher.grpc.call, "
    "without its result and code tags)",
    _UF,
)
DISPATCH_BYTES = counter(
    "processor_dispatch_grpc_bytes",
    "Value bytes of the records dispatched (uForwarder's processor.dispatch.grpc.bytes)",
    _UF,
)
DISPATCH_INFLIGHT_LIMIT = gauge(
    "processor_outbound_cache_limit",
    "Fixed inflight limit of the partition (flow_control.max_inflight_messages share)",
    _UF,
)
DISPATCH_ADAPTIVE_LIMIT = gauge(
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
DISPATCH_MESSAGES = counter(
    "uatu_dispatch_messages",
    "Records resolved, by uForwarder's DispatcherResponse code (commit, skip, retry = written "
    "to a retry tier, dlq, resq)",
    (*_UF, "code"),
)
DISPATCH_EVENTS = {
    column: counter(f"uatu_dispatch_{column}", doc, _UF)
    for column, doc in (
        ("timeouts", "Calls past their deadline"),
        ("in_memory_retries", "Calls retried in memory (UNAVAILABLE, INTERNAL, ...)"),
        ("hol_rerouted", "Records cancelled as head-of-line blocking and rerouted"),
        ("redelivered", "Records dispatched again after a crash cut their batch short"),
        ("produce_retries", "Failed writes to a retry, DLQ or resq topic, retried"),
        ("undecodable", "Records of a retry/DLQ/resq topic whose key is no DLQMetadata"),
    )
}
DISPATCH_RATE_LIMITED = counter(
    "uatu_dispatch_rate_limited_seconds",
    "Time records waited for the messages/bytes per second limits",
    _UF,
)
DISPATCH_PEAK_INFLIGHT = gauge(
    "uatu_dispatch_inflight_peak", "Most calls in flight at once in the partition's last batch", _UF
)
DISPATCH_LATENCY = gauge(
    "uatu_dispatch_rpc_latency_seconds",
    "RPC latency quantile of the partition's last batch (from its KLL sketch)",
    (*_UF, "quantile"),
)
_DISPATCH_QUANTILES = (
    ("0.5", "latency_p50_ms"),
    ("0.95", "latency_p95_ms"),
    ("0.99", "latency_p99_ms"),
)


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
        for column, series in DISPATCH_EVENTS.items():
            series.labels(*uf).inc(row.get(column) or 0)
        DISPATCH_RATE_LIMITED.labels(*uf).inc((row.get("rate_limited_ms") or 0.0) / 1000)
        if row.get("peak_inflight") is not None:
            DISPATCH_PEAK_INFLIGHT.labels(*uf).set(row["peak_inflight"])
        if row.get("inflight_limit") is not None:
            limit_gauge.labels(*uf).set(row["inflight_limit"])
        for quantile, column in _DISPATCH_QUANTILES:
            if row.get(column) is not None:
                DISPATCH_LATENCY.labels(*uf, quantile).set(row[column] / 1000)
