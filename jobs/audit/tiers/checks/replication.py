"""REPLICATION: which source offsets of a window reached the destination, from offsets alone.

Every micro-batch records, per check, its contiguous offset ranges in `replication_ledger`:
source records per (partition, source window: the record's Kafka timestamp), and destination
records' `uatu.src` stamps (`<cluster>/<topic>/<partition>/<offset>` of the source record,
the last stamp header of a record) of the check's source topics, per number of copies.

Per source window within the horizon, `verdicts.replication_outcome` compares the window's
source ranges of each partition with every destination range of that partition (any
window, from the window's lowest offset on); `verdicts.decide_replication` gives the
verdict. A LOSS window's missing ranges are `replication_gaps` rows (written with the
verdict's revision, `verdict_writer.py`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from functools import reduce
from typing import Any

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from core.faults import fault_point
from jobs.audit.tiers import tables
from jobs.audit.tiers.spec import REPLICATION, Check, TierAuditSpec
from jobs.audit.tiers.tables import epoch_ms
from jobs.audit.tiers.verdicts import (
    LOSS,
    PartitionOutcome,
    Span,
    decide_replication,
    replication_outcome,
    with_relative,
)
from jobs.audit.tiers.windows import Round, any_of, named
from jobs.runtime.delta import append_once

PartitionKey = tuple[str, str, int]  # source (cluster, topic, partition)
_STAMP = r"^(.*)/([^/]+)/(\d+)/(\d+)$"


# --- the ledger ------------------------------------------------------------------------------


def record(spec: TierAuditSpec, batch: DataFrame, app_id: str, batch_id: int) -> None:
    """Append this batch's ranges of every REPLICATION check to `replication_ledger`."""
    frames = [f for check in spec.of_type(REPLICATION) for f in ledger_frames(batch, check)]
    if not frames:
        return
    rows = reduce(DataFrame.unionByName, frames)
    append_once(
        rows.withColumn("batch_id", F.lit(batch_id).cast("long")),
        tables.REPLICATION_LEDGER,
        spec.output.table("replication_ledger"),
        app_id,
        batch_id,
    )
    fault_point("tiers.ledger_appended")


def ledger_frames(batch: DataFrame, check: Check) -> list[DataFrame]:
    """This batch's contiguous offset ranges of one REPLICATION check: source records per
    (partition, source window), destination stamps of its sources with their copies."""
    return [_source_ranges(batch, check), _destination_ranges(batch, check)]


def _islands(rows: DataFrame, by: tuple[str, ...]) -> DataFrame:
    """Contiguous runs of `offset` per `by` as (by..., first_offset, last_offset)."""
    rank = F.row_number().over(Window.partitionBy(*by).orderBy("offset"))
    return (
        rows.withColumn("island", F.col("offset") - rank)
        .groupBy(*by, "island")
        .agg(F.min("offset").alias("first_offset"), F.max("offset").alias("last_offset"))
    )


def _source_ranges(batch: DataFrame, check: Check) -> DataFrame:
    interval_ms = check.interval_seconds * 1000
    ts = F.unix_millis("timestamp")
    src = batch.where(any_of(check.source)).select(
        "cluster",
        "topic",
        "partition",
        "offset",
        (ts - F.pmod(ts, F.lit(interval_ms))).alias("start_ms"),
    )
    return _islands(src, ("cluster", "topic", "partition", "start_ms")).select(
        F.lit(check.name).alias("check_name"),
        F.lit("source").alias("side"),
        "cluster",
        "topic",
        "partition",
        F.timestamp_millis("start_ms").alias("window_start"),
        "first_offset",
        "last_offset",
        F.lit(1).cast("long").alias("copies"),
    )


def _destination_ranges(batch: DataFrame, check: Check) -> DataFrame:
    stamped = (
        batch.where(any_of(check.destination) & F.col("stamp").isNotNull())
        .select(
            F.regexp_extract("stamp", _STAMP, 1).alias("cluster"),
            F.regexp_extract("stamp", _STAMP, 2).alias("topic"),
            F.regexp_extract("stamp", _STAMP, 3).alias("p"),
            F.regexp_extract("stamp", _STAMP, 4).alias("o"),
        )
        .where(F.col("p") != "")
        .select(
            "cluster",
            "topic",
            F.col("p").cast("int").alias("partition"),
            F.col("o").cast("long").alias("offset"),
        )
    )
    per_offset = (
        stamped.where(any_of(check.source))
        .groupBy("cluster", "topic", "partition", "offset")
        .agg(F.count(F.lit(1)).alias("copies"))
    )
    return _islands(per_offset, ("cluster", "topic", "partition", "copies")).select(
        F.lit(check.name).alias("check_name"),
        F.lit("destination").alias("side"),
        "cluster",
        "topic",
        "partition",
        F.lit(None).cast("timestamp").alias("window_start"),
        "first_offset",
        "last_offset",
        "copies",
    )


# --- verdicts --------------------------------------------------------------------------------


def verdicts(
    spark: SparkSession, spec: TierAuditSpec, check: Check, at: Round
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(candidate verdict rows, their LOSS windows' gap rows) of every source window of
    `check` within the horizon."""
    ledger = (
        spark.read.format("delta")
        .load(spec.output.table("replication_ledger"))
        .where(F.col("check_name") == check.name)
    )
    source = (
        ledger.where(F.col("side") == "source")
        .where(F.col("window_start") >= F.timestamp_millis(F.lit(at.horizon)))
        .select(
            "cluster", "topic", "partition", epoch_ms("window_start"), "first_offset", "last_offset"
        )
        .collect()
    )
    if not source:
        return [], []
    low = min(r.first_offset for r in source)
    destination = (
        ledger.where(F.col("side") == "destination")
        .where(F.col("last_offset") >= low)
        .select("cluster", "topic", "partition", "first_offset", "last_offset", "copies")
        .collect()
    )
    high = {
        (r.cluster, r.topic, r.partition): r.high
        for r in ledger.where(F.col("side") == "destination")
        .groupBy("cluster", "topic", "partition")
        .agg(F.max("last_offset").alias("high"))
        .collect()
    }
    return candidates(check, at, source, destination, high)


def candidates(
    check: Check,
    at: Round,
    source: Iterable[Any],
    destination: Iterable[Any],
    high: Mapping[PartitionKey, int],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Ledger rows (source: cluster, topic, partition, window_start in epoch ms, first_offset,
    last_offset; destination: the same with copies, no window) and each source partition's
    highest stamped offset -> (one verdict row per source window, the gap rows of LOSS)."""
    copies: dict[PartitionKey, list[Span]] = defaultdict(list)
    for r in destination:
        copies[(r.cluster, r.topic, r.partition)].append(
            Span(r.first_offset, r.last_offset, r.copies)
        )
    windows: dict[int, dict[PartitionKey, list[Span]]] = defaultdict(lambda: defaultdict(list))
    for r in source:
        windows[r.window_start][(r.cluster, r.topic, r.partition)].append(
            Span(r.first_offset, r.last_offset)
        )
    rows, gaps = [], []
    for window, parts in sorted(windows.items()):
        outcomes = {
            key: replication_outcome(spans, copies.get(key, []), high.get(key))
            for key, spans in parts.items()
        }
        row = _verdict_row(check, at, window, outcomes)
        rows.append(row)
        if row["verdict"] == LOSS:
            gaps += gap_rows(check, at, window, outcomes)
    return rows, gaps


def _verdict_row(
    check: Check, at: Round, window: int, outcomes: Mapping[PartitionKey, PartitionOutcome]
) -> dict[str, Any]:
    by_partition = {f"{k[1]}/{k[2]}": o for k, o in outcomes.items()}
    verdict, detail, left, right, unique, missing = decide_replication(
        at.due(check, window), by_partition
    )
    if verdict == LOSS:
        detail = f"{missing} source offsets never arrived (see replication_gaps)"
    cluster, topic = named(check.destination)
    return with_relative(
        {
            "check_type": REPLICATION,
            "check_name": check.name,
            "job_group_id": at.job_group_id,
            "cluster": cluster,
            "topic": topic,
            "window_start": window,
            "window_end": window + check.interval_seconds * 1000,
            "left_label": "source " + "+".join(r.label for r in check.source),
            "right_label": "destination " + "+".join(r.label for r in check.destination),
            "left_count": left,
            "right_count": right,
            "left_unique": left,
            "right_unique": unique,
            "threshold": 0.0,
            "verdict": verdict,
            "detail": detail,
            "missing_count": missing,
            "decided_at": at.now,
        }
    )


def gap_rows(
    check: Check, at: Round, window: int, outcomes: Mapping[PartitionKey, PartitionOutcome]
) -> list[dict[str, Any]]:
    """One `replication_gaps` row (without its revision) per missing range of the window."""
    return [
        {
            "check_name": check.name,
            "job_group_id": at.job_group_id,
            "source_cluster": cluster,
            "source_topic": topic,
            "partition": partition,
            "window_start": window,
            "first_offset": span.first,
            "last_offset": span.last,
            "missing_count": span.size,
            "destination": "+".join(r.label for r in check.destination),
            "decided_at": at.now,
        }
        for (cluster, topic, partition), outcome in sorted(outcomes.items())
        for span in outcome.missing
    ]
