"""The Java audit interceptor in a plain Java producer outside Spark, against the 3.9 broker, on
both generations of Kafka clients: 4.1 (`var/jars/kafka4`), where the producer hands each
acknowledgement the record's own headers and the interceptor reads the dedupe key from them
(`SentAudit`), and 3.9 (`var/jars/kafka`), where acknowledgements are matched to sends
(`SendMatcher`).

Kafka's ProducerPerformance with the interceptor sends 3,000 records without timestamps,
whose values are drawn at random from 37 lines, at 1,000 records/s into 1-second report
windows. Truth comes from reading the topic back: how many records in each window of the
timestamps the broker stored, and how many distinct `xxhash64(key, value)` among them. The
reports on the audit topic must count every record in its window and carry an HLL sketch of
exactly those keys (a record counted without its key adds nothing to the sketch), and the
records must reach the broker with no header added. A 4.1 producer
(`testing/java/HeaderedProducer.java`) sets headers of its own on every record: they must
reach the broker exactly as set, through the interceptor's view of them.
"""

from __future__ import annotations

import subprocess
import uuid
from collections import Counter
from pathlib import Path

import pytest
from datasketches import hll_sketch, hll_union, kll_doubles_sketch
from uatu.v1 import audit_report_pb2

from bench.kafka_perf import producer_perf, producer_perf_args
from core.audit_reports import dedupe_key
from core.paths import KAFKA4_JARS_DIR, KAFKA_JARS_DIR, ROOT
from devservices.kafka import jvm_command
from testing.audit_clients import INTERCEPTOR, interceptor_jars
from testing.topic_data import iter_messages

pytestmark = pytest.mark.integration

RECORDS = 3_000
LINES = 37
RATE = 1_000  # records/s: the run spans three or four 1-second windows


CLIENTS = {"3.9": KAFKA_JARS_DIR, "4.1": KAFKA4_JARS_DIR}


def new_topics(kafka, prefix: str) -> tuple[str, str]:
    """A new topic of 3 partitions to produce to, and a new audit topic for its reports."""
    run = uuid.uuid4().hex[:8]
    topic, audit_topic = f"{prefix}-{run}", f"{prefix}-audit-{run}"
    kafka.create_topic(topic, partitions=3)
    kafka.create_topic(audit_topic, partitions=1)
    return topic, audit_topic


def reports_of(bootstrap: str, audit_topic: str, topic: str) -> list[audit_report_pb2.AuditReport]:
    """The reports on ``audit_topic`` about ``topic``."""
    reports = [
        audit_report_pb2.AuditReport.FromString(m.value())
        for m in iter_messages(bootstrap, audit_topic, 1)
    ]
    return [r for r in reports if r.topic == topic]


def keyed_count(reports: list[audit_report_pb2.AuditReport]) -> int:
    """How many records the reports counted with their dedupe key: the items of their latency
    sketches (the interceptor measures latency only for those)."""
    return sum(
        kll_doubles_sketch.deserialize(bytes(r.latency_kll_sketch)).n
        for r in reports
        if r.latency_kll_sketch
    )


@pytest.mark.parametrize("clients", sorted(CLIENTS))
def test_interceptor_counts_every_ack_with_its_key_in_the_broker_window(
    kafka, tmp_path: Path, clients: str
):
    jars_dir = CLIENTS[clients]
    if not any(jars_dir.glob(f"kafka-clients-{clients}.*.jar")):
        pytest.fail(f"no Kafka {clients} clients in {jars_dir}: run `make jars`")
    bootstrap = kafka.bootstrap_servers
    topic, audit_topic = new_topics(kafka, "perf")
    payloads = tmp_path / "payloads.txt"
    payloads.write_text("".join(f"line {i} of the payload file\n" for i in range(LINES)))
    props = {
        "linger.ms": "5",
        "interceptor.classes": INTERCEPTOR,
        "uatu.audit.service": "perf-k41",
        "uatu.audit.cluster": "local",
        "uatu.audit.topic": audit_topic,
        "uatu.audit.window.seconds": "1",
    }
    args = producer_perf_args(
        bootstrap, topic, RECORDS, None, throughput=RATE, extra_props=props, payload_file=payloads
    )
    result = producer_perf(args, jars_dir=interceptor_jars(jars_dir, tmp_path / "jars"))
    assert result.records == RECORDS

    sent = list(iter_messages(bootstrap, topic, 3))
    truth_keys = {dedupe_key(m.key(), m.value()) for m in sent}
    assert len(sent) == RECORDS
    assert 1 < len(truth_keys) <= LINES
    assert all(not m.headers() for m in sent), "the interceptor's key went over the wire"

    reports = reports_of(bootstrap, audit_topic, topic)
    assert reports, f"no audit report for {topic} on {audit_topic}"
    assert sum(r.message_count for r in reports) == RECORDS
    # Only a record counted with its dedupe key has its latency measured: every ack found it.
    assert keyed_count(reports) == RECORDS
    # Each record in the window of the timestamp the broker stored (the producer gave it one).
    by_window = Counter(m.timestamp()[1] // 1000 * 1000 for m in sent)
    # ProducerPerformance holds 1,000 records/s on average, but on a loaded machine it catches
    # up after a stall in a burst: two windows is what every run gives, and enough to tell a
    # record counted in the wrong window.
    assert len(by_window) >= 2
    reported = Counter[int]()
    for r in reports:
        assert r.window_seconds == 1
        reported[r.window_start_ms] += r.message_count
    assert reported == by_window
    assert sum(r.failed_count for r in reports) == 0
    assert sum(r.byte_count for r in reports) == sum(len(m.value()) for m in sent)
    union = hll_union(12)
    for r in reports:
        assert r.hll_sketch, "a report counted records without their dedupe keys"
        union.update(hll_sketch.deserialize(bytes(r.hll_sketch)))
    # Fewer than 40 distinct keys: the sketch is in its exact list mode.
    assert round(union.get_estimate()) == len(truth_keys)


HEADERED = 500  # records sent by testing/java/HeaderedProducer.java
HEADERED_PRODUCER = ROOT / "testing" / "java" / "HeaderedProducer.java"


def test_interceptor_on_kafka41_clients_sends_the_application_headers_as_they_were(
    kafka, tmp_path: Path
):
    """Records with headers of their own (testing/java/HeaderedProducer.java: "trace" on every
    record, "tenant" on every other) reach the broker with exactly those headers, through the
    interceptor's view of them, and are counted with their keys."""
    bootstrap = kafka.bootstrap_servers
    topic, audit_topic = new_topics(kafka, "k41h")
    log4j = tmp_path / "log4j.properties"
    log4j.write_text("log4j.rootLogger=ERROR\n")
    jars = interceptor_jars(KAFKA4_JARS_DIR, tmp_path / "jars")
    command = jvm_command(
        jars, log4j, str(HEADERED_PRODUCER), bootstrap, topic, audit_topic, str(HEADERED)
    )
    done = subprocess.run(command, capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 0, done.stderr[-3000:]

    sent = list(iter_messages(bootstrap, topic, 3))
    assert len(sent) == HEADERED
    seen = set()
    for m in sent:
        i = int(dict(m.headers())["trace"].decode()[1:])
        expected = [("trace", f"t{i}".encode())] + ([("tenant", b"a")] if i % 2 == 0 else [])
        assert m.headers() == expected, f"record {i}"
        assert (m.key(), m.value()) == (f"k{i % 3}".encode(), f"v{i % 10}".encode())
        seen.add(i)
    assert seen == set(range(HEADERED))

    reports = reports_of(bootstrap, audit_topic, topic)
    assert sum(r.message_count for r in reports) == HEADERED
    assert keyed_count(reports) == HEADERED
    union = hll_union(12)
    for r in reports:
        union.update(hll_sketch.deserialize(bytes(r.hll_sketch)))
    truth_keys = {dedupe_key(m.key(), m.value()) for m in sent}
    assert len(truth_keys) == 30
    # Fewer than 40 distinct keys: the sketch is in its exact list mode.
    assert round(union.get_estimate()) == len(truth_keys)
