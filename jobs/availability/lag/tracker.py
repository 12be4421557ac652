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
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from jobs.availability.lag.rules import (
    DEFAULT_INTERVALS,
    EXPIRE_GROUP_MS,
    Commit,
    GroupResult,
    evaluate_group,
    evaluate_partition,
    record_commit,
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


class LagTracker:
    def __init__(self, settings: LagSettings) -> None:
        self.settings = settings
        self._windows: dict[GroupPartition, tuple[Commit | None, ...]] = {}
        self._heads: dict[TopicPartition, deque[int]] = {}

    def record(
        self, group: str, topic: str, partition: int, offset: int, commit_ms: int, lag: int | None
    ) -> Commit:
        """Add one commit to its window; `lag` None when unknown. Returns what was stored."""
        key = (group, topic, partition)
        head = None if lag is None else offset + lag
        window = record_commit(
            self._windows.get(key, ()),
            offset,
            commit_ms,
            head,
            intervals=self.settings.intervals,
            min_distance_ms=self.settings.min_distance_ms,
        )
        self._windows[key] = window
        newest = window[-1]
        assert newest is not None  # record_commit always stores the new commit last
        return newest

    def forget(self, group: str, topic: str, partition: int) -> None:
        """The group's offset was deleted (a tombstone in `__consumer_offsets`)."""
        self._windows.pop((group, topic, partition), None)

    def refresh_heads(self, heads: Mapping[TopicPartition, int]) -> None:
        """The brokers' newest head offsets; the last `intervals` of each are kept."""
        for tp, head in heads.items():
            ring = self._heads.setdefault(tp, deque(maxlen=self.settings.intervals))
            ring.append(head)

    def head(self, topic: str, partition: int) -> int | None:
        ring = self._heads.get((topic, partition))
        return ring[-1] if ring else None

    def topic_partitions(self) -> set[TopicPartition]:
        """Every partition some group has committed to: the heads the job must fetch."""
        return {(topic, partition) for _, topic, partition in self._windows}

    def committed(self) -> dict[GroupPartition, int]:
        """The newest committed offset of every (group, topic, partition)."""
        return {key: _newest(window).offset for key, window in self._windows.items()}

    def current_lag(self, key: GroupPartition) -> int:
        """Head minus the newest commit, clamped at 0; the stored lag while no head is known."""
        newest = _newest(self._windows[key])
        head = self.head(key[1], key[2])
        if head is None:
            return newest.lag or 0
        return max(head - newest.offset, 0)

    def evaluate(self, now_ms: int, groups: Iterable[str] | None = None) -> list[GroupResult]:
        """Every group's status (or those named; an unknown one is NOTFOUND), sorted by name."""
        by_group: dict[str, list[GroupPartition]] = {}
        for key in sorted(self._windows):
            by_group.setdefault(key[0], []).append(key)
        names = sorted(by_group) if groups is None else sorted(set(groups))
        results = []
        for name in names:
            keys = by_group.get(name)
            if keys is None:
                results.append(evaluate_group(name, None, now_ms))
                continue
            partitions = [
                evaluate_partition(
                    self._windows[key],
                    self.current_lag(key),
                    now_ms,
                    topic=key[1],
                    partition=key[2],
                    broker_offsets=tuple(self._heads.get((key[1], key[2]), ())),
                    allowed_lag=self.settings.allowed_lag,
                    idle_caught_up_is_ok=not self.settings.burrow_strict,
                )
                for key in keys
            ]
            results.append(
                evaluate_group(
                    name, partitions, now_ms, expire_group_ms=self.settings.expire_group_ms
                )
            )
        return results


def _newest(window: tuple[Commit | None, ...]) -> Commit:
    newest = window[-1]
    if newest is None:
        raise ValueError("an empty window")  # record() never leaves one
    return newest
