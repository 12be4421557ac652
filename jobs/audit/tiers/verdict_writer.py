"""Writing one trigger's verdict candidates: the rows `verdicts.revise` keeps, against the
newest revision of each (check, window) within the horizon, are appended to `audit_verdicts`;
a REPLICATION gap row is appended to `replication_gaps` with the revision of its window's
verdict row, and only when that row is written. Both appends are idempotent per (app_id,
batch_id).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from pyspark.sql import SparkSession, Window
from pyspark.sql import functions as F

from jobs.audit.tiers import tables
from jobs.audit.tiers.spec import TierAuditSpec
from jobs.audit.tiers.tables import epoch_ms
from jobs.audit.tiers.verdicts import revise
from jobs.audit.tiers.windows import Round
from jobs.runtime.delta import append_once

log = logging.getLogger("uatu.tiers")


def with_revisions(
    written: Iterable[Mapping[str, Any]], gaps: Iterable[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """The gap rows whose window's verdict row is written, each with that row's revision."""
    revision = {(r["check_name"], r["window_start"]): r["revision"] for r in written}
    return [
        {**g, "revision": revision[(g["check_name"], g["window_start"])]}
        for g in gaps
        if (g["check_name"], g["window_start"]) in revision
    ]


def write(
    spark: SparkSession,
    spec: TierAuditSpec,
    at: Round,
    candidates: list[dict[str, Any]],
    gaps: list[dict[str, Any]],
    app_id: str,
    batch_id: int,
) -> None:
    """Append the candidates that are new revisions, and their gaps."""
    if not candidates:
        return
    rows = revise(candidates, _latest(spark, spec, at))
    if not rows:
        return
    append_once(
        tables.frame(spark, tables.AUDIT_VERDICTS, rows),
        tables.AUDIT_VERDICTS,
        spec.output.table("audit_verdicts"),
        app_id,
        batch_id,
    )
    found = with_revisions(rows, gaps)
    if found:
        append_once(
            tables.frame(spark, tables.REPLICATION_GAPS, found),
            tables.REPLICATION_GAPS,
            spec.output.table("replication_gaps"),
            app_id,
            batch_id,
        )
    counts = Counter(r["verdict"] for r in rows)
    log.info("batch %d: %d verdict rows written: %s", batch_id, len(rows), dict(counts))


def _latest(spark: SparkSession, spec: TierAuditSpec, at: Round) -> list[dict[str, Any]]:
    """The newest row of each (check, topic, window) of the job group within the horizon."""
    latest = (
        spark.read.format("delta")
        .load(spec.output.table("audit_verdicts"))
        .where(F.col("job_group_id") == spec.job_group_id)
        .where(F.col("window_start") >= F.timestamp_millis(F.lit(at.horizon)))
        .withColumn(
            "newest",
            F.max("revision").over(
                Window.partitionBy("check_type", "check_name", "topic", "window_start")
            ),
        )
        .where(F.col("revision") == F.col("newest"))
        .select(
            "check_type",
            "check_name",
            "topic",
            epoch_ms("window_start"),
            "verdict",
            "revision",
            "left_count",
            "right_count",
            "left_unique",
            "right_unique",
            "missing_count",
        )
        .collect()
    )
    return [r.asDict() for r in latest]
