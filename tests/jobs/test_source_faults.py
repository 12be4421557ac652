"""A Kafka source that fails under a running job: its records deleted before the job read them
(delete-records, as retention does), or the topic itself deleted. Never silent: exit 1 with
one line naming the cause, the lost offsets in `source_data_loss`, and nothing of the failed
batch written. All answered by `jobs/runtime/source_failure.py`.

Each fault is one test over the Kafka-sourced job kinds (`KINDS`): the audit, the replication
micro-batch copy, the low-latency copy and the dispatcher's source. They run in this process
(`jobs/main.py`'s `main` on the test session); the entry point through `./spark-submit.sh` is
the audit's own test below; the audit's deleted records are `test_skip_lost_records.py`'s. A
gap in the dispatcher's retry tier is
`test_records_deleted_from_a_retry_tier_are_a_loss_too`. Kafka unreachable at start is
`test_validation.py`'s (exit 2, one line, nothing written, for every job type).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from chispa import assert_df_equality
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from core.errors import EXIT_FAILED, EXIT_OK
from testing.conf import write_conf_dir
from testing.demo_data import audit_dataset, produce
from testing.dispatch_service import ScriptedService, value
from testing.jobrun import committed_batch, last_keys_batch, run_job
from testing.polling import wait_for
from testing.topic_data import Record, count_records, produce_records, read_partitions
from tests.jobs.audit.test_audit_job_integration import jobgroup
from tests.jobs.in_process import run_in_process, running

pytestmark = pytest.mark.integration

PARTITIONS = 2
WAVE = 40  # records a wave, over both partitions
DELETED = 5  # records of partition 0 deleted unread


# --- helpers (also test_skip_lost_records.py's) ---------------------------------------------


def error_lines(log: str) -> list[str]:
    return [line for line in log.splitlines() if line.startswith("error:")]


def delete_before(bootstrap: str, topic: str, partition: int, offset: int) -> None:
    """Delete the records of `partition` before `offset`, as retention does."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_records([TopicPartition(topic, partition, offset)]).values():
        future.result(30)


def delete_topic(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_topics([topic]).values():
        future.result(30)


def loss_rows(spark, warehouse: Path) -> list[tuple]:
    """source_data_loss as (job_group_id, topic, partition, from_offset, until_offset), sorted."""
    table = spark.read.format("delta").load(str(warehouse / "source_data_loss"))
    columns = ("job_group_id", "topic", "partition", "from_offset", "until_offset")
    return sorted(tuple(r) for r in table.select(*columns).collect())


def end_offsets(bootstrap: str, topic: str, partitions: int) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "offsets"})
    try:
        return [
            consumer.get_watermark_offsets(TopicPartition(topic, p), 10)[1]
            for p in range(partitions)
        ]
    finally:
        consumer.close()


def wave(tag: str) -> list[Record]:
    """WAVE records every kind reads: the dispatcher's service answers each with OK."""
    now = int(time.time() * 1000)
    return [
        Record(i % PARTITIONS, f"{tag}{i}".encode(), value(f"{tag}{i}", "ok"), now)
        for i in range(WAVE)
    ]


# --- the job kinds --------------------------------------------------------------------------


def audit_group(job_id: str, topic: str, _service: str) -> dict:
    return jobgroup(job_id, topic, trigger_s=1)


def replication_group(job_id: str, topic: str, _service: str, low_latency: bool = False) -> dict:
    extension: dict = {
        "@type": "type.googleapis.com/uatu.v1.JobOptions",
        "trigger": {"intervalSeconds": 1},
    }
    if low_latency:
        extension["replication"] = {"lowLatency": True, "epochSeconds": 2}
    return {
        "jobGroupId": job_id,
        "type": "JOB_TYPE_KAFKA_REPLICATION",
        "kafkaConsumerTaskGroup": {
            "cluster": "local",
            "topic": topic,
            "consumerGroup": f"{job_id}-cg",
        },
        "kafkaDispatcherTaskGroup": {"cluster": "local", "topic": f"{topic}-copy"},
        "replicationTaskGroup": {"isContinuous": True},
        "extension": extension,
    }


def dispatch_group(job_id: str, topic: str, service: str) -> dict:
    return {
        "jobGroupId": job_id,
        "type": "JOB_TYPE_KAFKA_CONSUMER_TO_RPC_DISPATCHER",
        "kafkaConsumerTaskGroup": {"cluster": "local", "topic": topic, "consumerGroup": "svc"},
        "rpcDispatcherTaskGroup": {"uri": f"dns:///{service}", "rpcTimeoutMs": 4000},
    }


@dataclass(frozen=True)
class Kind:
    name: str
    # The job's first table: its idempotent-write versions are the batches the job wrote, and
    # source_data_loss sits beside it.
    table: str
    group: Callable[[str, str, str], dict]
    low_latency: bool = False  # streams only (no --once): read a wave, then stop it


KINDS = [
    Kind("audit", "audit_counts", audit_group),
    Kind("replication", "replication_stats", replication_group),
    Kind(
        "low-latency",
        "replication_stats",
        lambda job_id, topic, service: replication_group(job_id, topic, service, True),
        low_latency=True,
    ),
    Kind("dispatch", "dispatch_stats", dispatch_group),
]
BY_KIND = pytest.mark.parametrize("kind", KINDS, ids=[k.name for k in KINDS])


@pytest.fixture(scope="module")
def service() -> Iterator[ScriptedService]:
    with ScriptedService() as svc:
        yield svc


@dataclass(frozen=True)
class Setup:
    topic: str
    group: dict
    conf: Path
    table: Path


def set_up(kind: Kind, kafka, service: ScriptedService, tmp_path: Path, name: str) -> Setup:
    """A topic with a first wave, a conf folder, and the kind's JobGroup on them."""
    topic = f"{name}-{kind.name}-{time.monotonic_ns()}"
    kafka.create_topic(topic, PARTITIONS)
    kafka.create_topic(f"{topic}-copy", PARTITIONS)  # the replication kinds' destination
    produce_records(kafka.bootstrap_servers, topic, wave("a"))
    conf = write_conf_dir(
        tmp_path / "conf", kafka.bootstrap_servers, tmp_path / "wh", tmp_path / "ck"
    )
    group = kind.group(f"{name}-{kind.name}", topic, service.address)
    return Setup(topic, group, conf, tmp_path / "wh" / kind.table)


def read_to_the_end(
    kind: Kind, setup: Setup, kafka, tmp_path: Path, stop_file: Path, copied: int, *args: str
) -> None:
    """Run the job (with `args`) until it has read everything in the topic: exit 0. A
    low-latency copy runs until the destination holds `copied` records, then is stopped."""
    if not kind.low_latency:
        assert run_in_process(setup.group, tmp_path, setup.conf, "--once", *args) == EXIT_OK
        return
    destination = f"{setup.topic}-copy"
    with running(setup.group, tmp_path, setup.conf, stop_file, *args) as status:
        wait_for(
            lambda: (
                count_records(kafka.bootstrap_servers, destination, PARTITIONS) == copied
                or status() is not None
            ),
            120,
            "the copy of the topic",
        )
    assert status() == EXIT_OK


def run_until_it_fails(kind: Kind, setup: Setup, tmp_path: Path, stop_file: Path) -> int | None:
    """A run that must end by itself: --once, or a low-latency run within two minutes."""
    if not kind.low_latency:
        return run_in_process(setup.group, tmp_path, setup.conf, "--once")
    with running(setup.group, tmp_path, setup.conf, stop_file) as status:
        wait_for(lambda: status() is not None, 120, "the run to end by itself")
    return status()


def assert_read_exactly(
    kind: Kind, kafka, service: ScriptedService, setup: Setup, kept: list[Record]
) -> None:
    """What the job made of the topic is what `kept` makes, computed here: the copy holds them
    in order, the service was called for each."""
    if kind.name == "dispatch":
        called = {c.record_id for c in service.snapshot() if c.message.topic == setup.topic}
        assert called == {r.key.decode() for r in kept if r.key}
    else:
        copied = read_partitions(kafka.bootstrap_servers, f"{setup.topic}-copy", PARTITIONS)
        for p in range(PARTITIONS):
            assert [r.key for r in copied[p]] == [r.key for r in kept if r.partition == p]


# The audit's case is test_skip_lost_records.py's first test, which also holds its counts per
# window against the truth and against the old recovery.
COPYING_KINDS = [k for k in KINDS if k.name != "audit"]


@pytest.mark.parametrize("kind", COPYING_KINDS, ids=[k.name for k in COPYING_KINDS])
def test_records_deleted_before_they_were_read_stop_the_job_until_they_are_skipped(
    kind, spark, kafka, service, tmp_path, stop_file, capsys
) -> None:
    """The run after the deletion exits 1 and records the range; the operator's
    `--skip-lost-records` run goes on past exactly that range, on the same checkpoint."""
    setup = set_up(kind, kafka, service, tmp_path, "loss")
    first, second = wave("a"), wave("b")
    read_to_the_end(kind, setup, kafka, tmp_path, stop_file, len(first))
    read_up_to = end_offsets(kafka.bootstrap_servers, setup.topic, PARTITIONS)[0]
    written = committed_batch(setup.table)
    assert written is not None
    produce_records(kafka.bootstrap_servers, setup.topic, second)
    delete_before(kafka.bootstrap_servers, setup.topic, 0, read_up_to + DELETED)
    lost = [r for r in second if r.partition == 0][:DELETED]
    kept = first + [r for r in second if r not in lost]  # keys are unique: no equal records
    capsys.readouterr()

    status = run_until_it_fails(kind, setup, tmp_path, stop_file)

    assert status == EXIT_FAILED
    (line,) = error_lines(capsys.readouterr().err)
    assert f"offsets: 0 [{read_up_to}, {read_up_to + DELETED}))" in line
    assert "source_data_loss" in line
    job_id = setup.group["jobGroupId"]
    recorded = [(job_id, setup.topic, 0, read_up_to, read_up_to + DELETED)]
    assert loss_rows(spark, tmp_path / "wh") == recorded
    assert committed_batch(setup.table) == written  # nothing of the failed batch

    read_to_the_end(kind, setup, kafka, tmp_path, stop_file, len(kept), "--skip-lost-records")

    assert error_lines(capsys.readouterr().err) == []
    assert loss_rows(spark, tmp_path / "wh") == recorded  # once
    assert_read_exactly(kind, kafka, service, setup, kept)


@BY_KIND
def test_source_topic_deleted_mid_run_exits_1_with_one_line(
    kind, spark, kafka, service, tmp_path, stop_file, capsys
) -> None:
    setup = set_up(kind, kafka, service, tmp_path, "deleted")
    capsys.readouterr()
    with running(setup.group, tmp_path, setup.conf, stop_file) as status:
        wait_for(
            lambda: committed_batch(setup.table) is not None or status() is not None,
            120,
            "a first batch",
        )
        assert status() is None
        delete_topic(kafka.bootstrap_servers, setup.topic)
        wait_for(lambda: status() is not None, 120, "the run to end by itself")
    assert status() == EXIT_FAILED
    assert error_lines(capsys.readouterr().err) == [
        f"error: source topic {setup.topic!r} on cluster 'local' no longer exists: it was "
        "deleted while the job ran; nothing of the failed micro-batch was written"
    ]


def test_through_spark_submit_the_audit_stops_with_one_line_and_writes_nothing(
    spark, kafka, tmp_path
) -> None:
    """The entry point: `./spark-submit.sh` exits 1 with the one line, and the failed batch
    wrote no counts. (A partition's task that finished before the batch failed may have left
    its exact keys of the batch: files of the batch's own, which no later batch reads and its
    replay rewrites; the SIGKILL tests of tests/jobs/audit/test_audit_job_integration.py
    restart over such files and get the truth.)"""
    topic = f"loss-submit-{time.monotonic_ns()}"
    kafka.create_topic(topic, partitions=2)
    produce(kafka.bootstrap_servers, topic, audit_dataset(60, 2, int(time.time() * 1000)))
    conf = write_conf_dir(
        tmp_path / "conf", kafka.bootstrap_servers, tmp_path / "wh", tmp_path / "ck"
    )
    group = jobgroup("loss", topic)
    assert run_in_process(group, tmp_path, conf, "--once") == EXIT_OK  # the entry is the 2nd run's
    read_up_to = end_offsets(kafka.bootstrap_servers, topic, 2)
    counts_path, checkpoints = tmp_path / "wh" / "audit_counts", tmp_path / "ck"
    before = spark.createDataFrame(
        spark.read.format("delta").load(str(counts_path)).collect(),
        spark.read.format("delta").load(str(counts_path)).schema,
    )
    produce(kafka.bootstrap_servers, topic, audit_dataset(60, 2, int(time.time() * 1000), seed=8))
    delete_before(kafka.bootstrap_servers, topic, 0, read_up_to[0] + 10)

    status, log = run_job(group, tmp_path, conf, "--once")

    assert status == 1, log
    lines = error_lines(log)
    assert len(lines) == 1, lines
    assert f"offsets: 0 [{read_up_to[0]}, {read_up_to[0] + 10})" in lines[0]
    assert loss_rows(spark, tmp_path / "wh") == [
        ("loss", topic, 0, read_up_to[0], read_up_to[0] + 10)
    ]
    assert committed_batch(counts_path) == 0
    assert last_keys_batch(checkpoints) in (0, 1)  # batch 0's keys are still there
    assert_df_equality(
        spark.read.format("delta").load(str(counts_path)), before, ignore_row_order=True
    )


def test_records_deleted_from_a_retry_tier_are_a_loss_too(
    spark, kafka, service, tmp_path, stop_file, capsys
) -> None:
    """A retry tier's records were written by the dispatcher itself, but they have not had
    their last call: deleted before the tier's query dispatched them, they are lost like the
    source's, and the dispatcher stops and records them the same way (under the tier's topic).

    The first run routes the second wave to the tier (the service answers RESOURCE_EXHAUSTED,
    then OK) with an hour's delay, so the tier's query plans none of them; the tier is emptied
    (delete-records); the second run, the tier's delay now 0, plans them and fails."""
    setup = set_up(KINDS[-1], kafka, service, tmp_path, "tier")
    topic, tier = setup.topic, f"{setup.topic}-r1"
    kafka.create_topic(tier, PARTITIONS)
    produce_records(
        kafka.bootstrap_servers,
        topic,
        [
            Record(r.partition, r.key, value(r.key.decode(), "retry,ok"), r.timestamp_ms)
            for r in wave("t")
        ],
    )

    def with_tier(delay_ms: int) -> dict:
        queue = {"retryQueueTopic": tier, "processingDelayMs": delay_ms, "maxRetryCount": 1}
        return {**setup.group, "retryConfig": {"retryEnabled": True, "retryQueues": [queue]}}

    with running(with_tier(3_600_000), tmp_path, setup.conf, stop_file) as status:
        wait_for(
            lambda: (
                sum(end_offsets(kafka.bootstrap_servers, tier, PARTITIONS)) == WAVE
                or status() is not None
            ),
            120,
            "the second wave in the retry tier",
        )
    assert status() == EXIT_OK
    routed = end_offsets(kafka.bootstrap_servers, tier, PARTITIONS)
    for p, end in enumerate(routed):
        delete_before(kafka.bootstrap_servers, tier, p, end)
    capsys.readouterr()

    assert run_in_process(with_tier(0), tmp_path, setup.conf, "--once") == EXIT_FAILED

    (line,) = error_lines(capsys.readouterr().err)
    ranges = ", ".join(f"{p} [0, {end})" for p, end in enumerate(routed) if end)
    assert f"records of local/{tier} were deleted" in line
    assert f"offsets: {ranges})" in line
    job_id = setup.group["jobGroupId"]
    assert loss_rows(spark, tmp_path / "wh") == [
        (job_id, tier, p, 0, end) for p, end in enumerate(routed) if end
    ]
