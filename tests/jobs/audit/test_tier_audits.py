"""The cross-tier AuditTypes against streams whose truth the test knows: a real broker, the
session's Spark, real Delta tables. Jobs run in-process (`run_once`: the job's own stream and
batch writer under `run_query`, AvailableNow), except the restart test, which SIGKILLs a
`./spark-submit.sh` application.

Windows are placed 10-20 minutes in the past, so every window is past its grace period when
the audit runs and the expected verdicts are final.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from pyspark.sql import functions as F

from clients import AuditedProducer, AuditSettings
from core.config import load_settings
from jobs import registry
from jobs.runtime.runner import run_query
from testing.conf import write_conf_dir
from testing.jobgroups import parse
from testing.topic_data import Record, produce_records

pytestmark = pytest.mark.integration

WINDOW_MS = 60_000
OPTIONS = "type.googleapis.com/uatu.v1.JobOptions"


def past_window(minutes_ago: int) -> int:
    now = int(time.time() * 1000)
    start = now - minutes_ago * 60_000
    return start - start % WINDOW_MS


def counting_group(group_id: str, topic: str) -> dict[str, Any]:
    return {
        "jobGroupId": group_id,
        "type": "JOB_TYPE_KAFKA_AUDIT",
        "kafkaConsumerTaskGroup": {
            "cluster": "local",
            "topic": topic,
            "auditMetadata": {
                "auditConfigs": [
                    {"auditType": "AUDIT_TYPE_EXACT_UNIQ", "auditIntervalInSeconds": 60},
                    {"auditType": "AUDIT_TYPE_APPROX_UNIQ", "auditIntervalInSeconds": 60},
                ]
            },
        },
    }


def tier_group(group_id: str, topic: str, configs: list[dict], **extra: Any) -> dict[str, Any]:
    group = {
        "jobGroupId": group_id,
        "type": "JOB_TYPE_KAFKA_AUDIT",
        "kafkaConsumerTaskGroup": {
            "cluster": "local",
            "topic": topic,
            "auditMetadata": {"auditConfigs": configs},
            **extra.pop("source", {}),
        },
        "extension": {"@type": OPTIONS, "trigger": {"intervalSeconds": 1}},
    }
    group.update(extra)
    return group


def run_once(spark, conf_dir: Path, group: dict[str, Any]) -> None:
    """One AvailableNow run of the group's job in this process (its own checkpoint)."""
    settings = load_settings(conf_dir)
    job_type, spec = registry.validate(parse(group), settings)
    job = job_type.load_runtime()(spec)
    job.ensure_tables(spark)
    status = run_query(
        job.stream(spark),
        job.batch_writer(spark),
        job.query_settings(once=True, stop_file=None),
    )
    job.close()
    assert status == 0


def verdicts(spark, warehouse: Path) -> list[dict[str, Any]]:
    rows = (
        spark.read.format("delta")
        .load(str(warehouse / "audit_verdicts"))
        .withColumn("start_ms", F.unix_millis("window_start"))
        .orderBy("check_name", "start_ms", "revision")
        .collect()
    )
    return [r.asDict() for r in rows]


def newest(rows: list[dict[str, Any]]) -> dict[tuple[str, int], dict[str, Any]]:
    out: dict[tuple[str, int], dict[str, Any]] = {}
    for r in rows:
        out[(r["check_name"], r["start_ms"])] = r  # rows are sorted by revision
    return out


@pytest.fixture
def env(kafka, tmp_path):
    name = tmp_path.name[-20:].replace("_", "-").lower()
    conf_dir = write_conf_dir(
        tmp_path / "conf", kafka.bootstrap_servers, tmp_path / "wh", tmp_path / "ck"
    )
    return name, conf_dir, tmp_path / "wh"


def audited_produce(
    bootstrap: str, topic: str, audit_topic: str, records: list[tuple[bytes, bytes, int]]
) -> AuditedProducer:
    producer = AuditedProducer(
        {"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5},
        AuditSettings(service="orders-api", cluster="local", audit_topic=audit_topic),
    )
    for key, value, ts in records:
        producer.produce(topic, value=value, key=key, timestamp=ts)
        producer.poll(0)
    producer.close()
    return producer


def test_service_reports_loss_duplicate_report_and_a_revision_on_late_data(spark, kafka, env):
    """SERVICE reports vs audit_counts: a window whose records were deleted from Kafka is LOSS
    with both sides' counts, an untouched one OK; a report read twice counts once; records that
    arrive late on Kafka revise the OK window to DUPLICATION as revision 2."""
    name, conf_dir, warehouse = env
    topic, audit_topic = f"orders-{name}", f"audit-{name}"
    kafka.create_topic(topic, partitions=1)
    kafka.create_topic(audit_topic, partitions=1)
    w1, w2 = past_window(20), past_window(18)
    first = [(b"k%d" % i, b"v%d" % i, w1 + 10 * i) for i in range(40)]
    second = [(b"m%d" % i, b"w%d" % i, w2 + 10 * i) for i in range(30)]
    audited_produce(kafka.bootstrap_servers, topic, audit_topic, first + second)
    # One report read twice: its exact bytes produced again to the audit topic.
    copy = next(iter(read_values(kafka.bootstrap_servers, audit_topic)))
    p = Producer({"bootstrap.servers": kafka.bootstrap_servers})
    p.produce(audit_topic, copy)
    p.flush()
    # The loss: Kafka deletes the first 5 records of window 1.
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers})
    for future in admin.delete_records([TopicPartition(topic, 0, 5)]).values():
        future.result(timeout=30)

    run_once(spark, conf_dir, counting_group(f"count-{name}", topic))
    service = [{"auditType": "AUDIT_TYPE_SERVICE_AUDIT_AGGREGATION", "auditIntervalInSeconds": 60}]
    tiers = tier_group(f"tiers-{name}", audit_topic, service)
    run_once(spark, conf_dir, tiers)

    counts = spark.read.format("delta").load(str(warehouse / "tier_counts"))
    totals = counts.groupBy("window_start").agg(F.sum("message_count").alias("n")).collect()
    assert sorted(r["n"] for r in totals) == [30, 40]  # the repeated report counted once
    got = newest(verdicts(spark, warehouse))
    loss = got[("service->kafka", w1)]
    assert (loss["verdict"], loss["left_count"], loss["right_count"]) == ("LOSS", 40, 35)
    assert loss["difference"] == -5 and loss["revision"] == 1
    ok = got[("service->kafka", w2)]
    assert (ok["verdict"], ok["left_count"], ok["right_count"], ok["revision"]) == ("OK", 30, 30, 1)

    # Late data on Kafka for window 2 (not through the wrapper): the verdict is revised.
    produce_records(
        kafka.bootstrap_servers, topic, [Record(0, b"m0", b"w0", w2 + 5) for _ in range(3)]
    )
    run_once(spark, conf_dir, counting_group(f"count-{name}", topic))
    run_once(spark, conf_dir, tiers)
    rows = [r for r in verdicts(spark, warehouse) if r["start_ms"] == w2]
    assert [(r["revision"], r["verdict"], r["right_count"]) for r in rows] == [
        (1, "OK", 30),
        (2, "DUPLICATION", 33),
    ]
    # Nothing changed for window 1: no new revision.
    assert [r["revision"] for r in verdicts(spark, warehouse) if r["start_ms"] == w1] == [1]


def read_values(bootstrap: str, topic: str) -> list[bytes]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": uuid.uuid4().hex,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([topic])
    values: list[bytes] = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not values:
        for m in consumer.consume(100, timeout=1):
            if m.error() is None:
                values.append(m.value())
    consumer.close()
    return values
