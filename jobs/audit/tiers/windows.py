"""The check windows every cross-tier check shares: window arithmetic, the trigger's round of
decisions (`Round`), a window's verdict candidate row, and the Kafka side of a window read
from `audit_counts`.

Times are epoch ms; a window starts at an epoch-aligned multiple of its check's interval, is
due once its end + grace period has passed, and is (re)decided while it starts within the
horizon (`extension.audit.verdict_horizon_seconds`).

The Kafka side of a topic is one counting audit's rows (`audit_counts`): of the audits whose
interval divides the check's, the one with the largest interval, AUDIT_TYPE_EXACT_UNIQ
preferred at equal interval; its windows are summed into the check's window. When several
counting JobGroups audit the topic (a pattern audit and a single-topic one, say: each writes
its own rows, `job_group_id`), the rows of one of them are used, the one that updated the
topic's rows last: two audits of the same records are never added together.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql import Column, SparkSession
from pyspark.sql import functions as F

from jobs.audit.spec import EXACT
from jobs.audit.tiers.spec import Check, TierAuditSpec, TopicRef
from jobs.audit.tiers.tables import epoch_ms
from jobs.audit.tiers.verdicts import Side, decide, with_relative

# (topic, check window) -> that topic's audit_counts rows in the window
KafkaRows = dict[tuple[TopicRef, int], list[Any]]


def window_of(ms: int, interval_s: int) -> int:
    """Start of the epoch-aligned window of `interval_s` seconds holding `ms`."""
    return ms - ms % (interval_s * 1000)


def closes_at(check: Check, window: int) -> int:
    """When `window` of `check` is past its end + grace period (epoch ms)."""
    return window + (check.interval_seconds + check.grace_seconds) * 1000


@dataclass(frozen=True)
class Round:
    """One trigger's decisions: whose (`job_group_id`), when (`now`, epoch ms: `decided_at`)
    and from which window start on windows are still (re)decided (`horizon`, epoch ms)."""

    job_group_id: str
    now: int
    horizon: int

    @classmethod
    def of(cls, spec: TierAuditSpec, now: int) -> Round:
        return cls(spec.job_group_id, now, now - spec.horizon_seconds * 1000)

    def due(self, check: Check, window: int) -> bool:
        return self.now >= closes_at(check, window)


def candidate(
    at: Round,
    check: Check,
    window: int,
    cluster: str,
    topic: str,
    left: Side,
    right: Side,
    name: str | None = None,
) -> dict[str, Any]:
    """The verdict row `decide` gives one window of `check` (`cluster`, `topic`: the
    downstream side's; `name`: a check name other than the check's own)."""
    verdict, detail = decide(at.due(check, window), left, right, check.threshold)
    return with_relative(
        {
            "check_type": check.audit_type,
            "check_name": name or check.name,
            "job_group_id": at.job_group_id,
            "cluster": cluster,
            "topic": topic,
            "window_start": window,
            "window_end": window + check.interval_seconds * 1000,
            "left_label": left.label,
            "right_label": right.label,
            "left_count": left.count,
            "right_count": right.count,
            "left_unique": left.unique,
            "right_unique": right.unique,
            "threshold": check.threshold,
            "verdict": verdict,
            "detail": detail,
            "missing_count": None,
            "decided_at": at.now,
        }
    )


def any_of(refs: Iterable[TopicRef]) -> Column:
    """A filter matching the rows of any of `refs` (false for none)."""
    match = F.lit(False)
    for ref in refs:
        match = match | ((F.col("cluster") == ref.cluster) & (F.col("topic") == ref.topic))
    return match


def per_check_window(
    rows: Iterable[Any], interval_s: int, updated: Mapping[tuple[TopicRef, str], int]
) -> KafkaRows:
    """`audit_counts` rows (cluster, topic, job_group_id, audit_type, audit_interval_seconds,
    window_start in epoch ms, ...) -> the chosen audit's rows of each topic per check window
    (the rule of the module docstring; `updated`: each (topic, writing group)'s latest update,
    epoch ms). `rows` hold only audits whose interval divides `interval_s`."""
    rows = list(rows)

    def rank(r: Any) -> tuple[int, int, int, str]:
        writer = (TopicRef(r.cluster, r.topic), r.job_group_id)
        exact = 1 if r.audit_type == EXACT else 0
        return (r.audit_interval_seconds, exact, updated.get(writer, 0), r.job_group_id)

    chosen: dict[TopicRef, tuple[int, int, int, str]] = {}
    for r in rows:
        ref = TopicRef(r.cluster, r.topic)
        chosen[ref] = max(chosen.get(ref, rank(r)), rank(r))
    out: KafkaRows = defaultdict(list)
    for r in rows:
        ref = TopicRef(r.cluster, r.topic)
        if rank(r) == chosen[ref]:
            out[(ref, window_of(r.window_start, interval_s))].append(r)
    return out


def kafka_side(
    spark: SparkSession, spec: TierAuditSpec, refs: Iterable[TopicRef], interval_s: int, at: Round
) -> tuple[KafkaRows, dict[TopicRef, int]]:
    """`audit_counts` rows per (topic, check window) within the horizon (`per_check_window`),
    and each topic's latest update (epoch ms)."""
    refs = list(dict.fromkeys(refs))
    if not refs:
        return {}, {}
    counts = spark.read.format("delta").load(spec.output.table("audit_counts"))
    mine = counts.where(any_of(refs))
    updated = {
        (TopicRef(r.cluster, r.topic), r.job_group_id): r.until
        for r in mine.groupBy("cluster", "topic", "job_group_id")
        .agg(F.max(F.unix_millis("updated_at")).alias("until"))
        .collect()
    }
    until: dict[TopicRef, int] = {}
    for (ref, _), ms in updated.items():
        until[ref] = max(until.get(ref, ms), ms)
    rows = (
        mine.where(F.col("window_start") >= F.timestamp_millis(F.lit(at.horizon)))
        .where(F.lit(interval_s) % F.col("audit_interval_seconds") == 0)
        .select(
            "cluster",
            "topic",
            "job_group_id",
            "audit_type",
            "audit_interval_seconds",
            epoch_ms("window_start"),
            "message_count",
            "hll_sketch",
        )
        .collect()
    )
    return per_check_window(rows, interval_s, updated), until


def named(refs: Sequence[TopicRef]) -> tuple[str, str]:
    """(cluster, topic) of a verdict row whose side is several topics: their sorted distinct
    cluster and topic names, comma-joined."""
    return ",".join(sorted({r.cluster for r in refs})), ",".join(sorted({r.topic for r in refs}))
