"""kafka-pixy through jobs.availability.probes.proxy_client: the partitioner (pure) and a real
proxy.

The integration tests run a real kafka-pixy (devservices.kafka_pixy, built from source) in front of
the session's KRaft broker, with its consumer groups in a real ZooKeeper.
"""

from __future__ import annotations

import time
import uuid

import grpc
import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from devservices.kafka_pixy import LONG_POLLING_TIMEOUT_S
from jobs.availability.probes.proxy_client import (
    PixyClient,
    ProxyError,
    ProxyMessage,
    fnv1a_32,
    key_for_partition,
    sarama_hash_partition,
)
from testing.polling import wait_for

CALL_TIMEOUT_S = 10.0


# --- the partitioner (no services) -----------------------------------------------------------


def test_fnv1a_32_matches_the_published_test_vectors() -> None:
    assert fnv1a_32(b"") == 0x811C9DC5
    assert fnv1a_32(b"a") == 0xE40C292C
    assert fnv1a_32(b"foobar") == 0xBF9CF968


# (key, partitions, partition) as Sarama 1.23.1's NewHashPartitioner computed them, run in Go
# against the module kafka-pixy v0.18.0 builds with.
SARAMA_PARTITIONS = [
    (b"", 3, 0),
    (b"foo", 3, 1),
    (b"uatu", 3, 2),
    (b"", 7, 2),
    (b"a", 7, 6),
    (b"\xff\xfe", 7, 1),
    (b"kafka-pixy", 12, 4),
    (b"uatu", 12, 8),
    (b"probe-2-3", 3, 2),
    (b"probe-5-3", 8, 5),
]


@pytest.mark.parametrize(("key", "partitions", "expected"), SARAMA_PARTITIONS)
def test_sarama_hash_partition_matches_sarama(key: bytes, partitions: int, expected: int) -> None:
    assert sarama_hash_partition(key, partitions) == expected


def test_the_sign_of_the_hash_matters() -> None:
    # FNV-1a("") = 0x811C9DC5 is negative as an int32: Sarama takes |int32 % n| = 0, an
    # unsigned modulo would say 1 and the Java client's `& 0x7fffffff` would say 2.
    assert sarama_hash_partition(b"", 3) == 0
    assert 0x811C9DC5 % 3 == 1
    assert (0x811C9DC5 & 0x7FFFFFFF) % 3 == 2


def test_key_for_partition_finds_a_key_for_every_partition() -> None:
    assert [key_for_partition(p, 3) for p in range(3)] == [
        b"probe-0-1",
        b"probe-1-1",
        b"probe-2-3",
    ]
    assert key_for_partition(7, 8) == b"probe-7-1"
    assert key_for_partition(0, 1) == b"probe-0-0"
    for partitions in (1, 2, 3, 8, 12, 64):
        for partition in range(partitions):
            key = key_for_partition(partition, partitions)
            assert sarama_hash_partition(key, partitions) == partition
    assert sarama_hash_partition(key_for_partition(4, 8, prefix=b"x/"), 8) == 4
    assert key_for_partition(4, 8, prefix=b"x/").startswith(b"x/4-")


@pytest.mark.parametrize(("partition", "partitions"), [(3, 3), (-1, 3), (0, 0)])
def test_key_for_partition_rejects_a_partition_out_of_range(
    partition: int, partitions: int
) -> None:
    with pytest.raises(ValueError, match="partition"):
        key_for_partition(partition, partitions)


# --- a real kafka-pixy -----------------------------------------------------------------------


def _topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _read_back(bootstrap: str, topic: str, partitions: int, expected: int) -> list:
    """Every record of ``topic`` (assigned from offset 0, no group) until ``expected`` came."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"pixy-readback-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    records: list = []

    def all_read() -> bool:
        for msg in consumer.consume(num_messages=100, timeout=0.5):
            assert msg.error() is None, msg.error()
            records.append((msg.partition(), msg.offset(), msg.key(), msg.value()))
        return len(records) >= expected

    try:
        wait_for(all_read, 30, f"{expected} records in {topic}")
    finally:
        consumer.close()
    return records


@pytest.mark.integration
def test_produce_through_pixy_lands_on_the_partition_key_for_partition_names(
    kafka, kafka_pixy
) -> None:
    topic = _topic("pixy-partitions")
    kafka.create_topic(topic, partitions=3)
    expected: list[tuple[int, int, bytes | None, bytes]] = []
    with PixyClient(kafka_pixy.grpc_address, kafka_pixy.cluster) as pixy:
        for partition in range(3):
            key = key_for_partition(partition, 3)
            for i in range(2):
                value = f"p{partition}-{i}".encode()
                assert pixy.produce(topic, key, value, CALL_TIMEOUT_S) == (partition, i)
                expected.append((partition, i, key, value))
        # The empty key is hashed like any other (not a random partition), but Kafka stores
        # it as a null key.
        for key in (b"", b"foo", b"uatu"):
            partition, offset = pixy.produce(topic, key, b"known " + key, CALL_TIMEOUT_S)
            assert partition == sarama_hash_partition(key, 3)
            expected.append((partition, offset, key or None, b"known " + key))

    records = _read_back(kafka.bootstrap_servers, topic, 3, len(expected))
    assert sorted(records) == sorted(expected)


class _Reader:
    """ConsumeNAck in a loop; each call acknowledges the message the previous call returned."""

    def __init__(self, pixy: PixyClient, topic: str, group: str) -> None:
        self.pixy, self.topic, self.group = pixy, topic, group
        self.unacked: ProxyMessage | None = None

    def drain(self) -> list[ProxyMessage]:
        """Messages until a long poll comes back empty (that call acks the last one)."""
        got: list[ProxyMessage] = []
        while True:
            msg = self.pixy.consume(self.topic, self.group, self.unacked, CALL_TIMEOUT_S)
            # The call acked `unacked` even if it returned nothing.
            self.unacked = msg
            if msg is None:
                return got
            got.append(msg)


@pytest.mark.integration
def test_consume_n_ack_round_trip_returns_the_produced_values(kafka, kafka_pixy) -> None:
    topic = _topic("pixy-consume")
    kafka.create_topic(topic, partitions=3)
    group = _topic("pixy-group")
    with PixyClient(kafka_pixy.grpc_address, kafka_pixy.cluster) as pixy:
        # The first ConsumeNAck joins the group; on a drained topic it long-polls, then NOT_FOUND.
        started = time.monotonic()
        assert pixy.consume(topic, group, None, CALL_TIMEOUT_S) is None
        waited = time.monotonic() - started
        assert LONG_POLLING_TIMEOUT_S * 0.9 <= waited < LONG_POLLING_TIMEOUT_S + 5

        # A new group starts at the end of each partition, positioned in the background. Send
        # a marker to each partition until one comes back from each: from then on nothing
        # produced is skipped.
        reader = _Reader(pixy, topic, group)
        markers_seen: set[int] = set()

        def positioned() -> bool:
            for partition in set(range(3)) - markers_seen:
                pixy.produce(topic, key_for_partition(partition, 3), b"marker", CALL_TIMEOUT_S)
            markers_seen.update(m.partition for m in reader.drain() if m.value == b"marker")
            return markers_seen == {0, 1, 2}

        wait_for(positioned, 60, f"pixy to position group {group} on every partition")

        sent = {}
        for i in range(6):
            partition = i % 3
            key = key_for_partition(partition, 3)
            value = f"round-trip {i}".encode()
            sent[pixy.produce(topic, key, value, CALL_TIMEOUT_S)] = (key, value)

        received: dict[tuple[int, int], tuple[bytes | None, bytes]] = {}

        def all_received() -> bool:
            # Stop before the long poll that would ack the last message: Ack does that below.
            while len(received) < len(sent):
                msg = pixy.consume(topic, group, reader.unacked, CALL_TIMEOUT_S)
                reader.unacked = msg
                if msg is None:
                    return False
                if msg.value == b"marker":
                    continue  # a marker that came late: acked by the next call, not counted
                received[(msg.partition, msg.offset)] = (msg.key, msg.value)
            return True

        wait_for(all_received, 30, f"the 6 values back through group {group}")
        assert received == sent
        last = reader.unacked
        assert last is not None and last.topic == topic
        pixy.ack(group, last, CALL_TIMEOUT_S)

        # Every message is acked, so pixy commits each partition's end offset to Kafka.
        ends = {p: 1 + max(o for q, o in sent if q == p) for p in range(3)}

        def committed() -> dict[int, int] | None:
            got = _committed(kafka.bootstrap_servers, group, topic, 3)
            return got if got == ends else None

        wait_for(committed, 30, f"group {group} to commit {ends}")
        # Nothing is left for the group.
        assert pixy.consume(topic, group, None, CALL_TIMEOUT_S) is None


def _committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    # Only reads the group's committed offsets: no subscribe, so it never joins the group.
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False}
    )
    try:
        tps = consumer.committed(
            [TopicPartition(topic, p) for p in range(partitions)], timeout=CALL_TIMEOUT_S
        )
    finally:
        consumer.close()
    return {tp.partition: tp.offset for tp in tps}


@pytest.mark.integration
def test_errors_name_the_unknown_topic_or_cluster(kafka, kafka_pixy) -> None:
    topic = _topic("pixy-errors")
    kafka.create_topic(topic, partitions=1)
    missing = _topic("pixy-no-such-topic")
    with PixyClient(kafka_pixy.grpc_address, kafka_pixy.cluster) as pixy:
        with pytest.raises(ProxyError) as unknown_topic:
            pixy.produce(missing, b"k", b"v", timeout_s=30)
        assert unknown_topic.value.code == grpc.StatusCode.INVALID_ARGUMENT
        assert unknown_topic.value.topic == missing
        assert missing in str(unknown_topic.value)
        assert "does not exist" in unknown_topic.value.details
        # A ConsumeNAck on a missing topic is no error to pixy: it long-polls, then NOT_FOUND.
        assert pixy.consume(missing, _topic("pixy-group"), None, CALL_TIMEOUT_S) is None

    with PixyClient(kafka_pixy.grpc_address, "no-such-cluster") as wrong:
        with pytest.raises(ProxyError) as unknown_cluster:
            wrong.produce(topic, b"k", b"v", CALL_TIMEOUT_S)
        assert unknown_cluster.value.code == grpc.StatusCode.INVALID_ARGUMENT
        assert unknown_cluster.value.details == "proxy `no-such-cluster` does not exist"
        with pytest.raises(ProxyError) as consume_error:
            wrong.consume(topic, "g", None, CALL_TIMEOUT_S)
        assert consume_error.value.code == grpc.StatusCode.INVALID_ARGUMENT
        assert "no-such-cluster" in str(consume_error.value)

    # The proxy still serves the right cluster afterwards.
    with PixyClient(kafka_pixy.grpc_address, kafka_pixy.cluster) as pixy:
        assert pixy.produce(topic, b"k", b"v", CALL_TIMEOUT_S) == (0, 0)
