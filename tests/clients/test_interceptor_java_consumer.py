"""The Java audit consumer interceptor (`dev.uatu.audit.report.AuditConsumerInterceptor`, tier
CONSUMER) in real KafkaConsumers outside Spark, and its reports in the cross-tier audit.

A Java producer with the producer interceptor (tier SERVICE, in the session's Spark JVM) writes
a 1-partition topic with known records in three past 1-minute windows, some (key, value)
pairs repeated. `testing/java/AuditedConsumer.java`, run as a single source file on Kafka 3.9
clients, then consumes it with two groups: one reads everything, the other stops after about
40 records. Each prints every record its polls returned, which with the records read back
from the topic is the truth: per group and window, how many records, how many bytes, how many
distinct `xxhash64(key, value)`. The CONSUMER reports must count exactly that, their HLL
sketches exact (fewer than 40 distinct keys a window); the SERVICE check of the cross-tier
audit must then say OK for `service->kafka` and for every window the full group consumed
(`kafka->consumer:<group>`), and LOSS, with both counts, for the window the other group left
half read.
"""

from __future__ import annotations

import subprocess
import uuid
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest
from datasketches import hll_sketch, hll_union, kll_doubles_sketch
from uatu.v1 import audit_report_pb2

from core.audit_reports import dedupe_key
from core.paths import KAFKA_JARS_DIR, ROOT
from devservices.kafka import jvm_command
from testing.audit_clients import interceptor_jars, produce_with_interceptor
from testing.conf import write_conf_dir
from testing.topic_data import iter_messages, read_partitions
from tests.jobs.audit.test_tier_audits import (
    counting_group,
    newest,
    past_window,
    run_once,
    tier_group,
    verdicts,
)

pytestmark = pytest.mark.integration

AUDITED_CONSUMER = ROOT / "testing" / "java" / "AuditedConsumer.java"
WINDOW_MS = 60_000


def records_of(window: int, prefix: str, count: int, distinct: int) -> list[tuple[bytes, ...]]:
    """`count` records 100 ms apart from `window` on, cycling through `distinct` (key, value)."""
    return [
        (f"{prefix}{i % distinct}".encode(), f"v{i % distinct}".encode(), window + 100 * i)
        for i in range(count)
    ]


def consumed_by_group(stdout: str) -> dict[str, list[int]]:
    """The offsets each group's polls returned (partition 0), as the program printed them."""
    out: dict[str, list[int]] = defaultdict(list)
    for line in stdout.splitlines():
        group, partition, offset = line.split()
        assert partition == "0", line
        out[group].append(int(offset))
    return out


def test_consumer_interceptor_counts_what_each_group_consumed_and_the_tier_audit_agrees(
    spark, kafka, tmp_path: Path
) -> None:
    run = uuid.uuid4().hex[:8]
    bootstrap = kafka.bootstrap_servers
    topic, audit_topic = f"consumed-{run}", f"consumed-audit-{run}"
    full, part = f"full-{run}", f"part-{run}"
    kafka.create_topic(topic, partitions=1)
    kafka.create_topic(audit_topic, partitions=1)
    w1, w2, w3 = past_window(20), past_window(19), past_window(18)
    produce_with_interceptor(
        spark,
        bootstrap,
        topic,
        audit_topic,
        records_of(w1, "a", 30, 25) + records_of(w2, "b", 20, 20) + records_of(w3, "c", 10, 7),
    )

    log4j = tmp_path / "log4j.properties"
    log4j.write_text("log4j.rootLogger=ERROR\n")
    jars = interceptor_jars(KAFKA_JARS_DIR, tmp_path / "jars")
    # The second group polls 5 records at a time and stops after 40: all of w1, half of w2.
    command = jvm_command(
        jars, log4j, str(AUDITED_CONSUMER), bootstrap, topic, audit_topic, f"{full}:60:500",
        f"{part}:40:5",
    )  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    consumed = consumed_by_group(done.stdout)
    assert sorted(consumed[full]) == list(range(60))
    assert sorted(consumed[part]) == list(range(len(consumed[part]))) != []

    # Truth per (group, window): records, bytes and distinct dedupe keys of what it consumed.
    on_topic = {r.offset: r for r in read_partitions(bootstrap, topic, 1)[0]}
    truth: dict[tuple[str, int], tuple[int, int, int]] = {}
    for group, offsets in consumed.items():
        counts: Counter[int] = Counter()
        sizes: Counter[int] = Counter()
        keys: dict[int, set[int]] = defaultdict(set)
        for offset in offsets:
            r = on_topic[offset]
            start = r.timestamp_ms - r.timestamp_ms % WINDOW_MS
            counts[start] += 1
            sizes[start] += len(r.key) + len(r.value)
            keys[start].add(dedupe_key(r.key, r.value))
        truth.update({(group, w): (counts[w], sizes[w], len(keys[w])) for w in counts})
    assert truth[(full, w1)][::2] == (30, 25) and truth[(part, w1)] == truth[(full, w1)]
    assert 10 <= truth[(part, w2)][0] < 15 and (part, w3) not in truth

    # The CONSUMER reports, per group and window.
    reports = [
        audit_report_pb2.AuditReport.FromString(m.value())
        for m in iter_messages(bootstrap, audit_topic, 1)
    ]
    consumer_reports = [r for r in reports if r.reporter.tier == audit_report_pb2.TIER_CONSUMER]
    assert {r.reporter.consumer_group for r in consumer_reports} == {full, part}
    tallied: dict[tuple[str, int], list[Any]] = defaultdict(lambda: [0, 0, hll_union(12), 0])
    for r in consumer_reports:
        assert (r.cluster, r.topic, r.window_seconds, r.failed_count) == ("local", topic, 60, 0)
        entry = tallied[(r.reporter.consumer_group, r.window_start_ms)]
        entry[0] += r.message_count
        entry[1] += r.byte_count
        entry[2].update(hll_sketch.deserialize(bytes(r.hll_sketch)))
        entry[3] += kll_doubles_sketch.deserialize(bytes(r.latency_kll_sketch)).n
    assert {k: (n, b, round(u.get_estimate())) for k, (n, b, u, _) in tallied.items()} == truth
    # Every record was counted with its dedupe key (only those get a latency).
    assert all(latencies == n for n, _, _, latencies in tallied.values())

    conf_dir = write_conf_dir(tmp_path / "conf", bootstrap, tmp_path / "wh", tmp_path / "ck")
    run_once(spark, conf_dir, counting_group(f"count-{run}", topic))
    service = [{"auditType": "AUDIT_TYPE_SERVICE_AUDIT_AGGREGATION", "auditIntervalInSeconds": 60}]
    run_once(spark, conf_dir, tier_group(f"tiers-{run}", audit_topic, service))

    on_kafka = {w1: 30, w2: 20, w3: 10}
    expected = {("service->kafka", w): ("OK", n, n) for w, n in on_kafka.items()}
    for (group, w), (n, _, _) in truth.items():
        verdict = "OK" if n == on_kafka[w] else "LOSS"
        expected[(f"kafka->consumer:{group}", w)] = (verdict, on_kafka[w], n)
    got = newest(verdicts(spark, tmp_path / "wh"))
    assert {
        k: (r["verdict"], r["left_count"], r["right_count"]) for k, r in got.items()
    } == expected
    assert expected[(f"kafka->consumer:{part}", w2)][0] == "LOSS"
