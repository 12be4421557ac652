"""The low-latency copy (`extension.replication.low_latency`, jobs/replication/continuous.py)
through `./spark-submit.sh`: an exact copy while records keep arriving, and the two moments a
crash can break its guarantees (fault points `replication.record_acked` and
`replication.epoch_logged`, core/faults.py): no record lost or duplicated at the destination,
and every source offset counted once in `replication_stats`. Partitions added to the source
are tested for both copies in test_replication_faults.py.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from core.errors import EXIT_OK
from testing.jobrun import log_path, run_job, running_job, stop_job
from testing.polling import wait_for
from testing.topic_data import committed_offsets, count_records, produce_records, read_partitions
from tests.jobs.in_process import running
from tests.jobs.replication.test_replication_faults import totals
from tests.jobs.replication.test_replication_integration import (
    PARTITIONS,
    assert_exact_copy,
    by_partition,
    dataset,
    group_json,
    two_cluster_conf,
)

pytestmark = pytest.mark.integration


def low_latency_group(
    group_id: str, source: str, destination: str, epoch_seconds: int, **extra
) -> dict:
    return group_json(
        group_id,
        source,
        destination,
        continuous=True,
        extension={"replication": {"lowLatency": True, "epochSeconds": epoch_seconds}},
        **extra,
    )


def assert_each_offset_counted_once(spark: SparkSession, warehouse: Path, n: int) -> None:
    """Per source partition, the stats rows read as many records as the partition holds (the
    dataset spreads records evenly), so no offset is counted twice or missed."""
    rows = (
        spark.read.format("delta")
        .load(str(warehouse / "replication_stats"))
        .groupBy("partition")
        .agg(F.sum("records_read").alias("read"))
        .collect()
    )
    assert {r.partition: r.read for r in rows} == dict.fromkeys(range(PARTITIONS), n // PARTITIONS)


def run_until_counted(
    spark: SparkSession, group: dict, tmp_path: Path, conf: Path, n: int, then=None, env=None
) -> str:
    """Run the job until replication_stats counts `n` records read (`then()` first, once the
    job is launched), stop it with SIGTERM; its log (it must exit 0)."""
    with running_job(group, tmp_path, conf, env=env) as proc:
        if then is not None:
            then()
        wait_for(
            lambda: stats_totals_or_zero(spark, tmp_path / "wh")[0] == n,
            300,
            f"{n} records counted in replication_stats",
        )
        status = stop_job(proc)
    log = log_path(tmp_path, group).read_text()
    assert status == 0, log
    return log


# Task slots of the job runs: local[2] (the default) runs one epoch after the other; local[3]
# relays, the next epoch's task taking over from the running one (continuous.epoch_layout).
APART = {"SPARK_MASTER": "local[2]"}
RELAY = {"SPARK_MASTER": "local[3]"}
LAYOUTS = pytest.mark.parametrize("slots", [APART, RELAY], ids=["epochs-apart", "relay"])


@LAYOUTS
def test_low_latency_copy_streams_arriving_records_once_in_order(
    spark, kafka, kafka_dest, tmp_path, slots
) -> None:
    """Two waves produced while the copy runs (epochs of 2 s); stopped with SIGTERM it exits
    0 and leaves an exact copy, stats that count each source offset once, and the copied
    offsets committed to the JobGroup's consumer group.

    In a relay, epoch 1's task comes 3 s late to its hand-over (fault point
    `replication.relay_take`), so epoch 0's keeps copying past its deadline and hands over
    then; the later epochs hand over on time."""
    topic = f"rep-ll-{time.monotonic_ns()}"
    kafka.create_topic(topic, PARTITIONS, 1)
    kafka_dest.create_topic(f"{topic}-copy", PARTITIONS, 1)
    conf = two_cluster_conf(tmp_path, kafka.bootstrap_servers, kafka_dest.bootstrap_servers)
    group = low_latency_group("ll", topic, f"{topic}-copy", epoch_seconds=2)
    first, second = dataset(400), dataset(400, topic_tag="b")
    env = {**slots, "UATU_FAULT": "replication.relay_take@1:pause=3000"}
    with running_job(group, tmp_path, conf, env=env) as proc:
        produce_records(kafka.bootstrap_servers, topic, first)
        wait_for(
            lambda: (
                count_records(kafka_dest.bootstrap_servers, f"{topic}-copy", PARTITIONS)
                == len(first)
            ),
            300,
            "the first wave copied",
        )
        produce_records(kafka.bootstrap_servers, topic, second)
        wait_for(
            lambda: (
                count_records(kafka_dest.bootstrap_servers, f"{topic}-copy", PARTITIONS)
                >= len(first) + len(second)
            ),
            120,
            "the second wave copied",
        )
        status = stop_job(proc)
    log = log_path(tmp_path, group).read_text()
    assert status == 0, log
    assert "low-latency copy of src/" in log
    assert ("relayed between epochs" in log) == (slots is RELAY)
    assert ("pause 3000 ms at replication.relay_take (hit 1)" in log) == (slots is RELAY)
    copied = read_partitions(kafka_dest.bootstrap_servers, f"{topic}-copy", PARTITIONS)
    assert_exact_copy(by_partition(first + second), copied, topic)
    n = len(first) + len(second)
    assert totals(spark, tmp_path / "wh") == (n, n, 0)
    assert_each_offset_counted_once(spark, tmp_path / "wh", n)
    per_partition = n // PARTITIONS
    assert committed_offsets(kafka.bootstrap_servers, "ll-cg", topic, PARTITIONS) == dict.fromkeys(
        range(PARTITIONS), per_partition
    )


@LAYOUTS
def test_low_latency_sigkill_after_k_acks_then_restart_sends_nothing_twice(
    spark, kafka, kafka_dest, tmp_path, slots
) -> None:
    """Killed after the 300th acknowledged record, inside the first epoch (30 s: no stats
    batch logged yet); the restart's first epoch reads the destination's tails, sends only
    what is missing and counts the rest as already present. The crashing run is paced at
    1,000 records/s, so most records are still unsent when it dies (unpaced, one produce
    request can carry all of them before the 300th ack arrives).

    In the restart, one of the two tasks pauses after reading its tails until its 2-second
    epoch is over (fault point `replication.tail_read`), so its partitions are read from the
    second epoch on, which must still skip what the tails held: a restart under load once
    re-sent a whole partition that way. In a relay, what the tails held goes to the second
    epoch's task with the baton."""
    n = 2000
    topic, records, conf = backlog(kafka, kafka_dest, tmp_path, "rep-ll-kill", n)
    group = low_latency_group(
        "ll-kill", topic, f"{topic}-copy", epoch_seconds=30, flowControl={"messagesPerSec": 1000}
    )

    status, log = run_job(
        group, tmp_path, conf, env={**slots, "UATU_FAULT": "replication.record_acked@300"}
    )

    assert status == -9, log
    assert "UATU_FAULT: crash at replication.record_acked (hit 300)" in log
    present = count_records(kafka_dest.bootstrap_servers, f"{topic}-copy", PARTITIONS)
    assert 300 <= present < n
    assert stats_totals_or_zero(spark, tmp_path / "wh") == (0, 0, 0)  # no batch was logged

    group = low_latency_group("ll-kill", topic, f"{topic}-copy", epoch_seconds=2)
    log = run_until_counted(
        spark,
        group,
        tmp_path,
        conf,
        n,
        env={**slots, "UATU_FAULT": "replication.tail_read@1:pause=4000"},
    )
    assert "UATU_FAULT: pause 4000 ms at replication.tail_read (hit 1)" in log
    copied = read_partitions(kafka_dest.bootstrap_servers, f"{topic}-copy", PARTITIONS)
    assert_exact_copy(by_partition(records), copied, topic)
    assert totals(spark, tmp_path / "wh") == (n, n - present, present)
    assert_each_offset_counted_once(spark, tmp_path / "wh", n)


def test_low_latency_crash_between_logging_and_stats_counts_the_batch_once(
    spark, kafka, kafka_dest, tmp_path, caplog, stop_file
) -> None:
    """Killed after stats batch 0's offsets were logged and before its stats were written:
    the restart counts batch 0 again from the source (its records found present, none sent),
    then copies a second wave; every offset is counted once and copied once."""
    topic = f"rep-ll-log-{time.monotonic_ns()}"
    kafka.create_topic(topic, PARTITIONS, 1)
    kafka_dest.create_topic(f"{topic}-copy", PARTITIONS, 1)
    first, second = dataset(400), dataset(400, topic_tag="b")
    produce_records(kafka.bootstrap_servers, topic, first)
    conf = two_cluster_conf(tmp_path, kafka.bootstrap_servers, kafka_dest.bootstrap_servers)
    group = low_latency_group("ll-log", topic, f"{topic}-copy", epoch_seconds=2)

    status, log = run_job(group, tmp_path, conf, env={"UATU_FAULT": "replication.epoch_logged"})

    assert status == -9, log
    assert "UATU_FAULT: crash at replication.epoch_logged (hit 1)" in log
    logged = tmp_path / "ck" / "ll-log" / "continuous"
    assert (logged / "offsets" / "0").exists() and not (logged / "commits" / "0").exists()
    assert stats_totals_or_zero(spark, tmp_path / "wh") == (0, 0, 0)

    n = len(first) + len(second)
    # The restart in this process (local[2], as the crashed run): the recount is the job's.
    with (
        caplog.at_level(logging.INFO, logger="uatu"),
        running(group, tmp_path, conf, stop_file) as status,
    ):
        produce_records(kafka.bootstrap_servers, topic, second)
        wait_for(
            lambda: stats_totals_or_zero(spark, tmp_path / "wh")[0] == n,
            300,
            f"{n} records counted in replication_stats",
        )
        assert status() is None, "the copy ended"
    assert status() == EXIT_OK
    assert "stats batch 0 was logged but not committed: counting it again" in caplog.text
    copied = read_partitions(kafka_dest.bootstrap_servers, f"{topic}-copy", PARTITIONS)
    assert_exact_copy(by_partition(first + second), copied, topic)
    read, replicated, present = totals(spark, tmp_path / "wh")
    assert read == n and replicated + present == n
    batch0 = (
        spark.read.format("delta")
        .load(str(tmp_path / "wh" / "replication_stats"))
        .where("batch_id = 0")
        .agg(F.sum("records_read"), F.sum("records_replicated"), F.sum("records_already_present"))
        .first()
    )
    # Every record of a logged batch was acknowledged before it was logged: the recount
    # finds all of them present and sends none.
    assert batch0 is not None and batch0[0] > 0 and batch0[1] == 0 and batch0[2] == batch0[0]
    assert_each_offset_counted_once(spark, tmp_path / "wh", n)


def test_a_relay_task_failing_after_its_hand_over_fails_the_run_and_the_restart_copies_once(
    spark, kafka, kafka_dest, tmp_path
) -> None:
    """Epoch 2's task hands over to epoch 3's, which copies on, then fails before its own acks
    are confirmed (fault point `replication.handed_over`, third hit): the run exits 1, and the
    destination holds what both sent though neither epoch was logged. The restart reads the
    tails and copies the rest: every record once, every offset counted once (what the failed
    run sent after its last logged batch counted as already present)."""
    n = 2000
    topic, records, conf = backlog(kafka, kafka_dest, tmp_path, "rep-ll-relay", n)
    # Paced so that the run fails with part of the records copied: the third hand-over of a
    # task that sent records (the point counts no other), in 2-second epochs at 200 records/s,
    # so two epochs' records are confirmed before it and 2,000 take five or more epochs.
    group = low_latency_group(
        "ll-relay", topic, f"{topic}-copy", epoch_seconds=2, flowControl={"messagesPerSec": 200}
    )

    status, log = run_job(
        group,
        tmp_path,
        conf,
        env={**RELAY, "UATU_FAULT": "replication.handed_over@3:fail-first-attempt"},
    )

    assert status == 1, log
    assert "relayed between epochs" in log
    assert "fail-first-attempt at replication.handed_over (hit 3)" in log
    present = count_records(kafka_dest.bootstrap_servers, f"{topic}-copy", PARTITIONS)
    assert 0 < present < n

    group = low_latency_group("ll-relay", topic, f"{topic}-copy", epoch_seconds=2)
    run_until_counted(spark, group, tmp_path, conf, n, env=RELAY)
    copied = read_partitions(kafka_dest.bootstrap_servers, f"{topic}-copy", PARTITIONS)
    assert_exact_copy(by_partition(records), copied, topic)
    read, replicated, already_present = totals(spark, tmp_path / "wh")
    assert read == n and replicated + already_present == n
    assert 0 < already_present <= present  # the failed run's unlogged records, found again
    assert_each_offset_counted_once(spark, tmp_path / "wh", n)


def backlog(kafka, kafka_dest, tmp_path: Path, prefix: str, n: int) -> tuple[str, list, Path]:
    """A new source topic holding `n` records, its empty `-copy` at the destination, and the
    conf of both clusters: (topic, records, conf dir)."""
    topic = f"{prefix}-{time.monotonic_ns()}"
    kafka.create_topic(topic, PARTITIONS, 1)
    kafka_dest.create_topic(f"{topic}-copy", PARTITIONS, 1)
    records = dataset(n)
    produce_records(kafka.bootstrap_servers, topic, records)
    conf = two_cluster_conf(tmp_path, kafka.bootstrap_servers, kafka_dest.bootstrap_servers)
    return topic, records, conf


def stats_totals_or_zero(spark: SparkSession, warehouse: Path) -> tuple[int, int, int]:
    """totals, or zeros while the table has no commit yet (a run killed while it was
    creating its tables can leave an empty log)."""
    if not list((warehouse / "replication_stats" / "_delta_log").glob("*.json")):
        return (0, 0, 0)
    return totals(spark, warehouse)
