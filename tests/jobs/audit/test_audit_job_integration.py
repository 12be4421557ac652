"""The audit job end to end: real broker, `./spark-submit.sh`, real Delta tables.

Expected tables are computed in plain Python from the records the test produced
(`testing.demo_data.py`), never from Spark.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from chispa import assert_df_equality
from pyspark.sql import functions as F

from testing.conf import write_conf_dir
from testing.demo_data import SentRecord, audit_dataset, produce
from testing.jobrun import query_conf, run_job, submit_job

pytestmark = pytest.mark.integration

WINDOW_S = 60
COMPARED = [
    "cluster",
    "topic",
    "partition",
    "audit_type",
    "audit_interval_seconds",
    "window_start",
    "window_end",
    "message_count",
    "unique_count",
    "duplicate_count",
    "bytes",
    "no_event_time_count",
    "late_count",
]


def jobgroup(group_id: str, topic: str, *, rate: float = 0, trigger_s: int = 0) -> dict:
    options = {
        "@type": "type.googleapis.com/uatu.v1.JobOptions",
        "audit": {
            "eventTime": {"source": "FIELD_SOURCE_JSON_FIELD", "field": "ts"},
            # An hour: the demo's late records are two hours old, and a run on a loaded machine
            # (a restarted stream once ran past 15 minutes) cannot make an on-time
            # record late by auditing it later than the reference run did.
            "allowedLatenessSeconds": 3600,
        },
    }
    if trigger_s:
        options["trigger"] = {"intervalSeconds": trigger_s}
    return {
        "jobGroupId": group_id,
        "type": "JOB_TYPE_KAFKA_AUDIT",
        "flowControl": {"messagesPerSec": rate},
        "kafkaConsumerTaskGroup": {
            "cluster": "local",
            "topic": topic,
            "consumerGroup": f"{group_id}-cg",
            "auditMetadata": {
                "auditConfigs": [
                    {"auditType": "AUDIT_TYPE_EXACT_UNIQ", "auditIntervalInSeconds": WINDOW_S},
                    {"auditType": "AUDIT_TYPE_APPROX_UNIQ", "auditIntervalInSeconds": WINDOW_S},
                ]
            },
        },
        "extension": options,
    }


def expected_rows(records: list[SentRecord], topic: str) -> list[tuple]:
    """The audit table a correct job must produce, computed without Spark."""
    window_ms = WINDOW_S * 1000
    counts: Counter = Counter()
    nbytes: Counter = Counter()
    untimed: Counter = Counter()
    late: Counter = Counter()
    distinct: dict = defaultdict(set)
    for r in records:
        placed = r.event_ms if r.event_ms is not None else r.kafka_ts_ms
        key = (r.partition, placed - placed % window_ms)
        counts[key] += 1
        nbytes[key] += len(r.key) + len(r.value)
        untimed[key] += r.event_ms is None
        # Late: event time hours before it was sent (the job's lateness is an hour).
        late[key] += r.event_ms is not None and r.event_ms < r.kafka_ts_ms - 3600_000
        distinct[key].add((r.key, r.value))
    rows = []
    for (partition, start), n in counts.items():
        unique = len(distinct[(partition, start)])
        for audit_type, dup in (
            ("AUDIT_TYPE_EXACT_UNIQ", n - unique),
            ("AUDIT_TYPE_APPROX_UNIQ", None),
        ):
            rows.append(
                (
                    "local",
                    topic,
                    partition,
                    audit_type,
                    WINDOW_S,
                    start,
                    start + window_ms,
                    n,
                    unique,
                    dup,
                    nbytes[(partition, start)],
                    untimed[(partition, start)],
                    late[(partition, start)],
                )
            )
    return rows


def expected_df(spark, rows):
    schema = (
        "cluster string, topic string, partition int, audit_type string, "
        "audit_interval_seconds int, start_ms long, end_ms long, message_count long, "
        "unique_count long, duplicate_count long, bytes long, no_event_time_count long, "
        "late_count long"
    )
    return (
        spark.createDataFrame(rows, schema)
        .withColumn("window_start", F.timestamp_millis("start_ms"))
        .withColumn("window_end", F.timestamp_millis("end_ms"))
        .select(*COMPARED)
    )


@pytest.fixture
def audit_env(kafka, tmp_path):
    """A topic with known data and a conf dir pointing at the session broker."""
    topic = f"orders-{tmp_path.name[-20:].replace('_', '-')}"
    kafka.create_topic(topic, partitions=3)
    now_ms = int(time.time() * 1000)
    records = audit_dataset(600, partitions=3, now_ms=now_ms)
    produce(kafka.bootstrap_servers, topic, records)
    return topic, records


def conf_for(kafka, tmp_path: Path, name: str) -> Path:
    base = tmp_path / name
    return write_conf_dir(base / "conf", kafka.bootstrap_servers, base / "wh", base / "ck")


def read_counts(spark, conf_dir: Path):
    return spark.read.format("delta").load(str(conf_dir.parent / "wh" / "audit_counts"))


def test_applications_started_at_once_into_one_warehouse_each_match_their_truth(
    spark, kafka, tmp_path, audit_env
):
    """Two audit applications start at the same moment and share one warehouse (the
    default conf): they create `audit_counts` at once and MERGE into it concurrently. They
    audit the same topic, which must not add up: each JobGroup's rows are its own."""
    topic, records = audit_env
    conf_dir = conf_for(kafka, tmp_path, "run")
    audited = {"truth-1": (topic, records), "truth-2": (topic, records)}
    runs = {
        group_id: submit_job(jobgroup(group_id, source), tmp_path, conf_dir, "--once")
        for group_id, (source, _) in audited.items()
    }
    for group_id, proc in runs.items():
        proc.wait(timeout=900)
        assert proc.returncode == 0, (tmp_path / f"{group_id}.log").read_text()

    table = read_counts(spark, conf_dir)
    for group_id, (source, sent) in audited.items():
        rows = table.where(F.col("job_group_id") == group_id)
        assert_df_equality(
            rows.select(*COMPARED),
            expected_df(spark, expected_rows(sent, source)),
            ignore_row_order=True,
            ignore_nullable=True,
        )
    # Every record is counted once per audit type; late and untimed ones are not dropped.
    totals = (
        table.where(F.col("job_group_id") == "truth-1")
        .groupBy("audit_type")
        .agg(F.sum("message_count").alias("n"))
        .collect()
    )
    assert {r["audit_type"]: r["n"] for r in totals} == {
        "AUDIT_TYPE_EXACT_UNIQ": len(records),
        "AUDIT_TYPE_APPROX_UNIQ": len(records),
    }
    timed = table.where("latency_p50_ms IS NOT NULL").count()
    assert timed > 0
    # UATU_SPARK_SUBMIT_ARGS's shuffle partitions win over the job's default (8).
    started = query_conf(conf_dir.parent / "ck")
    assert [c["spark.sql.shuffle.partitions"] for c in started] == ["2"] * len(audited), started
    # Latency quantiles are ordered and the sketch count matches the timed records.
    for row in table.where("latency_kll_sketch IS NOT NULL").collect():
        assert row["latency_p50_ms"] <= row["latency_p95_ms"] <= row["latency_p99_ms"]


def test_missing_topic_exits_2_before_spark(kafka, tmp_path):
    conf_dir = conf_for(kafka, tmp_path, "missing")
    status, out = run_job(jobgroup("missing", "no-such-topic"), tmp_path, conf_dir, "--once")
    assert status == 2
    assert "kafka_consumer_task_group.topic='no-such-topic'" in out
    assert not (conf_dir.parent / "wh").exists()


def wait_for_commits(table_path: Path, versions: int, proc: subprocess.Popen, deadline_s: float):
    """Poll the Delta log until `versions` commits exist (table creation is version 0)."""
    deadline = time.monotonic() + deadline_s
    log = table_path / "_delta_log"
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"job exited early with status {proc.returncode}")
        if len(list(log.glob("*.json"))) >= versions + 1:
            return
        time.sleep(0.5)
    raise AssertionError(f"no {versions} commits in {table_path} within {deadline_s} s")


def test_sigterm_stops_a_streaming_job_cleanly(spark, kafka, tmp_path, audit_env):
    """Without --once the job streams until stopped; SIGTERM to spark-submit.sh ends it, 0."""
    topic, records = audit_env
    conf_dir = conf_for(kafka, tmp_path, "sigterm")
    proc = submit_job(jobgroup("sigterm", topic, trigger_s=1), tmp_path, conf_dir)
    try:
        wait_for_commits(conf_dir.parent / "wh" / "audit_counts", 1, proc, deadline_s=300)
        os.kill(proc.pid, signal.SIGTERM)  # the script, as a scheduler would
        status = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    log = (tmp_path / "sigterm.log").read_text()
    assert status == 0, log
    assert "stopping query audit-sigterm" in log
    total = read_counts(spark, conf_dir).agg(F.sum("message_count")).first()[0]
    assert total == 2 * len(records)  # two audit types, every record once each


def test_check_validates_against_the_broker_without_starting_spark(kafka, tmp_path, audit_env):
    topic, _ = audit_env
    conf_dir = conf_for(kafka, tmp_path, "check")
    status, out = run_job(jobgroup("check", topic), tmp_path, conf_dir, "--check")
    assert status == 0, out
    assert f"JobGroup check is valid: JOB_TYPE_KAFKA_AUDIT on local/{topic} (3 partitions)" in out
    # No JVM started (it announces itself with this line) and nothing was written.
    assert "jdk.incubator" not in out
    assert not (conf_dir.parent / "wh").exists()
