"""RETENTION: records that retention deleted before the group's committed offset reached them.

Every sample of the audited topic (`sampling.py`) adds one `retention_audit` row per
partition to its window of sample times: the latest offsets and settings, the records the
log start passed since the previous sample (`deleted_count`) and, of those, the ones the group
had not consumed (`lost_count`, `lost_first_offset`..`lost_last_offset`, each offset once:
`sampling.RetentionState`, restored from the table when the job starts).

Per window within the horizon: left = deleted, right = deleted and consumed first. When
`verdicts.decide` finds the window OK or LOSS, the verdict is LOSS if any record was lost,
else INCOMPLETE if the partition count is not the configured one or the group has no
committed offset on every partition, else OK (its INCOMPLETE stays). `missing_count` is the
lost records.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from jobs.audit.tiers import tables
from jobs.audit.tiers.sampling import RetentionState, TopicSample
from jobs.audit.tiers.spec import Check, TierAuditSpec, TopicRef
from jobs.audit.tiers.tables import epoch_ms
from jobs.audit.tiers.verdicts import INCOMPLETE, LOSS, OK, Side
from jobs.audit.tiers.windows import Round, candidate, window_of
from jobs.runtime.delta import merge_once

# Columns a later sample of the same window replaces (the others add up).
_KEEP_LATEST = (
    "log_start_offset",
    "end_offset",
    "committed_offset",
    "partition_count",
    "expected_partition_count",
    "retention_ms",
    "retention_bytes",
    "cleanup_policy",
    "updated_at",
    "window_end",
)


# --- retention_audit -------------------------------------------------------------------------


def restore(spark: SparkSession, spec: TierAuditSpec, state: RetentionState) -> None:
    """Each partition's last recorded log start and lost offset, from `retention_audit`."""
    a = spec.audited
    for r in (
        spark.read.format("delta")
        .load(spec.output.table("retention_audit"))
        .where(F.col("job_group_id") == spec.job_group_id)
        .where((F.col("cluster") == a.cluster) & (F.col("topic") == a.topic))
        .groupBy("partition")
        .agg(F.max("lost_last_offset").alias("lost"), F.max("log_start_offset").alias("start"))
        .collect()
    ):
        if r.lost is not None:
            state.lost_through[r.partition] = r.lost
        if r.start is not None:
            state.log_start[r.partition] = r.start


def sample_rows(
    sample: TopicSample, audited: TopicRef, check: Check, state: RetentionState
) -> list[dict[str, Any]]:
    """One `retention_audit` row per partition of `sample` (advances `state`)."""
    start = window_of(sample.sampled_ms, check.interval_seconds)
    rows = []
    for p, s in sorted(sample.partitions.items()):
        deleted, first, last = state.step(p, s)
        rows.append(
            {
                "cluster": audited.cluster,
                "topic": audited.topic,
                "partition": p,
                "window_start": start,
                "window_end": start + check.interval_seconds * 1000,
                "log_start_offset": s.log_start,
                "end_offset": s.end,
                "committed_offset": s.committed,
                "deleted_count": deleted,
                "lost_count": (last - first + 1) if first is not None and last is not None else 0,
                "lost_first_offset": first,
                "lost_last_offset": last,
                "partition_count": len(sample.partitions),
                "expected_partition_count": check.partition_count,
                "retention_ms": sample.retention_ms,
                "retention_bytes": sample.retention_bytes,
                "cleanup_policy": sample.cleanup_policy,
                "samples": 1,
                "updated_at": sample.sampled_ms,
            }
        )
    return rows


def write(
    spark: SparkSession,
    spec: TierAuditSpec,
    rows: list[dict[str, Any]],
    app_id: str,
    batch_id: int,
) -> None:
    """Merge one sample's rows into their windows of `retention_audit`."""
    merge_once(
        tables.frame(spark, tables.RETENTION_AUDIT, rows),
        tables.RETENTION_AUDIT,
        spec.output.table("retention_audit"),
        app_id,
        batch_id,
        writer=spec.job_group_id,
        update={
            **{c: f"s.{c}" for c in _KEEP_LATEST},
            "deleted_count": "t.deleted_count + s.deleted_count",
            "lost_count": "t.lost_count + s.lost_count",
            "lost_first_offset": "coalesce(t.lost_first_offset, s.lost_first_offset)",
            "lost_last_offset": "coalesce(s.lost_last_offset, t.lost_last_offset)",
            "samples": "t.samples + 1",
        },
        insert={c: f"s.{c}" for c in tables.RETENTION_AUDIT.columns},
    )


# --- verdicts --------------------------------------------------------------------------------


def verdicts(
    spark: SparkSession, spec: TierAuditSpec, check: Check, at: Round
) -> list[dict[str, Any]]:
    """Candidate verdict rows of every window of `retention_audit` within the horizon."""
    a = spec.audited
    rows = (
        spark.read.format("delta")
        .load(spec.output.table("retention_audit"))
        .where(F.col("job_group_id") == spec.job_group_id)
        .where((F.col("cluster") == a.cluster) & (F.col("topic") == a.topic))
        .where(F.col("window_start") >= F.timestamp_millis(F.lit(at.horizon)))
        .select(
            epoch_ms("window_start"),
            "partition",
            "deleted_count",
            "lost_count",
            "committed_offset",
            "partition_count",
            "expected_partition_count",
        )
        .collect()
    )
    return candidates(check, at, a, spec.source.consumer_group, rows)


def candidates(
    check: Check, at: Round, audited: TopicRef, group: str, rows: Iterable[Any]
) -> list[dict[str, Any]]:
    """`retention_audit` rows (window_start in epoch ms) -> one verdict row per window (the
    rules of the module docstring; `group`: the consumer group, "" for none)."""
    by_window: dict[int, list[Any]] = defaultdict(list)
    for r in rows:
        by_window[r.window_start].append(r)
    out = []
    for window, mine in sorted(by_window.items()):
        deleted = sum(r.deleted_count for r in mine)
        lost = sum(r.lost_count for r in mine)
        count = max(r.partition_count for r in mine)
        row = candidate(
            at,
            check,
            window,
            audited.cluster,
            audited.topic,
            Side(f"deleted by retention from {audited.label}", deleted),
            Side(f"consumed by {group or '(no group)'} first", deleted - lost),
        )
        if row["verdict"] == OK or row["verdict"] == LOSS:
            if lost:
                row["verdict"] = LOSS
                row["detail"] = f"{lost} records deleted by retention before they were consumed"
            elif count != check.partition_count:
                row["verdict"] = INCOMPLETE
                row["detail"] = f"{count} partitions, expected {check.partition_count}"
            elif not group or any(r.committed_offset is None for r in mine):
                row["verdict"] = INCOMPLETE
                row["detail"] = "the group has no committed offset on every partition"
            else:
                row["verdict"] = OK
                row["detail"] = f"{deleted} records deleted, all consumed first"
        row["missing_count"] = lost
        out.append(row)
    return out
