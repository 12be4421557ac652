"""devservices.mirror_maker and bench.kafka_perf: the pure config/argument builders and output
parsers (fast), and MirrorMaker 2 copying a keyed topic between two real single-broker clusters.

Only the MM2 test is in the integration tier; the rest needs no broker or JVM.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from contextlib import ExitStack
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Message, Producer
from confluent_kafka import TopicPartition as TP

from bench.kafka_perf import (
    ConsumerPerfResult,
    KafkaPerfError,
    ProducerPerfResult,
    consumer_perf_args,
    parse_consumer_output,
    parse_producer_output,
    producer_perf_args,
)
from devservices.kafka import G1_GC, SERIAL_GC, SERVICE_JAVA_OPTS_ENV
from devservices.mirror_maker import (
    logged_consumer_configs,
    mm2_command,
    mm2_properties,
    render_properties,
    start_mirror_maker,
)
from testing.polling import wait_for

_CLIENT_LOG = logging.getLogger("test.mirror_maker.client")

# Captured from kafka-tools 3.9.2 (throttled to 10k records/s, so one progress line precedes
# the summary).
PRODUCER_OUT = (
    "49992 records sent, 9998.4 records/sec (1.91 MB/sec), 12.9 ms avg latency, "
    "346.0 ms max latency.\n"
    "60000 records sent, 9983.361065 records/sec (1.90 MB/sec), 10.89 ms avg latency, "
    "346.00 ms max latency, 1 ms 50th, 104 ms 95th, 202 ms 99th, 214 ms 99.9th.\n"
)
CONSUMER_HEADER = (
    "start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, "
    "rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec\n"
)
CONSUMER_OUT = (
    CONSUMER_HEADER + "2026-11-21 09:30:17:501, 2026-11-21 09:30:19:573, 38.1470, 18.4107, "
    "200000, 96525.0965, 1276, 796, 47.9233, 251256.2814\n"
)
# Asked for 70000 of 60000 records with --timeout 2000.
CONSUMER_TIMED_OUT = (
    CONSUMER_HEADER + "WARNING: Exiting before consuming the expected number of messages: "
    "timeout (2000 ms) exceeded. You can use the --timeout option to increase the timeout.\n"
    "2026-11-21 09:33:00:399, 2026-11-21 09:33:03:270, 11.4441, 3.9861, 60000, 20898.6416, "
    "642, 2229, 5.1342, 26917.9004\n"
)


# --- pure parts ------------------------------------------------------------------------------


def test_producer_args_put_props_last_and_extra_props_win() -> None:
    args = producer_perf_args(
        "h:1", "t", 1000, 200, acks="1", extra_props={"linger.ms": "5", "acks": "0"}
    )
    assert args == [
        "--topic",
        "t",
        "--num-records",
        "1000",
        "--record-size",
        "200",
        "--throughput",
        "-1",
        "--producer-props",
        "bootstrap.servers=h:1",
        "acks=0",
        "linger.ms=5",
    ]


def test_consumer_args() -> None:
    assert consumer_perf_args("h:1", "t", 50, timeout_ms=3000) == [
        "--bootstrap-server",
        "h:1",
        "--topic",
        "t",
        "--messages",
        "50",
        "--timeout",
        "3000",
    ]
    args = consumer_perf_args("h:1", "t", 50, group="g", consumer_config=Path("/c.properties"))
    assert args[-4:] == ["--group", "g", "--consumer.config", "/c.properties"]


def test_producer_output_uses_the_summary_not_the_progress_line() -> None:
    assert parse_producer_output(PRODUCER_OUT) == ProducerPerfResult(
        records=60000,
        records_per_s=9983.361065,
        mb_per_s=1.90,
        avg_latency_ms=10.89,
        max_latency_ms=346.0,
        p50_ms=1,
        p95_ms=104,
        p99_ms=202,
        p999_ms=214,
    )


def test_consumer_output() -> None:
    assert parse_consumer_output(CONSUMER_OUT) == ConsumerPerfResult(
        start_time="2026-11-21 09:30:17:501",
        end_time="2026-11-21 09:30:19:573",
        mb=38.147,
        mb_per_s=18.4107,
        records=200000,
        records_per_s=96525.0965,
        rebalance_ms=1276,
        fetch_ms=796,
        fetch_mb_per_s=47.9233,
        fetch_records_per_s=251256.2814,
        timed_out=False,
    )


def test_consumer_output_after_timeout_is_flagged() -> None:
    result = parse_consumer_output(CONSUMER_TIMED_OUT)
    assert result.timed_out
    assert result.records == 60000
    assert result.fetch_records_per_s == 26917.9004


@pytest.mark.parametrize("parse", [parse_producer_output, parse_consumer_output])
def test_parsers_reject_output_without_a_summary(parse) -> None:
    with pytest.raises(KafkaPerfError):
        parse("Exception in thread main org.apache.kafka.common.KafkaException\n")


def test_parse_consumer_rejects_a_header_without_a_row() -> None:
    with pytest.raises(KafkaPerfError, match="summary row"):
        parse_consumer_output(CONSUMER_HEADER)


def test_mm2_properties_one_way_identity_flow_with_rf_1() -> None:
    props = mm2_properties("s:1", "t:2", "a|b", tasks=3, producer_acks="1")
    assert props["clusters"] == "source, target"
    assert props["source.bootstrap.servers"] == "s:1"
    assert props["target.bootstrap.servers"] == "t:2"
    assert props["source->target.enabled"] == "true"
    assert props["target->source.enabled"] == "false"
    assert props["source->target.topics"] == "a|b"
    assert props["replication.policy.class"].endswith(".IdentityReplicationPolicy")
    assert props["tasks.max"] == "3"
    assert props["target.producer.acks"] == "1"
    assert props["emit.checkpoints.enabled"] == props["emit.heartbeats.enabled"] == "false"
    rf_keys = [k for k in props if k.endswith("replication.factor")]
    assert len(rf_keys) == 7
    assert {props[k] for k in rf_keys} == {"1"}


def test_mm2_properties_extra_wins() -> None:
    props = mm2_properties("s:1", "t:2", "x", extra={"tasks.max": "8", "target.producer.x": "y"})
    assert props["tasks.max"] == "8"
    assert props["target.producer.x"] == "y"


# Two blocks as MM2 3.9.2 logs them with log_consumer_configs (cut to a few settings), a WARN
# line between them.
CONSUMER_CONFIG_LOG = """\
[2026-11-24 09:40:01,001] INFO ConsumerConfig values: \n\
\tauto.offset.reset = earliest
\tclient.id = source->target|MirrorSourceConnector-0|replication-consumer
\tfetch.max.bytes = 33554432
\tmax.poll.records = 10000
 (org.apache.kafka.clients.consumer.ConsumerConfig)
[2026-11-24 09:40:01,002] WARN something else (org.apache.kafka.connect.runtime.Worker)
\tmax.poll.records = 1
[2026-11-24 09:40:01,003] INFO ConsumerConfig values: \n\
\tclient.id = source->target|MirrorSourceConnector|offset-syncs-source-consumer
\tmax.poll.records = 500
 (org.apache.kafka.clients.consumer.ConsumerConfig)
"""


def test_logged_consumer_configs_reads_each_block_and_keeps_the_named_clients() -> None:
    every = logged_consumer_configs(CONSUMER_CONFIG_LOG)
    assert [c["max.poll.records"] for c in every] == ["10000", "500"]
    copying = logged_consumer_configs(CONSUMER_CONFIG_LOG, "replication-consumer")
    assert copying == [
        {
            "auto.offset.reset": "earliest",
            "client.id": "source->target|MirrorSourceConnector-0|replication-consumer",
            "fetch.max.bytes": "33554432",
            "max.poll.records": "10000",
        }
    ]


def test_mm2_command_sets_both_heap_bounds_and_the_collector(tmp_path: Path) -> None:
    default = mm2_command(tmp_path, tmp_path / "jars")
    assert SERIAL_GC in default
    assert {"-Xmx1g", "-Xms1g"} <= set(default)
    sized = mm2_command(tmp_path, tmp_path / "jars", heap="2g", gc=G1_GC)
    assert {"-Xmx2g", "-Xms2g", G1_GC} <= set(sized)
    assert SERIAL_GC not in sized
    assert sized[-2:] == [
        "org.apache.kafka.connect.mirror.MirrorMaker",
        str(tmp_path / "mm2.properties"),
    ]


def test_service_jvms_take_the_extra_flags_of_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(SERVICE_JAVA_OPTS_ENV, " -XX:TieredStopAtLevel=1  -Dx=y ")
    command = mm2_command(tmp_path, tmp_path / "jars")
    flags = command[: command.index("-cp")]
    assert flags[-4:-2] == ["-XX:TieredStopAtLevel=1", "-Dx=y"]
    monkeypatch.delenv(SERVICE_JAVA_OPTS_ENV)
    assert "-Dx=y" not in mm2_command(tmp_path, tmp_path / "jars")


def test_render_properties_escapes_backslashes() -> None:
    text = render_properties({"source->target.topics": r"bench\..*", "a": " lead"})
    assert text.splitlines()[1:] == [r"source->target.topics=bench\\..*", r"a=\ lead"]


# --- MirrorMaker 2 against real brokers ------------------------------------------------------

TOPIC = "mirrored"
PARTITIONS = 4
RECORDS = 2000

Record = tuple[bytes | None, bytes | None]  # key, value


def _produce_keyed(bootstrap: str) -> dict[int, list[Record]]:
    """Produce RECORDS keyed records; return each partition's (key, value) list in offset order."""
    acked: list[tuple[int, int, Record]] = []
    failures: list[KafkaError] = []

    def on_delivery(err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            failures.append(err)
        else:
            acked.append((_partition(msg), msg.offset() or 0, (msg.key(), msg.value())))

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
            "logger": _CLIENT_LOG,
        }
    )
    for i in range(RECORDS):
        # 50 keys, so each partition gets several keys interleaved: order is per partition, not
        # per key.
        key = f"key-{i % 50:02d}".encode()
        producer.produce(TOPIC, key=key, value=f"value-{i:05d}".encode(), on_delivery=on_delivery)
    assert producer.flush(60) == 0
    assert not failures, failures
    by_partition: dict[int, list[Record]] = defaultdict(list)
    for partition, _offset, record in sorted(acked, key=lambda a: (a[0], a[1])):
        by_partition[partition].append(record)
    return dict(by_partition)


def _partition(msg: Message) -> int:
    partition = msg.partition()
    assert partition is not None
    return partition


def _target_count(bootstrap: str) -> int:
    """Records in the target topic (sum of high watermarks), 0 while it does not exist yet."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "test-mm2-probe", "logger": _CLIENT_LOG}
    )
    try:
        topic = consumer.list_topics(TOPIC, timeout=5).topics.get(TOPIC)
        if topic is None or topic.error is not None:
            return 0
        return sum(
            consumer.get_watermark_offsets(TP(TOPIC, p), timeout=5)[1] for p in topic.partitions
        )
    finally:
        consumer.close()


def _read_target(bootstrap: str) -> dict[int, list[Record]]:
    """Every record of the target topic, per partition in offset order."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "test-mm2-reader",
            "enable.auto.commit": False,
            "logger": _CLIENT_LOG,
        }
    )
    partitions = consumer.list_topics(TOPIC, timeout=10).topics[TOPIC].partitions
    assert len(partitions) == PARTITIONS
    consumer.assign([TP(TOPIC, p, OFFSET_BEGINNING) for p in partitions])
    got: dict[int, list[Record]] = defaultdict(list)
    n = 0

    def poll() -> bool:
        nonlocal n
        for msg in consumer.consume(500, timeout=1.0):
            assert msg.error() is None, msg.error()
            got[_partition(msg)].append((msg.key(), msg.value()))
            n += 1
        return n >= RECORDS

    try:
        wait_for(poll, 60, f"{RECORDS} records read back from the target")
    finally:
        consumer.close()
    return dict(got)


def test_mirror_maker_copies_every_record_keeping_partition_and_order(
    kafka, kafka_dest, tmp_path: Path
) -> None:
    # The session's two clusters (topic TOPIC is this test's alone): MM2 runs against brokers
    # as they are, no cluster of its own needed.
    source, target = kafka, kafka_dest
    with ExitStack() as stack:
        source.create_topic(TOPIC, PARTITIONS, replication_factor=1)
        expected = _produce_keyed(source.bootstrap_servers)
        assert sum(len(v) for v in expected.values()) == RECORDS
        assert len(expected) == PARTITIONS  # every partition has records to keep in order

        mm2 = stack.enter_context(
            start_mirror_maker(
                tmp_path / "mm2",
                source.bootstrap_servers,
                target.bootstrap_servers,
                TOPIC,
                # The bench's way of giving MM2's copying consumers the job's fetch settings.
                extra={"source.consumer.max.poll.records": "777"},
                log_consumer_configs=True,
            )
        )

        def copied() -> bool:
            mm2.check_running()  # a config error ends MM2; fail with its log, not at the deadline
            return _target_count(target.bootstrap_servers) >= RECORDS

        wait_for(copied, 180, f"MirrorMaker to copy {RECORDS} records (log: {mm2.log_path})")
        got = _read_target(target.bootstrap_servers)
        stored = _target_count(target.bootstrap_servers)

        copying = logged_consumer_configs(mm2.log_path.read_text(), "replication-consumer")

    assert stored == RECORDS  # no duplicates past the first RECORDS read back either
    assert sum(len(v) for v in got.values()) == RECORDS
    assert got == expected
    assert copying, f"no replication-consumer config in {mm2.log_path}"
    assert {c["max.poll.records"] for c in copying} == {"777"}
