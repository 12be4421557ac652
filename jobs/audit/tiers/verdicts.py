"""How a window's verdict is decided and revised: pure Python, no Spark, no I/O.

Two sides of a check (upstream "left", downstream "right") each give, per window, a record
count, a unique count with its sketch bounds, and whether they have reported. Then (`decide`):

* INCOMPLETE while the window is not past its end + grace period, or a side has not reported;
* LOSS when the right side has fewer records than the left beyond the threshold (relative
  to the left count), or when its unique count is surely lower: its HLL upper bound (3 standard
  deviations) is below the left's lower bound by more than the threshold allows. That catches a
  loss that duplicates hide in the counts;
* DUPLICATION when the right side has more records than the left beyond the threshold;
* OK otherwise.

Each rule is a predicate of its own below (`missing_records`, `missing_distinct`,
`extra_records`), held by its own test vectors in tests/jobs/audit/test_tier_verdicts.py.

REPLICATION is exact instead: source offsets are ranges, destination stamps are ranges with
their number of copies (`Ranges`); a source offset below the destination's highest stamped
offset of its partition that has no copy is lost (replication copies a partition in order), one
with two copies is duplicated.

A new `audit_verdicts` row (`revise`) is written when a (check, window) has no row yet, when
its verdict changes, or when a decided (not INCOMPLETE) verdict's counts change: late data
revises a verdict, never silently.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from datasketches import hll_sketch, hll_union, tgt_hll_type

from core.audit_verdicts import DUPLICATION, INCOMPLETE, LOSS, OK

STD_DEVS = 3  # sketch bounds used to call two unique counts different
_MAX_LG_K = 21


@dataclass(frozen=True)
class Side:
    """One side of a check in one window."""

    label: str
    count: int = 0
    unique: int | None = None  # estimate (None: not known)
    unique_low: float | None = None
    unique_high: float | None = None
    reported: bool = True
    why_not: str = ""  # when not reported: why


def sketch_union(sketches: Iterable[bytes | None]) -> tuple[int, float, float] | None:
    """(estimate, lower, upper bound at STD_DEVS) of the union of DataSketches HLL sketches
    (any lgK, any HLL type); None for no sketch."""
    union = hll_union(_MAX_LG_K)
    seen = False
    for data in sketches:
        if data:
            union.update(hll_sketch.deserialize(bytes(data)))
            seen = True
    if not seen:
        return None
    result = union.get_result(tgt_hll_type.HLL_8)
    return (
        round(result.get_estimate()),
        result.get_lower_bound(STD_DEVS),
        result.get_upper_bound(STD_DEVS),
    )


def side_from_sketches(label: str, count: int, sketches: Iterable[bytes | None]) -> Side:
    bounds = sketch_union(sketches)
    if bounds is None:
        return Side(label, count)
    estimate, low, high = bounds
    return Side(label, count, estimate, low, high)


def relative(left: int, right: int) -> float | None:
    return abs(right - left) / left if left else None


# The rules of a two-sided check, one predicate each; `decide` applies them in this order.


def allowed_difference(left: Side, threshold: float) -> float:
    """Rule 0: how many records either way the threshold forgives, relative to the left
    (upstream) count."""
    return threshold * left.count


def missing_records(left: Side, right: Side, threshold: float) -> int:
    """Rule 2, LOSS by count: the records the right side lacks beyond the threshold (0 when
    within it)."""
    lacking = left.count - right.count
    return lacking if lacking > 0 and lacking > allowed_difference(left, threshold) else 0


def missing_distinct(left: Side, right: Side, threshold: float) -> float:
    """Rule 3, LOSS by distinct records: how many distinct records the right side surely lacks
    (its HLL upper bound below the left's lower bound) beyond the threshold, at least one
    whole record; 0 when the sketches cannot tell or the gap is within it. This catches a loss
    that duplicates hide in the counts."""
    if left.unique_low is None or right.unique_high is None:
        return 0.0
    gap = left.unique_low - right.unique_high
    return gap if gap > max(allowed_difference(left, threshold), 0.0) and gap >= 1 else 0.0


def extra_records(left: Side, right: Side, threshold: float) -> int:
    """Rule 4, DUPLICATION: the records the right side has beyond the left's and the
    threshold (0 when within it)."""
    surplus = right.count - left.count
    return surplus if surplus > 0 and surplus > allowed_difference(left, threshold) else 0


def decide(due: bool, left: Side, right: Side, threshold: float) -> tuple[str, str]:
    """(verdict, detail) of one window: rule 1 (INCOMPLETE until due and both sides have
    reported), then rules 2 and 3 (LOSS), rule 4 (DUPLICATION), else OK."""
    if not due:
        return INCOMPLETE, "the window is not past its grace period yet"
    for side in (left, right):
        if not side.reported:
            return INCOMPLETE, f"{side.label} has not reported: {side.why_not}"
    if lacking := missing_records(left, right, threshold):
        return LOSS, f"{lacking} of {left.count} records missing on {right.label}"
    if missing_distinct(left, right, threshold):
        assert right.unique_high is not None and left.unique_low is not None
        return LOSS, (
            f"{right.label} has fewer distinct records ({right.unique}, at most "
            f"{right.unique_high:.0f}) than {left.label} ({left.unique}, at least "
            f"{left.unique_low:.0f}): a loss hidden by duplicates"
        )
    if surplus := extra_records(left, right, threshold):
        extra = ""
        if right.unique is not None and left.unique is not None:
            extra = f"; distinct {left.unique} -> {right.unique}"
        return DUPLICATION, f"{surplus} more records on {right.label} than {left.label}{extra}"
    return OK, "within threshold" if right.count != left.count else "counts match"


# --- REPLICATION: offset ranges --------------------------------------------------------------


@dataclass(frozen=True)
class Span:
    first: int
    last: int  # inclusive
    copies: int = 1

    @property
    def size(self) -> int:
        return self.last - self.first + 1


def merge(spans: Iterable[Span]) -> list[Span]:
    """Union of spans as disjoint sorted spans (copies ignored)."""
    out: list[Span] = []
    for s in sorted(spans, key=lambda s: s.first):
        if out and s.first <= out[-1].last + 1:
            if s.last > out[-1].last:
                out[-1] = Span(out[-1].first, s.last)
        else:
            out.append(Span(s.first, s.last))
    return out


def coverage(spans: Iterable[Span]) -> list[Span]:
    """Disjoint sorted spans with the total copies covering each (a sweep over the spans)."""
    events: dict[int, int] = {}
    for s in spans:
        events[s.first] = events.get(s.first, 0) + s.copies
        events[s.last + 1] = events.get(s.last + 1, 0) - s.copies
    out: list[Span] = []
    depth, start = 0, None
    for point in sorted(events):
        if depth > 0 and start is not None and point - 1 >= start:
            if out and out[-1].last + 1 == start and out[-1].copies == depth:
                out[-1] = Span(out[-1].first, point - 1, depth)
            else:
                out.append(Span(start, point - 1, depth))
        depth += events[point]
        start = point
    return out


@dataclass
class PartitionOutcome:
    expected: int = 0  # source offsets in the window
    present: int = 0  # of those, with at least one copy
    copies: int = 0  # destination records carrying them
    missing: list[Span] = field(default_factory=list)
    behind: bool = False  # the destination has not reached the window's last offset


def replication_outcome(
    source: Sequence[Span], destination: Sequence[Span], high_water: int | None
) -> PartitionOutcome:
    """What reached the destination of one source partition's window.

    `source`: the window's source offsets; `destination`: spans of stamped source offsets with
    their copies (any window); `high_water`: the highest source offset stamped at the
    destination for this partition (None: none yet).
    """
    wanted = merge(source)
    outcome = PartitionOutcome(expected=sum(s.size for s in wanted))
    if not wanted:
        return outcome
    outcome.behind = high_water is None or high_water < wanted[-1].last
    covered = coverage(destination)
    for want in wanted:
        cursor = want.first
        for c in covered:
            if c.last < want.first or c.first > want.last:
                continue
            lo, hi = max(c.first, want.first), min(c.last, want.last)
            if lo > cursor:
                outcome.missing.append(Span(cursor, lo - 1))
            outcome.present += hi - lo + 1
            outcome.copies += (hi - lo + 1) * c.copies
            cursor = hi + 1
        if cursor <= want.last:
            outcome.missing.append(Span(cursor, want.last))
    if outcome.behind and high_water is not None:
        # Offsets above the destination's high water may simply not be copied yet.
        outcome.missing = [
            Span(s.first, min(s.last, high_water)) for s in outcome.missing if s.first <= high_water
        ]
    elif outcome.behind:
        outcome.missing = []
    return outcome


def decide_replication(
    due: bool, outcomes: Mapping[Any, PartitionOutcome]
) -> tuple[str, str, int, int, int, int]:
    """(verdict, detail, left_count, right_count, right_unique, missing) of one window.

    The rules, in order: INCOMPLETE until due; LOSS as soon as any partition has a source
    offset below its destination high water with no copy, whatever the other partitions do
    (one partition still behind does not hide another's gap); INCOMPLETE while a partition's
    destination has not reached the window's last offsets; DUPLICATION when an offset arrived
    more than once; else OK."""
    expected = sum(o.expected for o in outcomes.values())
    present = sum(o.present for o in outcomes.values())
    copies = sum(o.copies for o in outcomes.values())
    missing = sum(s.size for o in outcomes.values() for s in o.missing)
    behind = sorted(p for p, o in outcomes.items() if o.behind)
    counts = (expected, copies, present, missing)
    if not due:
        return (INCOMPLETE, "the window is not past its grace period yet", *counts)
    if missing:
        parts = ", ".join(
            f"{p} {s.first}-{s.last}" for p, o in sorted(outcomes.items()) for s in o.missing[:3]
        )
        return (LOSS, f"{missing} source offsets never arrived: {parts}", *counts)
    if behind:
        why = f"the destination has not reached the window's last offsets of {behind}"
        return (INCOMPLETE, why, *counts)
    if copies > present:
        return (DUPLICATION, f"{copies - present} source offsets arrived more than once", *counts)
    return (OK, "every source offset arrived once", *counts)


# --- revisions -------------------------------------------------------------------------------

VERDICT_KEY = ("check_type", "check_name", "topic", "window_start")
_COUNTS = ("left_count", "right_count", "left_unique", "right_unique", "missing_count")


def _key(row: Mapping[str, Any]) -> tuple:
    start = row["window_start"]
    if isinstance(start, datetime):
        start = start.replace(tzinfo=None)
    return (row["check_type"], row["check_name"], row["topic"], start)


def revise(
    candidates: Iterable[dict[str, Any]], latest: Iterable[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """The candidate rows to append, each with its revision (rules of the module docstring).

    `latest` holds the newest row per (check, window) already in the table.
    """
    newest = {_key(r): r for r in latest}
    out = []
    for row in candidates:
        before = newest.get(_key(row))
        if before is None:
            out.append({**row, "revision": 1})
            continue
        changed_verdict = before["verdict"] != row["verdict"]
        changed_counts = any(before.get(c) != row.get(c) for c in _COUNTS)
        if changed_verdict or (row["verdict"] != INCOMPLETE and changed_counts):
            out.append({**row, "revision": int(before["revision"]) + 1})
    return out


def with_relative(row: dict[str, Any]) -> dict[str, Any]:
    """Fill difference and relative_difference from left/right counts."""
    left, right = row["left_count"], row["right_count"]
    rel = relative(left, right)
    return {
        **row,
        "difference": right - left,
        "relative_difference": None if rel is None or math.isnan(rel) else rel,
    }


__all__ = [
    "DUPLICATION",
    "INCOMPLETE",
    "LOSS",
    "OK",
    "PartitionOutcome",
    "Side",
    "Span",
    "coverage",
    "decide",
    "decide_replication",
    "merge",
    "replace",
    "replication_outcome",
    "revise",
    "side_from_sketches",
    "sketch_union",
]
