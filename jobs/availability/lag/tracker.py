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
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

from jobs.availability.lag.rules import (
    DEFAULT_INTERVALS,
    EXPIRE_GROUP_MS,
    WINDOW_RULES,
    Commit,
    GroupResult,
    Status,
    append_commit,
    evaluate_commits,
    evaluate_group,
)

TopicPartition = tuple[str, int]
GroupPartition = tuple[str, str, int]  # group, topic, partition


@dataclass(frozen=True)
class LagSettings:
    intervals: int = DEFAULT_INTERVALS  # commits per window (Burrow `intervals`)
    min_distance_ms: int = 0  # Burrow `min-distance`
    allowed_lag: int = 0  # Burrow `allowed-lag`
    expire_group_ms: int = EXPIRE_GROUP_MS  # Burrow `expire-group`
    burrow_strict: bool = False  # True: no OK for a caught-up consumer on an idle tail


class _Window:
    """One partition's stored commits, oldest first, and `window_rule`'s answer for them once
    an evaluation needed it: the window changes only with a commit, while the job evaluates
    every group at every micro-batch."""

    __slots__ = ("commits", "verdict")

    def __init__(self, commits: tuple[Commit, ...]) -> None:
        self.commits = commits
        self.verdict: tuple[Status, str] | None = None


class LagTracker:
    def __init__(self, settings: LagSettings) -> None:
        self.settings = settings
        # group -> (topic, partition) -> window. Kept by group so that evaluating some groups
        # touches only theirs.
        self._windows: dict[str, dict[TopicPartition, _Window]] = {}
        self._heads: dict[TopicPartition, deque[int]] = {}

    def record(
        self, group: str, topic: str, partition: int, offset: int, commit_ms: int, lag: int | None
    ) -> Commit:
        """Add one commit to its window; `lag` None when unknown. Returns what was stored."""
        windows = self._windows.setdefault(group, {})
        tp = (topic, partition)
        old = windows.get(tp)
        commits = append_commit(
            old.commits if old is not None else (),
            offset,
            commit_ms,
            None if lag is None else offset + lag,
            intervals=self.settings.intervals,
            min_distance_ms=self.settings.min_distance_ms,
        )
        windows[tp] = _Window(commits)
        return commits[-1]

    def forget(self, group: str, topic: str, partition: int) -> None:
        """The group's offset was deleted (a tombstone in `__consumer_offsets`)."""
        windows = self._windows.get(group)
        if windows is not None:
            windows.pop((topic, partition), None)
            if not windows:
                del self._windows[group]

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
        return {tp for windows in self._windows.values() for tp in windows}

    def committed(self) -> dict[GroupPartition, int]:
        """The newest committed offset of every (group, topic, partition)."""
        return {(group, *tp): commits[-1].offset for group, tp, commits in self._each()}

    def lagging(self) -> dict[GroupPartition, int]:
        """`committed`, for the partitions whose `current_lag` is above 0."""
        return {
            (group, *tp): commits[-1].offset
            for group, tp, commits in self._each()
            if self._current_lag(tp, commits[-1]) > 0
        }

    def current_lag(self, key: GroupPartition) -> int:
        """Head minus the newest commit, clamped at 0; the stored lag while no head is known."""
        group, topic, partition = key
        window = self._windows[group][(topic, partition)]
        return self._current_lag((topic, partition), window.commits[-1])

    def _current_lag(self, tp: TopicPartition, newest: Commit) -> int:
        ring = self._heads.get(tp)
        if not ring:
            return newest.lag or 0
        return max(ring[-1] - newest.offset, 0)

    def _each(self) -> Iterator[tuple[str, TopicPartition, tuple[Commit, ...]]]:
        for group, windows in self._windows.items():
            for tp, window in windows.items():
                yield group, tp, window.commits

    def evaluate(self, now_ms: int, groups: Iterable[str] | None = None) -> list[GroupResult]:
        """Every group's status (or those named; an unknown one is NOTFOUND), sorted by name;
        a group's partitions sorted by topic and partition."""
        names = sorted(self._windows) if groups is None else sorted(set(groups))
        settings = self.settings
        no_heads: tuple[int, ...] = ()
        results = []
        for name in names:
            windows = self._windows.get(name)
            if windows is None:
                results.append(evaluate_group(name, None, now_ms))
                continue
            partitions = []
            for tp in sorted(windows):
                window = windows[tp]
                commits = window.commits
                ring = self._heads.get(tp)
                newest = commits[-1]
                lag = max(ring[-1] - newest.offset, 0) if ring else newest.lag or 0
                result = evaluate_commits(
                    commits,
                    settings.intervals,
                    lag,
                    now_ms,
                    topic=tp[0],
                    partition=tp[1],
                    broker_offsets=ring if ring is not None else no_heads,
                    allowed_lag=settings.allowed_lag,
                    idle_caught_up_is_ok=not settings.burrow_strict,
                    window_verdict=window.verdict,
                )
                if window.verdict is None and result.rule in WINDOW_RULES:
                    window.verdict = result.status, result.rule
                partitions.append(result)
            results.append(
                evaluate_group(name, partitions, now_ms, expire_group_ms=settings.expire_group_ms)
            )
        return results
