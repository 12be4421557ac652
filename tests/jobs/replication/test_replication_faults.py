"""The replication job's effectively-once copy at the moments it can break: the application
SIGKILLed after k records of a copy were acknowledged and before the batch's stats were
committed, and a copy task whose first attempt fails after k acknowledged records (fault point
`replication.record_acked`, `core/faults.py`); its stats recorded once when the application
is SIGKILLed after a batch's stats were saved and before Spark committed the batch
(`replication.stats_saved`), or after Spark's commit and before the stats were appended
(`replication.stats_writing`: `jobs/replication/stats.py`).

Each run copies the same source topic (`source`, 2000 records over 4 partitions, one bounded
batch) to a destination topic of its own. The uninterrupted run (`reference`) is run once per
module; the destination is checked record by record in plain Python (`assert_exact_copy`).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from chispa import assert_df_equality
from confluent_kafka.admin import AdminClient, NewPartitions
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from core.errors import EXIT_OK
from jobs.replication.stats import FOLDER
from testing.jobrun import committed_batch, run_job, saved_batches, spark_committed_batch
from testing.polling import wait_for
from testing.topic_data import Record, count_records, produce_records, read_partitions
from tests.jobs.in_process import run_in_process, running
from tests.jobs.replication.test_replication_integration import (
    PARTITIONS,
    assert_exact_copy,
    by_partition,
    dataset,
    group_json,
    run_once,
    two_cluster_conf,
)

pytestmark = pytest.mark.integration

N = 2000


@dataclass(frozen=True)
class Source:
    topic: str
    records: list[Record]
    reference_warehouse: Path


@pytest.fixture(scope="module")
def source(kafka, kafka_dest, tmp_path_factory) -> Source:
    """The source topic, and its uninterrupted copy by the job in this process."""
    topic = f"rep-faults-{time.monotonic_ns()}"
    kafka.create_topic(topic, PARTITIONS, 1)
    records = dataset(N)
    produce_records(kafka.bootstrap_servers, topic, records)
    base = tmp_path_factory.mktemp("reference")
    conf = two_cluster_conf(base, kafka.bootstrap_servers, kafka_dest.bootstrap_servers)
    kafka_dest.create_topic(f"{topic}-reference", PARTITIONS, 1)
    group = group_json("reference", topic, f"{topic}-reference", continuous=False)
    assert run_once(group, conf) == 0
    return Source(topic, records, base / "wh")


def comparable_stats(spark: SparkSession, warehouse: Path) -> DataFrame:
    """replication_stats without what differs between runs by nature (times, latencies) or by
    design (a replay writes less and finds the rest present): per batch and partition, what
    was read and what the destination holds from it."""
    return (
        spark.read.format("delta")
        .load(str(warehouse / "replication_stats"))
        .select(
            "batch_id",
            "partition",
            "destination_partition",
            "records_read",
            "first_offset",
            "last_offset",
            (F.col("records_replicated") + F.col("records_already_present")).alias("held"),
        )
    )


def comparable_audit(spark: SparkSession, warehouse: Path) -> DataFrame:
    return (
        spark.read.format("delta")
        .load(str(warehouse / "replication_audit"))
        .select(
            "batch_id",
            "partition",
            "window_start",
            "window_end",
            "records_read",
            (F.col("records_written") + F.col("records_already_present")).alias("held"),
        )
    )


def assert_tables_match_reference(spark: SparkSession, warehouse: Path, source: Source) -> None:
    for comparable in (comparable_stats, comparable_audit):
        assert_df_equality(
            comparable(spark, warehouse),
            comparable(spark, source.reference_warehouse),
            ignore_row_order=True,
        )


def totals(spark: SparkSession, warehouse: Path) -> tuple[int, int, int]:
    stats = spark.read.format("delta").load(str(warehouse / "replication_stats"))
    row = stats.agg(
        F.sum("records_read"), F.sum("records_replicated"), F.sum("records_already_present")
    ).first()
    assert row is not None
    return int(row[0] or 0), int(row[1] or 0), int(row[2] or 0)  # None: no rows yet


def test_sigkill_after_k_acknowledged_records_then_restart_finds_them_present(
    spark, kafka, kafka_dest, tmp_path, source
) -> None:
    destination = f"{source.topic}-crash"
    kafka_dest.create_topic(destination, PARTITIONS, 1)
    conf = two_cluster_conf(tmp_path, kafka.bootstrap_servers, kafka_dest.bootstrap_servers)
    # Paced, so the crash at the 300th ack lands mid-copy: a task copies several partitions at
    # once, and unpaced the 2,000 records have all reached the broker before the 300th ack's
    # callback runs (nothing would be left for the restart to copy).
    group = group_json(
        "crash-acked",
        source.topic,
        destination,
        continuous=False,
        flowControl={"messagesPerSec": 1000},
    )

    status, log = run_job(group, tmp_path, conf, env={"UATU_FAULT": "replication.record_acked@300"})

    assert status == -9, log
    assert "UATU_FAULT: crash at replication.record_acked (hit 300)" in log
    assert committed_batch(tmp_path / "wh" / "replication_stats") is None  # before the stats
    present = count_records(kafka_dest.bootstrap_servers, destination, PARTITIONS)
    assert 300 <= present < N

    # The restart in this process: what it recovers is the job's, not spark-submit.sh's.
    assert run_in_process(group, tmp_path, conf) == EXIT_OK
    copied = read_partitions(kafka_dest.bootstrap_servers, destination, PARTITIONS)
    assert_exact_copy(by_partition(source.records), copied, source.topic)
    # The replay read everything, wrote only what was missing, and found the rest present.
    assert totals(spark, tmp_path / "wh") == (N, N - present, present)
    assert_tables_match_reference(spark, tmp_path / "wh", source)


@pytest.mark.parametrize(
    ("fault", "left"),
    [
        # Batch 0 copied and its rows saved; Spark has not committed it. The restart appends
        # the saved rows, then Spark replays batch 0, which finds every record present and
        # whose append is skipped by its marker: the tables say what the first attempt copied.
        ("replication.stats_saved@1", (None, None, [0])),
        # Spark has committed batch 0, its rows are in no table: only the saved file holds
        # them, and the restart, which has nothing left to copy, must append them.
        ("replication.stats_writing@1", (0, None, [0])),
    ],
    ids=["saved-not-committed", "committed-not-written"],
)
def test_a_crash_around_the_stats_write_then_a_restart_records_the_copy_once(
    spark, kafka, kafka_dest, tmp_path, source, fault: str, left: tuple
) -> None:
    destination = f"{source.topic}-{fault.split('.')[1].split('@')[0]}"
    kafka_dest.create_topic(destination, PARTITIONS, 1)
    conf = two_cluster_conf(tmp_path, kafka.bootstrap_servers, kafka_dest.bootstrap_servers)
    group = group_json("crash-stats", source.topic, destination, continuous=False)

    status, log = run_job(group, tmp_path, conf, env={"UATU_FAULT": fault})

    assert status == -9, log
    assert f"UATU_FAULT: crash at {fault.replace('@', ' (hit ')})" in log
    spark_commit = spark_committed_batch(tmp_path / "ck")
    written = committed_batch(tmp_path / "wh" / "replication_stats")
    assert (spark_commit, written, saved_batches(tmp_path / "ck", FOLDER)) == left

    # The restart in this process: what it recovers is the job's, not spark-submit.sh's.
    assert run_in_process(group, tmp_path, conf) == EXIT_OK
    assert saved_batches(tmp_path / "ck", FOLDER) == []
    copied = read_partitions(kafka_dest.bootstrap_servers, destination, PARTITIONS)
    assert_exact_copy(by_partition(source.records), copied, source.topic)
    # Once, and as the first attempt saw it: it wrote every record (a replay's rows, which
    # find them present, or both attempts' rows would differ).
    assert totals(spark, tmp_path / "wh") == (N, N, 0)
    assert_tables_match_reference(spark, tmp_path / "wh", source)


def test_a_task_whose_first_attempt_fails_is_retried_without_duplicates(
    spark, kafka, kafka_dest, tmp_path, source
) -> None:
    """local[2,2]: two task slots, a task may fail once. The first attempt of one copy task
    fails after the 100th acknowledged record; its retry in the same batch copies the rest."""
    destination = f"{source.topic}-retry"
    kafka_dest.create_topic(destination, PARTITIONS, 1)
    conf = two_cluster_conf(tmp_path, kafka.bootstrap_servers, kafka_dest.bootstrap_servers)
    group = group_json("retry-acked", source.topic, destination, continuous=False)

    status, log = run_job(
        group,
        tmp_path,
        conf,
        env={
            "UATU_FAULT": "replication.record_acked@100:fail-first-attempt",
            "SPARK_MASTER": "local[2,2]",
        },
    )

    assert status == 0, log
    assert "fail-first-attempt at replication.record_acked (hit 100)" in log
    copied = read_partitions(kafka_dest.bootstrap_servers, destination, PARTITIONS)
    assert_exact_copy(by_partition(source.records), copied, source.topic)
    read, replicated, present = totals(spark, tmp_path / "wh")
    assert read == N and replicated + present == N
    assert present >= 100  # what the failed attempt wrote, found by its retry
    assert_tables_match_reference(spark, tmp_path / "wh", source)


@pytest.mark.parametrize("low_latency", [False, True], ids=["micro-batch", "low-latency"])
def test_partitions_added_to_the_source_while_copying_are_copied_too(
    spark, kafka, kafka_dest, tmp_path, caplog, stop_file, low_latency
) -> None:
    """A continuous copy of a 2-partition topic; the source grows to 4 partitions meanwhile.
    The destination grows with it (as MirrorMaker 2 keeps a target in step) and every record
    of the new partitions lands in its own partition, once, in order. The low-latency copy
    (epochs of 2 s) notices the growth between epochs and starts again with them."""
    topic = f"rep-grow-{time.monotonic_ns()}"
    kafka.create_topic(topic, 2, 1)
    kafka_dest.create_topic(f"{topic}-copy", 2, 1)
    first = [r for r in dataset(400) if r.partition < 2]
    produce_records(kafka.bootstrap_servers, topic, first)
    conf = two_cluster_conf(tmp_path, kafka.bootstrap_servers, kafka_dest.bootstrap_servers)
    extension = {"replication": {"lowLatency": True, "epochSeconds": 2}} if low_latency else {}
    group = group_json("grow", topic, f"{topic}-copy", extension=extension)
    with (
        caplog.at_level(logging.INFO, logger="uatu"),
        running(group, tmp_path, conf, stop_file) as status,
    ):
        wait_for(
            lambda: count_records(kafka_dest.bootstrap_servers, f"{topic}-copy", 2) == len(first),
            300,
            "the first records copied",
        )
        admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers})
        for future in admin.create_partitions([NewPartitions(topic, PARTITIONS)]).values():
            future.result(30)
        second = dataset(400, topic_tag="b")
        produce_records(kafka.bootstrap_servers, topic, second)
        total = len(first) + len(second)
        wait_for(
            lambda: (
                count_records(kafka_dest.bootstrap_servers, f"{topic}-copy", PARTITIONS) >= total
            ),
            300,
            f"{total} records in the grown destination",
        )
        assert status() is None, "the copy ended"
    assert status() == EXIT_OK
    assert ("has new partitions [2, 3]" in caplog.text) == low_latency
    topics = AdminClient({"bootstrap.servers": kafka_dest.bootstrap_servers}).list_topics(
        f"{topic}-copy", timeout=10
    )
    assert len(topics.topics[f"{topic}-copy"].partitions) == PARTITIONS
    copied = read_partitions(kafka_dest.bootstrap_servers, f"{topic}-copy", PARTITIONS)
    assert_exact_copy(by_partition(first + second), copied, topic)


def test_a_continuous_copy_rides_out_restarts_of_both_brokers(
    spark, kafka, kafka_dest, tmp_path, stop_file
) -> None:
    """A continuous copy; after the first wave has landed, the source's and the destination's
    (only) brokers are restarted, then a second wave is produced. The job keeps going (Kafka's
    clients retry; a failed batch is retried from the checkpoint) and, stopped by its stop file,
    leaves an exact copy of both waves (in this process: the restarts are what is tested, not
    spark-submit.sh): every record once, in order, in its own partition."""
    topic = f"rep-restart-{time.monotonic_ns()}"
    kafka.create_topic(topic, PARTITIONS, 1)
    kafka_dest.create_topic(f"{topic}-copy", PARTITIONS, 1)
    first = dataset(300)
    produce_records(kafka.bootstrap_servers, topic, first)
    conf = two_cluster_conf(tmp_path, kafka.bootstrap_servers, kafka_dest.bootstrap_servers)
    group = group_json("restart", topic, f"{topic}-copy")
    with running(group, tmp_path, conf, stop_file) as status:
        wait_for(
            lambda: (
                count_records(kafka_dest.bootstrap_servers, f"{topic}-copy", PARTITIONS)
                == len(first)
            ),
            300,
            "the first wave copied",
        )
        kafka.restart_broker(0)
        kafka_dest.restart_broker(0)
        second = dataset(300, topic_tag="b")
        produce_records(kafka.bootstrap_servers, topic, second)
        total = len(first) + len(second)
        wait_for(
            lambda: (
                count_records(kafka_dest.bootstrap_servers, f"{topic}-copy", PARTITIONS) >= total
            ),
            300,
            f"{total} records at the destination",
        )
        assert status() is None, "the copy ended"
    assert status() == EXIT_OK
    copied = read_partitions(kafka_dest.bootstrap_servers, f"{topic}-copy", PARTITIONS)
    assert_exact_copy(by_partition(first + second), copied, topic)
