"""SERVICE and KRP aggregation: a tier's reports (`tier_counts`) against Kafka (`audit_counts`).

Per reported topic and check window, the tier's records against Kafka's (check name
`service->kafka` or `krp->kafka`); a SERVICE check also compares Kafka with each consumer
group's CONSUMER reports (`kafka->consumer:<group>`, Kafka upstream). Only `tier_counts` rows
whose window length divides the check's count, summed into the check's window; with
`audit_topic_filter` only that topic. A tier with no report in a window Kafka counted has
not reported; Kafka has not reported a window when `audit_counts` has no row for it and was
last updated before the window closed.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from jobs.audit.tiers.spec import Check, TierAuditSpec, TopicRef
from jobs.audit.tiers.tables import epoch_ms
from jobs.audit.tiers.verdicts import Side, side_from_sketches
from jobs.audit.tiers.windows import KafkaRows, Round, candidate, closes_at, kafka_side, window_of

Group = tuple[str, str, TopicRef, int]  # (tier, consumer group, topic, check window)


def verdicts(
    spark: SparkSession, spec: TierAuditSpec, check: Check, at: Round
) -> list[dict[str, Any]]:
    """Candidate verdict rows of every window of `check` within the horizon."""
    reports = by_window(_reported(spark, spec, check, at), check.interval_seconds)
    topics = {k[2] for k in reports}
    kafka, until = kafka_side(spark, spec, topics, check.interval_seconds, at)
    return candidates(check, at, reports, kafka, until)


def _reported(spark: SparkSession, spec: TierAuditSpec, check: Check, at: Round) -> list[Any]:
    interval = check.interval_seconds
    tiers = [check.tier] + (["CONSUMER"] if check.tier == "SERVICE" else [])
    reported = (
        spark.read.format("delta")
        .load(spec.output.table("tier_counts"))
        .where(F.col("job_group_id") == spec.job_group_id)
        .where(F.col("tier").isin(tiers))
        .where(F.col("window_start") >= F.timestamp_millis(F.lit(at.horizon)))
        .where(F.lit(interval) % F.col("window_seconds") == 0)
    )
    if spec.audited_topic_filter:
        reported = reported.where(F.col("topic") == spec.audited_topic_filter)
    return reported.select(
        "tier",
        "cluster",
        "topic",
        "consumer_group",
        epoch_ms("window_start"),
        "message_count",
        "hll_sketch",
    ).collect()


def by_window(rows: Iterable[Any], interval_s: int) -> dict[Group, list[Any]]:
    """`tier_counts` rows (window_start in epoch ms) per (tier, group, topic, check window)."""
    out: dict[Group, list[Any]] = defaultdict(list)
    for r in rows:
        ref = TopicRef(r.cluster, r.topic)
        out[(r.tier, r.consumer_group, ref, window_of(r.window_start, interval_s))].append(r)
    return out


def candidates(
    check: Check,
    at: Round,
    reports: Mapping[Group, Sequence[Any]],
    kafka: KafkaRows,
    until: Mapping[TopicRef, int],
) -> list[dict[str, Any]]:
    """One verdict row per reported (tier, group, topic, window), and per window Kafka counted
    of a reported topic (the rules of the module docstring)."""
    topics = {k[2] for k in reports}
    pairs: set[Group] = set(reports)
    for ref, window in kafka:
        if ref in topics:
            pairs.add((check.tier, "", ref, window))
    out = []
    for tier, group, ref, window in sorted(pairs, key=lambda k: (k[0], k[1], k[2].label, k[3])):
        mine = reports.get((tier, group, ref, window), [])
        tier_side = side_from_sketches(
            f"{tier} {ref.label}" + (f" group {group}" if group else ""),
            sum(r.message_count for r in mine),
            (r.hll_sketch for r in mine),
        )
        if not mine:
            tier_side = Side(tier_side.label, reported=False, why_not=f"no {tier} reports")
        theirs = kafka.get((ref, window), [])
        kafka_side = side_from_sketches(
            f"kafka {ref.label}",
            sum(r.message_count for r in theirs),
            (r.hll_sketch for r in theirs),
        )
        if not theirs and until.get(ref, 0) < closes_at(check, window):
            kafka_side = Side(
                kafka_side.label,
                reported=False,
                why_not=f"audit_counts has no row for it and was updated last at "
                f"{until.get(ref)} (epoch ms)",
            )
        if tier == "CONSUMER":
            name = f"kafka->consumer:{group}"
            row = candidate(at, check, window, ref.cluster, ref.topic, kafka_side, tier_side, name)
        else:
            row = candidate(at, check, window, ref.cluster, ref.topic, tier_side, kafka_side)
        out.append(row)
    return out
