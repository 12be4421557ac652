"""The source offset ranges one micro-batch copies (pure, no I/O).

Spark's Kafka source plans every micro-batch: start offsets (the last batch's ends, or the
resolved starting offsets), end offsets (the latest, capped by maxOffsetsPerTrigger), and the
checkpoint that makes a restart resume there. The replication job copies exactly the ranges
the source planned, each partition's range read by one Spark task, clipped to a bounded
copy's end offsets.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class SourceRange:
    """Source offsets [from_offset, until_offset) of one partition, copied by one task."""

    partition: int
    from_offset: int
    until_offset: int


def batch_ranges(
    planned: Sequence[SourceRange], copy_ends: Mapping[int, int] | None
) -> list[SourceRange]:
    """One range per partition with records to copy, in partition order.

    `planned` are the ranges Spark's Kafka source planned for the batch; a partition split into
    adjoining ranges (the source's minPartitions) becomes one again, because one task reading
    a partition's range is what keeps its order. `copy_ends` are a bounded copy's end offsets
    (None for a continuous copy); a partition it has no end for is not part of the copy.
    """
    merged: dict[int, SourceRange] = {}
    for r in sorted(planned, key=lambda r: (r.partition, r.from_offset)):
        before = merged.get(r.partition)
        if before is None:
            merged[r.partition] = r
        elif before.until_offset == r.from_offset:
            merged[r.partition] = SourceRange(r.partition, before.from_offset, r.until_offset)
        else:
            raise ValueError(
                f"partition {r.partition}: planned ranges {before} and {r} do not adjoin"
            )
    ranges = []
    for partition, r in sorted(merged.items()):
        until = r.until_offset
        if copy_ends is not None:
            if partition not in copy_ends:
                continue
            until = min(until, copy_ends[partition])
        if r.from_offset < until:
            ranges.append(SourceRange(partition, r.from_offset, until))
    return ranges
