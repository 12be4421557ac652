"""Both audit-reporting clients against the cross-tier audit, on the real broker, Spark and
Delta: a Python service (`clients.AuditedProducer`) and a Java producer with
`interceptor.classes=dev.uatu.audit.report.AuditProducerInterceptor` (a real KafkaProducer in
the session's Spark JVM, driven through py4j) produce known records; loss and duplication are
injected between the tiers with known counts; one counting run and one cross-tier run decide
every window, and a late report revises a verdict as revision 2.

Topic `orders` (1 partition), offsets by construction:
  w1  0..39   orders-api (Python wrapper), 40 records; offsets 0..4 deleted (loss at Kafka)
  w2  40..69  java-api (Java interceptor), 30 records; 94..96 three of them produced again
              by a plain producer (duplication at Kafka, no report)
  w3  70..89  orders-api, 20 records; 90..93 late-api, 4 records whose report arrives late
`orders-copy`: every remaining offset stamped `uatu.src` as the replication job does, except
75..77 (never arrived) and 45 (copied twice).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

from core.audit_reports import AuditReporter, ReporterIdentity, WindowTally
from testing.audit_clients import produce_with_interceptor, produce_with_wrapper
from testing.topic_data import Record, produce_records, read_partitions
from tests.jobs.audit.test_tier_audits import (
    counting_group,
    newest,
    past_window,
    run_once,
    tier_group,
    verdicts,
)

pytestmark = pytest.mark.integration


def late_report(bootstrap: str, audit_topic: str, topic: str, records) -> None:
    """What late-api's reporter sends once it is back: its tally of the records it produced,
    without latency (a report with no KLL sketch must not fail the aggregation)."""
    tally = WindowTally(60)
    for key, value, ts in records:
        tally.add(topic, key, value, ts)
    reporter = AuditReporter(
        tally,
        ReporterIdentity("late-api", "local"),
        audit_topic,
        {"bootstrap.servers": bootstrap},
        start_timer=False,
    )
    reporter.close()
    assert reporter.reports_sent == 1


def test_python_and_java_reporters_loss_duplication_gaps_and_a_late_revision(
    spark, kafka, tmp_path: Path
):
    from testing.conf import write_conf_dir

    name = tmp_path.name[-16:].replace("_", "-").lower()
    bootstrap = kafka.bootstrap_servers
    conf_dir = write_conf_dir(tmp_path / "conf", bootstrap, tmp_path / "wh", tmp_path / "ck")
    warehouse = tmp_path / "wh"
    topic, copy, audit_topic = f"orders-{name}", f"orders-copy-{name}", f"audit-{name}"
    for t in (topic, copy, audit_topic):
        kafka.create_topic(t, partitions=1)
    w1, w2, w3 = past_window(20), past_window(18), past_window(16)
    first = [(b"a%d" % i, b"x%d" % i, w1 + 100 * i) for i in range(40)]
    java = [(b"j%d" % i, b"y%d" % i, w2 + 100 * i) for i in range(30)]
    third = [(b"c%d" % i, b"z%d" % i, w3 + 100 * i) for i in range(20)]
    late = [(b"l%d" % i, b"q%d" % i, w3 + 50 + 100 * i) for i in range(4)]

    produce_with_wrapper(bootstrap, topic, audit_topic, first)
    produce_with_interceptor(spark, bootstrap, topic, audit_topic, java)
    produce_with_wrapper(bootstrap, topic, audit_topic, third)
    produce_records(bootstrap, topic, [Record(0, k, v, ts) for k, v, ts in late])
    produce_records(bootstrap, topic, [Record(0, k, v, ts) for k, v, ts in java[:3]])
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_records([TopicPartition(topic, 0, 5)]).values():
        future.result(timeout=30)

    # The replication tier, simulated exactly: stamped copies, 75..77 lost, 45 twice.
    source = read_partitions(bootstrap, topic, 1)[0]
    assert [r.offset for r in source] == list(range(5, 97))
    copies = []
    for r in source:
        if r.offset in (75, 76, 77):
            continue
        stamp = (("uatu.src", f"local/{topic}/0/{r.offset}".encode()),)
        copies += [Record(0, r.key, r.value, r.timestamp_ms, stamp)] * (2 if r.offset == 45 else 1)
    produce_records(bootstrap, copy, copies)

    run_once(spark, conf_dir, counting_group(f"count-{name}", topic))
    configs: list[dict[str, Any]] = [
        {"auditType": "AUDIT_TYPE_SERVICE_AUDIT_AGGREGATION", "auditIntervalInSeconds": 60},
        {
            "auditType": "AUDIT_TYPE_REPLICATION",
            "auditIntervalInSeconds": 60,
            "replicationAuditConfig": {
                "replicationChecks": [
                    {
                        "source": [{"cluster": "local", "topic": topic}],
                        "destination": [{"cluster": "local", "topic": copy}],
                    }
                ]
            },
        },
    ]
    group = tier_group(f"tiers-{name}", audit_topic, configs)
    run_once(spark, conf_dir, group)

    got = newest(verdicts(spark, warehouse))
    service = {w: got[("service->kafka", w)] for w in (w1, w2, w3)}
    assert [
        (r["verdict"], r["left_count"], r["right_count"], r["difference"], r["revision"])
        for r in service.values()
    ] == [
        ("LOSS", 40, 35, -5, 1),  # 5 acknowledged records deleted at Kafka
        ("DUPLICATION", 30, 33, 3, 1),  # the Java interceptor's 30, 3 produced again
        ("DUPLICATION", 20, 24, 4, 1),  # late-api has not reported yet
    ]
    # Kafka's unique count sees through the duplicates of w2: the same 30 records.
    assert service[w2]["right_unique"] == 30 and service[w2]["left_unique"] == 30

    check = f"replication:local/{topic}->local/{copy}"
    replication = {w: got[(check, w)] for w in (w1, w2, w3)}
    assert [
        (r["verdict"], r["left_count"], r["right_count"], r["missing_count"])
        for r in replication.values()
    ] == [
        ("OK", 35, 35, 0),
        ("DUPLICATION", 33, 34, 0),
        ("LOSS", 24, 21, 3),
    ]
    gaps = (
        spark.read.format("delta")
        .load(str(warehouse / "replication_gaps"))
        .select("source_topic", "partition", "first_offset", "last_offset", "missing_count")
        .collect()
    )
    assert [tuple(g) for g in gaps] == [(topic, 0, 75, 77, 3)]

    # late-api's report arrives: w3 is revised to OK as revision 2, nothing else changes.
    late_report(bootstrap, audit_topic, topic, late)
    run_once(spark, conf_dir, group)
    rows = [r for r in verdicts(spark, warehouse) if r["check_name"] == "service->kafka"]
    assert [(r["start_ms"], r["revision"], r["verdict"], r["left_count"]) for r in rows] == [
        (w1, 1, "LOSS", 40),
        (w2, 1, "DUPLICATION", 30),
        (w3, 1, "DUPLICATION", 20),
        (w3, 2, "OK", 24),
    ]
    assert [r["revision"] for r in verdicts(spark, warehouse) if r["check_name"] == check] == [
        1,
        1,
        1,
    ]
