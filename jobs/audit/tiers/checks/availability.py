"""AVAILABILITY: offline, under-replicated and under-min-ISR time of the audited topic.

Every sample (`sampling.py`) adds, per partition, the seconds since the previous sample (0 for
the job's first) to its window of sample times in `availability_audit`: as sampled, and as
offline (no leader), under-replicated (ISR < replicas) or under min ISR (ISR <
min.insync.replicas) when the partition is so at the sample. No verdict: a table to query.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import SparkSession

from jobs.audit.tiers import tables
from jobs.audit.tiers.sampling import NO_LEADER, TopicSample
from jobs.audit.tiers.spec import Check, TierAuditSpec, TopicRef
from jobs.audit.tiers.windows import window_of
from jobs.runtime.delta import merge_once

_ADDED = (
    "sampled_seconds",
    "offline_seconds",
    "under_replicated_seconds",
    "under_min_isr_seconds",
    "samples",
)


def sample_rows(
    sample: TopicSample, audited: TopicRef, check: Check, last_sample_ms: int | None
) -> list[dict[str, Any]]:
    """One `availability_audit` row per partition of `sample`."""
    start = window_of(sample.sampled_ms, check.interval_seconds)
    last = last_sample_ms
    seconds = 0.0 if last is None else max(0.0, (sample.sampled_ms - last) / 1000)
    return [
        {
            "cluster": audited.cluster,
            "topic": audited.topic,
            "partition": p,
            "window_start": start,
            "window_end": start + check.interval_seconds * 1000,
            "sampled_seconds": seconds,
            "offline_seconds": seconds if s.leader == NO_LEADER else 0.0,
            "under_replicated_seconds": seconds if s.isr < s.replicas else 0.0,
            "under_min_isr_seconds": seconds if s.isr < sample.min_isr else 0.0,
            "samples": 1,
            "updated_at": sample.sampled_ms,
        }
        for p, s in sorted(sample.partitions.items())
    ]


def write(
    spark: SparkSession,
    spec: TierAuditSpec,
    rows: list[dict[str, Any]],
    app_id: str,
    batch_id: int,
) -> None:
    """Add one sample's rows to their windows of `availability_audit`."""
    merge_once(
        tables.frame(spark, tables.AVAILABILITY_AUDIT, rows),
        tables.AVAILABILITY_AUDIT,
        spec.output.table("availability_audit"),
        app_id,
        batch_id,
        writer=spec.job_group_id,
        update={**{c: f"t.{c} + s.{c}" for c in _ADDED}, "updated_at": "s.updated_at"},
        insert={c: f"s.{c}" for c in tables.AVAILABILITY_AUDIT.columns},
    )
