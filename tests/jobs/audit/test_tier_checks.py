"""The cross-tier checks' row computations (`jobs/audit/tiers/windows.py`, `checks/`,
`verdict_writer.py`), pure Python on rows as the Delta reads return them: which audit is
the Kafka side of a topic, when a RETENTION window is LOSS or INCOMPLETE, and which
REPLICATION gaps are written with which revision. Truths are written out by hand."""

from __future__ import annotations

from pyspark.sql import Row

from jobs.audit.tiers.checks import replication, retention
from jobs.audit.tiers.spec import REPLICATION, RETENTION, Check, TopicRef
from jobs.audit.tiers.verdict_writer import with_revisions
from jobs.audit.tiers.verdicts import INCOMPLETE, LOSS, OK
from jobs.audit.tiers.windows import Round, per_check_window

T0 = 1_800_000_000_000 - 1_800_000_000_000 % 120_000  # a start of a 120 s window
ORDERS, COPY = TopicRef("local", "orders"), TopicRef("local", "orders-copy")


def counted(
    topic: TopicRef, audit_type: str, interval: int, start: int, n: int, group: str = "fleet"
) -> Row:
    return Row(
        cluster=topic.cluster,
        topic=topic.topic,
        job_group_id=group,
        audit_type=f"AUDIT_TYPE_{audit_type}",
        audit_interval_seconds=interval,
        window_start=start,
        message_count=n,
    )


def test_the_kafka_side_is_one_audit_per_topic_summed_into_the_check_window():
    """Of the audits dividing the check's 120 s: the longest interval, EXACT over APPROX."""
    other = TopicRef("local", "other")
    rows = [
        counted(ORDERS, "EXACT_UNIQ", 60, T0, 5),
        counted(ORDERS, "EXACT_UNIQ", 60, T0 + 60_000, 7),
        counted(ORDERS, "APPROX_UNIQ", 60, T0, 6),  # same interval, not EXACT
        counted(ORDERS, "EXACT_UNIQ", 30, T0, 100),  # shorter interval
        counted(other, "APPROX_UNIQ", 30, T0 + 150_000, 3),
    ]
    got = per_check_window(rows, 120, {})
    assert {k: [r.message_count for r in v] for k, v in got.items()} == {
        (ORDERS, T0): [5, 7],
        (other, T0 + 120_000): [3],
    }


def test_two_groups_counting_one_topic_are_never_added_together():
    """A pattern audit and a single-topic audit both count `orders` (each its own rows): the
    Kafka side is the rows of the group that updated them last, not their sum."""
    rows = [
        counted(ORDERS, "EXACT_UNIQ", 60, T0, 5, group="fleet"),
        counted(ORDERS, "EXACT_UNIQ", 60, T0 + 60_000, 7, group="fleet"),
        counted(ORDERS, "EXACT_UNIQ", 60, T0, 5, group="orders-only"),
        counted(ORDERS, "EXACT_UNIQ", 60, T0 + 60_000, 6, group="orders-only"),  # behind
    ]
    updated = {(ORDERS, "fleet"): T0 + 200_000, (ORDERS, "orders-only"): T0 + 100_000}
    got = per_check_window(rows, 120, updated)
    assert {k: [r.message_count for r in v] for k, v in got.items()} == {(ORDERS, T0): [5, 7]}
    # The other one's rows once it is the one updated last.
    updated[(ORDERS, "orders-only")] = T0 + 300_000
    got = per_check_window(rows, 120, updated)
    assert {k: [r.message_count for r in v] for k, v in got.items()} == {(ORDERS, T0): [5, 6]}


def ret_row(start: int, partition: int, deleted: int, lost: int, committed: int | None, of: int):
    return Row(
        window_start=start,
        partition=partition,
        deleted_count=deleted,
        lost_count=lost,
        committed_offset=committed,
        partition_count=of,
        expected_partition_count=2,
    )


def test_a_retention_window_is_loss_on_a_lost_record_else_incomplete_without_full_truth():
    check = Check(RETENTION, "retention:local/orders", 60, 60, partition_count=2, source=(ORDERS,))
    w = [T0 + i * 60_000 for i in range(5)]
    at = Round("g", now=w[3] + 120_000, horizon=0)  # w[0..3] due, w[4] not yet
    rows = [
        ret_row(w[0], 0, 10, 3, 7, 2),
        ret_row(w[0], 1, 5, 0, 40, 2),
        ret_row(w[1], 0, 4, 0, 9, 1),  # one partition of the expected two
        ret_row(w[2], 0, 4, 0, 9, 2),
        ret_row(w[2], 1, 4, 0, None, 2),  # no committed offset
        ret_row(w[3], 0, 6, 0, 20, 2),
        ret_row(w[3], 1, 0, 0, 40, 2),
        ret_row(w[4], 0, 9, 9, 0, 2),  # lost, but not past its grace period
    ]
    got = retention.candidates(check, at, ORDERS, "readers", rows)
    assert [(r["verdict"], r["left_count"], r["right_count"], r["missing_count"]) for r in got] == [
        (LOSS, 15, 12, 3),
        (INCOMPLETE, 4, 4, 0),
        (INCOMPLETE, 8, 8, 0),
        (OK, 6, 6, 0),
        (INCOMPLETE, 9, 0, 9),
    ]
    assert got[0]["detail"] == "3 records deleted by retention before they were consumed"
    assert got[1]["detail"] == "1 partitions, expected 2"
    no_group = retention.candidates(check, at, ORDERS, "", rows[5:7])
    assert [(r["verdict"], r["detail"]) for r in no_group] == [
        (INCOMPLETE, "the group has no committed offset on every partition")
    ]


def test_replication_gaps_come_only_with_a_loss_and_carry_its_revision():
    check = Check(REPLICATION, "replication", 60, 60, source=(ORDERS,), destination=(COPY,))
    w1, w2 = T0, T0 + 60_000
    at = Round("g", now=w1 + 120_000, horizon=0)  # w1 due; w2 not yet
    partition = {"cluster": "local", "topic": "orders", "partition": 0}
    source = [
        Row(**partition, window_start=w, first_offset=a, last_offset=b)
        for w, a, b in ((w1, 0, 9), (w2, 10, 19))
    ]
    destination = [
        Row(**partition, first_offset=a, last_offset=b, copies=1)
        for a, b in ((0, 3), (6, 12), (15, 19))
    ]
    rows, gaps = replication.candidates(
        check, at, source, destination, {("local", "orders", 0): 19}
    )
    assert [(r["window_start"], r["verdict"], r["missing_count"]) for r in rows] == [
        (w1, LOSS, 2),
        (w2, INCOMPLETE, 2),  # 13-14 missing too, but the window is not decided yet
    ]
    assert [(g["window_start"], g["first_offset"], g["last_offset"]) for g in gaps] == [(w1, 4, 5)]
    # Written with the revision of its verdict row; not at all when that row is not written.
    assert [g["revision"] for g in with_revisions([{**rows[0], "revision": 3}], gaps)] == [3]
    assert with_revisions([], gaps) == []
