"""The KRP tier end to end, on real parts: the session's broker, a real kafka-pixy, Spark and
Delta. The availability job's PROXY_PRODUCER probes go through kafka-pixy's Produce and report
what kafka-pixy acknowledged, as tier KRP, to their `krp_audit_topic` (2-second windows); the
counting audit (EXACT_UNIQ, events placed by the probes' `sent_ms`) counts the probe topic;
the cross-tier audit (AUDIT_TYPE_KRP_AUDIT_AGGREGATION) folds the reports and compares.

Truth is read back from the probe topic after the job stopped (every probe there, by its send
time) and from the probes' own ledger (`availability_probes`' produced counts); the test then
deletes the first records of partition 0 (all of one window, as retention would) and knows
exactly how many: that window must be LOSS by that many, every other window OK.
"""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import TopicPartition
from datasketches import hll_sketch, hll_union, kll_doubles_sketch
from delta.tables import DeltaTable
from pyspark.sql import functions as F
from uatu.v1 import audit_report_pb2

from core.audit_reports import dedupe_key
from testing.polling import wait_for
from testing.topic_data import iter_messages, read_partitions
from tests.jobs.audit.test_tier_audits import OPTIONS, newest, run_once, tier_group, verdicts
from tests.jobs.availability.test_availability_integration import running, spec_for

pytestmark = pytest.mark.integration

WINDOW_S = 2
WINDOW_MS = WINDOW_S * 1000


def window(ms: int) -> int:
    return ms - ms % WINDOW_MS


def probe_counting_group(group_id: str, topic: str) -> dict[str, Any]:
    """EXACT_UNIQ of the probe topic, each probe placed by the send time in its value (as the
    KRP reports place it: jobs/availability/probes/krp.py)."""
    return {
        "jobGroupId": group_id,
        "type": "JOB_TYPE_KAFKA_AUDIT",
        "kafkaConsumerTaskGroup": {
            "cluster": "local",
            "topic": topic,
            "auditMetadata": {
                "auditConfigs": [
                    {"auditType": "AUDIT_TYPE_EXACT_UNIQ", "auditIntervalInSeconds": WINDOW_S}
                ]
            },
        },
        "extension": {
            "@type": OPTIONS,
            "audit": {"eventTime": {"source": "FIELD_SOURCE_JSON_FIELD", "field": "sent_ms"}},
        },
    }


def krp_reports(bootstrap: str, audit_topic: str) -> list[audit_report_pb2.AuditReport]:
    return [
        audit_report_pb2.AuditReport.FromString(m.value())
        for m in iter_messages(bootstrap, audit_topic, 1)
    ]


def test_proxy_probes_report_krp_and_the_tier_audit_finds_a_window_kafka_lost(
    spark, kafka, kafka_pixy, tmp_path: Path
) -> None:
    run = uuid.uuid4().hex[:8]
    topic, audit_topic, group_id = f"probe-krp-{run}", f"krp-audit-{run}", f"krp-{run}"
    bootstrap = kafka.bootstrap_servers
    kafka.create_topic(topic, 2, 1)  # the audit topic is the job's to create
    spec = spec_for(
        tmp_path,
        bootstrap,
        group_id,
        probe_type="PROXY_PRODUCER",
        probe_topic=topic,
        proxy={"grpc_address": kafka_pixy.grpc_address, "cluster": "local"},
        skipConsumerLag=True,
        skipTopicAvailability=True,
        probeIntervalMs=200,
        probeWindowSeconds=WINDOW_S,
        krpAuditTopic=audit_topic,
        krpAuditWindowSeconds=WINDOW_S,
    )
    probes_table = spec.output.table("availability_probes")

    def ledger_windows() -> dict[int, int] | None:
        """Produced probes per window (the ledger's roll-up rows), once there are two."""
        if not DeltaTable.isDeltaTable(spark, probes_table):
            return None
        rows = (
            spark.read.format("delta").load(probes_table).where("broker IS NULL")
            .select(F.unix_millis("window_start").alias("start"), "produced", "probes")
            .collect()
        )  # fmt: skip
        return {r.start: r.produced for r in rows} if len(rows) >= 2 else None

    with running(spec, tmp_path / "stop"):
        ledger = wait_for(ledger_windows, 90, "two final probe windows")
    # Stopped: the reporter sent its last reports after the last Produce call returned.

    # Truth from the topic: every probe, by the send time its value carries.
    records = read_partitions(bootstrap, topic, 2)
    sent: Counter[int] = Counter()
    keys: dict[int, set[int]] = defaultdict(set)
    sizes: Counter[int] = Counter()
    for r in (r for part in records.values() for r in part):
        start = window(json.loads(r.value)["sent_ms"])
        sent[start] += 1
        keys[start].add(dedupe_key(r.key, r.value))
        sizes[start] += len(r.key or b"") + len(r.value or b"")
    assert len(sent) >= 2 and all(len(keys[w]) == n for w, n in sent.items())
    # The ledger's windows agree with the topic (the windows still open at stop are not in it).
    assert {w: sent[w] for w in ledger} == ledger

    # The KRP reports count exactly what kafka-pixy acknowledged, which all reached Kafka.
    reports = krp_reports(bootstrap, audit_topic)
    reported: Counter[int] = Counter()
    reported_bytes: Counter[int] = Counter()
    unions: dict[int, Any] = defaultdict(lambda: hll_union(12))
    latencies = 0
    for report in reports:
        assert report.reporter.tier == audit_report_pb2.TIER_KRP
        assert report.reporter.service == f"uatu-availability-{group_id}"
        assert (report.cluster, report.topic, report.window_seconds) == ("local", topic, WINDOW_S)
        assert report.failed_count == 0
        reported[report.window_start_ms] += report.message_count
        reported_bytes[report.window_start_ms] += report.byte_count
        unions[report.window_start_ms].update(hll_sketch.deserialize(bytes(report.hll_sketch)))
        latencies += kll_doubles_sketch.deserialize(bytes(report.latency_kll_sketch)).n
    assert reported == sent and reported_bytes == sizes
    assert {w: round(u.get_estimate()) for w, u in unions.items()} == {
        w: len(k) for w, k in keys.items()
    }
    assert latencies == sum(sent.values())  # an ack latency for every acknowledged probe

    # Kafka loses the first records of partition 0, all in the first window: the test knows
    # how many.
    first = records[0]
    lossy = window(json.loads(first[0].value)["sent_ms"])
    lost = 0
    while lost < min(3, len(first)) and window(json.loads(first[lost].value)["sent_ms"]) == lossy:
        lost += 1
    admin = kafka.admin()  # kept: a collected client fails its pending requests
    deleted = admin.delete_records([TopicPartition(topic, 0, first[0].offset + lost)])
    for future in deleted.values():
        future.result(timeout=30)

    conf_dir = tmp_path / "conf"
    run_once(spark, conf_dir, probe_counting_group(f"count-{group_id}", topic))
    # Every window decided: past its end and its grace period (one window).
    last_close = max(sent) + 2 * WINDOW_MS
    wait_for(lambda: time.time() * 1000 > last_close, 30, "the last window's grace period")
    krp = [{"auditType": "AUDIT_TYPE_KRP_AUDIT_AGGREGATION", "auditIntervalInSeconds": WINDOW_S}]
    run_once(spark, conf_dir, tier_group(f"tiers-{group_id}", audit_topic, krp))

    got = {start: r for (check, start), r in newest(verdicts(spark, tmp_path / "wh")).items()}
    assert {r["check_name"] for r in got.values()} == {"krp->kafka"}
    expected = {
        w: ("LOSS", n, n - lost, n, n - lost) if w == lossy else ("OK", n, n, n, n)
        for w, n in sent.items()
    }
    decided = {
        w: (r["verdict"], r["left_count"], r["right_count"], r["left_unique"], r["right_unique"])
        for w, r in got.items()
    }
    assert decided == expected
    assert sum(v == "OK" for v, *_ in decided.values()) == len(sent) - 1 >= 1
    assert lost >= 1 and got[lossy]["left_label"] == f"KRP local/{topic}"
