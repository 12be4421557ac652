"""XDC: the sum of the source topics' `audit_counts` against the destination topics', per
check window, with the check's `failure_threshold`.

A side has not reported a window when one of its topics has no `audit_counts` row in it and
was last updated before the window closed. The unique counts of each side's sketch union
tell a loss hidden by duplicates from a duplication (`verdicts.decide`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pyspark.sql import SparkSession

from jobs.audit.tiers.spec import Check, TierAuditSpec, TopicRef
from jobs.audit.tiers.verdicts import Side, side_from_sketches
from jobs.audit.tiers.windows import KafkaRows, Round, candidate, closes_at, kafka_side, named


def verdicts(
    spark: SparkSession, spec: TierAuditSpec, check: Check, at: Round
) -> list[dict[str, Any]]:
    """Candidate verdict rows of every window of `check` within the horizon."""
    refs = (*check.source, *check.destination)
    rows, until = kafka_side(spark, spec, refs, check.interval_seconds, at)
    return candidates(check, at, rows, until)


def candidates(
    check: Check, at: Round, rows: KafkaRows, until: Mapping[TopicRef, int]
) -> list[dict[str, Any]]:
    """One verdict row per window either side counted (the rules of the module docstring)."""
    cluster, topic = named(check.destination)
    out = []
    for window in sorted({w for _, w in rows}):
        sides = []
        for refs in (check.source, check.destination):
            mine = [r for ref in refs for r in rows.get((ref, window), [])]
            label = "+".join(r.label for r in refs)
            side = side_from_sketches(
                label, sum(r.message_count for r in mine), (r.hll_sketch for r in mine)
            )
            silent = [
                ref.label
                for ref in refs
                if not rows.get((ref, window)) and until.get(ref, 0) < closes_at(check, window)
            ]
            if silent:
                side = Side(label, reported=False, why_not=f"{silent} not audited past it yet")
            sides.append(side)
        out.append(candidate(at, check, window, cluster, topic, sides[0], sides[1]))
    return out
