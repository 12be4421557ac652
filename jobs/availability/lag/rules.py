"""Consumer-lag status rules after LinkedIn Burrow's evaluator: pure functions, no Spark, no I/O.

The model is Burrow's (`core/internal/storage/inmemory.go`, `core/internal/evaluator/caching.go`):

* Per (group, topic, partition) a *window* of the last `intervals` offset commits, oldest first.
  Each `Commit` keeps the lag measured when the commit arrived: broker head offset minus the
  committed offset, clamped at 0. Slots not filled yet are `None` and lead the window.
  `record_commit` builds windows the way Burrow's storage does; `append_commit` does the same
  on the stored commits alone, which is what `LagTracker` keeps.
* `current_lag`: the latest broker head offset minus the newest committed offset, clamped at 0.
* `broker_offsets`: the last few broker head offsets fetched for the partition (Burrow keeps
  `intervals` of them, one per `offset-refresh`).

`partition_status` applies Burrow's rules in Burrow's current order (`calculatePartitionStatus`
after PRs #292, #338, #591 and #716):

1. `current_lag <= allowed_lag` -> OK. Nothing else is checked.
2. STOP: `commits_stopped` and not `recent_lag_zero`.
3. REWIND: `first_rewind_index` finds a backwards step that `rewind_recovered` says was not
   made good later in the window.
4. Some stored lag `<= allowed_lag` (`lag_always_above_allowed` is false) -> OK.
5. STALL: `commits_stalled`.
6. WARN: `lag_not_decreasing`.
7. OK.

`legacy_rewind=True` gives the rules as they were before PR #716 (Burrow 1.3.6 and earlier,
so the 1.2.1 that the side-by-side test runs). There, REWIND means any backwards step, and it
is checked only after rule 4, just before STALL. Burrow's evaluator test table passes with the
default rules, and the table as it was before #716 with `legacy_rewind=True`.
`idle_caught_up_is_ok=True` adds one rule (1b) that Burrow does not have; see
`partition_status`.

`evaluate_group` aggregates partitions as Burrow's `evaluateConsumerStatus` does and applies the
storage's `expire-group` purge.

Deliberate departures from Burrow, where Burrow would crash or has no defined answer: a window
whose slots are all `None` is OK with completeness 0.0, and a `None` after the first commit is
rejected. `now_ms` is used to the millisecond, while Burrow truncates "now" to whole seconds.
Rule 6 needs two measured lags: a window with one (the commits a job records before its first
head-offset fetch have none) shows no trend, so it is not WARN.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import IntEnum
from itertools import pairwise
from typing import Any, NamedTuple

DEFAULT_INTERVALS = 10
"""Burrow storage `intervals`: commits kept per partition."""

EXPIRE_GROUP_MS = 604_800_000
"""Burrow storage `expire-group` (7 days): a group silent for longer is purged (NOTFOUND)."""


class Status(IntEnum):
    """Burrow's `StatusConstant`, same values and names, so `>` ranks severity like Burrow.

    Partitions get OK, WARN, STOP, STALL or REWIND. Groups get NOTFOUND, OK, WARN or ERR.
    """

    NOTFOUND = 0
    OK = 1
    WARN = 2
    ERR = 3
    STOP = 4
    STALL = 5
    REWIND = 6

    def __str__(self) -> str:
        return self.name


# Commit, PartitionResult and GroupResult are NamedTuples, not frozen dataclasses: the job makes
# one per commit and one per partition per evaluation, and a frozen dataclass takes several
# times as long to build.


class Commit(NamedTuple):
    """One stored offset commit.

    `lag` is the broker head minus `offset` when the commit was observed, clamped at 0.
    `None` means no lag was measured for it (Burrow's nil `Lag`). The lag rules skip such entries.
    """

    offset: int
    timestamp_ms: int
    lag: int | None


class PartitionResult(NamedTuple):
    """Burrow's `PartitionStatus`. `start`/`end` are the oldest/newest stored commits."""

    topic: str
    partition: int
    status: Status
    start: Commit | None
    end: Commit | None
    current_lag: int
    complete: float
    # Which rule decided `status` (one of RULES), so a status can be explained, not just shown.
    rule: str = ""


class GroupResult(NamedTuple):
    """Burrow's `ConsumerGroupStatus`. `partitions` may be filtered (`show_all=False`); the
    totals, completeness and `max_lag_partition` always cover every partition."""

    group: str
    status: Status
    complete: float
    partitions: tuple[PartitionResult, ...]
    total_lag: int
    max_lag_partition: PartitionResult | None
    total_partitions: int
    # Why the group has its status: the rule of its worst partition, or why it is NOTFOUND.
    reason: str = ""


# The rule that decided a partition's status, by the numbers of `partition_status` (rule 0 is
# `evaluate_partition`'s), as written to consumer_group_status.partitions.rule.
RULES = {
    "no_commits": "0: the window holds no commit yet",
    "incomplete_window": "0: the window is less complete than minimum_complete",
    "lag_within_allowed": "1: current lag <= allowed lag",
    "idle_caught_up": "1b: nothing produced since the newest commit, lag within the idle tail",
    "commits_stopped": "2: no commit for longer than the window spans, and lag is not zero",
    "rewind": "3: an offset went backwards and did not recover",
    "lag_zero_in_window": "4: some commit in the window had lag <= allowed lag",
    "rewind_legacy": "4b: an offset went backwards (rules before Burrow PR #716)",
    "offsets_stalled": "5: every commit in the window has the same offset",
    "lag_not_decreasing": "6: lag never decreased across the window",
    "lag_decreasing": "7: lag decreased somewhere in the window",
}


# The rules `window_rule` decides: those that look at nothing but the window.
WINDOW_RULES = frozenset(
    (
        "rewind",
        "lag_zero_in_window",
        "rewind_legacy",
        "offsets_stalled",
        "lag_not_decreasing",
        "lag_decreasing",
    )
)


# --- Burrow's rule predicates. Each takes the window's commits, oldest first, without the
# --- leading empty slots, and needs at least one commit.


def lag_always_above_allowed(commits: Sequence[Commit], allowed_lag: int = 0) -> bool:
    """Burrow `isLagAlwaysNotZero` (rule 4 inverted): no stored lag is `<= allowed_lag`.

    Unmeasured lags (`None`) do not count either way.
    """
    return not any(c.lag is not None and c.lag <= allowed_lag for c in commits)


def first_rewind_index(commits: Sequence[Commit]) -> int | None:
    """Burrow `checkIfOffsetsRewind` (rule 3, first half): the index of the first commit whose
    offset is lower than the one before it, or None."""
    for i, (earlier, later) in enumerate(pairwise(commits), start=1):
        if later.offset < earlier.offset:
            return i
    return None


def rewind_recovered(commits: Sequence[Commit], index: int) -> bool:
    """Burrow `checkIfRewindRecovered` (rule 3, second half, PR #716): some commit from `index`
    on gets back to (>=) the offset committed just before the rewind."""
    before = commits[index - 1].offset
    return any(c.offset >= before for c in commits[index:])


def commits_stopped(commits: Sequence[Commit], now_ms: int) -> bool:
    """Burrow `checkIfOffsetsStopped` (rule 2): the time since the newest commit is strictly
    longer than the time the window spans (newest minus oldest commit time)."""
    first, last = commits[0].timestamp_ms, commits[-1].timestamp_ms
    return now_ms - last > last - first


def commits_stalled(commits: Sequence[Commit]) -> bool:
    """Burrow `checkIfOffsetsStalled` (rule 5): every commit in the window has the same offset."""
    return all(c.offset == commits[0].offset for c in commits)


def lag_not_decreasing(commits: Sequence[Commit]) -> bool:
    """Burrow `checkIfLagNotDecreasing` (rule 6): no measured lag is lower than the measured
    lag before it (unmeasured entries are skipped, not treated as breaks). Fewer than two
    measured lags show no trend either way: False, so no WARN is raised on no evidence (the
    commits a job records before its first head-offset fetch have no lag)."""
    lags = [c.lag for c in commits if c.lag is not None]
    return len(lags) >= 2 and all(later >= earlier for earlier, later in pairwise(lags))


def recent_lag_zero(commits: Sequence[Commit], broker_offsets: Sequence[int]) -> bool:
    """Burrow `checkIfRecentLagZero` (rule 2 escape, PR #338): one of the recently fetched broker
    head offsets is <= the newest committed offset, so the consumer was caught up a few
    refreshes ago and may not have had a chance to commit for new data yet."""
    newest = commits[-1].offset
    return any(head <= newest for head in broker_offsets)


# --- Evaluation.


def partition_rule(
    commits: Sequence[Commit],
    current_lag: int,
    now_ms: int,
    *,
    broker_offsets: Sequence[int] = (),
    allowed_lag: int = 0,
    legacy_rewind: bool = False,
    idle_caught_up_is_ok: bool = False,
    idle_tail_lag: int = 1,
    window_verdict: tuple[Status, str] | None = None,
) -> tuple[Status, str]:
    """Burrow `calculatePartitionStatus`: rules 1-7 of the module docstring, first match wins;
    returns the status and the name of the rule that decided it (a key of RULES).

    Rules 3 to 7 look at the window alone (`window_rule`); a caller that evaluates the same
    window again and again may pass their answer, kept from before, as `window_verdict`.

    `commits` is the non-empty window without leading empty slots. `legacy_rewind` reproduces the
    rules from before PR #716 (see the module docstring).

    `idle_caught_up_is_ok` adds rule 1b, which Burrow does not have. Rule 1b says a partition is
    OK when nothing has been produced since the consumer's newest commit (its stored lag equals
    `current_lag`) and it trails the head by at most `allowed_lag + idle_tail_lag`. Burrow
    already reports OK when `current_lag <= allowed_lag` (rule 1). Its remaining idle blind spot
    is a tail the consumer can never consume. For example, the commit marker a transactional
    producer writes after its last record is never handed to the consumer as a record, so an
    idle, caught-up consumer commits one short of the head and stops committing. Burrow then
    reports STOP once the silence outlasts the window, or STALL if the consumer keeps
    re-committing. Its own remedy, `allowed_lag`, hides that much lag on busy partitions too.
    Rule 1b hides it only while nothing new arrives, so a consumer that dies with more backlog
    than the tail is still reported STOP.
    """
    if current_lag <= allowed_lag:
        return Status.OK, "lag_within_allowed"
    if idle_caught_up_is_ok:
        newest_lag = commits[-1].lag
        if newest_lag == current_lag and current_lag <= allowed_lag + idle_tail_lag:
            return Status.OK, "idle_caught_up"
    # STOP comes before the zero-lag rule because the window can hold days-old zero-lag commits
    # (issue #290); the broker-offset escape delays it for data that has only just arrived (#303).
    if commits_stopped(commits, now_ms) and not recent_lag_zero(commits, broker_offsets):
        return Status.STOP, "commits_stopped"
    if window_verdict is not None:
        return window_verdict
    return window_rule(commits, allowed_lag=allowed_lag, legacy_rewind=legacy_rewind)


def window_rule(
    commits: Sequence[Commit], *, allowed_lag: int = 0, legacy_rewind: bool = False
) -> tuple[Status, str]:
    """Rules 3 to 7 of `partition_rule`, those that need neither the clock nor the broker's
    head offsets: the same window always gets the same answer."""
    if not legacy_rewind:
        # Above the zero-lag rule: a consumer reset to earliest usually had zero lag before the
        # reset, which would otherwise hide it (issue #714).
        index = first_rewind_index(commits)
        if index is not None and not rewind_recovered(commits, index):
            return Status.REWIND, "rewind"
    if not lag_always_above_allowed(commits, allowed_lag):
        return Status.OK, "lag_zero_in_window"
    if legacy_rewind and first_rewind_index(commits) is not None:
        return Status.REWIND, "rewind_legacy"
    if commits_stalled(commits):
        return Status.STALL, "offsets_stalled"
    if lag_not_decreasing(commits):
        return Status.WARN, "lag_not_decreasing"
    return Status.OK, "lag_decreasing"


def partition_status(
    commits: Sequence[Commit],
    current_lag: int,
    now_ms: int,
    **options: Any,
) -> Status:
    """Burrow `calculatePartitionStatus`: the status alone (see `partition_rule`)."""
    return partition_rule(commits, current_lag, now_ms, **options)[0]


def evaluate_partition(
    window: Sequence[Commit | None],
    current_lag: int,
    now_ms: int,
    **options: Any,
) -> PartitionResult:
    """Burrow `evaluatePartitionStatus` on a window as `record_commit` builds it (empty slots
    leading): `evaluate_commits` of its stored commits, with as many slots as the window has."""
    return evaluate_commits(_stored(window), len(window), current_lag, now_ms, **options)


def evaluate_commits(
    commits: Sequence[Commit],
    slots: int,
    current_lag: int,
    now_ms: int,
    *,
    topic: str = "",
    partition: int = 0,
    broker_offsets: Sequence[int] = (),
    allowed_lag: int = 0,
    minimum_complete: float = 0.0,
    legacy_rewind: bool = False,
    idle_caught_up_is_ok: bool = False,
    idle_tail_lag: int = 1,
    window_verdict: tuple[Status, str] | None = None,
) -> PartitionResult:
    """Burrow `evaluatePartitionStatus` on the stored commits of a window of `slots` slots
    (oldest first, as `append_commit` keeps them): the completeness, then `partition_rule`
    (which takes `window_verdict`).

    Rule 0 covers the cases where the other rules do not run:
    * an empty window is OK with completeness 0.0;
    * otherwise completeness = stored commits / slots;
    * a partition whose completeness is below `minimum_complete` (Burrow's evaluator
      `minimum-complete`, default 0) is reported OK.
    """
    if current_lag < 0 or allowed_lag < 0 or idle_tail_lag < 0:
        raise ValueError("lags are non-negative (Burrow clamps a negative lag to 0)")
    if not commits:
        return PartitionResult(
            topic, partition, Status.OK, None, None, current_lag, 0.0, "no_commits"
        )
    complete = len(commits) / slots
    status, rule = Status.OK, "incomplete_window"
    if complete >= minimum_complete:
        status, rule = partition_rule(
            commits,
            current_lag,
            now_ms,
            broker_offsets=broker_offsets,
            allowed_lag=allowed_lag,
            legacy_rewind=legacy_rewind,
            idle_caught_up_is_ok=idle_caught_up_is_ok,
            idle_tail_lag=idle_tail_lag,
            window_verdict=window_verdict,
        )
    return PartitionResult(
        topic, partition, status, commits[0], commits[-1], current_lag, complete, rule
    )


def evaluate_group(
    group: str,
    partitions: Sequence[PartitionResult] | None,
    now_ms: int,
    *,
    last_commit_ms: int | None = None,
    expire_group_ms: int = EXPIRE_GROUP_MS,
    show_all: bool = True,
) -> GroupResult:
    """Burrow `evaluateConsumerStatus` plus the storage's lazy `expire-group` purge.

    * NOTFOUND (completeness 1.0, no partitions, no lag): `partitions is None` (unknown group),
      or the group's last commit is older than `expire_group_ms`, i.e.
      `now_ms - expire_group_ms > last_commit_ms`. `last_commit_ms` defaults to the newest commit
      in `partitions`, or 0 when there is none (Burrow likewise purges a group with no commits).
    * status: the worst partition status, where STOP, STALL and REWIND count as ERR; OK if there
      are no partitions.
    * complete: the share of partitions whose completeness is 1.0; 0.0 with no partitions.
    * total_lag: the sum of `current_lag`.
    * max_lag_partition: the first partition with the largest `current_lag`.
    * `show_all=False` keeps only partitions that are not OK in `partitions`, like Burrow's
      default HTTP view.
    """
    if partitions is None:
        return _not_found(group, "unknown group: no commit read for it")
    if last_commit_ms is None:
        last_commit_ms = max(
            (p.end.timestamp_ms for p in partitions if p.end is not None), default=0
        )
    if now_ms - expire_group_ms > last_commit_ms:
        return _not_found(group, f"expired: no commit for more than {expire_group_ms} ms")

    status = Status.OK
    worst: PartitionResult | None = None  # the first partition of the highest status
    max_lag: PartitionResult | None = None
    complete_count = total_lag = 0
    for p in partitions:  # one pass: the job evaluates every group at every micro-batch
        if worst is None or p.status > worst.status:
            worst = p
        if max_lag is None or p.current_lag > max_lag.current_lag:
            max_lag = p
        if p.complete == 1.0:
            complete_count += 1
        total_lag += p.current_lag
    if worst is not None:
        status = min(worst.status, Status.ERR)
    total = len(partitions)
    shown = tuple(partitions) if show_all else tuple(p for p in partitions if p.status > Status.OK)
    reason = (
        f"{worst.topic}/{worst.partition} {worst.status.name}: {worst.rule}"
        if worst is not None
        else "no partitions"
    )
    return GroupResult(
        group=group,
        status=status,
        complete=complete_count / total if total else 0.0,
        partitions=shown,
        total_lag=total_lag,
        max_lag_partition=max_lag,
        total_partitions=total,
        reason=reason,
    )


def record_commit(
    window: Sequence[Commit | None],
    offset: int,
    timestamp_ms: int,
    head_offset: int | None,
    *,
    intervals: int = DEFAULT_INTERVALS,
    min_distance_ms: int = 0,
) -> tuple[Commit | None, ...]:
    """Burrow storage `addConsumerOffset`: the window after one more commit, as `intervals`
    slots, oldest first, with empty slots leading. See `append_commit`."""
    commits = append_commit(
        tuple(_stored(window)),
        offset,
        timestamp_ms,
        head_offset,
        intervals=intervals,
        min_distance_ms=min_distance_ms,
    )
    return (None,) * (intervals - len(commits)) + commits


def append_commit(
    commits: tuple[Commit, ...],
    offset: int,
    timestamp_ms: int,
    head_offset: int | None,
    *,
    intervals: int = DEFAULT_INTERVALS,
    min_distance_ms: int = 0,
) -> tuple[Commit, ...]:
    """Burrow storage `addConsumerOffset` on a window's stored commits (oldest first, at most
    `intervals`): the stored commits after one more, the oldest dropped past `intervals`.

    The stored lag is `head_offset - offset`, clamped at 0 (the head is only refreshed
    periodically, so a commit can be ahead of it), or None without a head offset (a commit
    replayed from history, whose lag at the time is unknown). A commit that arrives less than
    `min_distance_ms` after the newest stored one replaces it and keeps the older timestamp, so
    fast committers do not flush the window and the slot still ages.
    """
    if intervals < 1:
        raise ValueError("intervals must be at least 1")
    lag = None if head_offset is None else max(head_offset - offset, 0)
    if commits and timestamp_ms - commits[-1].timestamp_ms < min_distance_ms:
        return (*commits[:-1], Commit(offset, commits[-1].timestamp_ms, lag))
    return (*commits, Commit(offset, timestamp_ms, lag))[-intervals:]


def _stored(window: Sequence[Commit | None]) -> list[Commit]:
    """The window without its leading empty slots; an empty slot after a commit is an error."""
    first = next((i for i, c in enumerate(window) if c is not None), len(window))
    stored = [c for c in window[first:] if c is not None]
    if len(stored) != len(window) - first:
        raise ValueError("empty (None) slots may only lead the window")
    return stored


def _not_found(group: str, reason: str) -> GroupResult:
    # Burrow's 404 reply reports completeness 1.0 and no partitions.
    return GroupResult(group, Status.NOTFOUND, 1.0, (), 0, None, 0, reason)
