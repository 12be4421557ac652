"""The audit job's exactly-once guarantee at the steps where it can break (fault points in
`core/faults.py`), and a broker restart mid-run:

* `audit.keys_committed`: a batch's exact keys are committed (under the checkpoint,
  `<checkpoint>/audit-keys`, written by the JVM fold), its partials are not saved. The replay
  of that batch must count its keys as new although their files already exist.
* `audit.partials_saved`: its partials are saved (`<checkpoint>/audit-partials`), Spark has
  not committed it. The restart writes the saved file and Spark replays the batch, whose
  MERGE must then commit nothing.
* `audit.counts_merging`: Spark has committed the batch, its counts are not in the table.
  Only the saved file holds them; the restart must write it before any new batch.
* `audit.counts_merged`: the batch's counts are in the table, its saved file is not deleted.
  The restart finds the file; the table's idempotent-write marker must keep it from being
  counted a second time.

The truth is computed in plain Python from the records sent (`expected_rows`).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from chispa import assert_df_equality
from pyspark.sql import functions as F

from core.errors import EXIT_OK
from jobs.audit.counts_writer import FOLDER
from testing.conf import write_conf_dir
from testing.demo_data import audit_dataset, produce
from testing.jobrun import (
    committed_batch,
    last_keys_batch,
    run_job,
    saved_batches,
    spark_committed_batch,
)
from testing.polling import wait_for
from tests.jobs.audit.test_audit_job_integration import (
    COMPARED,
    expected_df,
    expected_rows,
    jobgroup,
)
from tests.jobs.in_process import run_in_process, running

pytestmark = pytest.mark.integration


@dataclass(frozen=True)
class CrashState:
    """What a crash left under the checkpoints and in the table."""

    keys_batch: int | None  # the newest batch whose exact keys the fold wrote
    spark_commit: int | None  # the newest batch in Spark's commit log
    merged: int | None  # the newest batch in audit_counts (its idempotent-write marker)
    saved: list[int]  # batches whose partials are saved and not yet MERGEd


@pytest.mark.parametrize(
    ("fault", "expected", "topics"),
    [
        # Batch 1's keys written, its partials not saved; batch 0's MERGE runs beside batch 1,
        # so it may or may not have committed. A group of two topics holding the same records
        # (extension.topics): each topic partition's keys must be its own, under the crash too.
        (
            "audit.keys_committed@2",
            lambda s: s.keys_batch == 1 and s.saved in ([], [0]) and s.merged in (None, 0),
            2,
        ),
        # Batch 1 saved, not committed by Spark; batch 0 committed and perhaps merged.
        (
            "audit.partials_saved@2",
            lambda s: s.spark_commit == 0 and s.merged in (None, 0) and 1 in s.saved,
            1,
        ),
        # The first MERGE about to run: batch 0 committed by Spark, in no table, saved.
        (
            "audit.counts_merging@1",
            lambda s: s.spark_commit is not None and s.merged is None and 0 in s.saved,
            1,
        ),
        # The first write committed (into the new table), its files not deleted: the newest
        # batch the table holds is still saved.
        (
            "audit.counts_merged@1",
            lambda s: s.merged is not None and s.merged in s.saved,
            1,
        ),
    ],
    ids=[
        "keys-not-saved-two-topics",
        "saved-not-committed",
        "committed-not-merged",
        "merged-not-deleted",
    ],
)
def test_a_crash_at_each_step_of_a_batch_then_a_restart_gives_the_truth(
    spark, kafka, tmp_path: Path, caplog, fault: str, expected, topics: int
) -> None:
    """330 records a topic in batches of 150 (rate 150 x 1 s trigger; --once keeps the
    limit); the job is SIGKILLed at `fault`, then run again on the same checkpoint."""
    names = [f"audit-crash-{time.monotonic_ns()}-{i}" for i in range(topics)]
    records = audit_dataset(300, partitions=3, now_ms=int(time.time() * 1000))  # 330 records
    for topic in names:
        kafka.create_topic(topic, partitions=3)
        produce(kafka.bootstrap_servers, topic, records)
    conf_dir = write_conf_dir(
        tmp_path / "conf", kafka.bootstrap_servers, tmp_path / "wh", tmp_path / "ck"
    )
    counts_path = tmp_path / "wh" / "audit_counts"
    name = fault.split(".")[1].split("@")[0].replace("_", "-")
    group = jobgroup(f"crash-{name}", names[0], rate=150, trigger_s=1)
    if topics > 1:
        del group["kafkaConsumerTaskGroup"]["topic"]
        group["extension"]["topics"] = {"names": names}

    status, log = run_job(group, tmp_path, conf_dir, "--once", env={"UATU_FAULT": fault})

    assert status == -9, log  # the whole process group got SIGKILL
    assert f"UATU_FAULT: crash at {fault.replace('@', ' (hit ')})" in log
    left = CrashState(
        last_keys_batch(tmp_path / "ck"),
        spark_committed_batch(tmp_path / "ck"),
        committed_batch(counts_path),
        saved_batches(tmp_path / "ck", FOLDER),
    )
    assert expected(left), f"the crash left {left}"

    # The restart in this process: what it recovers is the job's, not spark-submit.sh's.
    with caplog.at_level(logging.INFO, logger="uatu"):
        assert run_in_process(group, tmp_path, conf_dir, "--once") == EXIT_OK
    merged = [r for r in caplog.records if "wrote the saved batches" in r.message]
    assert bool(merged) == bool(left.saved)
    assert saved_batches(tmp_path / "ck", FOLDER) == []
    counts = spark.read.format("delta").load(str(counts_path))
    assert_df_equality(
        counts.select(*COMPARED),
        expected_df(spark, [row for t in names for row in expected_rows(records, t)]),
        ignore_row_order=True,
        ignore_nullable=True,
    )


def test_a_broker_restart_mid_run_leaves_the_truth(
    spark, kafka, tmp_path: Path, stop_file: Path
) -> None:
    """A streaming audit job; its (only) broker is stopped and started again between two
    waves of records. The job (in this process) rides it out (Kafka's clients retry) and,
    stopped by its stop file, has counted both waves exactly as the truth computed in Python."""
    topic = f"audit-broker-{time.monotonic_ns()}"
    kafka.create_topic(topic, partitions=2)
    first = audit_dataset(60, partitions=2, now_ms=int(time.time() * 1000))
    produce(kafka.bootstrap_servers, topic, first)
    conf_dir = write_conf_dir(
        tmp_path / "conf", kafka.bootstrap_servers, tmp_path / "wh", tmp_path / "ck"
    )
    counts_path = tmp_path / "wh" / "audit_counts"
    group = jobgroup("broker-restart", topic, trigger_s=1)
    records = first
    with running(group, tmp_path, conf_dir, stop_file) as status:
        wait_for(lambda: committed_batch(counts_path) is not None, 300, "a first batch")
        kafka.restart_broker(0)
        second = audit_dataset(60, partitions=2, now_ms=int(time.time() * 1000), seed=8)
        produce(kafka.bootstrap_servers, topic, second)
        records = first + second

        def counted() -> int:
            assert status() is None, "the job ended"
            total = spark.read.format("delta").load(str(counts_path)).agg(F.sum("message_count"))
            return total.first()[0] or 0

        # Two audit types: every record counted twice.
        wait_for(lambda: counted() >= 2 * len(records), 300, "both waves counted", interval_s=2)
    assert status() == EXIT_OK
    assert_df_equality(
        spark.read.format("delta").load(str(counts_path)).select(*COMPARED),
        expected_df(spark, expected_rows(records, topic)),
        ignore_row_order=True,
        ignore_nullable=True,
    )
