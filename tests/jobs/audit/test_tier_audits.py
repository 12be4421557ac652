"""The cross-tier AuditTypes against streams whose truth the test knows: a real broker, the
session's Spark, real Delta tables. Jobs run in-process (`run_once`: the job template's steps
after the session, AvailableNow), except the restart test, which SIGKILLs a
`./spark-submit.sh` application.

Windows are placed 10-20 minutes in the past, so every window is past its grace period when
the audit runs and the expected verdicts are final; RETENTION and AVAILABILITY, which sample
the broker's metadata now, run as a streaming job with 5-second windows until the verdict
the test waits for is decided.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource
from delta.tables import DeltaTable
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from pyspark.sql import functions as F

from clients import AuditedProducer, AuditSettings
from core.config import load_settings
from jobs import registry
from jobs.runtime import metrics as runtime_metrics
from testing.conf import write_conf_dir
from testing.jobgroups import parse
from testing.jobrun import running_in_thread
from testing.polling import wait_for
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
    """One AvailableNow run of the group's job in this process (its own checkpoint): the
    template's steps after the session (`StreamingJob.run`), on the test's session."""
    settings = load_settings(conf_dir)
    job_type, spec = registry.validate(parse(group), settings)
    job = job_type.load_runtime()(spec)
    try:
        job.ensure_tables(spark)
        assert job.before_query(spark) is None
        status = job.run_stream(spark, once=True, stop_file=None, reporting=None)
    finally:
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


def test_service_reports_loss_duplicate_report_and_a_revision_on_late_data(
    spark, kafka, env, monkeypatch
):
    """SERVICE reports vs audit_counts: a window whose records were deleted from Kafka is LOSS
    with both sides' counts, an untouched one OK; a report read twice counts once; records that
    arrive late on Kafka revise the OK window to DUPLICATION as revision 2. The job's verdict
    series (as a driver serving /metrics exports them) count the rows the table holds."""
    monkeypatch.setattr(runtime_metrics, "serving", lambda: True)
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
    written = Counter(r["verdict"] for r in verdicts(spark, warehouse))
    assert verdict_samples("uatu_audit_verdicts_total", f"tiers-{name}") == {
        (("verdict", v),): float(n) for v, n in written.items()
    }
    # The newest window is w2, revised to DUPLICATION by 3 records.
    assert verdict_samples("uatu_audit_check_verdict", f"tiers-{name}") == {(): 2.0}
    assert verdict_samples("uatu_audit_check_duplicated_records", f"tiers-{name}") == {(): 3.0}


def verdict_samples(name: str, group_id: str) -> dict[tuple[tuple[str, str], ...], float]:
    """{labels but the check's: value} of the samples `name` of `group_id` in the registry."""
    check = {"job_group_id", "check_type", "check_name", "cluster", "topic"}
    text = generate_latest(runtime_metrics.REGISTRY).decode()
    return {
        tuple(sorted((k, v) for k, v in s.labels.items() if k not in check)): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name and s.labels.get("job_group_id") == group_id
    }


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


def counting_on(cluster: str, group_id: str, topic: str) -> dict[str, Any]:
    group = counting_group(group_id, topic)
    group["kafkaConsumerTaskGroup"]["cluster"] = cluster
    return group


def keyed(prefix: str, window: int, indexes: Iterable[int]) -> list[Record]:
    return [Record(0, f"{prefix}{i}".encode(), b"v", window + 10 * i) for i in indexes]


def test_xdc_sums_one_dc_against_another_and_tells_loss_from_duplication(
    spark, kafka, kafka_dest, tmp_path
):
    """XDC: two topics of DC A (`local`) summed against one of DC B (`dc-b`, a second
    cluster), failure_threshold 2 %, per 1-minute window. The test knows both sides of every
    window: equal (OK); 1 % short (OK, within the threshold); 15 % short (LOSS); 20 % more
    (DUPLICATION); and as many records as the source but 5 of them repeats (LOSS, told apart
    only by the unique counts of the sketch union)."""
    name = tmp_path.name[-20:].replace("_", "-").lower()
    conf_dir = write_conf_dir(
        tmp_path / "conf",
        kafka.bootstrap_servers,
        tmp_path / "wh",
        tmp_path / "ck",
        more_clusters={"dc-b": {"bootstrap_servers": kafka_dest.bootstrap_servers}},
    )
    src_a, src_b, dest = f"xa-{name}", f"xb-{name}", f"xagg-{name}"
    kafka.create_topic(src_a, partitions=1)
    kafka.create_topic(src_b, partitions=1)
    kafka_dest.create_topic(dest, partitions=1)
    w = [past_window(m) for m in (20, 19, 18, 17, 16)]
    to_a = keyed("a", w[0], range(30)) + keyed("c", w[1], range(100)) + keyed("d", w[2], range(40))
    to_a += keyed("f", w[4], range(20))
    to_b = keyed("b", w[0], range(20)) + keyed("e", w[3], range(10))
    to_dest = keyed("a", w[0], range(30)) + keyed("b", w[0], range(20))
    to_dest += keyed("c", w[1], range(99)) + keyed("d", w[2], range(34))
    to_dest += keyed("e", w[3], range(10)) + keyed("e", w[3], range(2))
    to_dest += keyed("f", w[4], range(15)) + keyed("f", w[4], range(5))
    produce_records(kafka.bootstrap_servers, src_a, to_a)
    produce_records(kafka.bootstrap_servers, src_b, to_b)
    produce_records(kafka_dest.bootstrap_servers, dest, to_dest)

    run_once(spark, conf_dir, counting_on("local", f"count-a-{name}", src_a))
    run_once(spark, conf_dir, counting_on("local", f"count-b-{name}", src_b))
    run_once(spark, conf_dir, counting_on("dc-b", f"count-agg-{name}", dest))
    xdc = {
        "auditType": "AUDIT_TYPE_XDC",
        "auditIntervalInSeconds": 60,
        "crossDcAuditConfig": {
            "crossDcChecks": {
                "source": [
                    {"cluster": "local", "topic": src_a},
                    {"cluster": "local", "topic": src_b},
                ],
                "destination": [{"cluster": "dc-b", "topic": dest}],
            },
            "failureThreshold": 0.02,
            "udqTestName": "orders-xdc",
        },
    }
    run_once(spark, conf_dir, tier_group(f"xdc-{name}", src_a, [xdc]))

    got = newest(verdicts(spark, tmp_path / "wh"))
    decided = {
        start: (
            r["verdict"],
            r["left_count"],
            r["right_count"],
            r["left_unique"],
            r["right_unique"],
        )
        for (check, start), r in got.items()
        if check == "orders-xdc"
    }
    assert decided == {
        w[0]: ("OK", 50, 50, 50, 50),
        w[1]: ("OK", 100, 99, 100, 99),
        w[2]: ("LOSS", 40, 34, 40, 34),
        w[3]: ("DUPLICATION", 10, 12, 10, 10),
        w[4]: ("LOSS", 20, 20, 20, 15),
    }
    assert {(r["check_type"], r["cluster"], r["topic"]) for r in got.values()} == {
        ("AUDIT_TYPE_XDC", "dc-b", dest)
    }
    assert "fewer distinct records" in got[("orders-xdc", w[4])]["detail"]


def test_retention_and_availability_are_sampled_while_the_job_runs(spark, kafka, env):
    """RETENTION and AVAILABILITY on a running job (1 s trigger, 5 s windows, 1 s grace).

    The group has consumed partition 0 up to offset 10 and partition 1 to its end (40); then
    retention (delete_records, as the log cleaner would) moves the log starts to 25 and 30.
    Truth: offsets 10-24 of partition 0 were deleted before they were consumed (LOSS, 15
    records, that exact range); partition 1 lost nothing. The topic's min.insync.replicas is
    2 on one replica, so every sampled second of every partition is under min ISR, and none is
    offline or under-replicated."""
    name, conf_dir, warehouse = env
    topic, consumer_group = f"ret-{name}", f"ret-group-{name}"
    bootstrap = kafka.bootstrap_servers
    kafka.create_topic(topic, partitions=2, config={"retention.ms": "3600000"})
    now = int(time.time() * 1000)
    produce_records(
        bootstrap, topic, [Record(p, None, b"r%d" % i, now) for p in (0, 1) for i in range(40)]
    )
    # The group's commits, as its consumer makes them: AdminClient.alter_consumer_group_offsets
    # returns per-partition errors (NOT_COORDINATOR while the offsets topic loads) without
    # raising, and crashed the Python process in some runs here (confluent-kafka 2.16.1).
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": consumer_group, "enable.auto.commit": False}
    )
    offsets = [TopicPartition(topic, 0, 10), TopicPartition(topic, 1, 40)]
    try:
        wait_for(
            lambda: consumer.commit(offsets=offsets, asynchronous=False),
            60,
            "the group's committed offsets",
        )
    finally:
        consumer.close()
    admin = kafka.admin()
    # After producing: with acks=all, a topic under its min ISR refuses writes.
    under_min_isr = ConfigResource(
        ConfigResource.Type.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry("min.insync.replicas", "2", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    admin.incremental_alter_configs([under_min_isr])[under_min_isr].result(30)

    configs = [
        {
            "auditType": "AUDIT_TYPE_RETENTION",
            "auditIntervalInSeconds": 5,
            "retentionAuditConfig": {"partitionCount": 2},
        },
        {"auditType": "AUDIT_TYPE_AVAILABILITY", "auditIntervalInSeconds": 5},
    ]
    group = tier_group(
        f"ret-{name}",
        topic,
        configs,
        source={"consumerGroup": consumer_group},
        extension={
            "@type": OPTIONS,
            "trigger": {"intervalSeconds": 1},
            "audit": {"allowedLatenessSeconds": 1},
        },
    )
    job_type, spec = registry.validate(parse(group), load_settings(conf_dir))
    retention_path, check = str(warehouse / "retention_audit"), f"retention:local/{topic}"

    def sampled(min_samples: int) -> bool:
        if not DeltaTable.isDeltaTable(spark, retention_path):
            return False
        rows = (
            spark.read.format("delta").load(retention_path)
            .groupBy("partition").agg(F.sum("samples").alias("n")).collect()
        )  # fmt: skip
        return len(rows) == 2 and all(r["n"] >= min_samples for r in rows)

    def loss_verdict() -> dict[str, Any] | None:
        if not DeltaTable.isDeltaTable(spark, str(warehouse / "audit_verdicts")):
            return None
        rows = [r for (c, _), r in newest(verdicts(spark, warehouse)).items() if c == check]
        return next((r for r in rows if r["verdict"] == "LOSS"), None)

    with running_in_thread(job_type.load_runtime()(spec), warehouse.parent / "stop"):
        # One sample first: the log starts the deletion is measured from.
        wait_for(lambda: sampled(1), 120, "a sample of each partition before the deletion")
        deleted = admin.delete_records([TopicPartition(topic, 0, 25), TopicPartition(topic, 1, 30)])
        for future in deleted.values():
            future.result(30)
        loss = wait_for(loss_verdict, 120, f"a LOSS verdict of {check}")

    # Deleted in the window minus consumed first: 15 lost (both partitions' deletions
    # normally fall in one sample, 55 deleted and 40 of them consumed).
    assert loss["left_count"] - loss["right_count"] == loss["missing_count"] == 15
    assert loss["detail"] == "15 records deleted by retention before they were consumed"
    retention = (
        spark.read.format("delta").load(retention_path)
        .groupBy("partition")
        .agg(
            F.sum("deleted_count").alias("deleted"),
            F.sum("lost_count").alias("lost"),
            F.min("lost_first_offset").alias("first"),
            F.max("lost_last_offset").alias("last"),
            F.collect_set("retention_ms").alias("retention_ms"),
            F.collect_set("partition_count").alias("partitions"),
        )
        .orderBy("partition")
        .collect()
    )  # fmt: skip
    assert [tuple(r) for r in retention] == [
        (0, 25, 15, 10, 24, [3600000], [2]),
        (1, 30, 0, None, None, [3600000], [2]),
    ]
    availability = spark.read.format("delta").load(str(warehouse / "availability_audit"))
    by_partition = (
        availability.groupBy("partition")
        .agg(
            F.sum("sampled_seconds").alias("sampled"),
            F.sum("under_min_isr_seconds").alias("under_min_isr"),
            F.sum("offline_seconds").alias("offline"),
            F.sum("under_replicated_seconds").alias("under_replicated"),
        )
        .orderBy("partition")
        .collect()
    )
    assert [r["partition"] for r in by_partition] == [0, 1]
    for r in by_partition:
        assert r["sampled"] > 0
        assert r["under_min_isr"] == pytest.approx(r["sampled"])
        assert (r["offline"], r["under_replicated"]) == (0.0, 0.0)
