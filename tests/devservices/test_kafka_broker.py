"""Integration tests for devservices.kafka: real KRaft brokers as local JVM processes."""

from __future__ import annotations

import logging
import os
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    Message,
    Producer,
    TopicPartition,
)

from core.config import ClusterConfig
from core.kafka_admin import OFFSETS_TOPIC, ensure_offsets_topic, topic_partitions
from devservices.kafka import KafkaBrokerError, start_cluster

pytestmark = pytest.mark.integration

# librdkafka logs "connection refused" for every broker a test kills; keep it in pytest's capture.
_CLIENT_LOG = logging.getLogger("test.kafka.client")


def _produce(bootstrap: str, topic: str, payloads: list[bytes], timeout: float = 60.0) -> None:
    """Produce with acks=all and fail unless every message is acknowledged in time."""
    failures: list[KafkaError] = []

    def on_delivery(err: KafkaError | None, _msg: Message) -> None:
        if err is not None:
            failures.append(err)

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            # Retries after a leader change must not duplicate: the tests count exactly.
            "enable.idempotence": True,
            "logger": _CLIENT_LOG,
        }
    )
    for i, payload in enumerate(payloads):
        producer.produce(topic, value=payload, key=str(i).encode(), on_delivery=on_delivery)
    unacked = producer.flush(timeout)
    assert unacked == 0, f"{unacked} messages not acknowledged within {timeout} s"
    assert not failures, failures


def _consume_all(bootstrap: str, topic: str, expected: int, timeout: float = 60.0) -> list[bytes]:
    """Read ``topic`` from the beginning until ``expected`` messages arrived or time runs out.

    Partitions are assigned from offset 0, as Spark's Kafka source does, rather than subscribed:
    no group join or rebalance to wait for, and the read does not depend on the group coordinator.
    """
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"test-{uuid.uuid4()}",
            "enable.auto.commit": False,
            "logger": _CLIENT_LOG,
        }
    )
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        values: list[bytes] = []
        deadline = time.monotonic() + timeout
        while len(values) < expected and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            values.append(msg.value())
        # High watermarks prove nothing beyond what was read is in the log.
        in_log = sum(
            consumer.get_watermark_offsets(TopicPartition(topic, p))[1] for p in partitions
        )
        assert in_log == expected, f"{in_log} messages in {topic}, expected {expected}"
        return values
    finally:
        consumer.close()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_single_broker_round_trip(tmp_path: Path) -> None:
    cluster = start_cluster(tmp_path / "kafka")
    try:
        (broker,) = cluster.brokers
        pid = broker.pid
        assert pid is not None
        assert (broker.dir / "kafka.pid").read_text().strip() == str(pid)

        # A cluster no group has used has no __consumer_offsets; one lookup makes Kafka create
        # it (what the availability job and AddJobGroup of one do, core/kafka_admin.py).
        fresh = ClusterConfig("fresh", cluster.bootstrap_servers)
        assert OFFSETS_TOPIC not in topic_partitions(fresh)
        ensure_offsets_topic(fresh, "uatu-test")
        assert topic_partitions(fresh)[OFFSETS_TOPIC] > 0

        cluster.create_topic("round-trip", partitions=3)
        # Asked again as it is (what a CreateTopics re-sent by librdkafka answers): created;
        # asked with another shape: refused with the topic's name.
        cluster.create_topic("round-trip", partitions=3, replication_factor=1)
        with pytest.raises(KafkaBrokerError, match=r"'round-trip'.*already exists"):
            cluster.create_topic("round-trip", partitions=4)
        payloads = [f"message-{i}".encode() for i in range(100)]
        _produce(cluster.bootstrap_servers, "round-trip", payloads)
        consumed = _consume_all(cluster.bootstrap_servers, "round-trip", len(payloads))
        assert Counter(consumed) == Counter(payloads)
    finally:
        cluster.stop()

    assert not _alive(pid)
    assert not (broker.dir / "kafka.pid").exists()
    cluster.stop()  # idempotent
