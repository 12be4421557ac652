"""`--skip-lost-records` for the audit: the documented way past a retention gap on the same
checkpoint (docs/operations.md), on a real broker, in this process (`jobs/main.py`'s `main`).

A run fails on records deleted before it read them (exit 1, the range in source_data_loss);
the run with the flag goes on past exactly that range and the final audit_counts equals the
Python truth of the records that were still there, each window counted once. The old
recovery, a new checkpoint, counts every window still in the topic a second time: shown on a
copy of the same table. A loss the flag run did not know at its start (records deleted while
it is paused at the fault point `source.lost_recorded`, core/faults.py) still fails it.
"""

from __future__ import annotations

import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from chispa import assert_df_equality
from pyspark.sql import functions as F

from core import faults
from core.errors import EXIT_FAILED, EXIT_OK
from testing.conf import write_conf_dir
from testing.demo_data import SentRecord, audit_dataset, produce
from testing.jobrun import committed_batch
from testing.polling import wait_for
from tests.jobs.audit.test_audit_job_integration import (
    COMPARED,
    expected_df,
    expected_rows,
    jobgroup,
)
from tests.jobs.in_process import run_in_process
from tests.jobs.test_source_faults import (
    delete_before,
    end_offsets,
    error_lines,
    loss_rows,
)

pytestmark = pytest.mark.integration

DELETED = 10  # the first records of the second wave on partition 0, deleted unread


@dataclass(frozen=True)
class Gap:
    topic: str
    group: dict
    conf: Path
    first: list[SentRecord]  # the wave the first run counted
    kept: list[SentRecord]  # every record still in the topic
    start: int  # partition 0's first lost offset


def gap_setup(kafka, tmp_path: Path, name: str) -> Gap:
    """A topic whose first wave the audit counted, then a second wave whose first DELETED
    records of partition 0 are deleted unread, as retention does to a job that fell behind."""
    topic = f"{name}-{time.monotonic_ns()}"
    kafka.create_topic(topic, partitions=2)
    first = audit_dataset(60, 2, int(time.time() * 1000))
    produce(kafka.bootstrap_servers, topic, first)
    conf = write_conf_dir(
        tmp_path / "conf", kafka.bootstrap_servers, tmp_path / "wh", tmp_path / "ck"
    )
    group = jobgroup(name, topic)
    assert run_in_process(group, tmp_path, conf, "--once") == EXIT_OK
    start = end_offsets(kafka.bootstrap_servers, topic, 2)[0]
    second = audit_dataset(60, 2, int(time.time() * 1000), seed=8)
    produce(kafka.bootstrap_servers, topic, second)
    delete_before(kafka.bootstrap_servers, topic, 0, start + DELETED)
    # By position: a duplicate equals its original, and only one of them may be deleted.
    lost = {i for i, r in enumerate(second) if r.partition == 0}
    lost = set(sorted(lost)[:DELETED])
    kept = first + [r for i, r in enumerate(second) if i not in lost]
    return Gap(topic, group, conf, first, kept, start)


def message_totals(spark, warehouse: Path) -> dict[str, int]:
    counts = spark.read.format("delta").load(str(warehouse / "audit_counts"))
    rows = counts.groupBy("audit_type").agg(F.sum("message_count").alias("n")).collect()
    return {r["audit_type"]: int(r["n"]) for r in rows}


def both_types(n: int) -> dict[str, int]:
    return {"AUDIT_TYPE_EXACT_UNIQ": n, "AUDIT_TYPE_APPROX_UNIQ": n}


def test_skip_lost_records_goes_on_past_the_gap_and_counts_each_window_once(
    spark, kafka, tmp_path, capsys
) -> None:
    setup = gap_setup(kafka, tmp_path, "skip")
    topic, group, conf, gap_from = setup.topic, setup.group, setup.conf, setup.start
    gap = f"0 [{gap_from}, {gap_from + DELETED})"
    capsys.readouterr()

    # Without the flag the run stops on the gap and records it.
    assert run_in_process(group, tmp_path, conf, "--once") == EXIT_FAILED
    (line,) = error_lines(capsys.readouterr().err)
    assert f"offsets: {gap})" in line
    assert "--skip-lost-records" in line
    assert loss_rows(spark, tmp_path / "wh") == [("skip", topic, 0, gap_from, gap_from + DELETED)]
    # The table as the failure left it, for the old recovery below.
    shutil.copytree(tmp_path / "wh", tmp_path / "wh-old")

    # With the flag: the same checkpoint, past the recorded range only.
    assert run_in_process(group, tmp_path, conf, "--once", "--skip-lost-records") == EXIT_OK
    assert error_lines(capsys.readouterr().err) == []
    counts = spark.read.format("delta").load(str(tmp_path / "wh" / "audit_counts"))
    assert_df_equality(
        counts.select(*COMPARED),
        expected_df(spark, expected_rows(setup.kept, topic)),
        ignore_row_order=True,
        ignore_nullable=True,
    )
    assert loss_rows(spark, tmp_path / "wh") == [("skip", topic, 0, gap_from, gap_from + DELETED)]

    # The old recovery, a new checkpoint on the same table, counts every record still in
    # the topic again: the first wave's on partition 1 (delete-records took partition 0's,
    # which were counted before) a second time.
    old = write_conf_dir(
        tmp_path / "conf-old", kafka.bootstrap_servers, tmp_path / "wh-old", tmp_path / "ck-new"
    )
    assert run_in_process(group, tmp_path, old, "--once") == EXIT_OK
    twice = [r for r in setup.first if r.partition == 1]
    assert message_totals(spark, tmp_path / "wh") == both_types(len(setup.kept))
    assert message_totals(spark, tmp_path / "wh-old") == both_types(len(setup.kept) + len(twice))


def test_a_loss_the_skip_did_not_know_still_fails_the_run(
    spark, kafka, tmp_path, capsys, monkeypatch
) -> None:
    """Records deleted after the flag run recorded its gap and before its query read them
    (the run paused at `source.lost_recorded`): exit 1 naming the whole range, the new part
    recorded beside the known one, nothing of the batch written."""
    setup = gap_setup(kafka, tmp_path, "later")
    topic, group, conf, gap_from = setup.topic, setup.group, setup.conf, setup.start
    counts_path = tmp_path / "wh" / "audit_counts"
    before = committed_batch(counts_path)
    capsys.readouterr()
    faults.reset()
    monkeypatch.setenv(faults.ENV, "source.lost_recorded:pause=8000")
    deleted = threading.Event()

    def delete_more() -> None:
        wait_for(lambda: faults.hits().get("source.lost_recorded"), 120, "the gap recorded")
        delete_before(kafka.bootstrap_servers, topic, 0, gap_from + 2 * DELETED)
        deleted.set()

    deleter = threading.Thread(target=delete_more, daemon=True)
    deleter.start()
    status = run_in_process(group, tmp_path, conf, "--once", "--skip-lost-records")
    deleter.join(60)

    assert deleted.is_set()
    assert status == EXIT_FAILED
    (line,) = error_lines(capsys.readouterr().err)
    assert f"offsets: 0 [{gap_from}, {gap_from + 2 * DELETED}))" in line
    assert loss_rows(spark, tmp_path / "wh") == [
        ("later", topic, 0, gap_from, gap_from + DELETED),
        ("later", topic, 0, gap_from + DELETED, gap_from + 2 * DELETED),
    ]
    assert committed_batch(counts_path) == before
