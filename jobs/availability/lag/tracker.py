"""Every consumer group's commit windows and the brokers' head offsets, evaluated on demand.

`LagTracker` is the evaluator's memory, kept by the availability job's driver: pure Python, no
Spark, no I/O. The job feeds it the commits decoded from `__consumer_offsets` (`record`,
`forget`) and the newest head offsets (`refresh_heads`), then asks for every group's status
(`evaluate`). Rules and windows are Burrow's (`lag/rules.py`); what differs:

* nothing, for the current lag: it is recomputed from the newest head offsets at every
  evaluation, so a stopped consumer's lag keeps growing. Users of older Burrow releases saw it
  frozen at the last commit (Burrow #287, #446); Burrow 1.2.1 recomputes it too (checked side
  by side in tests/jobs/availability/test_burrow_side_by_side.py);
* a caught-up consumer on an idle partition whose tail cannot be consumed (a transaction
  marker leaves lag 1 forever) is OK, not STOP, unless `burrow_strict` (Burrow #38, #94...);
* the job persists every commit it records, and `record` replays them on start, so a restart
  has no blind period (Burrow keeps its windows in memory only).

The job records every commit and evaluates every group (at most once a second,
`status_due`), so `record` and `evaluate` are its hot path. `evaluate` applies
`rules.partition_rule` inline (rules 1, 1b and 2, then the window's own verdict, rules 3-7,
kept until the window's next commit) and hands back the previous evaluation's result
objects for what did not change; a randomized test holds it to the pure rules
(tests/jobs/availability/test_availability_units.py).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from jobs.availability.lag.rules import (
    DEFAULT_INTERVALS,
    EXPIRE_GROUP_MS,
    Commit,
    GroupResult,
    PartitionResult,
    Status,
    evaluate_group,
)

TopicPartition = tuple[str, int]
GroupPartition = tuple[str, str, int]  # group, topic, partition

# The rules' answers, as `partition_rule` and `window_rule` give them.
_OK_WITHIN_ALLOWED = (Status.OK, "lag_within_allowed")
_OK_IDLE_CAUGHT_UP = (Status.OK, "idle_caught_up")
_STOP = (Status.STOP, "commits_stopped")
_REWIND = (Status.REWIND, "rewind")
_OK_LAG_ZERO = (Status.OK, "lag_zero_in_window")
_STALL = (Status.STALL, "offsets_stalled")
_WARN = (Status.WARN, "lag_not_decreasing")
_OK_DECREASING = (Status.OK, "lag_decreasing")
IDLE_TAIL_LAG = 1  # `partition_rule`'s default idle_tail_lag, which the job uses
_NEVER = -(1 << 63)  # below any commit time

STATUS_INTERVAL_MS = 1_000
"""`LagSettings.status_interval_ms` by default: the head sampler's refresh
(`head_sampler.REFRESH_S`). The job's spec lowers it to half the trigger (1 s at least) when
that is shorter, so every micro-batch the trigger paces is evaluated."""

# `Commit(...)` and `PartitionResult(...)` go through the NamedTuple's Python-level __new__;
# tuple.__new__ builds the same object in a third of the time (one per partition per
# evaluation when its lag moved).
_new = tuple.__new__

# A stored commit: `Commit`'s fields in a plain tuple. The garbage collector stops tracking a
# plain tuple of numbers the first time it sees one, never a NamedTuple; the windows hold
# `intervals` commits of every partition of every group, which the collector would otherwise
# walk again and again. They become `Commit`s where they leave the tracker.
Stored = tuple[int, int, int | None]  # offset, timestamp_ms, lag


def window_verdict(commits: Sequence[Stored], allowed_lag: int) -> tuple[Status, str]:
    """`rules.window_rule` (rules 3 to 7, not `legacy_rewind`) in one pass over the window,
    without the predicates' generators: the job needs it once per commit. The same answers
    on random windows (tests/jobs/availability/test_availability_units.py)."""
    first = prev = commits[0][0]
    stalled = True  # `commits_stalled`
    before = None  # the offset before the first rewind (`first_rewind_index`)
    recovered = False  # `rewind_recovered`
    zero = False  # not `lag_always_above_allowed`
    rising = True  # `lag_not_decreasing`, with `measured` >= 2
    measured = 0
    last_lag = 0
    for offset, _, lag in commits:
        if before is None:
            if offset < prev:
                before = prev
            prev = offset
        elif offset >= before:
            recovered = True
        if offset != first:
            stalled = False
        if lag is not None:
            if lag <= allowed_lag:
                zero = True
            if measured and lag < last_lag:
                rising = False
            last_lag = lag
            measured += 1
    if before is not None and not recovered:
        return _REWIND
    if zero:
        return _OK_LAG_ZERO
    if stalled:
        return _STALL
    if rising and measured >= 2:
        return _WARN
    return _OK_DECREASING


@dataclass(frozen=True)
class LagSettings:
    intervals: int = DEFAULT_INTERVALS  # commits per window (Burrow `intervals`)
    min_distance_ms: int = 0  # Burrow `min-distance`
    allowed_lag: int = 0  # Burrow `allowed-lag`
    expire_group_ms: int = EXPIRE_GROUP_MS  # Burrow `expire-group`
    burrow_strict: bool = False  # True: no OK for a caught-up consumer on an idle tail
    # The job evaluates the groups (and writes `consumer_group_status`) at most this often: a
    # micro-batch sooner after the last evaluated one records its commits only (`status_due`).
    status_interval_ms: int = STATUS_INTERVAL_MS


def status_due(last_ms: int | None, now_ms: int, interval_ms: int) -> bool:
    """Whether the micro-batch at `now_ms` evaluates the groups: the first does (`last_ms`
    None), then the first at least `interval_ms` after the last that did, or any once the
    clock went back."""
    return last_ms is None or not 0 <= now_ms - last_ms < interval_ms


class _Window:
    """One partition's stored commits, oldest first (what `rules.append_commit` keeps, as
    `Stored` tuples in a deque of `intervals` that drops the oldest itself), and what
    evaluations found for them: `verdict`, `window_rule`'s answer once an evaluation needed
    it (it changes only with a commit), and `result`, the newest evaluation's
    `PartitionResult`, handed back while nothing in it changed."""

    __slots__ = ("commits", "result", "verdict")

    def __init__(self, commits: deque[Stored]) -> None:
        self.commits = commits
        self.verdict: tuple[Status, str] | None = None
        self.result: PartitionResult | None = None


class _Group:
    """One group's windows, and its newest evaluation (`partitions`, `result`) for reuse."""

    __slots__ = ("partitions", "result", "sorted", "windows")

    def __init__(self) -> None:
        self.windows: dict[TopicPartition, _Window] = {}
        self.sorted: list[tuple[TopicPartition, _Window]] | None = None  # by topic, partition
        self.partitions: list[PartitionResult] = []
        self.result: GroupResult | None = None


class LagTracker:
    def __init__(self, settings: LagSettings) -> None:
        if settings.intervals < 1:
            raise ValueError("intervals must be at least 1")
        self.settings = settings
        # Kept by group so that evaluating some groups touches only theirs.
        self._groups: dict[str, _Group] = {}
        self._names: list[str] | None = None  # sorted group names, None when to sort again
        self._heads: dict[TopicPartition, deque[int]] = {}
        self._windows_on: dict[TopicPartition, int] = {}  # windows per partition
        self._intervals = settings.intervals  # `record` runs once per commit: one lookup
        self._min_distance_ms = settings.min_distance_ms

    def record(
        self, group: str, topic: str, partition: int, offset: int, commit_ms: int, lag: int | None
    ) -> Commit:
        """Add one commit to its window; `lag` None when unknown, clamped at 0 otherwise.
        Returns what was stored. The same as `rules.append_commit` with head offset
        `offset + lag`."""
        return _new(Commit, self.record_at(group, (topic, partition), offset, commit_ms, lag))

    def record_at(
        self, group: str, tp: TopicPartition, offset: int, commit_ms: int, lag: int | None
    ) -> Stored:
        """`record`, with the partition as the (topic, partition) key the caller has, and
        what was stored as a plain tuple (the job's hot path)."""
        state = self._groups.get(group)
        if state is None:
            state = self._groups[group] = _Group()
            self._names = None
        if lag is not None and lag < 0:
            lag = 0  # as `append_commit` clamps it
        window = state.windows.get(tp)
        if window is None:
            commit = (offset, commit_ms, lag)
            state.windows[tp] = _Window(deque((commit,), self._intervals))
            state.sorted = None
            self._windows_on[tp] = self._windows_on.get(tp, 0) + 1
            return commit
        commits = window.commits
        newest_ms = commits[-1][1]
        if commit_ms - newest_ms < self._min_distance_ms:
            # Replaces the newest and keeps its time (see `append_commit`).
            commit = commits[-1] = (offset, newest_ms, lag)
        else:
            commit = (offset, commit_ms, lag)
            commits.append(commit)  # the oldest drops out past `intervals`
        window.verdict = window.result = None
        return commit

    def held(self, group: str, tp: TopicPartition, offset: int, commit_ms: int) -> Stored | None:
        """This commit as the group's window has it, when the window has seen it: the stored
        commit itself, or, for one older than the newest stored (gone from the window, or
        replaced by a commit within `min_distance_ms`), the commit with an unknown lag. None
        for a commit the window has not seen: newer than its newest, or as new with another
        offset. A replayed micro-batch asks before it records: what its first attempt stored
        is in the windows again (the job replays the table on start), and recording it again
        would store it twice (or, older than the newest, put its offset at the newest's
        time). A group's commits to a partition come in time order (its coordinator stamps
        them), so one of the replayed batch older than the newest stored was stored."""
        state = self._groups.get(group)
        window = state.windows.get(tp) if state is not None else None
        if window is None:
            return None
        commits = window.commits
        newest_ms = commits[-1][1]
        if commit_ms > newest_ms:
            return None
        for stored in commits:
            if stored[0] == offset and stored[1] == commit_ms:
                return stored
        return (offset, commit_ms, None) if commit_ms < newest_ms else None

    def forget(self, group: str, topic: str, partition: int) -> None:
        """The group's offset was deleted (a tombstone in `__consumer_offsets`)."""
        state = self._groups.get(group)
        if state is None or state.windows.pop((topic, partition), None) is None:
            return
        state.sorted = None
        tp = (topic, partition)
        self._windows_on[tp] -= 1
        if not self._windows_on[tp]:
            del self._windows_on[tp]
        if not state.windows:
            del self._groups[group]
            self._names = None

    def refresh_heads(self, heads: Mapping[TopicPartition, int]) -> None:
        """The brokers' newest head offsets; the last `intervals` of each are kept."""
        for tp, head in heads.items():
            ring = self._heads.get(tp)
            if ring is None:
                ring = self._heads[tp] = deque(maxlen=self.settings.intervals)
            ring.append(head)

    def head(self, topic: str, partition: int) -> int | None:
        ring = self._heads.get((topic, partition))
        return ring[-1] if ring else None

    def topic_partitions(self) -> set[TopicPartition]:
        """Every partition some group has committed to: the heads the job must fetch."""
        return set(self._windows_on)

    def committed(self) -> dict[GroupPartition, int]:
        """The newest committed offset of every (group, topic, partition)."""
        return {(group, *tp): commits[-1][0] for group, tp, commits in self._each()}

    def lagging(self) -> dict[GroupPartition, int]:
        """`committed`, for the partitions whose `current_lag` is above 0."""
        return {
            (group, *tp): commits[-1][0]
            for group, tp, commits in self._each()
            if self._current_lag(tp, commits[-1]) > 0
        }

    def current_lag(self, key: GroupPartition) -> int:
        """Head minus the newest commit, clamped at 0; the stored lag while no head is known."""
        group, topic, partition = key
        window = self._groups[group].windows[(topic, partition)]
        return self._current_lag((topic, partition), window.commits[-1])

    def _current_lag(self, tp: TopicPartition, newest: Stored) -> int:
        ring = self._heads.get(tp)
        if not ring:
            return newest[2] or 0
        return max(ring[-1] - newest[0], 0)

    def _each(self) -> Iterator[tuple[str, TopicPartition, deque[Stored]]]:
        for group, state in self._groups.items():
            for tp, window in state.windows.items():
                yield group, tp, window.commits

    def evaluate(self, now_ms: int, groups: Iterable[str] | None = None) -> list[GroupResult]:
        """Every group's status (or those named; an unknown one is NOTFOUND), sorted by name;
        a group's partitions sorted by topic and partition. Equal to `rules.evaluate_group` of
        `rules.evaluate_commits` of every window (checked by a randomized test); a result
        that did not change since the last evaluation is the same object."""
        if groups is None:
            if self._names is None:
                self._names = sorted(self._groups)
            names: Iterable[str] = self._names
        else:
            names = sorted(set(groups))
        settings = self.settings
        allowed = settings.allowed_lag
        idle_ok = not settings.burrow_strict
        idle_most = allowed + IDLE_TAIL_LAG
        slots = settings.intervals
        expire_ms = settings.expire_group_ms
        heads = self._heads
        results = []
        for name in names:
            state = self._groups.get(name)
            if state is None:
                results.append(evaluate_group(name, None, now_ms))
                continue
            pairs = state.sorted
            if pairs is None:
                pairs = state.sorted = sorted(state.windows.items())
            previous = state.partitions
            partitions = []
            same = len(previous) == len(pairs)
            last_ms = _NEVER
            for i, (tp, window) in enumerate(pairs):
                commits = window.commits
                newest = commits[-1]
                offset, newest_ms, newest_lag = newest
                if newest_ms > last_ms:
                    last_ms = newest_ms
                ring = heads.get(tp)
                if ring:
                    lag = ring[-1] - offset
                    if lag < 0:
                        lag = 0
                else:
                    lag = newest_lag or 0
                # `rules.partition_rule`, rule by rule.
                if lag <= allowed:
                    status, rule = _OK_WITHIN_ALLOWED
                elif idle_ok and newest_lag == lag and lag <= idle_most:
                    status, rule = _OK_IDLE_CAUGHT_UP
                elif now_ms - newest_ms > newest_ms - commits[0][1] and not (
                    ring and min(ring) <= offset  # `rules.recent_lag_zero`
                ):
                    status, rule = _STOP
                else:
                    verdict = window.verdict
                    if verdict is None:
                        verdict = window.verdict = window_verdict(commits, allowed)
                    status, rule = verdict
                result = window.result
                if (
                    result is None
                    or result.current_lag != lag
                    or result.status is not status
                    or result.rule != rule
                ):
                    start: Commit | None
                    end: Commit | None
                    if result is None:  # a new window: its ends as `Commit`s
                        start, end = _new(Commit, commits[0]), _new(Commit, newest)
                    else:  # the same window, another lag or status
                        start, end = result.start, result.end
                    result = window.result = _new(
                        PartitionResult,
                        (tp[0], tp[1], status, start, end, lag, len(commits) / slots, rule),
                    )
                    same = False
                elif same and previous[i] is not result:
                    same = False
                partitions.append(result)
            cached = state.result
            # The group's answer changes with its partitions', or by expiring (`now_ms`).
            expired = now_ms - expire_ms > last_ms
            if same and cached is not None and (cached.status is Status.NOTFOUND) == expired:
                results.append(cached)
                continue
            state.partitions = partitions
            state.result = evaluate_group(
                name, partitions, now_ms, last_commit_ms=last_ms, expire_group_ms=expire_ms
            )
            results.append(state.result)
        return results
