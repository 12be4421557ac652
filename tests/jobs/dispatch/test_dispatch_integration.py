"""The dispatcher end to end: a real broker, Spark, and a real gRPC service scripted to fail
(testing/dispatch_service.py), with every expectation computed here, in plain Python, from the
records' plans and uForwarder's rules as the issue states them.

Most runs are in-process (`DispatchJob(spec).run(once=True)` on the test session, as the
replication tests do); the crash test runs `./spark-submit.sh` because its fault hook
(`UATU_FAULT`, core/faults.py) SIGKILLs the application's process group.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections import Counter, defaultdict
from concurrent import futures
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import grpc
import pytest
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource
from google.protobuf import json_format
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from pyspark.sql import functions as F
from uber.data.kafka.datatransfer import job_pb2
from uber.data.kafka.datatransfer import master_worker_service_pb2 as mw_pb2
from uber.data.kafka.datatransfer import master_worker_service_pb2_grpc as mw_grpc
from uber.data.kafka.datatransfer.job_group_pb2 import JobGroup

from clients import dlq_list
from clients.dlq_metadata import DlqMetadata, decode, encode
from core.config import load_settings
from core.errors import EXIT_OK
from core.paths import ROOT
from jobs import registry
from jobs.availability.job import status_rows
from jobs.availability.lag.offsets_topic import OFFSETS_TOPIC, OffsetCommit
from jobs.availability.lag.offsets_topic import decode as decode_commit
from jobs.availability.lag.tracker import LagSettings, LagTracker
from jobs.dispatch.job import DispatchJob
from jobs.runtime import metrics
from jobs.runtime.progress import JobIdentity
from jobs.runtime.reporting import ReporterConfig, Reporting
from testing.conf import write_conf_dir
from testing.dispatch_service import Call, ScriptedService, plan_of, value
from testing.jobrun import log_path, run_job, running_job
from testing.polling import wait_for
from testing.spark import streams_listeners
from testing.topic_data import (
    Record,
    commit_offsets,
    committed_offsets,
    high_watermarks,
    java_default_partition,
    partition_count,
    produce_records,
    read_partitions,
)

pytestmark = pytest.mark.integration

# Generous: a first call on a cold JVM of a loaded machine must not time out by accident.
RPC_TIMEOUT_MS = 4000
R1_DELAY_MS, R2_DELAY_MS = 1500, 3000
MAX_PER_TIER = 2


@dataclass(frozen=True)
class Topics:
    main: str
    r1: str
    r2: str
    dlq: str
    resq: str

    @classmethod
    def create(cls, kafka, prefix: str, partitions: int = 2) -> Topics:
        topics = cls(prefix, f"{prefix}-r1", f"{prefix}-r2", f"{prefix}-dlq", f"{prefix}-resq")
        kafka.create_topic(topics.main, partitions, 1)
        for t in (topics.r1, topics.r2):
            kafka.create_topic(t, 2, 1)
        kafka.create_topic(topics.dlq, 1, 1)
        kafka.create_topic(topics.resq, 1, 1)
        return topics


def group(group_id: str, topics: Topics, service: ScriptedService, **overrides) -> dict:
    data: dict = {
        "jobGroupId": group_id,
        "type": "JOB_TYPE_KAFKA_CONSUMER_TO_RPC_DISPATCHER",
        "kafkaConsumerTaskGroup": {
            "cluster": "local",
            "topic": topics.main,
            "consumerGroup": "svc",
        },
        "rpcDispatcherTaskGroup": {
            "uri": f"dns:///{service.address}",
            "rpcTimeoutMs": RPC_TIMEOUT_MS,
            "dlqTopic": topics.dlq,
        },
        "retryConfig": {
            "retryEnabled": True,
            "retryQueues": [
                {
                    "retryQueueTopic": topics.r2,
                    "processingDelayMs": R2_DELAY_MS,
                    "maxRetryCount": 2,
                },
                {
                    "retryQueueTopic": topics.r1,
                    "processingDelayMs": R1_DELAY_MS,
                    "maxRetryCount": 2,
                },
            ],
        },
        "extension": {"@type": "type.googleapis.com/uatu.v1.JobOptions"},
    }
    for key, val in overrides.items():
        section, _, field = key.partition("__")
        if field:
            data.setdefault(section, {})[field] = val
        else:
            data[section] = val
    return data


def run_in_process(data: dict, conf_dir: Path) -> int:
    _, spec = registry.validate(json_format.ParseDict(data, JobGroup()), load_settings(conf_dir))
    job = DispatchJob(spec)  # type: ignore[arg-type]
    job.check()
    return job.run(once=True)


@pytest.fixture(scope="module")
def work(tmp_path_factory, kafka, spark) -> Path:
    """The conf folder (and warehouse, checkpoints) of every run here. In-process runs need the
    test session (`spark`, with the project's jars) to exist before they ask for one."""
    path = tmp_path_factory.mktemp("dispatch")
    write_conf_dir(path / "conf", kafka.bootstrap_servers, path / "wh", path / "ck")
    return path


@pytest.fixture(scope="module")
def service():
    with ScriptedService() as svc:
        yield svc


# --- the model: what uForwarder's rules say each plan does -----------------------------------


@dataclass(frozen=True)
class Expected:
    topics: list[str]  # the physical topic of each call ("main", "r1", "r2", "dlq")
    outcome: str  # committed | skipped | dlq
    retry_counts: list[int]  # kafka-retrycount of each call
    final_retry_count: int  # in the DLQ record's metadata, when it ends in the DLQ


def expected_path(plan: list[str]) -> Expected:
    """Tiers: r1 (max 2), r2 (max 2), then the DLQ; max_rpc_timeouts 0; deadline
    RPC_TIMEOUT_MS doubling per timeout."""
    topics, counts = [], []
    topic, retries, timeouts, n = "main", 0, 0, 0
    while True:
        answer = plan[min(n, len(plan) - 1)]
        topics.append(topic)
        counts.append(retries)
        n += 1
        deadline = RPC_TIMEOUT_MS * 2**timeouts
        if answer == "ok" or (answer.startswith("slow") and int(answer[4:]) < deadline):
            return Expected(topics, "committed", counts, retries)
        if answer in ("exists", "t-skip"):
            return Expected(topics, "skipped", counts, retries)
        if answer in ("fail", "t-stash"):
            return Expected(topics, "dlq", counts, retries + 1)
        if answer == "error":
            continue  # retried in memory, from the same topic
        if answer.startswith("slow"):
            timeouts += 1  # a timeout goes to the retry tiers
        retries += 1
        if retries > 2 * MAX_PER_TIER:
            return Expected(topics, "dlq", counts, retries)
        topic = "r1" if retries <= MAX_PER_TIER else "r2"


PLANS = [
    "ok",
    "exists",
    "fail",
    "t-stash",
    "t-skip",
    "t-retry,ok",
    "retry",
    "retry,retry,retry,ok",
    "error,error,ok",
    "slow6000,ok",
]


def test_the_model_follows_the_issue() -> None:
    always_retry = expected_path(["retry"])
    assert always_retry.topics == ["main", "r1", "r1", "r2", "r2"]  # then the DLQ
    assert (always_retry.outcome, always_retry.final_retry_count) == ("dlq", 5)
    assert expected_path(["slow6000", "ok"]).topics == ["main", "r1"]


@dataclass
class MainRun:
    topics: Topics
    records: list[Record]
    offsets: dict[str, tuple[int, int]]  # record id -> (partition, offset) in the main topic
    status: int
    calls: list[Call]
    stats_path: Path
    started_s: float
    listeners_left: set[int]  # streaming listeners the run added to the session and left


@pytest.fixture(scope="module")
def main_run(kafka, work: Path, service: ScriptedService, spark) -> MainRun:
    topics = Topics.create(kafka, "dsp")
    now = int(time.time() * 1000)
    records = [
        Record(
            i % 2,
            f"key-{i}".encode(),
            value(f"r{i}", PLANS[i % len(PLANS)]),
            now,
            (("trace", f"t{i}".encode()),),
        )
        for i in range(len(PLANS) * 3)
    ]
    produce_records(kafka.bootstrap_servers, topics.main, records)
    offsets = {}
    for partition, got in read_partitions(kafka.bootstrap_servers, topics.main, 2).items():
        for r in got:
            offsets[r.value.split(b"|")[0].decode()] = (partition, r.offset)  # type: ignore[union-attr]
    started = time.time()
    # This run also serves the driver's Prometheus metrics (test_prometheus_series_...).
    saved = {k: os.environ.get(k) for k in (metrics.ENV_PORT, "UATU_METRICS_HOST")}
    os.environ.update({metrics.ENV_PORT: "0", "UATU_METRICS_HOST": "127.0.0.1"})
    listeners = streams_listeners(spark)
    try:
        status = run_in_process(group("dsp", topics, service), work / "conf")
        left = streams_listeners(spark) - listeners
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    calls = [c for c in service.snapshot() if c.message.topic == topics.main]
    stats = work / "wh" / "dispatch_stats"
    return MainRun(topics, records, offsets, status, calls, stats, started, left)


def calls_by_record(run: MainRun) -> dict[str, list[Call]]:
    by_id: dict[str, list[Call]] = defaultdict(list)
    for c in run.calls:
        by_id[c.record_id].append(c)
    return by_id


def physical_label(run: MainRun, call: Call) -> str:
    if call.message.physical is None:
        return "main"
    topic = call.message.physical[0]
    return {run.topics.r1: "r1", run.topics.r2: "r2", run.topics.dlq: "dlq"}.get(topic, topic)


def test_a_run_takes_its_listeners_off_the_session(main_run: MainRun) -> None:
    """The metrics listeners of the source and of every tier query (the run served metrics)
    leave with the run: one left behind would take every later query's events over py4j."""
    assert main_run.listeners_left == set()


def test_every_record_takes_the_path_its_answers_imply(main_run: MainRun) -> None:
    assert main_run.status == EXIT_OK
    by_id = calls_by_record(main_run)
    assert set(by_id) == {f"r{i}" for i in range(len(main_run.records))}
    for rid, calls in by_id.items():
        expected = expected_path(plan_of(calls[0].message.value))
        assert [physical_label(main_run, c) for c in calls] == expected.topics, (
            rid,
            [
                (
                    c.message.topic,
                    c.message.partition,
                    c.message.offset,
                    c.message.tracing_info,
                    c.message.value,
                    c.answer,
                )
                for c in calls
            ],
            main_run.offsets[rid],
        )
        assert [c.message.retry_count for c in calls] == expected.retry_counts, rid


def test_every_record_ends_committed_skipped_or_in_the_dlq_once(kafka, main_run: MainRun) -> None:
    by_id = calls_by_record(main_run)
    expected = {rid: expected_path(plan_of(calls[0].message.value)) for rid, calls in by_id.items()}
    dlq = read_partitions(kafka.bootstrap_servers, main_run.topics.dlq, 1)[0]
    in_dlq = Counter()
    for record in dlq:
        meta = decode(record.key)
        rid = record.value.split(b"|")[0].decode()  # type: ignore[union-attr]
        in_dlq[rid] += 1
        # Metadata: the original coordinates and key, the retry count the path implies.
        assert (meta.topic, (meta.partition, meta.offset)) == (
            main_run.topics.main,
            main_run.offsets[rid],
        )
        assert meta.key == f"key-{rid[1:]}".encode()
        assert meta.retry_count == expected[rid].final_retry_count
        assert dict(record.headers) == {"trace": f"t{rid[1:]}".encode()}  # headers unchanged
    assert in_dlq == Counter({rid for rid, e in expected.items() if e.outcome == "dlq"})
    # Committed and skipped records end with an OK or a skip answer and nothing after it.
    for rid, calls in by_id.items():
        last = calls[-1].answer
        if expected[rid].outcome == "committed":
            assert last == "ok" or last.startswith("slow"), rid
        elif expected[rid].outcome == "skipped":
            assert last in ("exists", "t-skip"), rid


def test_the_group_commits_every_topic_it_read_up_to_its_end(kafka, main_run: MainRun) -> None:
    """uForwarder's consumer group `svc`, on the source and on each retry tier: a lag monitor
    (Burrow, kafka-consumer-groups) sees the run as a consumer that read everything."""
    assert main_run.status == EXIT_OK
    topics = main_run.topics
    for topic in (topics.main, topics.r1, topics.r2):
        ends = high_watermarks(kafka.bootstrap_servers, topic, 2)
        read = {p: end for p, end in ends.items() if end > 0}  # a partition never written: none
        assert read, topic
        assert committed_offsets(kafka.bootstrap_servers, "svc", topic, 2) == {
            p: read.get(p, -1001) for p in range(2)
        }, topic


def test_the_dlq_lister_shows_each_dlq_records_origin_and_counts(
    kafka, main_run: MainRun, capsys
) -> None:
    by_id = calls_by_record(main_run)
    expected = {rid: expected_path(plan_of(calls[0].message.value)) for rid, calls in by_id.items()}
    dlq = read_partitions(kafka.bootstrap_servers, main_run.topics.dlq, 1)[0]
    args = [main_run.topics.dlq, "--bootstrap-servers", kafka.bootstrap_servers, "--json"]
    assert dlq_list.main(args) == 0
    listed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(d["partition"], d["offset"]) for d in listed] == [(0, r.offset) for r in dlq]
    for d, record in zip(listed, dlq, strict=True):
        rid = record.value.split(b"|")[0].decode()  # type: ignore[union-attr]
        partition, offset = main_run.offsets[rid]
        assert d["origin"] == f"{main_run.topics.main}/{partition}/{offset}"
        assert d["retry_count"] == expected[rid].final_retry_count
        assert d["key"] == f"key-{rid[1:]}"
        assert d["value_bytes"] == len(record.value or b"")


def test_no_record_is_dispatched_from_a_tier_before_its_due_time(kafka, main_run: MainRun) -> None:
    delays = {main_run.topics.r1: R1_DELAY_MS, main_run.topics.r2: R2_DELAY_MS}
    written = {}
    for topic in delays:
        for partition, got in read_partitions(kafka.bootstrap_servers, topic, 2).items():
            for r in got:
                written[(topic, partition, r.offset)] = r.timestamp_ms
    tier_calls = [c for c in main_run.calls if c.message.physical is not None]
    assert len(tier_calls) == len(written)  # every tier record was dispatched once
    for c in tier_calls:
        topic, partition, offset = c.message.physical  # type: ignore[misc]
        due_ms = written[(topic, partition, offset)] + delays[topic]
        assert c.received_s * 1000 >= due_ms - 1, (c.record_id, c.received_s * 1000 - due_ms)


def test_calls_carry_uforwarders_metadata(main_run: MainRun) -> None:
    for c in main_run.calls:
        m = c.message
        rid = c.record_id
        assert m.method == "/kafka.consumerproxy.svc/dsp"
        assert (m.topic, (m.partition, m.offset)) == ("dsp", main_run.offsets[rid])  # logical
        assert m.key == f"key-{rid[1:]}".encode()
        assert m.consumer_group == "svc"
        assert m.headers.get("trace") == f"t{rid[1:]}"
    in_memory = [c for c in main_run.calls if plan_of(c.message.value)[0] == "error"]
    by_id = defaultdict(list)
    for c in in_memory:
        by_id[c.record_id].append(c.message.attempt_count)
    assert by_id and all(a == [0, 1, 2] for a in by_id.values())  # kafka-attemptcount


def test_dispatch_stats_count_what_the_service_saw(spark, main_run: MainRun) -> None:
    stats = (
        spark.read.format("delta")
        .load(str(main_run.stats_path))
        .where(F.col("job_group_id") == "dsp")
    )
    totals = stats.agg(*(F.sum(c).alias(c) for c in (
        "records", "attempts", "committed", "skipped", "retried", "dlq", "resq",
        "in_memory_retries", "timeouts", "redelivered", "hol_rerouted",
    ))).first().asDict()  # fmt: skip
    by_id = calls_by_record(main_run)
    paths = [expected_path(plan_of(calls[0].message.value)) for calls in by_id.values()]
    outcomes = Counter(p.outcome for p in paths)
    tier_deliveries = sum(sum(t != "main" for t in p.topics) for p in paths)
    assert totals["attempts"] == len(main_run.calls)
    assert totals["committed"] == outcomes["committed"]
    assert totals["skipped"] == outcomes["skipped"]
    assert totals["dlq"] == outcomes["dlq"]
    assert totals["retried"] == tier_deliveries  # each tier delivery was a write to a tier
    assert totals["records"] == len(main_run.records) + tier_deliveries
    assert totals["timeouts"] == sum(1 for c in main_run.calls if c.answer.startswith("slow"))
    assert totals["in_memory_retries"] == sum(1 for c in main_run.calls if c.answer == "error")
    assert (totals["resq"], totals["redelivered"], totals["hol_rerouted"]) == (0, 0, 0)
    tiers = {r["tier"] for r in stats.select("tier").distinct().collect()}
    assert tiers == {"main", "retry-1", "retry-2"}
    latency = stats.where("latency_p50_ms IS NOT NULL").select("latency_p50_ms", "inflight_limit")
    assert latency.count() > 0
    assert all(0 < r.inflight_limit <= 1000 for r in latency.collect())  # adaptive, bounded


def test_prometheus_series_count_what_the_service_saw(main_run: MainRun) -> None:
    """The driver's /metrics registry after the run: uForwarder's call counter and the
    outcome counter by DispatcherResponse code, for this run's topics only."""
    text = generate_latest(metrics.REGISTRY).decode()
    topics = {main_run.topics.main, main_run.topics.r1, main_run.topics.r2}

    def total(name: str, **where: str) -> float:
        return sum(
            s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
            if s.name == name
            and s.labels.get("kafka_topic") in topics
            and all(s.labels.get(k) == v for k, v in where.items())
        )

    by_id = calls_by_record(main_run)
    paths = [expected_path(plan_of(calls[0].message.value)) for calls in by_id.values()]
    outcomes = Counter(p.outcome for p in paths)
    tier_deliveries = sum(sum(t != "main" for t in p.topics) for p in paths)
    assert total("dispatcher_grpc_call_total", kafka_group="svc") == len(main_run.calls)
    assert total("uatu_dispatch_messages_total", code="commit") == outcomes["committed"]
    assert total("uatu_dispatch_messages_total", code="skip") == outcomes["skipped"]
    assert total("uatu_dispatch_messages_total", code="dlq") == outcomes["dlq"]
    assert total("uatu_dispatch_messages_total", code="retry") == tier_deliveries
    slow = sum(1 for c in main_run.calls if c.answer.startswith("slow"))
    assert total("uatu_dispatch_timeouts_total") == slow
    tier_query = [
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "uatu_query_batches_total"
        and s.labels.get("query") == f"dispatch-dsp-{main_run.topics.r1}"
    ]
    assert tier_query and tier_query[0] > 0  # the tiers' queries are listened to as well


def test_dlq_redrive_is_bounded_and_gives_the_sixth_invocation(
    kafka, work: Path, service: ScriptedService, main_run: MainRun
) -> None:
    dlq = read_partitions(kafka.bootstrap_servers, main_run.topics.dlq, 1)[0]
    end = dlq[-1].offset + 1
    data = group(
        "dsp-redrive",
        main_run.topics,
        service,
        kafkaConsumerTaskGroup={
            "cluster": "local",
            "topic": main_run.topics.dlq,
            "consumerGroup": "svc",
            "partitionOffsetRanges": {
                "partitionOffsetRange": [
                    {"partition": 0, "startOffset": "0", "endOffset": str(end)}
                ]
            },
        },
        rpcDispatcherTaskGroup__procedure="kafka.consumerproxy.svc/dsp",
    )
    before = len(service.snapshot())
    assert run_in_process(data, work / "conf") == EXIT_OK
    redriven = [c for c in service.snapshot()[before:]]
    assert len(redriven) == len(dlq)  # each DLQ record of the range called once, nothing else
    always_retry = {c.record_id for c in redriven if plan_of(c.message.value) == ["retry"]}
    by_id = calls_by_record(main_run)
    for rid in always_retry:  # uForwarder's integration case: 5 calls, then 1 from the DLQ
        assert len(by_id[rid]) + 1 == 6
    assert always_retry
    after = read_partitions(kafka.bootstrap_servers, main_run.topics.dlq, 1)[0]
    # Redriven records that fail again go back to the DLQ (after the bounded range).
    appended = [decode(r.key) for r in after[len(dlq) :]]
    assert sorted(m.retry_count for m in appended if m.retry_count == 6) == [6] * len(always_retry)


def test_head_of_line_record_is_rerouted_to_the_resq(kafka, work: Path, service) -> None:
    topics = Topics.create(kafka, "hol", partitions=1)
    now = int(time.time() * 1000)
    records = [Record(0, b"stuck", value("h0", "stuck"), now)] + [
        Record(0, f"k{i}".encode(), value(f"h{i}", "ok"), now) for i in range(1, 200)
    ]
    produce_records(kafka.bootstrap_servers, topics.main, records)
    data = group(
        "hol",
        topics,
        service,
        resqConfig={"resqEnabled": True, "resqTopic": topics.resq},
        extension={
            "@type": "type.googleapis.com/uatu.v1.JobOptions",
            "dispatch": {"headOfLineGraceMs": 1000},
        },
    )
    before = len(service.snapshot())
    assert run_in_process(data, work / "conf") == EXIT_OK
    calls = [c for c in service.snapshot()[before:] if c.record_id == "h0"]
    from_main = [c for c in calls if c.message.physical is None]
    from_resq = [c for c in calls if c.message.physical is not None]
    assert len(from_main) >= 2  # retried in memory while it blocked the batch
    assert [c.message.physical[0] for c in from_resq] == [topics.resq]  # type: ignore[index]
    assert from_resq[0].answer == "stuck"  # ... which answers OK from the resq
    resq = read_partitions(kafka.bootstrap_servers, topics.resq, 1)[0]
    assert [decode(r.key).offset for r in resq] == [0]
    others = Counter(c.record_id for c in service.snapshot()[before:] if c.record_id != "h0")
    assert set(others.values()) == {1} and len(others) == 199  # the rest: once each


@pytest.mark.parametrize(
    ("cap", "flow"),
    [
        ("messages", {"messagesPerSec": 40, "maxInflightMessages": 8}),
        ("bytes", {"bytesPerSec": 4000}),
    ],
)
def test_flow_control_holds_every_10_second_window(spark, kafka, work, service, cap, flow) -> None:
    topics = Topics.create(kafka, f"flow-{cap}")
    now = int(time.time() * 1000)
    pad = "x" * (100 - len("f0000|ok"))  # values of 100 bytes; the plan stays last
    records = [Record(i % 2, None, value(f"f{i:04d}{pad}", "ok"), now) for i in range(720)]
    assert {len(r.value or b"") for r in records} == {100}
    produce_records(kafka.bootstrap_servers, topics.main, records)
    before = len(service.snapshot())
    assert (
        run_in_process(group(f"flow-{cap}", topics, service, flowControl=flow), work / "conf") == 0
    )
    received = sorted(c.received_s for c in service.snapshot()[before:])
    assert len(received) == 720
    limit = 40 * 10 * 1.10  # 40 records/s either way (4000 bytes/s of 100-byte values), +10%
    j = 0
    for i, start in enumerate(received):  # every 10 s window that starts at a call
        while j < len(received) and received[j] < start + 10:
            j += 1
        assert j - i <= limit, f"{j - i} calls in the 10 s from {start - received[0]:.1f} s"
    assert received[-1] - received[0] > 14  # the cap bound: 720 calls at 40/s take 18 s
    stats = spark.read.format("delta").load(str(work / "wh" / "dispatch_stats"))
    mine = stats.where(F.col("job_group_id") == f"flow-{cap}")
    peak, waited = mine.agg(F.max("peak_inflight"), F.sum("rate_limited_ms")).first()
    assert waited > 0  # the limiter, not the service, set the pace
    if "maxInflightMessages" in flow:
        assert 0 < peak <= flow["maxInflightMessages"]


def test_the_inflight_cap_holds_at_the_receiving_service(spark, kafka, work, service) -> None:
    """flow_control.max_inflight_messages 4, counted where it matters: the service itself
    never answers more than 4 calls at once. Each call takes 100 ms, so the dispatcher would
    keep far more in flight without the cap (its adaptive limit starts in the hundreds)."""
    topics = Topics.create(kafka, "inflight")
    now = int(time.time() * 1000)
    records = [Record(i % 2, None, value(f"n{i:03d}", "slow100"), now) for i in range(120)]
    produce_records(kafka.bootstrap_servers, topics.main, records)
    before = len(service.snapshot())
    capped = group("inflight", topics, service, flowControl={"maxInflightMessages": 4})
    assert run_in_process(capped, work / "conf") == EXIT_OK
    assert len({c.record_id for c in service.snapshot()[before:]}) == 120
    assert 2 <= service.peak_in_flight(before) <= 4


def tier_partition(topic: str, partition: int, stamp: int) -> int:
    """The r1 partition of the first retry of `topic`'s offset 0 of `partition`: the Java
    producer hashes the DLQMetadata key, as uForwarder does."""
    meta = DlqMetadata(1, topic, partition, 0, stamp, None, 0)
    return java_default_partition(encode(meta), 2)


def timestamp_splitting_tier_partitions(topic: str, now: int) -> int:
    """A record timestamp near `now` at which offset 0 of partitions 0 and 1 go to different
    r1 partitions, so a test of per-partition waiting never sees both in one partition."""
    return next(
        t
        for t in range(now, now - 1000, -1)
        if tier_partition(topic, 0, t) != tier_partition(topic, 1, t)
    )


SLOW_CALL_MS = 6000


def test_one_partitions_retry_delay_does_not_hold_back_another_partition(
    spark, kafka, work, service
) -> None:
    """Both records go to the 1.5 s tier: b0 (partition 1) at once, a0 (partition 0) only
    after a 6 s call. b0 is due first and is dispatched from the tier before a0 is due:
    the tier waits per partition, not for the slowest one. (A tier that waited for the slowest
    partition would dispatch b0 after a0 is due. Between b0's due time and a0's lie the slow
    call's 6 s, for b0 to be dispatched in through 1 s tier triggers on a loaded machine; a
    shorter call left too little.)"""
    topics = Topics.create(kafka, "holdback")
    stamp = timestamp_splitting_tier_partitions(topics.main, int(time.time() * 1000))
    records = [
        Record(0, None, value("a0", f"slowretry{SLOW_CALL_MS},ok"), stamp),
        Record(1, None, value("b0", "retry,ok"), stamp),
    ]
    produce_records(kafka.bootstrap_servers, topics.main, records)
    before = len(service.snapshot())
    data = group(
        "holdback",
        topics,
        service,
        extension={
            "@type": "type.googleapis.com/uatu.v1.JobOptions",
            "dispatch": {"tierTriggerSeconds": 1},
        },
        rpcDispatcherTaskGroup__rpcTimeoutMs=SLOW_CALL_MS + RPC_TIMEOUT_MS,  # a0's call answers
    )
    assert run_in_process(data, work / "conf") == EXIT_OK
    calls = {}
    for c in service.snapshot()[before:]:
        calls.setdefault(c.record_id, []).append(c)
    (a_first, a_tier), (b_first, b_tier) = calls["a0"], calls["b0"]
    assert a_tier.message.physical is not None and b_tier.message.physical is not None
    assert a_tier.message.physical[:2] == (topics.r1, tier_partition(topics.main, 0, stamp))
    assert b_tier.message.physical[:2] == (topics.r1, tier_partition(topics.main, 1, stamp))
    a_due = a_first.received_s + (SLOW_CALL_MS + R1_DELAY_MS) / 1000
    assert b_first.received_s + R1_DELAY_MS / 1000 <= b_tier.received_s < a_due
    assert a_tier.received_s >= a_due - 0.5  # a0 waited its own delay


@pytest.mark.parametrize("missing", ["dlq", "retry"])
def test_a_missing_dlq_or_retry_topic_is_refused_before_spark(
    kafka, work: Path, service, missing: str
) -> None:
    topics = Topics.create(kafka, f"no{missing}")
    if missing == "dlq":
        rpc = {"uri": f"dns:///{service.address}", "rpcTimeoutMs": 100, "dlqTopic": "no-such-dlq"}
        data = group(f"no{missing}", topics, service, rpcDispatcherTaskGroup=rpc)
        expected = "rpc_dispatcher_task_group.dlq_topic='no-such-dlq'"
    else:
        data = group(f"no{missing}", topics, service)
        data["retryConfig"]["retryQueues"][1]["retryQueueTopic"] = "no-such-r1"
        expected = "retry_config.retry_queues[1].retry_queue_topic='no-such-r1'"
    path = work / f"no{missing}.json"
    path.write_text(json.dumps(data))
    done = subprocess.run(
        [str(ROOT / "spark-submit.sh"), str(path), "--check", "--conf-dir", str(work / "conf")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2
    assert expected in done.stderr.strip().splitlines()[-1]


@pytest.mark.parametrize(
    "step", ["after_tier_produce", "after_dispatch", "before_checkpoint", "stats_writing"]
)
def test_a_crash_loses_nothing_and_its_redeliveries_are_counted(
    kafka, work: Path, service, spark, step: str
) -> None:
    """The fault hook's dispatch points (core/faults.py), limited to the source topic's query:
    after_tier_produce: in a task, with part of the batch's tier writes done; after_dispatch:
    in a task that has resolved every record of its range, before the batch ends;
    before_checkpoint: on the driver, with the batch's dispatch_stats rows saved (not yet
    appended: jobs/dispatch/stats.py); stats_writing: in the stats writer's thread, once Spark
    has committed the batch and before its rows are appended, so nothing is redelivered and
    the rows reach the table only from the saved file.

    The crash is a `./spark-submit.sh` run in its own process group (`run_job`: the hook
    SIGKILLs the group); the restart runs in this test's session, on the same conf, checkpoint
    and tables, which is what a relaunch reads."""
    name = f"crash-{step.replace('_', '-')}"
    topics = Topics.create(kafka, name)
    now = int(time.time() * 1000)
    plans = ["ok", "retry,ok", "fail", "exists"]
    records = [
        Record(i % 2, f"c{i}".encode(), value(f"c{i}", plans[i % 4]), now) for i in range(80)
    ]
    produce_records(kafka.bootstrap_servers, topics.main, records)
    data = group(name, topics, service)
    before = len(service.snapshot())

    fault = f"dispatch.{step}/{topics.main}"
    status, log = run_job(
        data, work, work / "conf", "--once", env={"UATU_FAULT": fault}, timeout_s=900
    )
    assert status == -signal.SIGKILL, log[-3000:]  # the whole process group
    assert f"UATU_FAULT: crash at {fault} (hit 1)" in log
    first_calls = len(service.snapshot()) - before
    assert first_calls > 0
    # The group's commit waits for every record of the batch to be done: nothing is committed
    # by a crash inside the tasks; by one after them (before the checkpoint), the batch.
    committed = committed_offsets(kafka.bootstrap_servers, "svc", topics.main, 2)
    ends = {0: 40, 1: 40}
    done_before_crash = step in ("before_checkpoint", "stats_writing")
    assert committed == (ends if done_before_crash else {0: -1001, 1: -1001})

    assert run_in_process(data, work / "conf") == EXIT_OK
    assert committed_offsets(kafka.bootstrap_servers, "svc", topics.main, 2) == ends

    calls = [c for c in service.snapshot()[before:] if c.message.topic == topics.main]
    last = {}
    for c in calls:
        last[c.record_id] = c.answer
    # Nothing lost: every record's last answer ended it; each DLQ record is in the DLQ.
    assert set(last) == {f"c{i}" for i in range(80)}
    for i in range(80):
        assert (
            last[f"c{i}"]
            == {"ok": "ok", "retry,ok": "ok", "fail": "fail", "exists": "exists"}[plans[i % 4]]
        )
    dlq = {
        r.value.split(b"|")[0].decode()
        for r in read_partitions(kafka.bootstrap_servers, topics.dlq, 1)[0]
    }  # type: ignore[union-attr]
    assert dlq == {f"c{i}" for i in range(80) if plans[i % 4] == "fail"}
    # Redeliveries only from the batch the crash cut short (batch 0 of the source: all 80),
    # each counted in dispatch_stats; none when Spark had committed it.
    from_main = Counter(c.record_id for c in calls if c.message.physical is None)
    if step == "stats_writing":
        assert set(from_main.values()) == {1}
    else:
        assert max(from_main.values()) <= 2 and sum(from_main.values()) > 80
    stats = spark.read.format("delta").load(str(work / "wh" / "dispatch_stats"))
    main = (
        stats.where(f"job_group_id = '{name}' AND tier = 'main'")
        .agg(F.sum("records"), F.sum("redelivered"))
        .first()
    )
    # Rows of both attempts when the first one's rows were saved before the crash.
    first_attempt = 80 if done_before_crash else 0
    redelivered = 0 if step == "stats_writing" else 80
    assert (main[0], main[1]) == (first_attempt + redelivered, redelivered)


def test_a_dlq_write_the_broker_refuses_is_retried_until_acknowledged(
    kafka, work: Path, service, spark
) -> None:
    """The DLQ topic's max.message.bytes is 1, so the broker refuses every write to it
    (MESSAGE_TOO_LARGE, which the producer does not retry) until the test restores it. The
    dispatcher must send again itself: the job may neither finish nor checkpoint while a DLQ
    write is unacknowledged, and no record is lost or written twice.

    Three records go to the DLQ at once. Had the producer batched them, the refused batch
    would be split again and again until the producer's network thread died and the job hung
    (KAFKA-8202): the job keeps batches under half the smallest limit of its tier topics."""
    name = "acked"
    topics = Topics(name, f"{name}-r1", f"{name}-r2", f"{name}-dlq", f"{name}-resq")
    for t in (topics.main, topics.r1, topics.r2):
        kafka.create_topic(t, 2, 1)
    kafka.create_topic(topics.dlq, 1, 1, config={"max.message.bytes": "1"})
    now = int(time.time() * 1000)
    plans = ["fail"] * 3 + ["ok"] * 7
    records = [Record(i % 2, None, value(f"a{i}", plans[i]), now) for i in range(10)]
    produce_records(kafka.bootstrap_servers, topics.main, records)
    data = group(name, topics, service)
    log = log_path(work, data)
    with running_job(data, work, work / "conf", "--once") as job:
        refused = f"not yet written to {topics.dlq} (attempt 2)"
        wait_for(
            lambda: refused in log.read_text() or job.poll() is not None,
            180,
            "a second refused DLQ write",
        )
        assert job.poll() is None, log.read_text()[-3000:]
        assert read_partitions(kafka.bootstrap_servers, topics.dlq, 1)[0] == []
        resource = ConfigResource(
            ConfigResource.Type.TOPIC,
            topics.dlq,
            incremental_configs=[
                ConfigEntry(
                    "max.message.bytes", None, incremental_operation=AlterConfigOpType.DELETE
                )
            ],
        )
        admin = kafka.admin()  # held: a dropped AdminClient fails its futures
        admin.incremental_alter_configs([resource])[resource].result(30)
        assert job.wait(300) == EXIT_OK, log.read_text()[-3000:]

    dlq = [r.value.split(b"|")[0].decode() for r in read_partitions(
        kafka.bootstrap_servers, topics.dlq, 1)[0]]  # type: ignore[union-attr]  # fmt: skip
    assert sorted(dlq) == ["a0", "a1", "a2"]
    stats = spark.read.format("delta").load(str(work / "wh" / "dispatch_stats"))
    totals = (
        stats.where(f"job_group_id = '{name}' AND tier = 'main'")
        .agg(F.sum("committed"), F.sum("dlq"), F.sum("produce_retries"), F.sum("redelivered"))
        .first()
    )
    assert tuple(totals[:2]) == (7, 3)
    assert totals[2] >= 2 and totals[3] == 0


class _MasterWorker(mw_grpc.MasterWorkerServiceServicer):
    """A control plane's worker service that keeps every heartbeat."""

    def __init__(self) -> None:
        self.heartbeats: list[mw_pb2.HeartbeatRequest] = []

    def RegisterWorker(self, request, context):
        participants = mw_pb2.Participants()
        participants.CopyFrom(request.participants)
        participants.worker.id = 7
        return mw_pb2.RegisterWorkerResponse(participants=participants)

    def Heartbeat(self, request, context):
        self.heartbeats.append(request)
        return mw_pb2.HeartbeatResponse(participants=request.participants)


def test_heartbeats_report_each_source_partition(kafka, work: Path, service, spark) -> None:
    topics = Topics.create(kafka, "beat")
    now = int(time.time() * 1000)
    records = [Record(i % 2, None, value(f"b{i}", "ok"), now) for i in range(50)]
    produce_records(kafka.bootstrap_servers, topics.main, records)
    master = _MasterWorker()
    server = grpc.server(futures.ThreadPoolExecutor(4))
    mw_grpc.add_MasterWorkerServiceServicer_to_server(master, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        data = group("beat", topics, service)
        _, spec = registry.validate(
            json_format.ParseDict(data, JobGroup()), load_settings(work / "conf")
        )
        reporting = Reporting(
            ReporterConfig((f"127.0.0.1:{port}",), interval_seconds=0.3),
            JobIdentity(
                job_pb2.JOB_TYPE_KAFKA_CONSUMER_TO_RPC_DISPATCHER, "local", topics.main, "svc"
            ),
        )
        listeners = streams_listeners(spark)
        assert DispatchJob(spec).run(once=True, reporting=reporting) == EXIT_OK  # type: ignore[arg-type]
        assert streams_listeners(spark) == listeners  # the heartbeats' listener left with the run
    finally:
        server.stop(0)
    last = {}
    for beat in master.heartbeats:
        assert beat.participants.worker.id in (0, 7)
        for status in beat.job_status:
            task = status.job.kafka_consumer_task
            assert (task.topic, task.consumer_group) == (topics.main, "svc")
            last[task.partition] = status.kafka_consumer_task_status.commit_offset
    assert last == {0: 25, 1: 25}  # committed offsets of both partitions, as the broker has them


def test_a_new_checkpoint_starts_where_the_group_committed_and_its_lag_is_seen(
    kafka, work: Path, service
) -> None:
    """A team moving from uForwarder: another consumer of group `moved-cg` committed partition
    0 up to offset 5 and partition 1 up to 12. The dispatcher's new checkpoint starts there
    (nothing before it is called again), it commits what it dispatched, and the availability
    job's evaluator, fed from the broker's `__consumer_offsets`, shows its lag once more
    records arrive."""
    topics = Topics.create(kafka, "moved")
    now = int(time.time() * 1000)
    records = [Record(i % 2, None, value(f"m{i}", "ok"), now) for i in range(40)]
    produce_records(kafka.bootstrap_servers, topics.main, records)
    before = {0: 5, 1: 12}
    commit_offsets(kafka.bootstrap_servers, "moved-cg", topics.main, before)
    data = group("moved", topics, service, kafkaConsumerTaskGroup__consumerGroup="moved-cg")
    seen = len(service.snapshot())

    assert run_in_process(data, work / "conf") == EXIT_OK

    called = Counter(c.origin for c in service.snapshot()[seen:])
    assert called == Counter({(topics.main, p, o): 1 for p in (0, 1) for o in range(before[p], 20)})
    assert committed_offsets(kafka.bootstrap_servers, "moved-cg", topics.main, 2) == {0: 20, 1: 20}
    more = [Record(0, None, value(f"n{i}", "ok"), now) for i in range(7)]
    produce_records(kafka.bootstrap_servers, topics.main, more)
    lags = evaluated_lags(kafka.bootstrap_servers, "moved-cg", topics.main)
    assert lags == {0: 7, 1: 0}


def evaluated_lags(bootstrap: str, group_id: str, topic: str) -> dict[int, int]:
    """{partition: current lag} of `group_id` on `topic` in the availability job's status rows,
    from every commit in `__consumer_offsets` (decoded as the job decodes them) and the
    topic's head offsets now."""
    commits = [
        event
        for records in read_partitions(
            bootstrap, OFFSETS_TOPIC, partition_count(bootstrap, OFFSETS_TOPIC)
        ).values()
        for r in records
        if isinstance(event := decode_commit(r.key, r.value), OffsetCommit)
        and (event.group, event.topic) == (group_id, topic)
    ]
    tracker = LagTracker(LagSettings())
    for c in commits:
        tracker.record(c.group, c.topic, c.partition, c.offset, c.commit_ms, None)
    heads = high_watermarks(bootstrap, topic, 2)
    tracker.refresh_heads({(topic, p): end for p, end in heads.items()})
    now = datetime.now(UTC)
    rows = status_rows("local", now, tracker.evaluate(int(now.timestamp() * 1000)), {})
    (row,) = [r for r in rows if r["group"] == group_id]
    return {p["partition"]: p["current_lag"] for p in row["partitions"]}
