"""Folding one micro-batch's AuditReports (SERVICE, KRP, CONSUMER tiers) into `tier_counts`.

A value of the reports topic that is not an AuditReport, or one without an instance id, a
positive sequence and window length, or a known tier, is skipped: the audit topic is shared.
A report is folded once: (instance_id, sequence) repeated within the batch counts once, and
one recorded in `tier_report_ids` by an earlier batch (first_batch_id < this batch) not at
all, so a replayed batch folds the same reports again and its idempotent writes are no-ops.
Folding adds counts, unions HLL sketches and merges KLL sketches per `tables.TIER_KEY`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from uatu.v1 import audit_report_pb2

from core.faults import fault_point
from jobs.audit.tiers import tables
from jobs.audit.tiers.spec import TierAuditSpec
from jobs.runtime.delta import append_once, kll_merged_or_null, kll_quantiles, merge_once

log = logging.getLogger("uatu.tiers")

TIER_NAMES = {v: k.removeprefix("TIER_") for k, v in audit_report_pb2.Tier.items()}
ReportKey = tuple[str, int]  # (instance_id, sequence)
Reports = Mapping[ReportKey, audit_report_pb2.AuditReport]

_PARTIAL_DDL = (
    "tier string, cluster string, topic string, consumer_group string, window_seconds int, "
    "start_ms long, message_count long, bytes long, failed_count long, hll binary, kll binary"
)


def parse(values: Iterable[bytes]) -> dict[ReportKey, audit_report_pb2.AuditReport]:
    """The valid AuditReports among `values` by (instance_id, sequence), the first kept."""
    reports: dict[ReportKey, audit_report_pb2.AuditReport] = {}
    for value in values:
        try:
            report = audit_report_pb2.AuditReport.FromString(value)
        except Exception:  # not an AuditReport: skipped, the audit topic is shared
            continue
        r = report.reporter
        if not r.instance_id or report.sequence <= 0 or report.window_seconds <= 0:
            continue
        if r.tier not in TIER_NAMES or r.tier == audit_report_pb2.TIER_INVALID:
            continue
        reports.setdefault((r.instance_id, report.sequence), report)
    return reports


def id_rows(new: Reports, batch_id: int) -> list[dict[str, Any]]:
    """`tier_report_ids` rows of the reports this batch folds first."""
    return [
        {
            "instance_id": i,
            "sequence": s,
            "first_batch_id": batch_id,
            "service": r.reporter.service,
            "host": r.reporter.host,
            "tier": TIER_NAMES[r.reporter.tier],
        }
        for (i, s), r in sorted(new.items())
    ]


def count_rows(new: Reports) -> list[tuple[Any, ...]]:
    """One row of `_PARTIAL_DDL` per report (CONSUMER reports keep their group)."""
    rows = []
    for r in new.values():
        tier = TIER_NAMES[r.reporter.tier]
        rows.append(
            (
                tier,
                r.cluster,
                r.topic,
                r.reporter.consumer_group if tier == "CONSUMER" else "",
                r.window_seconds,
                r.window_start_ms,
                r.message_count,
                r.byte_count,
                r.failed_count,
                bytes(r.hll_sketch) or None,
                bytes(r.latency_kll_sketch) or None,
            )
        )
    return rows


def fold(
    spark: SparkSession, spec: TierAuditSpec, batch: DataFrame, app_id: str, batch_id: int
) -> None:
    """Fold the batch's new reports into `tier_counts`, recording them in `tier_report_ids`
    (both writes idempotent per (app_id, batch_id))."""
    values = batch.where(F.col("value").isNotNull()).select("value").collect()
    reports = parse(bytes(row.value) for row in values)
    if not reports:
        return
    known = _folded_before(spark, spec, {i for i, _ in reports}, batch_id)
    new = {k: v for k, v in reports.items() if k not in known}
    ids = id_rows(new, batch_id)
    if ids:
        append_once(
            tables.frame(spark, tables.TIER_REPORT_IDS, ids),
            tables.TIER_REPORT_IDS,
            spec.output.table("tier_report_ids"),
            app_id,
            batch_id,
        )
    fault_point("tiers.report_ids_appended")
    rows = count_rows(new)
    if not rows:
        return
    _merge_counts(spark, spec, _partial(spark, rows), app_id, batch_id)
    log.info(
        "batch %d: %d new audit reports (%d repeated)",
        batch_id,
        len(new),
        len(reports) - len(new),
    )


def _folded_before(
    spark: SparkSession, spec: TierAuditSpec, instances: set[str], batch_id: int
) -> set[ReportKey]:
    return {
        (r.instance_id, r.sequence)
        for r in spark.read.format("delta")
        .load(spec.output.table("tier_report_ids"))
        .where(F.col("first_batch_id") < batch_id)
        .where(F.col("instance_id").isin(sorted(instances)))
        .select("instance_id", "sequence")
        .collect()
    }


def _partial(spark: SparkSession, rows: list[tuple[Any, ...]]) -> DataFrame:
    """The batch's reports summed per `tables.TIER_KEY` (sketches unioned, merged)."""
    return (
        spark.createDataFrame(rows, _PARTIAL_DDL)
        .groupBy("tier", "cluster", "topic", "consumer_group", "window_seconds", "start_ms")
        .agg(
            F.sum("message_count").alias("message_count"),
            F.sum("bytes").alias("bytes"),
            F.sum("failed_count").alias("failed_count"),
            F.count(F.lit(1)).alias("reports"),
            F.hll_union_agg("hll", True).alias("hll_sketch"),
            # No report of the group measured latency: null, not an empty sketch.
            kll_merged_or_null("kll").alias("latency_kll_sketch"),
        )
        .withColumn("window_start", F.timestamp_millis("start_ms"))
        .withColumn(
            "window_end",
            F.timestamp_millis(F.col("start_ms") + F.col("window_seconds") * 1000),
        )
        .withColumn("updated_at", F.current_timestamp())
        .drop("start_ms")
    ).localCheckpoint()


def _merge_counts(
    spark: SparkSession, spec: TierAuditSpec, partial: DataFrame, app_id: str, batch_id: int
) -> None:
    merged_hll = "hll_union(t.hll_sketch, s.hll_sketch, true)"
    merged_kll = (
        "CASE WHEN t.latency_kll_sketch IS NULL THEN s.latency_kll_sketch "
        "WHEN s.latency_kll_sketch IS NULL THEN t.latency_kll_sketch "
        "ELSE kll_sketch_merge_double(t.latency_kll_sketch, s.latency_kll_sketch) END"
    )
    quantiles = {"latency_p50_ms": 0.5, "latency_p99_ms": 0.99}
    merge_once(
        partial,
        tables.TIER_COUNTS,
        spec.output.table("tier_counts"),
        app_id,
        batch_id,
        writer=spec.job_group_id,
        update={
            "message_count": "t.message_count + s.message_count",
            "bytes": "t.bytes + s.bytes",
            "failed_count": "t.failed_count + s.failed_count",
            "reports": "t.reports + s.reports",
            "unique_count": f"hll_sketch_estimate({merged_hll})",
            "hll_sketch": merged_hll,
            "latency_kll_sketch": merged_kll,
            **kll_quantiles(F.expr(merged_kll), "double", quantiles),
            "updated_at": "s.updated_at",
        },
        insert={
            **{c: f"s.{c}" for c in tables.TIER_KEY},
            "window_end": "s.window_end",
            "message_count": "s.message_count",
            "bytes": "s.bytes",
            "failed_count": "s.failed_count",
            "reports": "s.reports",
            "unique_count": "hll_sketch_estimate(s.hll_sketch)",
            "hll_sketch": "s.hll_sketch",
            "latency_kll_sketch": "s.latency_kll_sketch",
            **kll_quantiles(F.col("s.latency_kll_sketch"), "double", quantiles),
            "updated_at": "s.updated_at",
        },
    )
