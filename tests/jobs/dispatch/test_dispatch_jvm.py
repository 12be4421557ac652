"""The JVM dispatcher's pieces (build/uatu-jvm.jar, through py4j) against their Python
specification: the routing rules over every input, the DLQMetadata bytes against Python's
generated protobuf class, the limiters' behaviour, and the stats transform."""

from __future__ import annotations

import itertools
import json
import random
from concurrent import futures
from datetime import UTC, datetime

import grpc
import pytest
from google.protobuf import json_format
from uber.data.kafka.consumer.dlq_metadata_pb2 import DLQMetadata
from uber.data.kafka.datatransfer.job_group_pb2 import JobGroup

from core.config import ClusterConfig, Settings
from jobs import registry
from jobs.dispatch import dispatcher
from jobs.dispatch.routing import (
    Code,
    Kind,
    after_timeout,
    destination,
    hol_rule,
    response_code,
    timeout_ms,
)
from jobs.dispatch.spec import DispatchSpec
from jobs.dispatch.tables import STATS_SCHEMA
from jobs.dispatch.transforms import dispatch_stats_rows
from jobs.runtime.saved_rows import decode_rows, encode_values

SETTINGS = Settings(None, "/w", "/c", {"local": ClusterConfig("local", "127.0.0.1:9")})  # type: ignore[arg-type]


def spec(
    retry: bool = True,
    dlq: str = "dlq",
    resq: bool = True,
    max_timeouts: int = 2,
    job_group_id: str = "g",
    service: str = "127.0.0.1:1",
) -> DispatchSpec:
    data = {
        "jobGroupId": job_group_id,
        "type": "JOB_TYPE_KAFKA_CONSUMER_TO_RPC_DISPATCHER",
        "kafkaConsumerTaskGroup": {"cluster": "local", "topic": "src", "consumerGroup": "svc"},
        "rpcDispatcherTaskGroup": {
            "uri": f"dns:///{service}",
            "rpcTimeoutMs": 250,
            "rpcTimeoutLimitMs": 3000,
            "dlqTopic": dlq,
            "maxRpcTimeouts": max_timeouts,
        },
        "retryConfig": {
            "retryEnabled": retry,
            "retryQueues": [
                {"retryQueueTopic": "t2", "processingDelayMs": 9000, "maxRetryCount": 1},
                {"retryQueueTopic": "t1", "processingDelayMs": 1000, "maxRetryCount": 2},
            ],
        },
        "resqConfig": {"resqEnabled": resq, "resqTopic": "resq"},
    }
    _, result = registry.validate(json_format.ParseDict(data, JobGroup()), SETTINGS)
    assert isinstance(result, DispatchSpec)
    return result


SPECS = [spec(), spec(retry=False), spec(dlq=""), spec(resq=False, max_timeouts=0)]


@pytest.fixture(scope="module")
def jvm(spark):
    return spark.sparkContext._jvm.dev.uatu.dispatch


@pytest.mark.parametrize("index", range(len(SPECS)))
def test_java_routing_equals_the_python_rules(jvm, index: int) -> None:
    s = SPECS[index]
    config = dispatcher.config_json(s)
    java = jvm.Dispatch
    statuses = [c.name for c in grpc.StatusCode]
    trailers = [None, "", "Retry", "Stash", "Skip", "Bogus"]
    for status, trailer, overdue in itertools.product(statuses, trailers, (False, True)):
        expected = response_code(status, trailer, overdue).value
        assert java.responseCode(config, status, trailer, overdue) == expected, (status, trailer)
    for kind, count, token in itertools.product(Kind, range(4), (False, True)):
        expected = after_timeout(s.routes, kind, count, lambda t=token: t).value
        assert java.afterTimeout(config, kind.value, count, token) == expected, (kind, count)
    for code, retries in itertools.product(Code, range(8)):
        assert java.destination(config, code.value, retries) == destination(s.routes, code, retries)
    for kind in Kind:
        rule = hol_rule(s.routes, kind)
        assert java.holRule(config, kind.value) == (
            "" if rule is None else f"{rule[0].value}:{rule[1]}"
        )
    for count in range(8):
        assert java.timeoutMs(config, count) == timeout_ms(250, 3000, count)


def dlq_vectors() -> list[tuple]:
    rng = random.Random(7)
    vectors = [
        (0, "t", 0, 0, 0, None, 0),
        (5, "orders", 2, 300, 1_700_000_000_000, b"k1", 1),
        (1, "ordérs", -1, 2**62, -5, b"", 2**40),
    ]
    for _ in range(50):
        key = None if rng.random() < 0.2 else rng.randbytes(rng.randint(0, 40))
        vectors.append(
            (
                rng.randint(0, 2**40),
                "".join(rng.choice("abcxyz-._") for _ in range(rng.randint(1, 30))),
                rng.randint(-(2**31), 2**31 - 1),
                rng.randint(0, 2**62),
                rng.randint(0, 2**45),
                key,
                rng.randint(0, 99),
            )
        )
    return vectors


def python_bytes(v: tuple) -> bytes:
    retry, topic, partition, offset, ts, key, timeouts = v
    return DLQMetadata(
        retry_count=retry,
        topic=topic,
        partition=partition,
        offset=offset,
        timestamp_ns=ts,
        data=key or b"",
        timeout_count=timeouts,
    ).SerializeToString()


def test_java_dlq_metadata_bytes_equal_protobufs(jvm) -> None:
    for v in dlq_vectors():
        java_bytes = bytes(jvm.Dispatch.encodeDlqMetadata(*v))
        assert java_bytes == python_bytes(v), v
        decoded = list(jvm.Dispatch.decodeDlqMetadata(python_bytes(v)))
        retry, topic, partition, offset, ts, key, timeouts = v
        assert decoded[:5] == [retry, topic, partition, offset, ts]
        assert (bytes(decoded[5]) if decoded[5] is not None else None) == (key or None)
        assert decoded[6] == timeouts


@pytest.mark.parametrize(
    "raw", [b"", b"\x12\x09short", b"\x0a\x01x", b"\xff\xff", b"\x12\x02\xff\xfe"]
)
def test_java_refuses_what_is_not_a_dlq_metadata(jvm, raw: bytes) -> None:
    decoded = jvm.Dispatch.decodeDlqMetadata(raw)
    # Empty bytes decode to all zeros, which the dispatcher treats as not a DLQMetadata (no topic).
    assert decoded is None or decoded[1] == ""


def test_vegas_limit_grows_at_no_load_and_shrinks_when_calls_queue_or_drop(jvm) -> None:
    vegas = jvm.VegasLimit(500)
    limit = vegas.limit()
    ms = 1_000_000
    for _ in range(200):
        limit = vegas.onSample(1 * ms, limit, False)  # every permit busy, no-load latency
    assert limit > 100
    grown = limit
    for _ in range(200):
        limit = vegas.onSample(10 * ms, limit, False)  # ten times the no-load latency: queueing
    assert limit < grown
    for _ in range(500):
        limit = vegas.onSample(1 * ms, limit, False)
    assert limit == 500  # never above the hard maximum
    for _ in range(50):
        limit = vegas.onSample(1 * ms, limit, True)  # drops (timeouts) shrink it
    assert limit < 500
    idle = jvm.VegasLimit(500)
    assert idle.onSample(1 * ms, 1, False) == idle.limit()  # unused capacity is no evidence


def test_rate_limiter_holds_every_window(jvm) -> None:
    rate = 100.0
    limiter = jvm.RateLimiter(rate, 0.2, 0)
    now, sent = 0, []
    for _ in range(3000):  # a greedy caller: sends the moment it is allowed
        now += limiter.reserve(1.0, now)
        sent.append(now)
    sent_s = [t / 1e9 for t in sent]
    window = 10.0
    j = 0
    for i, start in enumerate(sent_s):  # every 10 s window that starts at a send
        while j < len(sent_s) and sent_s[j] < start + window:
            j += 1
        assert j - i <= rate * window * 1.02 + 1
    assert sent_s[-1] == pytest.approx(3000 / rate - rate * 0.2 / rate, abs=0.5)


def test_the_end_of_one_groups_run_closes_its_clients_only(spark) -> None:
    """A worker application runs many dispatch groups in one JVM: the end of one group's run
    closes its channels, producer and threads, never a neighbour's (closing every group's
    failed the neighbours' next calls with RejectedExecutionException in the worker pool
    bench)."""
    server = grpc.server(futures.ThreadPoolExecutor(1))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    groups = ("closing-a", "closing-b")
    try:
        for group in groups:
            config = dispatcher.config_json(spec(job_group_id=group, service=f"127.0.0.1:{port}"))
            assert dispatcher.check_clients(spark, config, "local")  # its clients built
        assert set(groups) <= set(dispatcher.open_groups(spark))
        dispatcher.close(spark, "closing-a")
        assert [g for g in dispatcher.open_groups(spark) if g in groups] == ["closing-b"]
    finally:
        for group in groups:
            dispatcher.close(spark, group)
        server.stop(0)
    assert not set(groups) & set(dispatcher.open_groups(spark))


def test_stats_rows_have_the_table_schema(spark) -> None:
    """A task's summary row (DispatchStats.SCHEMA) becomes one dispatch_stats row: labelled,
    tiered, windowed, a replay's records counted as redelivered; saved and read back, it has
    the table's schema and values."""
    names = [part.split()[0] for part in dispatcher_schema().split(", ")]
    values = ["src", 0, 60_000, 10, 1000, 5, 14, 12, 7, 1, 1, 1, 0, 2, 1, 0, 0, 0]
    values += [bytearray(b"kll"), 1.5, 2.0, 3.0, 4, 64, 12.5]
    summary = dict(zip(names, values, strict=True))
    batch_time = datetime(2026, 1, 1, tzinfo=UTC)
    rows = dispatch_stats_rows(
        [summary],
        labels={"job_group_id": "g", "cluster": "local", "source_topic": "src"},
        tiers={"src": "main", "t1": "retry-1"},
        batch_id=3,
        batch_time=batch_time,
        window_ms=60_000,
        redelivered=True,
    )
    restored = decode_rows(spark, json.loads(json.dumps(encode_values(STATS_SCHEMA, rows))))
    assert [(f.name, f.dataType) for f in restored.schema] == [
        (f.name, f.dataType) for f in STATS_SCHEMA
    ]
    (row,) = restored.collect()
    assert (row.tier, row.batch_id, row.redelivered, row.committed, row.latency_p99_ms) == (
        "main",
        3,
        10,
        7,
        3.0,
    )
    assert (row.window_start.astimezone(UTC), row.window_end.astimezone(UTC)) == (
        datetime(1970, 1, 1, 0, 1, tzinfo=UTC),
        datetime(1970, 1, 1, 0, 2, tzinfo=UTC),
    )
    assert bytes(row.latency_kll_sketch) == b"kll"
    assert (row.batch_time.astimezone(UTC), row.rate_limited_ms, row.inflight_limit) == (
        batch_time,
        12.5,
        64,
    )
    (fresh,) = dispatch_stats_rows(
        [summary], labels={}, tiers={}, batch_id=4, batch_time=batch_time, window_ms=1,
        redelivered=False,
    )  # fmt: skip
    assert (fresh["redelivered"], fresh["tier"]) == (0, None)


def dispatcher_schema() -> str:
    """The dispatch tasks' summary schema (DispatchStats.SCHEMA)."""
    return (
        "topic string, partition int, window_start_ms long, records long, value_bytes long, "
        "first_offset long, last_offset long, attempts long, committed long, skipped long, "
        "retried long, dlq long, resq long, in_memory_retries long, timeouts long, "
        "hol_rerouted long, produce_retries long, undecodable long, "
        "latency_kll_sketch binary, latency_p50_ms double, latency_p95_ms double, "
        "latency_p99_ms double, peak_inflight int, inflight_limit int, rate_limited_ms double"
    )
