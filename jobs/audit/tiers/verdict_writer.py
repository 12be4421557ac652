"""Writing one trigger's verdicts exactly once.

`decide_once`: the candidate rows `verdicts.revise` keeps, against the newest revision of
each (check, window) within the horizon, and the REPLICATION gap rows of those revisions
(each with its verdict row's revision, and only when that row is written) are the batch's
decision. It is saved under the checkpoint (`<checkpoint>/tier-decisions/<batch id>`) before
anything is appended, and a replayed batch takes the saved one: deciding again, at another
time, after the first attempt's verdict rows are in the table, would keep no revision and so
write none of that revision's gaps.

`append`: the decision's rows to `audit_verdicts`, then its gaps to `replication_gaps`, each
idempotent per (app_id, batch_id).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pyspark.sql import SparkSession, Window
from pyspark.sql import functions as F

from core.faults import fault_point
from jobs.audit.tiers import tables
from jobs.audit.tiers.spec import TierAuditSpec
from jobs.audit.tiers.tables import epoch_ms
from jobs.audit.tiers.verdicts import revise
from jobs.audit.tiers.windows import Round
from jobs.runtime.checkpoint_files import CheckpointFiles
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


DECISIONS = "tier-decisions"
KEEP_DECISIONS = 10  # batches before the newest whose decision stays (a replay is the newest)


def decide_once(
    spark: SparkSession,
    spec: TierAuditSpec,
    at: Round,
    batch_id: int,
    decide: Callable[[], tuple[list[dict[str, Any]], list[dict[str, Any]]]],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(verdict rows, gap rows) this batch appends: its saved decision, or a new one, saved
    before it is returned. `decide` gives the candidates and gaps (no I/O but reads)."""
    files = CheckpointFiles(spark, spec.output.checkpoint, DECISIONS)
    saved = files.read(str(batch_id))
    if saved is not None:
        log.info("batch %d: appending the decision saved by its first attempt", batch_id)
        return saved["rows"], saved["gaps"]
    candidates, gaps = decide()
    rows = revise(candidates, _latest(spark, spec, at)) if candidates else []
    if not rows:
        return [], []
    found = with_revisions(rows, gaps)
    files.write(str(batch_id), {"rows": rows, "gaps": found})
    for old in files.numbers():
        if old < batch_id - KEEP_DECISIONS:
            files.delete(str(old))
    fault_point("tiers.decision_saved")
    return rows, found


def append(
    spark: SparkSession,
    spec: TierAuditSpec,
    rows: list[dict[str, Any]],
    gaps: list[dict[str, Any]],
    app_id: str,
    batch_id: int,
) -> None:
    """Append a decision's verdict rows, then its gap rows."""
    if not rows:
        return
    append_once(
        tables.frame(spark, tables.AUDIT_VERDICTS, rows),
        tables.AUDIT_VERDICTS,
        spec.output.table("audit_verdicts"),
        app_id,
        batch_id,
    )
    fault_point("tiers.verdicts_appended")
    if gaps:
        append_once(
            tables.frame(spark, tables.REPLICATION_GAPS, gaps),
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
