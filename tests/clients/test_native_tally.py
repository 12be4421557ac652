"""The audit interceptor plugin (`clients/audit_interceptor`) on a real broker: what an
`AuditedConsumer` counts in librdkafka's threads equals what the pure-Python `WindowTally`
counts from the same records, sketches included, and a misconfigured client is refused.

Truth: the records this test produced (known windows, keys, values, null and empty ones).
"""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import KafkaException, Producer
from datasketches import hll_union, tgt_hll_type

from clients import AuditedConsumer, AuditedProducer, AuditSettings
from clients.native_tally import NativeTally, plugin_path
from core.audit_reports import WindowTally, window_start_ms
from testing.topic_data import Record, produce_records

pytestmark = pytest.mark.integration

WINDOW_S = 60


def known_records(now_ms: int) -> list[Record]:
    """3,000 records over 2 partitions and 3 windows: 1,200 distinct (key, value) pairs, null
    keys, null values and empty values among them."""
    records = []
    for i in range(3000):
        key = None if i % 7 == 0 else b"k%d" % (i % 40)
        value = None if i % 11 == 0 else (b"" if i % 13 == 0 else b"v%d" % (i % 1200))
        timestamp = now_ms - (i % 3) * WINDOW_S * 1000
        records.append(Record(i % 2, key, value, timestamp))
    return records


def union_estimate(*sketches) -> float:
    union = hll_union(12)
    for sketch in sketches:
        union.update(sketch)
    return union.get_result(tgt_hll_type.HLL_8).get_estimate()


def consume_all(consumer: AuditedConsumer, expected: int, deadline_s: float = 60.0) -> list:
    messages: list = []
    deadline = time.monotonic() + deadline_s
    while len(messages) < expected and time.monotonic() < deadline:
        messages += [m for m in consumer.consume(500, 1.0) if m.error() is None]
    return messages


def test_the_consumer_plugin_counts_what_the_python_tally_counts(kafka) -> None:
    topic = f"native-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(topic, 2, 1)
    records = known_records(int(time.time() * 1000))
    produce_records(kafka.bootstrap_servers, topic, records)

    consumer = AuditedConsumer(
        {
            "bootstrap.servers": kafka.bootstrap_servers,
            "group.id": f"g-{topic}",
            "auto.offset.reset": "earliest",
        },
        AuditSettings(service="t", cluster="local", audit_topic="audit-unused",
                      report_interval_s=3600),
    )  # fmt: skip
    try:
        consumer.subscribe([topic])
        messages = consume_all(consumer, len(records))
        native = consumer.tally.drain()
    finally:
        consumer.close()
    assert len(messages) == len(records)

    python = WindowTally(WINDOW_S)
    for m in messages:
        python.add(m.topic(), m.key(), m.value(), m.timestamp()[1], 0.0)
    expected = python.drain()

    assert set(native) == {(topic, window_start_ms(r.timestamp_ms, WINDOW_S)) for r in records}
    assert set(native) == set(expected)
    for window, counts in native.items():
        truth = expected[window]
        assert (counts.message_count, counts.byte_count, counts.failed_count) == (
            truth.message_count,
            truth.byte_count,
            0,
        ), window
        # Same coupons: the union with the Python sketch is the Python sketch's union with
        # itself (a union re-estimates, so it is not the sketch's own estimate).
        assert counts.hll.get_estimate() == pytest.approx(truth.hll.get_estimate(), rel=1e-9)
        assert union_estimate(counts.hll, truth.hll) == union_estimate(truth.hll, truth.hll)
        assert counts.kll.n == counts.message_count
    assert sum(c.message_count for c in native.values()) == len(records)
    assert consumer.tally.lg_k == 12


def test_a_tally_the_plugin_does_not_know_is_refused_with_its_name(kafka) -> None:
    with pytest.raises(KafkaException, match=r"uatu\.audit\.tally=\"nope\""):
        Producer({
            "bootstrap.servers": kafka.bootstrap_servers,
            "plugin.library.paths": str(plugin_path()),
            "uatu.audit.tally": "nope",
        })  # fmt: skip


def test_a_client_that_loads_the_plugin_without_a_tally_says_so(kafka, capfd) -> None:
    """librdkafka goes on without an interceptor whose on_new failed; it says why on stderr
    (before the client's own logger exists)."""
    NativeTally()  # loads the library and makes librdkafka's symbols global
    Producer({"bootstrap.servers": kafka.bootstrap_servers,
              "plugin.library.paths": str(plugin_path())})  # fmt: skip
    assert "uatu.audit.tally is not set" in capfd.readouterr().err


def test_closing_the_tally_before_the_client_keeps_the_client_counting(kafka) -> None:
    topic = f"native-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(topic, 1, 1)
    tally = NativeTally()
    producer = Producer(tally.client_config({"bootstrap.servers": kafka.bootstrap_servers}))
    producer.produce(topic, b"before")
    producer.flush(30)
    assert sum(c.message_count for c in tally.drain().values()) == 1
    tally.close()
    producer.produce(topic, b"after")  # the client holds its own reference to the tally
    assert producer.flush(30) == 0
    with pytest.raises(RuntimeError, match="closed"):
        tally.drain()


def test_a_bad_client_setting_is_named_and_its_tally_forgotten(kafka, monkeypatch) -> None:
    made: list[NativeTally] = []
    closed: list[NativeTally] = []
    real_close = NativeTally.close

    class Recorded(NativeTally):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            made.append(self)

        def close(self) -> None:
            closed.append(self)
            real_close(self)

    monkeypatch.setattr("clients.audit.NativeTally", Recorded)
    with pytest.raises(KafkaException, match=r"no\.such\.setting"):
        AuditedProducer(
            {"bootstrap.servers": kafka.bootstrap_servers, "no.such.setting": "x"},
            AuditSettings(service="t", cluster="local", audit_topic="audit-unused"),
        )
    assert made and closed == made
    with pytest.raises(RuntimeError, match="closed"):
        made[0].drain()
