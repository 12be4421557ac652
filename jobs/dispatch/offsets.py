"""Offsets the driver works out before and during a run (librdkafka, no Spark).

* `Watermarks`: low and high offsets of a topic's partitions, and offsets for a timestamp.
* `main_bounds`: where the source query starts on a new checkpoint and, for a bounded run
  (partition_offset_ranges, end_timestamp, or `--once`), where it ends.
* `start_from_commits`: where a new checkpoint starts when the JobGroup's consumer group has
  committed offsets (a team moving from uForwarder, or a checkpoint deleted): Kafka's rule.
* `is_drained`: whether a bounded or `--once` run has nothing left: the source read to its ends
  and every retry tier and the resq read to their current ends, so no record is left to
  dispatch and none can arrive (records only reach a tier from a batch of this application).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass

from confluent_kafka import Consumer, TopicPartition

from core.config import ClusterConfig
from core.errors import InvalidJobGroup
from jobs.dispatch.routing import Kind
from jobs.dispatch.spec import DispatchSpec

TIMEOUT_S = 15.0


class Watermarks:
    """One metadata consumer (no group membership, nothing committed)."""

    def __init__(self, cluster: ClusterConfig) -> None:
        self._consumer = Consumer(
            {
                **cluster.client_config(),
                "group.id": f"uatu-dispatch-offsets-{time.time_ns()}",
                "enable.auto.commit": False,
            }
        )

    def partitions(self, topic: str) -> list[int]:
        meta = self._consumer.list_topics(topic, timeout=TIMEOUT_S).topics.get(topic)
        if meta is None or meta.error is not None or not meta.partitions:
            raise RuntimeError(f"topic {topic} has no partitions")
        return sorted(meta.partitions)

    def range_of(self, topic: str, partition: int) -> tuple[int, int]:
        low, high = self._consumer.get_watermark_offsets(
            TopicPartition(topic, partition), timeout=TIMEOUT_S, cached=False
        )
        return int(low), int(high)

    def for_time(self, topic: str, partitions: list[int], ms: int) -> dict[int, int]:
        """The first offset at or after `ms` per partition (the end offset if there is none)."""
        found = self._consumer.offsets_for_times(
            [TopicPartition(topic, p, ms) for p in partitions], timeout=TIMEOUT_S
        )
        result = {}
        for tp in found:
            result[tp.partition] = (
                tp.offset if tp.offset >= 0 else self.range_of(topic, tp.partition)[1]
            )
        return result

    def close(self) -> None:
        self._consumer.close()


@dataclass(frozen=True)
class Bounds:
    """The source query's offsets: `start` for a new checkpoint ("earliest", "latest" or
    offsets), `end` None for an unbounded run."""

    start: str | Mapping[int, int]
    end: Mapping[int, int] | None


def starts_from_group(spec: DispatchSpec, kind: Kind) -> bool:
    """Whether a new checkpoint of the query reading a topic of `kind` starts where the
    JobGroup's consumer group committed: not a DLQ redrive (it reads its range), nor a source
    the JobGroup starts itself (partition_offset_ranges, start_timestamp)."""
    if kind is Kind.DLQ:
        return False
    if kind is Kind.MAIN:
        return not spec.source.offset_ranges and spec.source.start_timestamp_ms is None
    return True


def start_from_commits(
    policy: str, commits: Mapping[int, int], ranges: Mapping[int, tuple[int, int]]
) -> dict[int, int] | None:
    """A new checkpoint's start offsets from the group's `commits` ({partition: next offset}),
    given each partition's (low, high) watermarks; None when the group committed nothing on
    these partitions (`policy`, earliest or latest, then decides alone). As a Kafka consumer
    resumes: a partition's commit where it has one; `policy` where it has none, or where the
    commit is past the partition's end (the topic was recreated). A commit below the log start
    starts at the log start: those records were deleted before the group read them, and the
    job records that range as lost (`source_failure.lost_ranges`)."""
    if not any(p in commits for p in ranges):
        return None
    start = {}
    for p, (low, high) in sorted(ranges.items()):
        commit = commits.get(p)
        if commit is None or commit > high:
            start[p] = low if policy == "earliest" else high
        else:
            start[p] = max(commit, low)
    return start


def main_bounds(
    spec: DispatchSpec,
    marks: Watermarks,
    once_ends: Mapping[int, int] | None,
    group_start: Mapping[int, int] | None = None,
) -> Bounds:
    """The source query's bounds; `once_ends` are the end offsets `--once` captured (None
    without --once); `group_start` the start `start_from_commits` gave a new checkpoint (an
    explicit start, partition_offset_ranges or start_timestamp, comes first). Raises
    InvalidJobGroup for a range on a partition the topic lacks."""
    partitions = marks.partitions(spec.source.topic)
    if spec.source.offset_ranges:
        for i, r in enumerate(spec.source.offset_ranges):
            if r.partition not in partitions:
                raise InvalidJobGroup(
                    "kafka_consumer_task_group.partition_offset_ranges.partition_offset_range"
                    f"[{i}].partition",
                    r.partition,
                    f"topic {spec.source.topic} has partitions 0..{len(partitions) - 1}",
                )
        return Bounds(
            {r.partition: r.start for r in spec.source.offset_ranges},
            {r.partition: r.end for r in spec.source.offset_ranges},
        )
    start: str | dict[int, int] = spec.source.starting_offsets
    if spec.source.start_timestamp_ms is not None:
        start = marks.for_time(spec.source.topic, partitions, spec.source.start_timestamp_ms)
    elif group_start is not None:
        start = dict(group_start)
    end: dict[int, int] | None = None
    if spec.source.end_timestamp_ms is not None:
        end = marks.for_time(spec.source.topic, partitions, spec.source.end_timestamp_ms)
    if once_ends is not None:
        end = dict(once_ends) if end is None else {p: min(o, once_ends[p]) for p, o in end.items()}
    return Bounds(start, end)


def resolved_start(
    bounds: Bounds, marks: Watermarks, topic: str, ends_now: Mapping[int, int]
) -> dict[int, int]:
    """The start offsets `bounds.start` stands for, as offsets (for the drain check)."""
    if isinstance(bounds.start, Mapping):
        return dict(bounds.start)
    if bounds.start == "latest":
        return dict(ends_now)
    return {p: marks.range_of(topic, p)[0] for p in ends_now}


def is_drained(
    main_position: Mapping[int, int],
    main_end: Mapping[int, int],
    others: Mapping[str, tuple[Mapping[int, int], Mapping[int, tuple[int, int]]]],
) -> bool:
    """True when the source is read up to its ends and every other topic up to its high
    watermarks. `others` maps a topic to (its committed positions, {partition: (low, high)});
    a partition with no committed position starts at its low watermark."""
    if any(main_position.get(p, 0) < end for p, end in main_end.items()):
        return False
    for positions, marks in others.values():
        for p, (low, high) in marks.items():
            if positions.get(p, low) < high:
                return False
    return True
