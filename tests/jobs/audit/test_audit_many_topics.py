"""One audit job over a topic selection (extension.topics), end to end on a real broker, in
this process (`jobs/main.py`'s `main` on the test session, as tests/jobs/test_source_faults.py
runs it): a pattern that matches topics made before the run and one made during it, minus
an excluded and a non-matching topic, and a matching topic deleted mid-run.

One streaming run carries every assertion: each (topic, partition, window) of audit_counts
equals the truth computed here in plain Python from the records sent
(`test_audit_job_integration.expected_rows`, per topic); a topic created mid-run is in a
micro-batch at most two batches after the batch planned when its records were sent; the
deleted topic is logged and recorded in source_data_loss, and the job goes on counting the
others. Three topics hold the very same records, one of them created after the others were
counted, so exact keys shared between topics would show as duplicates. The crash points of a
multi-topic group are test_audit_faults.py's ("keys-not-saved-two-topics"). A topic deleted
after a batch was planned and before it was read is the second test's, paused there through
the fault hook.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from chispa import assert_df_equality
from pyspark.sql import functions as F

from core.errors import EXIT_OK
from jobs.runtime.checkpoint_files import batch_end_offsets, read_offset_log
from testing.conf import write_conf_dir
from testing.demo_data import SentRecord, audit_dataset, produce
from testing.polling import wait_for
from tests.jobs.audit.test_audit_job_integration import (
    COMPARED,
    expected_df,
    expected_rows,
    jobgroup,
)
from tests.jobs.in_process import run_in_process, running
from tests.jobs.test_source_faults import delete_topic, loss_rows

pytestmark = pytest.mark.integration

PARTITIONS = 4
TYPES = 2  # the group's audit types: every record is counted once per type


def selection_group(group_id: str, pattern: str, exclude: str = "") -> dict:
    """test_audit_job_integration's audit group, reading a pattern instead of one topic."""
    group = jobgroup(group_id, "", trigger_s=1)
    del group["kafkaConsumerTaskGroup"]["topic"]
    group["extension"]["topics"] = {"pattern": pattern, "excludePattern": exclude}
    return group


def counted(spark, table: Path) -> dict[str, int]:
    """message_count per topic in audit_counts, over both audit types."""
    if not (table / "_delta_log").exists():
        return {}
    rows = spark.read.format("delta").load(str(table)).groupBy("topic").agg(F.sum("message_count"))
    return {r[0]: int(r[1]) for r in rows.collect()}


def first_batch_with(spark, checkpoint: str, topic: str) -> int | None:
    """The first micro-batch whose planned end offsets hold records of `topic`."""
    for batch in read_offset_log(spark, checkpoint).planned:
        ends = batch_end_offsets(spark, checkpoint, batch) or {}
        if sum(ends.get(topic, {}).values()) > 0:
            return batch
    return None


def test_a_pattern_audit_counts_every_matching_topic_follows_new_and_deleted_ones(
    spark, kafka, tmp_path: Path, stop_file: Path, caplog
) -> None:
    prefix = f"many{time.monotonic_ns()}"
    now = int(time.time() * 1000)
    mirrored = audit_dataset(60, PARTITIONS, now, seed=1)
    sent: dict[str, list[SentRecord]] = {
        f"{prefix}-a": mirrored,
        f"{prefix}-b": audit_dataset(60, PARTITIONS, now, seed=2),
        f"{prefix}-c": list(mirrored),  # the same records as -a: keys are per topic
    }
    ignored = [f"{prefix}-skip", f"x{prefix}-a"]  # excluded; not a whole-name match
    for topic in [*sent, *ignored]:
        kafka.create_topic(topic, PARTITIONS)
    for topic, records in sent.items():
        produce(kafka.bootstrap_servers, topic, records)
    for topic in ignored:
        produce(kafka.bootstrap_servers, topic, audit_dataset(20, PARTITIONS, now, seed=3))
    conf = write_conf_dir(
        tmp_path / "conf", kafka.bootstrap_servers, tmp_path / "wh", tmp_path / "ck"
    )
    table = tmp_path / "wh" / "audit_counts"
    group = selection_group("many", f"{prefix}-.*", exclude=f"{prefix}-skip")
    checkpoint = str(tmp_path / "ck" / "many")

    def all_counted(status) -> bool:
        assert status() is None, "the job ended"
        got = counted(spark, table)
        return all(got.get(t) == TYPES * len(r) for t, r in sent.items())

    with running(group, tmp_path, conf, stop_file) as status:
        wait_for(lambda: all_counted(status), 300, "the first topics counted", interval_s=1)

        # A topic created mid-run: in a batch within two of the one planned when it got records.
        new = f"{prefix}-d"
        created = time.monotonic()
        kafka.create_topic(new, PARTITIONS)
        sent[new] = list(mirrored)  # what -a and -c hold: keys already seen, in other topics
        produce(kafka.bootstrap_servers, new, sent[new])
        planned_then = read_offset_log(spark, checkpoint).last_planned
        wait_for(lambda: all_counted(status), 300, "the new topic counted", interval_s=0.5)
        print(f"topic creation to counted: {time.monotonic() - created:.1f} s")
        first = first_batch_with(spark, checkpoint, new)
        assert first is not None and planned_then is not None
        assert first <= planned_then + 2, (first, planned_then)

        # A matching topic deleted mid-run: recorded, and the others go on being counted.
        deleted = f"{prefix}-b"
        delete_topic(kafka.bootstrap_servers, deleted)
        more = audit_dataset(30, PARTITIONS, int(time.time() * 1000), seed=5)
        produce(kafka.bootstrap_servers, f"{prefix}-a", more)
        sent[f"{prefix}-a"] = sent[f"{prefix}-a"] + more
        wait_for(lambda: all_counted(status), 300, "counting after the deletion", interval_s=1)
        wait_for(
            lambda: (tmp_path / "wh" / "source_data_loss" / "_delta_log").exists(),
            120,
            "the deletion recorded",
        )
    assert status() == EXIT_OK

    ends = {p: len([r for r in sent[deleted] if r.partition == p]) for p in range(PARTITIONS)}
    assert loss_rows(spark, tmp_path / "wh") == [
        ("many", deleted, p, ends[p], -1) for p in range(PARTITIONS)
    ]
    assert any(f"{deleted} is gone (deleted)" in r.getMessage() for r in caplog.records)
    counts = spark.read.format("delta").load(str(table))
    truth = [row for topic, records in sent.items() for row in expected_rows(records, topic)]
    assert_df_equality(
        counts.select(*COMPARED),
        expected_df(spark, truth),
        ignore_row_order=True,
        ignore_nullable=True,
    )


def test_a_topic_deleted_between_planning_and_reading_is_left_out_and_recorded(
    spark, kafka, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """A --once run paused at `audit.ranges_planned` (core/faults.py) while one of its two
    topics is deleted: the batch reads the other, the deleted one's planned ranges are in
    source_data_loss, and the run exits 0 (the range reader would otherwise wait for records
    that are gone until RANGE_TIMEOUT_MS, then fail the batch)."""
    prefix = f"race{time.monotonic_ns()}"
    kept, deleted = f"{prefix}-kept", f"{prefix}-deleted"
    records = audit_dataset(20, 2, int(time.time() * 1000))
    for topic in (kept, deleted):
        kafka.create_topic(topic, 2)
        produce(kafka.bootstrap_servers, topic, records)
    conf = write_conf_dir(
        tmp_path / "conf", kafka.bootstrap_servers, tmp_path / "wh", tmp_path / "ck"
    )
    monkeypatch.setenv("UATU_FAULT", "audit.ranges_planned@1:pause=20000")
    result: list[int] = []
    run = threading.Thread(
        target=lambda: result.append(
            run_in_process(selection_group("race", f"{prefix}-.*"), tmp_path, conf, "--once")
        )
    )
    run.start()
    try:
        # Once Spark has planned the batch's ranges (the pause's line), not before: a topic
        # gone before Spark plans a bounded run's batch fails it in Spark's own check
        # (LOST_TOPIC_PARTITIONS_IN_END_OFFSET_WITH_TRIGGER_AVAILABLENOW; docs/audit.md).
        seen: list[str] = []

        def planned() -> bool:
            seen.append(capsys.readouterr().err)
            return "at audit.ranges_planned" in "".join(seen)

        wait_for(planned, 120, "batch 0's ranges planned")
        delete_topic(kafka.bootstrap_servers, deleted)
    finally:
        run.join(300)
    assert result == [EXIT_OK]
    ends = {p: len([r for r in records if r.partition == p]) for p in (0, 1)}
    assert loss_rows(spark, tmp_path / "wh") == [("race", deleted, p, 0, ends[p]) for p in (0, 1)]
    assert_df_equality(
        spark.read.format("delta").load(str(tmp_path / "wh" / "audit_counts")).select(*COMPARED),
        expected_df(spark, expected_rows(records, kept)),
        ignore_row_order=True,
        ignore_nullable=True,
    )
