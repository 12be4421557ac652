"""The dispatcher's Prometheus series: uForwarder's names and tags, from dispatch_stats rows
(pure updates of the driver's registry; no Spark)."""

from __future__ import annotations

from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from jobs.dispatch import metrics
from jobs.dispatch.tables import STATS_SCHEMA
from jobs.runtime.metrics import REGISTRY

LABELS = {"kafka_cluster": "main", "kafka_group": "orders-cg", "uri": "dns:///svc:50051"}


def samples(name: str) -> dict[tuple[tuple[str, str], ...], float]:
    """{sorted labels: value} of every sample called `name` in the driver's registry."""
    text = generate_latest(REGISTRY).decode()
    return {
        tuple(sorted(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name
    }


def tags(topic: str, partition: int, **extra: str) -> tuple[tuple[str, str], ...]:
    return tuple(
        sorted(
            {
                "kafka_cluster": "main",
                "kafka_group": "orders-cg",
                "kafka_topic": topic,
                "kafka_partition": str(partition),
                "uri": "dns:///svc:50051",
                **extra,
            }.items()
        )
    )


def row(topic: str, partition: int, **values: object) -> dict[str, object]:
    """A dispatch_stats row: every column of the table, None unless given."""
    out: dict[str, object] = dict.fromkeys(STATS_SCHEMA.fieldNames())
    out.update(topic=topic, partition=partition, **values)
    return out


def test_every_column_the_metrics_read_is_a_dispatch_stats_column() -> None:
    read = {
        "topic",
        "partition",
        "attempts",
        "value_bytes",
        "rate_limited_ms",
        "peak_inflight",
        "inflight_limit",
        *metrics.DISPATCH_OUTCOME_CODES,
        *metrics.DISPATCH_EVENTS,
        *(column for _, column in metrics._DISPATCH_QUANTILES),
    }
    assert read <= set(STATS_SCHEMA.fieldNames())


def test_a_batchs_rows_add_up_under_uforwarders_names() -> None:
    # two stats windows of partition 3 of the source, one of partition 0 of a retry tier
    first = row(
        "m-orders",
        3,
        attempts=12,
        value_bytes=1500,
        committed=7,
        skipped=1,
        retried=2,
        dlq=1,
        resq=0,
        timeouts=3,
        in_memory_retries=1,
        hol_rerouted=0,
        redelivered=10,
        rate_limited_ms=250.0,
        peak_inflight=9,
        inflight_limit=64,
        latency_p50_ms=2.0,
        latency_p95_ms=8.0,
        latency_p99_ms=20.0,
    )
    second = row(
        "m-orders",
        3,
        attempts=5,
        value_bytes=500,
        committed=5,
        rate_limited_ms=750.0,
        peak_inflight=4,
        inflight_limit=64,
        latency_p50_ms=3.0,
        latency_p95_ms=None,
        latency_p99_ms=30.0,
    )
    tier = row("m-orders-r1", 0, attempts=2, committed=1, dlq=1, peak_inflight=2)
    metrics.dispatch(LABELS, False, [first, second, tier])

    source = tags("m-orders", 3)
    assert samples("dispatcher_grpc_call_total")[source] == 17
    assert samples("processor_dispatch_grpc_bytes_total")[source] == 2000
    messages = samples("uatu_dispatch_messages_total")
    by_code = {
        dict(k)["code"]: v for k, v in messages.items() if dict(k)["kafka_topic"] == "m-orders"
    }
    assert by_code == {"commit": 12, "skip": 1, "retry": 2, "dlq": 1, "resq": 0}
    assert samples("uatu_dispatch_timeouts_total")[source] == 3
    assert samples("uatu_dispatch_redelivered_total")[source] == 10
    assert samples("uatu_dispatch_rate_limited_seconds_total")[source] == 1.0
    # gauges: the partition's last row with a value
    assert samples("uatu_dispatch_inflight_peak")[source] == 4
    assert samples("processor_outbound_cache_limit")[source] == 64
    assert source not in samples("processor_outbound_cache_adaptive_limit")
    latency = samples("uatu_dispatch_rpc_latency_seconds")
    assert latency[tags("m-orders", 3, quantile="0.5")] == 0.003
    assert latency[tags("m-orders", 3, quantile="0.95")] == 0.008  # second row had none
    assert latency[tags("m-orders", 3, quantile="0.99")] == 0.03
    retry_tier = tags("m-orders-r1", 0)
    assert samples("dispatcher_grpc_call_total")[retry_tier] == 2
    assert messages[tags("m-orders-r1", 0, code="dlq")] == 1


def test_an_adaptive_limit_goes_to_uforwarders_adaptive_gauge() -> None:
    metrics.dispatch(LABELS, True, [row("a-orders", 1, attempts=1, inflight_limit=37)])
    assert samples("processor_outbound_cache_adaptive_limit")[tags("a-orders", 1)] == 37
    assert tags("a-orders", 1) not in samples("processor_outbound_cache_limit")
