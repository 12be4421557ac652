"""`clients.AuditedProducer` on a real broker: what it counts, in which window, and the
application's delivery callbacks it must keep calling.

Truth is computed here: the records the test produced, and their timestamps as the broker
stored them (read back from the topic).
"""

from __future__ import annotations

import uuid
from collections import Counter

import pytest
from confluent_kafka import KafkaError, Message

from clients import AuditedProducer, AuditSettings
from core.audit_reports import WindowCounts, dedupe_key, window_start_ms
from testing.topic_data import read_partitions

pytestmark = pytest.mark.integration


def audited(kafka, **config) -> AuditedProducer:
    """A producer whose reporter's timer never drains the tally during a test."""
    return AuditedProducer(
        {"bootstrap.servers": kafka.bootstrap_servers, "linger.ms": 5, **config},
        AuditSettings(
            service="t", cluster="local", audit_topic="audit-unused", report_interval_s=3600
        ),
    )


def counted(producer: AuditedProducer) -> dict[tuple[str, int], WindowCounts]:
    producer.flush()
    return producer.tally.drain()


def test_records_without_a_timestamp_count_in_the_window_the_broker_stored(kafka) -> None:
    topic = f"audited-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(topic, 2, 1)
    producer = audited(kafka)
    try:
        for i in range(50):
            producer.produce(topic, value=b"v%d" % i, key=b"k%d" % (i % 10))
        windows = counted(producer)
    finally:
        producer.close()

    stored = [r for part in read_partitions(kafka.bootstrap_servers, topic, 2).values()
              for r in part]  # fmt: skip
    assert len(stored) == 50
    expected = Counter((topic, window_start_ms(r.timestamp_ms, 60)) for r in stored)
    assert {w: c.message_count for w, c in windows.items()} == dict(expected)
    assert sum(c.byte_count for c in windows.values()) == sum(
        len(r.key or b"") + len(r.value or b"") for r in stored
    )
    distinct = {dedupe_key(r.key, r.value) for r in stored}
    estimate = sum(c.hll.get_estimate() for c in windows.values())
    assert len(distinct) == 50 and abs(estimate - 50) <= 2  # HLL is exact-ish this small
    assert all(c.kll is not None and c.kll.n == c.message_count for c in windows.values())


def test_per_record_and_default_callbacks_are_still_called_and_every_record_counted(
    kafka,
) -> None:
    topic = f"audited-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(topic, 1, 1)
    by_default: list[bytes] = []
    by_record: list[bytes] = []
    by_alias: list[bytes] = []

    def collect(into: list[bytes]):
        def callback(err: KafkaError | None, msg: Message) -> None:
            assert err is None
            into.append(msg.value())

        return callback

    producer = audited(kafka, on_delivery=collect(by_default))
    try:
        for i in range(30):
            value = b"r%d" % i
            if i % 3 == 0:
                producer.produce(topic, value=value, on_delivery=collect(by_record))
            elif i % 3 == 1:
                producer.produce(topic, value=value, callback=collect(by_alias))
            else:
                producer.produce(topic, value=value)
        windows = counted(producer)
    finally:
        producer.close()

    assert by_record == [b"r%d" % i for i in range(0, 30, 3)]
    assert by_alias == [b"r%d" % i for i in range(1, 30, 3)]
    assert by_default == [b"r%d" % i for i in range(2, 30, 3)]
    assert sum(c.message_count for c in windows.values()) == 30


def test_a_send_the_broker_refuses_counts_as_failed_not_as_sent(kafka) -> None:
    topic = f"audited-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(topic, 1, 1, config={"max.message.bytes": "400"})
    errors: list[KafkaError] = []
    producer = audited(kafka, on_delivery=lambda err, msg: errors.append(err))
    try:
        producer.produce(topic, value=b"x" * 1000)  # larger than the topic allows
        producer.flush()  # alone in its batch: the broker refuses a batch as a whole
        for i in range(5):
            producer.produce(topic, value=b"small-%d" % i)
        windows = counted(producer)
    finally:
        producer.close()

    assert sum(e is not None for e in errors) == 1
    assert sum(c.failed_count for c in windows.values()) == 1
    assert sum(c.message_count for c in windows.values()) == 5
