"""Offset translation's search, checked against a brute-force scan of random replicas."""

from __future__ import annotations

import math
import random

import pytest

from core.provenance import SourceOffset
from jobs.replication.offsets import translate

OURS = ("src", "orders")


def replica(rng: random.Random, n: int) -> list[SourceOffset | None]:
    """A destination partition: our copied records (increasing source offsets with gaps, as
    after compaction or a bounded start) mixed with records other writers put there."""
    out: list[SourceOffset | None] = []
    source = rng.randrange(0, 50)
    for _ in range(n):
        roll = rng.random()
        if roll < 0.2:
            out.append(None)  # no stamp: another producer
        elif roll < 0.3:
            out.append(SourceOffset("other", "orders", 0, rng.randrange(10_000)))
        else:
            source += rng.choice((1, 1, 1, 2, 7))
            out.append(SourceOffset(*OURS, 0, source))
    return out


class Reader:
    def __init__(self, records: list[SourceOffset | None]) -> None:
        self.records, self.reads = records, 0

    def __call__(self, offset: int) -> tuple[int, SourceOffset] | None:
        self.reads += 1
        for at in range(offset, len(self.records)):
            stamp = self.records[at]
            if stamp is not None and (stamp.cluster, stamp.topic) == OURS:
                return at, stamp
        return None


def brute_force(records: list[SourceOffset | None], source_offset: int) -> int:
    for at, stamp in enumerate(records):
        ours = stamp is not None and (stamp.cluster, stamp.topic) == OURS
        if ours and stamp.offset >= source_offset:  # type: ignore[union-attr]
            return at
    return len(records)


@pytest.mark.parametrize("seed", range(40))
def test_translation_equals_a_full_scan(seed: int) -> None:
    rng = random.Random(seed)
    records = replica(rng, rng.randrange(0, 400))
    ours = [s.offset for s in records if s is not None and s.cluster == "src"]
    candidates = {0, *(o for o in ours), *(o + 1 for o in ours), (ours[-1] + 5 if ours else 3)}
    for source_offset in sorted(candidates):
        reader = Reader(records)
        got = translate(source_offset, 0, len(records), reader)
        assert got == brute_force(records, source_offset), (seed, source_offset)
        # One read per halving: the search never walks the partition.
        assert reader.reads <= math.ceil(math.log2(len(records) + 1)) + 1


def test_a_group_ahead_of_the_copy_resumes_at_the_end() -> None:
    records = [SourceOffset(*OURS, 0, o) for o in range(10)]
    assert translate(25, 0, 10, Reader(records)) == 10


def test_the_low_watermark_is_respected() -> None:
    """Records deleted by retention are below `low`; the answer is never below it."""
    records = [SourceOffset(*OURS, 0, o) for o in range(10)]
    assert translate(0, 4, 10, Reader(records)) == 4
    assert translate(6, 4, 10, Reader(records)) == 6
