"""The cross-tier verdict rules (`jobs/audit/tiers/verdicts.py`), pure Python: truths computed
by hand for each rule, so a changed rule fails here before any Spark test runs."""

from __future__ import annotations

from datetime import datetime

from jobs.audit.tiers.verdicts import (
    DUPLICATION,
    INCOMPLETE,
    LOSS,
    OK,
    Side,
    Span,
    decide,
    decide_replication,
    replication_outcome,
    revise,
)


def test_decide_counts_and_threshold():
    left = Side("SERVICE", 100)
    assert decide(True, left, Side("kafka", 100), 0.0)[0] == OK
    assert decide(True, left, Side("kafka", 95), 0.0) == (
        LOSS,
        "5 of 100 records missing on kafka",
    )
    assert decide(True, left, Side("kafka", 95), 0.05)[0] == OK  # within 5 %
    assert decide(True, left, Side("kafka", 94), 0.05)[0] == LOSS
    assert decide(True, left, Side("kafka", 103), 0.0)[0] == DUPLICATION
    assert decide(False, left, Side("kafka", 50), 0.0)[0] == INCOMPLETE
    silent = Side("kafka", 0, reported=False, why_not="no audit_counts yet")
    assert decide(True, left, silent, 0.0) == (
        INCOMPLETE,
        "kafka has not reported: no audit_counts yet",
    )


def test_a_loss_hidden_by_duplicates_is_loss_by_unique_bounds():
    left = Side("SERVICE", 1000, 1000, 990.0, 1010.0)
    right = Side("kafka", 1000, 800, 790.0, 810.0)  # same count, 200 fewer distinct
    assert decide(True, left, right, 0.0)[0] == LOSS
    overlapping = Side("kafka", 1000, 995, 985.0, 1005.0)
    assert decide(True, left, overlapping, 0.0)[0] == OK


def test_replication_outcome_exact_missing_ranges_and_copies():
    source = [Span(0, 9), Span(10, 19)]
    destination = [Span(0, 4), Span(8, 15), Span(12, 12), Span(17, 25)]
    o = replication_outcome(source, destination, high_water=25)
    assert o.missing == [Span(5, 7), Span(16, 16)]
    assert (o.expected, o.present, o.copies, o.behind) == (20, 16, 17, False)
    assert decide_replication(True, {"t/0": o})[:2] == (
        LOSS,
        "4 source offsets never arrived: t/0 5-7, t/0 16-16",
    )
    # Offsets above the destination's high water may not be copied yet: not a loss.
    behind = replication_outcome([Span(0, 9)], [Span(0, 5)], high_water=5)
    assert behind.missing == [] and behind.behind
    assert decide_replication(True, {"t/0": behind})[0] == INCOMPLETE
    twice = replication_outcome([Span(0, 4)], [Span(0, 4), Span(2, 2)], high_water=4)
    assert decide_replication(True, {"t/0": twice})[:5] == (
        DUPLICATION,
        "1 source offsets arrived more than once",
        5,
        6,
        5,
    )


def _row(verdict: str, right: int, revision: int | None = None) -> dict:
    row = {
        "check_type": "AUDIT_TYPE_SERVICE_AUDIT_AGGREGATION",
        "check_name": "service->kafka",
        "topic": "orders",
        "window_start": datetime(2026, 1, 1, 0, 0),
        "verdict": verdict,
        "left_count": 30,
        "right_count": right,
        "left_unique": 30,
        "right_unique": 30,
        "missing_count": 0,
    }
    if revision is not None:
        row["revision"] = revision
    return row


def test_revise_appends_a_numbered_revision_only_on_a_change():
    assert [r["revision"] for r in revise([_row(OK, 30)], [])] == [1]
    assert revise([_row(OK, 30)], [_row(OK, 30, 1)]) == []  # nothing changed
    changed = revise([_row(DUPLICATION, 33)], [_row(OK, 30, 1)])
    assert [(r["verdict"], r["revision"]) for r in changed] == [(DUPLICATION, 2)]
    counts_only = revise([_row(LOSS, 20)], [_row(LOSS, 25, 3)])
    assert [r["revision"] for r in counts_only] == [4]
    # An undecided window's counts move every batch: no revision until its verdict changes.
    assert revise([_row(INCOMPLETE, 12)], [_row(INCOMPLETE, 10, 1)]) == []
