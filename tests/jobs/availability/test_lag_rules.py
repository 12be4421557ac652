"""`jobs.availability.lag.rules` against LinkedIn Burrow's published evaluator tests.

Where the vectors come from, all in linkedin/Burrow `core/internal/evaluator/caching_test.go`,
read at ced55ba90f6b833a45a124d411fd5eef63a70933 (the newest upstream commit; the file's table
last changed in d69a8ec044626f4a651a0b35b61715fbc2d9f1de, PR #716, released in 1.3.7):

* Partition vectors 0-15 are its `tests` table ("correctness proof"), written here as data.
  Each keeps Burrow's inputs, the result Burrow asserts for every rule predicate (for the rewind
  check, the index of the first backwards commit, -1 for none) and the expected status.
  Burrow's commits also carry an `Order` field, which no rule reads; it is left out. Burrow's
  `timeNow` is in seconds and is passed here as milliseconds.
* `PRE_716_STATUS` is the same table at 3a98882f04b928166328cb4391e3a53342b8af3e, the parent of
  PR #716's merge (eab12c58). It has vectors 0-14 with the same inputs and predicates (the rewind
  check was a boolean then), and vectors 7 and 14 expected REWIND. `legacy_rewind=True` replays
  it, as the rules of Burrow 1.2.1 (the release the side-by-side test runs).
* The group cases replay `TestCachingEvaluator_Start`, `_SingleRequest_NoShowAll`,
  `_SingleRequest_ShowAll`, `_SingleRequest_Incomplete` and `_TopicDeleted` from the same file.
  Their storage contents are rebuilt from `core/internal/storage/fixtures.go`
  (`CoordinatorWithOffsets`) at the same commit. Burrow's `Cluster` is not modelled.

The rules agree with Burrow on every vector. Their deliberate differences from Burrow (rule 1b,
`idle_caught_up_is_ok`, off by default; windows without commits; milliseconds for "now") are
for inputs the table does not have, and `test_idle_fix_changes_no_burrow_outcome` shows rule 1b
changes none of its answers. Everything after the Burrow sections tests this project's own cases.
"""

from __future__ import annotations

from typing import NamedTuple

import pytest

from jobs.availability.lag.rules import (
    EXPIRE_GROUP_MS,
    RULES,
    Commit,
    PartitionResult,
    Status,
    commits_stalled,
    commits_stopped,
    evaluate_group,
    evaluate_partition,
    first_rewind_index,
    lag_always_above_allowed,
    lag_not_decreasing,
    partition_status,
    recent_lag_zero,
    record_commit,
)


class Predicates(NamedTuple):
    """Burrow's per-rule expectations, in its table's column order."""

    lag_always_above_allowed: bool  # isLagAlwaysNotZero
    rewind_index: int  # checkIfOffsetsRewind: index of the first backwards commit, -1 if none
    stopped: bool  # checkIfOffsetsStopped
    stalled: bool  # checkIfOffsetsStalled
    lag_not_decreasing: bool  # checkIfLagNotDecreasing
    recent_lag_zero: bool  # checkIfRecentLagZero


class Vector(NamedTuple):
    commits: tuple[tuple[int, int, int | None], ...]  # (offset, timestamp ms, lag)
    broker_offsets: tuple[int, ...]
    current_lag: int
    allowed_lag: int
    time_now_s: int
    expect: Predicates
    status: Status


OK, WARN, ERR = Status.OK, Status.WARN, Status.ERR
STOP, STALL, REWIND = Status.STOP, Status.STALL, Status.REWIND
T, F = True, False
NONE = -1  # Burrow's checkIfOffsetsRewind result when no commit goes backwards

# fmt: off
# Commit lists that several vectors share in Burrow's table: 0-2, 3/8, 5/13, 7/14 and 9/10.
_ZERO_AT_START = ((1000, 100000, 0), (2000, 200000, 50), (3000, 300000, 100),
                  (4000, 400000, 150), (5000, 500000, 200))
_ALWAYS_LAGGING = ((1000, 100000, 50), (2000, 200000, 100), (3000, 300000, 150),
                   (4000, 400000, 200), (5000, 500000, 250))
_STALLED_GROWING = ((1000, 100000, 100), (1000, 200000, 150), (1000, 300000, 200),
                    (1000, 400000, 250), (1000, 500000, 300))
_REWOUND = ((1000, 100000, 100), (2000, 200000, 150), (3000, 300000, 200),
            (2000, 400000, 1250), (4000, 500000, 300))
_FAST_COMMITTER = tuple(
    (792748079 + i, ts, 0)
    for i, ts in enumerate(
        (1512224618356, 1512224619362, 1512224620366, 1512224621367, 1512224622370,
         1512224623373, 1512224624378, 1512224625379, 1512224626383, 1512224627383,
         1512224628383, 1512224629388, 1512224630391, 1512224631394, 1512224632397)
    )
)

BURROW_VECTORS: dict[int, Vector] = {
    # 0 - OK because there is zero lag somewhere
    0: Vector(_ZERO_AT_START, (5200,), 200, 0, 600, Predicates(F, NONE, F, F, T, F), OK),
    # 1 - not stopped: time since last commit (400 s) equals the window span, not greater
    1: Vector(_ZERO_AT_START, (5200,), 200, 0, 900, Predicates(F, NONE, F, F, T, F), OK),
    # 2 - STOP once the silence (500 s) exceeds the span, despite the zero lag at the start (#290)
    2: Vector(_ZERO_AT_START, (5200,), 200, 0, 1000, Predicates(F, NONE, T, F, T, F), STOP),
    # 3 - STOP when the lag is always non-zero as well
    3: Vector(_ALWAYS_LAGGING, (5250,), 250, 0, 1000, Predicates(T, NONE, T, F, T, F), STOP),
    # 4 - OK because of the zero lag, although the offsets are stalled
    4: Vector(
        ((1000, 100000, 0), (1000, 200000, 50), (1000, 300000, 100),
         (1000, 400000, 150), (1000, 500000, 200)),
        (1200,), 200, 0, 600, Predicates(F, NONE, F, T, T, F), OK,
    ),
    # 5 - STALL because the lag is always non-zero
    5: Vector(_STALLED_GROWING, (1300,), 300, 0, 600, Predicates(T, NONE, F, T, T, F), STALL),
    # 6 - still STALL when the lag stays the same
    6: Vector(
        tuple((1000, ts, 100) for ts in (100000, 200000, 300000, 400000, 500000)),
        (1100,), 100, 0, 600, Predicates(T, NONE, F, T, T, F), STALL,
    ),
    # 7 - OK: the offsets go back (3000 -> 2000 at index 3), but 4000 makes up for the rewind
    7: Vector(_REWOUND, (4300,), 300, 0, 600, Predicates(T, 3, F, F, F, F), OK),
    # 8 - OK because the current lag is 0, although the timestamps say stopped
    8: Vector(_ALWAYS_LAGGING, (5250,), 0, 0, 1000, Predicates(T, NONE, T, F, T, F), OK),
    # 9 - STOP: current lag non-zero, zero lag in every commit, new data arrived (#290)
    9: Vector(
        _FAST_COMMITTER,
        (792749024, 792749000, 792748800, 792748600, 792748500),
        931, 0, 1512224650, Predicates(F, NONE, T, F, T, F), STOP,
    ),
    # 10 - OK although stopped by timestamps: lag was zero within the recent broker offsets (#303)
    10: Vector(
        _FAST_COMMITTER,
        (792748094, 792748093, 792748093, 792748093),
        1, 0, 1512224650, Predicates(F, NONE, T, F, T, T), OK,
    ),
    # 11 - vector 0 with unmeasured (nil) lag entries, which must not change the result
    11: Vector(
        ((1000, 100000, 0), (1500, 150000, None), (2000, 200000, 50), (2500, 250000, None),
         (3000, 300000, 100), (3500, 350000, None), (4000, 400000, 150), (4500, 450000, None),
         (5000, 500000, 200), (5500, 550000, None)),
        (5700,), 200, 0, 600, Predicates(F, NONE, F, F, T, F), OK,
    ),
    # 12 - OK: lag > 0 and stopped by timestamps, but within the configured allowed lag (#591)
    12: Vector(
        ((1000, 100000, 2), (2000, 200000, 1), (2000, 300000, 1)),
        (2001,), 1, 1, 550, Predicates(F, NONE, T, F, F, F), OK,
    ),
    # 13 - vector 5 with allowed lag 99: still STALL, every stored lag is above it
    13: Vector(_STALLED_GROWING, (1300,), 300, 99, 600, Predicates(T, NONE, F, T, T, F), STALL),
    # 14 - vector 7 with allowed lag 99: still OK, the rewind is made up for
    14: Vector(_REWOUND, (4300,), 300, 99, 600, Predicates(T, 3, F, F, F, F), OK),
    # 15 - REWIND: back from 3000 to 2000 at index 3, and 2500 does not get back to 3000
    15: Vector(
        ((1000, 100000, 100), (2000, 200000, 150), (3000, 300000, 200),
         (2000, 400000, 1250), (2500, 500000, 300)),
        (4300,), 300, 0, 600, Predicates(T, 3, F, F, F, F), REWIND,
    ),
}

# fmt: on

# Vectors 0-14 as Burrow's table expected them before PR #716: the same, except these two.
PRE_716_STATUS = {i: v.status for i, v in BURROW_VECTORS.items() if i <= 14} | {
    7: REWIND,
    14: REWIND,
}

VECTOR_IDS = [f"burrow-{i:02d}" for i in BURROW_VECTORS]


def commits_of(v: Vector) -> list[Commit]:
    return [Commit(*c) for c in v.commits]


def evaluate_vector(
    v: Vector, *, legacy_rewind: bool = False, idle_caught_up_is_ok: bool = False
) -> PartitionResult:
    return evaluate_partition(
        commits_of(v),
        v.current_lag,
        v.time_now_s * 1000,
        broker_offsets=v.broker_offsets,
        allowed_lag=v.allowed_lag,
        legacy_rewind=legacy_rewind,
        idle_caught_up_is_ok=idle_caught_up_is_ok,
    )


# --- Burrow's partition vectors.


def test_the_table_is_complete() -> None:
    assert sorted(BURROW_VECTORS) == list(range(16))


@pytest.mark.parametrize("v", BURROW_VECTORS.values(), ids=VECTOR_IDS)
def test_burrow_vector_rule_predicates(v: Vector) -> None:
    commits = commits_of(v)
    rewind_index = first_rewind_index(commits)
    got = Predicates(
        lag_always_above_allowed(commits, v.allowed_lag),
        NONE if rewind_index is None else rewind_index,
        commits_stopped(commits, v.time_now_s * 1000),
        commits_stalled(commits),
        lag_not_decreasing(commits),
        recent_lag_zero(commits, v.broker_offsets),
    )
    assert got == v.expect


@pytest.mark.parametrize("v", BURROW_VECTORS.values(), ids=VECTOR_IDS)
def test_burrow_vector_status(v: Vector) -> None:
    result = evaluate_vector(v)
    assert result.status == v.status
    assert result.complete == 1.0
    assert result.start == Commit(*v.commits[0])
    assert result.end == Commit(*v.commits[-1])
    assert result.current_lag == v.current_lag


@pytest.mark.parametrize("i", PRE_716_STATUS, ids=VECTOR_IDS[: len(PRE_716_STATUS)])
def test_burrow_vector_status_before_pr_716_with_legacy_rewind(i: int) -> None:
    assert evaluate_vector(BURROW_VECTORS[i], legacy_rewind=True).status == PRE_716_STATUS[i]


@pytest.mark.parametrize("v", BURROW_VECTORS.values(), ids=VECTOR_IDS)
def test_idle_fix_changes_no_burrow_outcome(v: Vector) -> None:
    assert evaluate_vector(v, idle_caught_up_is_ok=True).status == v.status


# --- Burrow's group cases, on the contents of its storage fixture (`CoordinatorWithOffsets`):
# --- broker head 4321 for testtopic/0; "testgroup" commits 1000, 1100, ... 1900 and "testgroup2"
# --- commits 1000 ... 1400, one every 10 s from 100 s ago, into 10-slot windows, min-distance 0.

NOW_MS = 1_700_000_000_000
FIXTURE_HEAD = 4321


def fixture_partition(group_commits: int) -> PartitionResult:
    window: tuple[Commit | None, ...] = ()
    start_ms = NOW_MS - 100_000
    for i in range(group_commits):
        window = record_commit(window, 1000 + i * 100, start_ms + i * 10_000, FIXTURE_HEAD)
    newest = window[-1]
    assert newest is not None
    return evaluate_partition(
        window,
        FIXTURE_HEAD - newest.offset,
        NOW_MS,
        topic="testtopic",
        partition=0,
        broker_offsets=(FIXTURE_HEAD,),
    )


def test_burrow_group_start_unknown_group_is_notfound() -> None:
    result = evaluate_group("nosuchgroup", None, NOW_MS)
    assert result.status == Status.NOTFOUND
    assert (result.complete, result.partitions, result.total_lag) == (1.0, (), 0)
    assert result.max_lag_partition is None


@pytest.mark.parametrize("show_all", [False, True], ids=["NoShowAll", "ShowAll"])
def test_burrow_group_single_request(show_all: bool) -> None:
    result = evaluate_group("testgroup", [fixture_partition(10)], NOW_MS, show_all=show_all)
    assert result.status == OK
    assert result.complete == 1.0
    assert result.total_partitions == 1
    assert result.total_lag == 2421
    assert result.group == "testgroup"
    assert len(result.partitions) == (1 if show_all else 0)


def test_burrow_group_single_request_incomplete() -> None:
    result = evaluate_group("testgroup2", [fixture_partition(5)], NOW_MS)
    assert result.status == ERR
    assert result.group == "testgroup2"
    assert result.complete == 0.0
    assert result.total_partitions == 1
    assert result.total_lag == 2921
    assert len(result.partitions) == 1
    assert result.partitions[0].complete == 0.5
    assert result.partitions[0].status == STOP
    max_lag = result.max_lag_partition
    assert max_lag is not None and max_lag.start is not None and max_lag.end is not None
    assert (max_lag.start.offset, max_lag.end.offset) == (1000, 1400)


def test_burrow_group_topic_deleted_keeps_the_group_with_no_partitions() -> None:
    # The group's own last-commit time is recent; only its topic (and so its partitions) is gone.
    result = evaluate_group("testgroup", [], NOW_MS, last_commit_ms=NOW_MS - 10_000)
    assert result.status == OK
    assert result.partitions == ()
    assert result.complete == 0.0


# --- Own cases: the rewind rule of PR #716, with the two windows from Burrow issue #714.


def test_rewind_after_zero_lag_is_reported_until_recovered() -> None:
    # Caught up (lag 0) through offset 30, then back to 20 while the head moved on to 40.
    window = [
        Commit(10, 60_000, 0),
        Commit(20, 120_000, 0),
        Commit(30, 180_000, 0),
        Commit(20, 240_000, 10),
    ]
    assert evaluate_partition(window, 20, 250_000).status == REWIND
    # Before #716 the zero lags hid it.
    assert evaluate_partition(window, 20, 250_000, legacy_rewind=True).status == OK


def test_rewind_made_good_within_the_window_is_forgiven() -> None:
    window = [
        Commit(20, 120_000, 0),
        Commit(30, 180_000, 0),
        Commit(20, 240_000, 10),
        Commit(30, 300_000, 15),
    ]
    assert evaluate_partition(window, 15, 310_000).status == OK


# --- Own cases: the idle blind spot (rule 1b, idle_caught_up_is_ok).


def test_caught_up_idle_consumer_is_ok_in_burrow_already() -> None:
    # Current lag 0 and no commit for far longer than the window spans: Burrow's rule 1 says OK,
    # with or without the fix (see Burrow vector 8).
    window = [Commit(5000, ts, 0) for ts in (100_000, 200_000, 300_000)]
    for fix in (False, True):
        assert evaluate_partition(window, 0, 10_000_000, idle_caught_up_is_ok=fix).status == OK


def advancing(lag: int) -> list[Commit]:
    """Commits 1000, 2000, ... 5000 at 100 s, 200 s, ... 500 s, each with the same stored lag."""
    return [Commit(1000 * i, 100_000 * i, lag) for i in range(1, 6)]


def marker_tail_window() -> list[Commit]:
    # A transactional producer leaves a commit marker after each batch, so the head is always
    # one past the last record the consumer can receive, and the consumer commits one short.
    return advancing(1)


def test_idle_consumer_behind_only_a_marker_is_stop_in_burrow_ok_with_the_fix() -> None:
    window = marker_tail_window()  # newest commit 5000 at 500 s, head 5001 ever since
    now_ms = 1_000_000  # 500 s of silence > 400 s window span
    exact = evaluate_partition(window, 1, now_ms, broker_offsets=(5001, 5001, 5001))
    fixed = evaluate_partition(
        window, 1, now_ms, broker_offsets=(5001, 5001, 5001), idle_caught_up_is_ok=True
    )
    assert (exact.status, fixed.status) == (STOP, OK)


def test_idle_consumer_recommitting_behind_a_marker_is_stall_in_burrow_ok_with_the_fix() -> None:
    window = [Commit(5000, ts, 1) for ts in (100_000, 200_000, 300_000, 400_000, 500_000)]
    assert evaluate_partition(window, 1, 550_000).status == STALL
    assert evaluate_partition(window, 1, 550_000, idle_caught_up_is_ok=True).status == OK


def test_the_fix_does_not_hide_a_dead_consumer_with_backlog() -> None:
    window = advancing(300)
    result = evaluate_partition(window, 300, 1_000_000, idle_caught_up_is_ok=True)
    assert result.status == STOP


def test_the_fix_does_not_apply_once_new_data_arrives() -> None:
    # Caught up at its newest commit (lag 0); one new message since (current lag 1): not idle.
    window = advancing(0)
    old_heads = (5000, 5000, 5001)  # the consumer was at the head a refresh or two ago
    new_heads = (5001, 5001, 5001)
    for fix in (False, True):
        # Burrow's escape (#338) waits while a recent head offset still matches the commit ...
        escaped = evaluate_partition(
            window, 1, 1_000_000, broker_offsets=old_heads, idle_caught_up_is_ok=fix
        )
        assert escaped.status == OK
        # ... and reports STOP once every recent head is past it.
        stopped = evaluate_partition(
            window, 1, 1_000_000, broker_offsets=new_heads, idle_caught_up_is_ok=fix
        )
        assert stopped.status == STOP


def test_the_fix_needs_a_measured_lag_on_the_newest_commit() -> None:
    window = [*marker_tail_window()[:-1], Commit(5000, 500_000, None)]
    result = evaluate_partition(window, 1, 1_000_000, idle_caught_up_is_ok=True)
    assert result.status == STOP


# --- Own cases: windows, completeness and storage.


def test_partial_window_completeness_and_minimum_complete() -> None:
    window = [None, None, None, *marker_tail_window()[:2]]
    assert evaluate_partition(window, 1, 10_000_000).complete == 0.4
    assert evaluate_partition(window, 1, 10_000_000).status == STOP
    below = evaluate_partition(window, 1, 10_000_000, minimum_complete=0.5)
    assert below.status == OK
    assert below.end == window[-1]


@pytest.mark.parametrize("window", [[], [None, None]], ids=["no-slots", "all-empty"])
def test_window_without_commits_is_ok_and_incomplete(window: list[Commit | None]) -> None:
    result = evaluate_partition(window, 7, 1_000)
    assert (result.status, result.complete, result.start, result.end) == (OK, 0.0, None, None)


def test_empty_slot_after_a_commit_is_rejected() -> None:
    with pytest.raises(ValueError, match="lead the window"):
        evaluate_partition([Commit(1, 1, 0), None, Commit(2, 2, 0)], 0, 3)
    with pytest.raises(ValueError, match="lead the window"):
        evaluate_partition([None, Commit(1, 1, 0), None], 0, 3)


def test_partition_status_takes_the_same_rules_without_the_window() -> None:
    v = BURROW_VECTORS[9]
    status = partition_status(
        commits_of(v), v.current_lag, v.time_now_s * 1000, broker_offsets=v.broker_offsets
    )
    assert status == STOP


def test_record_commit_keeps_the_last_intervals_commits() -> None:
    window: tuple[Commit | None, ...] = ()
    for i in range(4):
        window = record_commit(window, 100 * i, 1_000 * i, 250, intervals=3)
    assert window == (Commit(100, 1_000, 150), Commit(200, 2_000, 50), Commit(300, 3_000, 0))


def test_record_commit_pads_a_partial_window_and_clamps_lag() -> None:
    window = record_commit((), 500, 1_000, 400, intervals=3)
    assert window == (None, None, Commit(500, 1_000, 0))


def test_record_commit_within_min_distance_replaces_the_newest_keeping_its_time() -> None:
    window = record_commit((), 100, 10_000, 1_000, intervals=3, min_distance_ms=5_000)
    window = record_commit(window, 150, 12_000, 1_000, intervals=3, min_distance_ms=5_000)
    assert window == (None, None, Commit(150, 10_000, 850))
    window = record_commit(window, 200, 15_000, 1_000, intervals=3, min_distance_ms=5_000)
    assert window == (None, Commit(150, 10_000, 850), Commit(200, 15_000, 800))


# --- Own cases: group aggregation.


def part(status: Status, lag: int, complete: float = 1.0, topic: str = "t") -> PartitionResult:
    end = Commit(0, NOW_MS - 1_000, lag)
    return PartitionResult(topic, 0, status, end, end, lag, complete)


@pytest.mark.parametrize(
    ("statuses", "expected"),
    [
        ((OK, OK), OK),
        ((OK, WARN), WARN),
        ((WARN, STALL, OK), ERR),
        ((STOP,), ERR),
        ((REWIND, WARN), ERR),
    ],
)
def test_group_status_is_the_worst_partition_with_errors_as_err(
    statuses: tuple[Status, ...], expected: Status
) -> None:
    result = evaluate_group("g", [part(s, 1) for s in statuses], NOW_MS)
    assert result.status == expected


def test_group_totals_completeness_and_max_lag() -> None:
    parts = [part(OK, 5, topic="a"), part(WARN, 9, 0.5, "b"), part(OK, 9, topic="c")]
    result = evaluate_group("g", parts, NOW_MS, show_all=False)
    assert result.total_lag == 23
    assert result.total_partitions == 3
    assert result.complete == 2 / 3
    assert result.max_lag_partition == parts[1]  # the first of the tied largest lags
    assert result.partitions == (parts[1],)


def test_group_expires_after_expire_group_of_silence() -> None:
    parts = [part(OK, 0)]
    last = NOW_MS - 1_000
    at_limit = evaluate_group("g", parts, last + EXPIRE_GROUP_MS)
    assert at_limit.status == OK
    expired = evaluate_group("g", parts, last + EXPIRE_GROUP_MS + 1)
    assert (expired.status, expired.partitions, expired.total_lag) == (Status.NOTFOUND, (), 0)


def test_group_without_any_commit_expires_like_burrow() -> None:
    no_commits = PartitionResult("t", 0, OK, None, None, 0, 0.0)
    assert evaluate_group("g", [no_commits], NOW_MS).status == Status.NOTFOUND


def test_status_names_are_burrows() -> None:
    assert [str(s) for s in Status] == ["NOTFOUND", "OK", "WARN", "ERR", "STOP", "STALL", "REWIND"]


# --- Own cases: every status says which rule decided it (Burrow #303, #113: "why WARN?").


def _window(*lags: int, offsets: tuple[int, ...] | None = None, step_ms: int = 1_000):
    offsets = offsets or tuple(range(100, 100 + 10 * len(lags), 10))
    start = NOW_MS - step_ms * len(lags)
    pairs = enumerate(zip(offsets, lags, strict=True))
    return [Commit(o, start + i * step_ms, lag) for i, (o, lag) in pairs]


@pytest.mark.parametrize(
    ("window", "current_lag", "now_ms", "expected"),
    [
        (_window(5, 4), 0, NOW_MS, (OK, "lag_within_allowed")),
        (_window(5, 4), 4, NOW_MS + 60_000, (STOP, "commits_stopped")),
        (_window(5, 4, offsets=(300, 200)), 4, NOW_MS, (REWIND, "rewind")),
        (_window(0, 4), 4, NOW_MS, (OK, "lag_zero_in_window")),
        (_window(5, 5, offsets=(100, 100)), 5, NOW_MS, (STALL, "offsets_stalled")),
        (_window(5, 6, 7), 7, NOW_MS, (WARN, "lag_not_decreasing")),
        (_window(7, 6, 5), 5, NOW_MS, (OK, "lag_decreasing")),
    ],
)
def test_each_status_names_the_rule_that_decided_it(window, current_lag, now_ms, expected):
    result = evaluate_partition(window, current_lag, now_ms)
    assert (result.status, result.rule) == expected
    assert result.rule in RULES


def test_an_empty_window_and_the_group_reason_are_explained() -> None:
    empty = evaluate_partition([None, None], 3, NOW_MS, topic="t", partition=2)
    assert (empty.status, empty.rule) == (OK, "no_commits")
    stalled = evaluate_partition(_window(5, 5, offsets=(100, 100)), 5, NOW_MS, topic="t")
    group = evaluate_group("g", [part(OK, 0), stalled], NOW_MS)
    assert group.reason == "t/0 STALL: offsets_stalled"
    assert "unknown group" in evaluate_group("g", None, NOW_MS).reason


def test_a_window_with_one_measured_lag_is_not_warn_on_no_evidence() -> None:
    # A job that recorded four commits before its first head-offset fetch (lag unknown) and a
    # fifth with a lag: the lag may be falling, nothing shows it is not.
    unmeasured = [Commit(10 + 3 * k, 60_000 + 3_000 * k, None) for k in range(4)]
    window = [*unmeasured, Commit(22, 72_000, 89)]
    assert not lag_not_decreasing(window)
    assert evaluate_partition(window, 89, 73_000).status == OK
    # With a second measured lag, not lower than the first, rule 6 applies.
    window = [*unmeasured[:3], Commit(19, 69_000, 89), Commit(22, 72_000, 89)]
    assert lag_not_decreasing(window)
    assert evaluate_partition(window, 89, 73_000).status == WARN
