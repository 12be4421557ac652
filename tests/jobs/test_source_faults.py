"""A Kafka source that fails under a running job: its records deleted before the job read them,
or the topic itself deleted. Never silent: exit 1 with one line naming the cause, the lost
offsets in `source_data_loss`, and nothing of the failed batch half-written.

The audit job stands for both Kafka-sourced jobs (the replication job answers through the
same `jobs/runtime/source_failure.py`). Kafka unreachable at start is `test_validation.py`'s
(exit 2, one line, nothing written, for every job type).
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest
from chispa import assert_df_equality
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

from core.processes import signal_group
from testing.conf import write_conf_dir
from testing.demo_data import audit_dataset, produce
from testing.jobrun import committed_batch, last_keys_batch, log_path, run_job, submit_job
from testing.polling import wait_for
from tests.jobs.audit.test_audit_job_integration import jobgroup

pytestmark = pytest.mark.integration


def error_lines(log: str) -> list[str]:
    return [line for line in log.splitlines() if line.startswith("error:")]


def setup(kafka, tmp_path: Path, name: str) -> tuple[str, Path]:
    topic = f"{name}-{time.monotonic_ns()}"
    kafka.create_topic(topic, partitions=2)
    produce(kafka.bootstrap_servers, topic, audit_dataset(60, 2, int(time.time() * 1000)))
    conf = write_conf_dir(
        tmp_path / "conf", kafka.bootstrap_servers, tmp_path / "wh", tmp_path / "ck"
    )
    return topic, conf


def end_offsets(bootstrap: str, topic: str, partitions: int) -> list[int]:
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "offsets"})
    try:
        return [
            consumer.get_watermark_offsets(TopicPartition(topic, p), 10)[1]
            for p in range(partitions)
        ]
    finally:
        consumer.close()


def test_records_deleted_before_they_were_read_stop_the_job_and_are_recorded(
    spark, kafka, tmp_path
) -> None:
    topic, conf = setup(kafka, tmp_path, "loss")
    group = jobgroup("loss", topic)
    status, log = run_job(group, tmp_path, conf, "--once")
    assert status == 0, log
    read_up_to = end_offsets(kafka.bootstrap_servers, topic, 2)
    counts_path, checkpoints = tmp_path / "wh" / "audit_counts", tmp_path / "ck"
    before = spark.createDataFrame(
        spark.read.format("delta").load(str(counts_path)).collect(),
        spark.read.format("delta").load(str(counts_path)).schema,
    )
    # More records arrive; the first 10 new ones of partition 0 are deleted unread (what
    # retention does to a job that fell behind).
    produce(kafka.bootstrap_servers, topic, audit_dataset(60, 2, int(time.time() * 1000), seed=8))
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers})
    deleted = admin.delete_records([TopicPartition(topic, 0, read_up_to[0] + 10)])
    for future in deleted.values():
        future.result(30)

    status, log = run_job(group, tmp_path, conf, "--once")

    assert status == 1, log
    lines = error_lines(log)
    assert len(lines) == 1, lines
    assert f"offsets: 0 [{read_up_to[0]}, {read_up_to[0] + 10})" in lines[0]
    assert "source_data_loss" in lines[0]
    recorded = spark.read.format("delta").load(str(tmp_path / "wh" / "source_data_loss"))
    assert [
        tuple(r)
        for r in recorded.select(
            "job_group_id", "topic", "partition", "from_offset", "until_offset"
        ).collect()
    ] == [("loss", topic, 0, read_up_to[0], read_up_to[0] + 10)]
    # Nothing of the failed batch was written.
    assert last_keys_batch(checkpoints) == committed_batch(counts_path) == 0
    assert_df_equality(
        spark.read.format("delta").load(str(counts_path)), before, ignore_row_order=True
    )


def test_source_topic_deleted_mid_run_exits_1_with_one_line(spark, kafka, tmp_path) -> None:
    topic, conf = setup(kafka, tmp_path, "deleted")
    group = jobgroup("deleted", topic, trigger_s=1)
    proc = submit_job(group, tmp_path, conf)
    counts_path, checkpoints = tmp_path / "wh" / "audit_counts", tmp_path / "ck"
    try:
        wait_for(lambda: committed_batch(counts_path) is not None, 300, "a first batch")
        admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers})
        for future in admin.delete_topics([topic]).values():
            future.result(30)
        status = proc.wait(300)
    finally:
        if proc.poll() is None:
            signal_group(proc.pid, signal.SIGKILL)
            proc.wait()
    log = log_path(tmp_path, group).read_text()
    assert status == 1, log
    assert error_lines(log) == [
        f"error: source topic {topic!r} on cluster 'local' no longer exists: it was deleted "
        "while the job ran; nothing of the failed micro-batch was written"
    ]
    assert last_keys_batch(checkpoints) == committed_batch(counts_path)
