"""The verdict reader (`integrations/verdicts.py`) against a real Delta table written with
delta-rs in the job's schema: revisions appended over several commits (and out of revision
order inside one), several checks judging one window, other topics and clusters beside it.

The truth is the table below (`TRUTH`): per check and window, the verdict of its highest
revision, written down by hand, not derived by the code under test.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from integrations.verdicts import (
    DUPLICATION,
    INCOMPLETE,
    LOSS,
    OK,
    RangeQuery,
    answer,
    range_answer,
    read_newest,
    window_answers,
    worst,
)
from tests.integrations.verdict_rows import HOUR, SCHEMA, row

W0 = datetime(2030, 1, 1, 10, tzinfo=UTC)
W1, W2, W3 = W0 + HOUR, W0 + 2 * HOUR, W0 + 3 * HOUR
SERVICE, CONSUMER = "service->kafka", "kafka->consumer:billing"
# One Delta commit per list, in this order (the job appends each batch's new revisions).
COMMITS = [
    [
        row(SERVICE, W0, 1, INCOMPLETE, counts=(100, 0)),
        row(SERVICE, W1, 1, OK),
        row(SERVICE, W2, 1, INCOMPLETE, counts=(100, 0)),
        row(CONSUMER, W0, 1, DUPLICATION, counts=(100, 104)),
        row(CONSUMER, W1, 1, OK),
        # Beside it, never in an answer about local/orders: another topic and another cluster.
        row(SERVICE, W1, 1, LOSS, topic="payments", counts=(100, 1)),
        row(SERVICE, W1, 1, LOSS, cluster="dest", counts=(100, 2)),
    ],
    # Late data: W0 of service->kafka decided, then revised; W1 revised from OK to LOSS. The
    # newest revision is neither the first nor the last row of its commit.
    [
        row(SERVICE, W0, 3, OK),
        row(SERVICE, W1, 2, LOSS, counts=(100, 90)),
        row(SERVICE, W0, 2, LOSS, counts=(100, 97)),
    ],
]
TRUTH = {  # (check, window) -> (verdict, revision) of the newest revision, local/orders
    (SERVICE, W0): (OK, 3),
    (SERVICE, W1): (LOSS, 2),
    (SERVICE, W2): (INCOMPLETE, 1),
    (CONSUMER, W0): (DUPLICATION, 1),
    (CONSUMER, W1): (OK, 1),
}


@pytest.fixture
def warehouse(tmp_path) -> Path:
    for rows in COMMITS:
        table = pa.Table.from_pylist(rows, schema=SCHEMA)
        write_deltalake(str(tmp_path / "audit_verdicts"), table, mode="append")
    return tmp_path


def query(warehouse: Path, start: datetime, end: datetime, **more) -> RangeQuery:
    return RangeQuery(str(warehouse), start, end, **{"cluster": "local", "topic": "orders", **more})


def test_the_newest_revision_of_every_check_and_window_is_read(warehouse) -> None:
    rows = read_newest(warehouse, cluster="local", topic="orders")
    got = {(r["check_name"], r["window_start"]): (r["verdict"], r["revision"]) for r in rows}
    assert got == TRUTH
    loss = next(r for r in rows if (r["check_name"], r["window_start"]) == (SERVICE, W1))
    assert (loss["left_count"], loss["right_count"], loss["detail"]) == (
        100,
        90,
        "LOSS at revision 2",
    )


def test_a_window_judged_by_several_checks_gets_the_worst(warehouse) -> None:
    answers = {
        key[2]: (a.verdict, a.decided, [(c["check_name"], c["verdict"]) for c in a.checks])
        for key, a in window_answers(read_newest(warehouse, cluster="local", topic="orders"))
    }
    assert answers == {
        W0: (DUPLICATION, True, [(CONSUMER, DUPLICATION), (SERVICE, OK)]),
        W1: (LOSS, True, [(CONSUMER, OK), (SERVICE, LOSS)]),
        W2: (INCOMPLETE, False, [(SERVICE, INCOMPLETE)]),
    }
    # The same through a range query: one window each, and W0..W1 together.
    assert range_answer(query(warehouse, W0, W1)).verdict == DUPLICATION
    both = range_answer(query(warehouse, W0, W2))
    assert (both.verdict, both.decided, len(both.checks)) == (LOSS, True, 4)
    assert [r["check_name"] for r in both.failing([LOSS])] == [SERVICE]
    undecided = range_answer(query(warehouse, W1, W3))
    assert (undecided.verdict, undecided.decided) == (LOSS, False)  # W2 still waits


def test_a_window_without_rows_is_incomplete_no_verdict_yet(warehouse, tmp_path) -> None:
    empty = range_answer(query(warehouse, W3, W3 + HOUR))
    assert (empty.verdict, empty.decided, empty.checks) == (INCOMPLETE, False, ())
    assert empty.detail == "no verdict yet"
    elsewhere = range_answer(query(warehouse, W0, W1, topic="unknown"))
    assert (elsewhere.verdict, elsewhere.decided) == (INCOMPLETE, False)
    no_table = range_answer(query(tmp_path / "nothing", W0, W1))
    assert (no_table.verdict, no_table.decided, no_table.detail) == (
        INCOMPLETE,
        False,
        "no verdict yet",
    )


def test_named_checks_alone_decide_and_a_missing_one_waits(warehouse) -> None:
    alone = range_answer(query(warehouse, W0, W1, check_names=(SERVICE,)))
    assert (alone.verdict, alone.decided, [c["revision"] for c in alone.checks]) == (OK, True, [3])
    waiting = range_answer(query(warehouse, W0, W1, check_names=(SERVICE, "xdc:never")))
    assert (waiting.verdict, waiting.decided, waiting.missing) == (
        INCOMPLETE,
        False,
        ("xdc:never",),
    )
    assert "no verdict yet from xdc:never" in waiting.detail
    # By check name alone, every cluster and topic it judges.
    by_name = range_answer(RangeQuery(str(warehouse), W1, W2, check_names=(SERVICE,)))
    assert sorted((c["cluster"], c["topic"], c["verdict"]) for c in by_name.checks) == [
        ("dest", "orders", LOSS),
        ("local", "orders", LOSS),
        ("local", "payments", LOSS),
    ]


def test_worst_orders_loss_duplication_incomplete_ok() -> None:
    order = [OK, INCOMPLETE, DUPLICATION, LOSS]
    for i, low in enumerate(order):
        for high in order[i:]:
            assert worst([low, high]) == worst([high, low]) == high
    assert worst([]) == INCOMPLETE
    assert answer([]).verdict == INCOMPLETE


def test_a_query_without_topic_or_check_or_with_an_empty_range_is_refused(tmp_path) -> None:
    with pytest.raises(ValueError, match="topic=None: give a topic or check_names"):
        RangeQuery(str(tmp_path), W0, W1)
    with pytest.raises(ValueError, match="window_end=2030-01-01T10:00:00\\+00:00"):
        RangeQuery(str(tmp_path), W0, W0, topic="orders")
