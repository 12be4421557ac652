"""Pure DataFrame -> DataFrame transforms of the audit job.

They work the same on a streaming DataFrame and on a small batch DataFrame built from
literals, which is how the tests exercise them. No function here reads, writes or creates a
session.

What the audit computes, in SQL::

    Kafka rows + audit_ts --audit_records--> one row per record (placement, key, latency)
              --assign_windows--> one row per (record, AuditConfig) with its window
              --window_partials--> one row per (cluster, topic, partition, window, type)

The job runs the first step as written, compiled by Spark and evaluated on each record inside
its JVM fold tasks (`jobs/audit/fold.py`), and the other two as the fold's Java equivalent;
`fold_partials` turns the fold's rows into `window_partials`' columns plus the
ESTIMATE_COLUMNS: new_unique_count (keys new to an exact audit's window),
unique_estimated_count (records of a window whose exact keys had expired: their uniqueness
is left to the sketch) and exact_hll_sketch (see `combine_partials`). The tests hold the fold
to these definitions.

Time is carried as epoch milliseconds (bigint) until the final columns, because window
arithmetic on integers is exact and cheap.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from jobs.audit.spec import AuditWindow, FieldRef
from jobs.runtime.delta import kll_doubles_or_null, kll_merged_or_null

# Columns that identify one audit row; the Delta MERGE key of audit_counts.
WINDOW_KEY = [
    "cluster",
    "topic",
    "partition",
    "audit_type",
    "audit_interval_seconds",
    "window_start",
]
# Header/JSON event times below this are seconds, above it milliseconds (Chaperone's rule:
# 1e11 ms is March 1973, 1e11 s is year 5138).
_SECONDS_THRESHOLD = 1e11


def _usable_ms(ms: Column, audit_ms: Column, max_future_skew_seconds: int) -> Column:
    """`ms` when it is a plausible event time (positive, not too far ahead), else null."""
    upper = audit_ms + F.lit(max_future_skew_seconds * 1000)
    # NaN compares greater than everything in Spark, so it fails the upper bound too.
    return F.when((ms > 0) & (ms <= upper), ms.cast("long"))


def _header_value(name: str) -> Column:
    matching = F.filter("headers", lambda h: h["key"] == F.lit(name))
    return F.get(matching, 0)["value"]


def _json_field(name: str) -> Column:
    return F.get_json_object(F.col("value").cast("string"), f"$.{name}")


def _epoch_ms_from_text(text: Column) -> Column:
    number = text.try_cast("double")
    return F.when(number < _SECONDS_THRESHOLD, number * 1000).otherwise(number)


def _event_ms_raw(event_time: FieldRef) -> Column:
    if event_time.source == "kafka_timestamp":
        return F.unix_millis("timestamp").cast("double")
    if event_time.source == "header":
        return _epoch_ms_from_text(_header_value(event_time.name).cast("string"))
    return _epoch_ms_from_text(_json_field(event_time.name))


def _dedupe_hash(dedupe_key: FieldRef) -> Column:
    key_and_value = F.xxhash64("key", "value")
    if dedupe_key.source == "key_and_value":
        return key_and_value
    field = (
        _header_value(dedupe_key.name)
        if dedupe_key.source == "header"
        else _json_field(dedupe_key.name)
    )
    # A record without the configured field still gets an identity: its bytes.
    return F.when(field.isNull(), key_and_value).otherwise(F.xxhash64(field))


def audit_records(
    df: DataFrame,
    *,
    cluster: str,
    topic: str,
    event_time: FieldRef,
    dedupe_key: FieldRef,
    max_future_skew_seconds: int,
) -> DataFrame:
    """Kafka source rows -> one audit row per record.

    Input: the Kafka source schema (key, value, partition, offset, timestamp, and headers when
    a header is used) plus `audit_ts`, the time of auditing (the micro-batch timestamp, so a
    replayed batch computes the same values).

    Output columns: cluster, topic (the audited labels), partition, offset, bytes (key +
    value), dedupe_key (bigint hash), event_ms (null when the configured event time is
    missing, unparsable, <= 0 or beyond the future skew), placed_ms (event_ms, else the Kafka
    timestamp if usable, else audit_ms: every record is placed somewhere, none is dropped),
    audit_ms, latency_ms (audit_ms - event_ms, null without a usable event time), audit_ts.
    """
    audit_ms = F.col("audit_ms")
    event_ms = _usable_ms(F.col("event_ms_raw"), audit_ms, max_future_skew_seconds)
    kafka_ms = _usable_ms(F.unix_millis("timestamp"), audit_ms, max_future_skew_seconds)
    # Parse the event time once into a column: inlined, the JSON lookup would run per use.
    parsed = df.withColumn("event_ms_raw", _event_ms_raw(event_time)).withColumn(
        "audit_ms", F.unix_millis("audit_ts")
    )
    return parsed.select(
        F.lit(cluster).alias("cluster"),
        F.lit(topic).alias("topic"),
        F.col("partition"),
        F.col("offset"),
        (F.coalesce(F.length("key"), F.lit(0)) + F.coalesce(F.length("value"), F.lit(0)))
        .cast("long")
        .alias("bytes"),
        _dedupe_hash(dedupe_key).alias("dedupe_key"),
        event_ms.alias("event_ms"),
        F.coalesce(event_ms, kafka_ms, audit_ms).alias("placed_ms"),
        audit_ms,
        (audit_ms - event_ms).cast("double").alias("latency_ms"),
        F.col("audit_ts"),
    )


def assign_windows(
    records: DataFrame, windows: Sequence[AuditWindow], allowed_lateness_seconds: int | None
) -> DataFrame:
    """One row per (record, AuditConfig), with the epoch-aligned tumbling window it falls in.

    Adds audit_type, audit_interval_seconds, window_start_ms, window_end_ms and is_late
    (arrived more than the allowed lateness after its window ended; the default lateness is
    the window's own interval).
    """
    specs = F.array(
        *[
            F.struct(
                F.lit(w.audit_type).alias("audit_type"),
                F.lit(w.interval_seconds).alias("interval_seconds"),
                F.lit(
                    (
                        allowed_lateness_seconds
                        if allowed_lateness_seconds is not None
                        else w.interval_seconds
                    )
                    * 1000
                )
                .cast("long")
                .alias("lateness_ms"),
            )
            for w in windows
        ]
    )
    interval_ms = F.col("w.interval_seconds").cast("long") * 1000
    window_start_ms = F.col("placed_ms") - F.pmod(F.col("placed_ms"), interval_ms)
    return (
        records.withColumn("w", F.explode(specs))
        .withColumn("audit_type", F.col("w.audit_type"))
        .withColumn("audit_interval_seconds", F.col("w.interval_seconds"))
        .withColumn("window_start_ms", window_start_ms)
        .withColumn("window_end_ms", window_start_ms + interval_ms)
        .withColumn("is_late", F.col("audit_ms") > F.col("window_end_ms") + F.col("w.lateness_ms"))
        .withColumn("window_start", F.timestamp_millis("window_start_ms"))
        .drop("w")
    )


def window_partials(windowed: DataFrame, hll_lg_config_k: int) -> DataFrame:
    """Per (cluster, topic, partition, audit_type, interval, window) totals of one batch.

    Output: WINDOW_KEY + window_end, message_count, bytes, no_event_time_count, late_count,
    hll_sketch (HLL_8 over dedupe_key, mergeable with hll_union), latency_kll_sketch (KLL
    doubles over latency_ms, mergeable with kll_sketch_merge_double; null when no record of
    the window had a usable event time), updated_at.
    """
    return windowed.groupBy(*WINDOW_KEY).agg(
        F.timestamp_millis(F.max("window_end_ms")).alias("window_end"),
        F.count(F.lit(1)).alias("message_count"),
        F.sum("bytes").alias("bytes"),
        F.count_if(F.col("event_ms").isNull()).alias("no_event_time_count"),
        F.count_if("is_late").alias("late_count"),
        F.hll_sketch_agg("dedupe_key", hll_lg_config_k).alias("hll_sketch"),
        kll_doubles_or_null("latency_ms").alias("latency_kll_sketch"),
        F.max("audit_ts").alias("updated_at"),
    )


def fold_partials(rows: DataFrame, cluster: str, topic: str | None, audit_ms: int) -> DataFrame:
    """The fold's per-window rows (`dev.uatu.audit.AuditFold.ROW_SCHEMA`, audit_type set) ->
    `window_partials`' columns plus new_unique_count, the counts MERGE's source.

    `cluster` and `topic` are the audited labels; `topic` None (a job that audits a topic
    selection): each row's own topic, the one its records were read from. `audit_ms` is the
    batch's audit time, which becomes updated_at.
    """
    return rows.select(
        F.lit(cluster).alias("cluster"),
        (F.col("topic") if topic is None else F.lit(topic)).alias("topic"),
        "partition",
        "audit_type",
        "audit_interval_seconds",
        F.timestamp_millis("window_start_ms").alias("window_start"),
        F.timestamp_millis("window_end_ms").alias("window_end"),
        "message_count",
        "bytes",
        "no_event_time_count",
        "late_count",
        "hll_sketch",
        "latency_kll_sketch",
        F.timestamp_millis(F.lit(audit_ms)).alias("updated_at"),
        "new_unique_count",
        "unique_estimated_count",
        F.lit(None).cast("binary").alias("exact_hll_sketch"),
    )


# A partial's columns beyond window_partials', with what a partial without them means: no new
# key, no record of an expired window, no exact part to tell from the estimated one.
ESTIMATE_COLUMNS = {
    "new_unique_count": "CAST(0 AS BIGINT)",
    "unique_estimated_count": "CAST(0 AS BIGINT)",
    "exact_hll_sketch": "CAST(NULL AS BINARY)",
}


def with_estimate_columns(partials: DataFrame) -> DataFrame:
    """`partials` with any of ESTIMATE_COLUMNS it lacks (partials computed by the SQL path,
    or saved by a build before key retention)."""
    missing = {c: F.expr(v) for c, v in ESTIMATE_COLUMNS.items() if c not in partials.columns}
    return partials.withColumns(missing) if missing else partials


def combine_partials(partials: DataFrame) -> DataFrame:
    """The partials of several batches (`fold_partials`' columns) -> one row per window, as
    one batch over all their records would give: counts and new keys add up, HLL sketches
    union, KLL sketches merge (null when every batch's is null), the newest updated_at. A
    MERGE matches a target row with at most one source row, so batches written together are
    combined first.

    Summing new_unique_count is right because each batch's new keys are counted against the
    batches before it only (`jobs/audit/fold.py`). A window whose exact keys expire does so
    for good, so its batches with exact keys come before those with estimated ones;
    exact_hll_sketch is the union of the former's sketches when the window has the latter
    (else null), which lets the MERGE estimate the uniqueness of the estimated records alone,
    as consecutive MERGEs of the same batches would (`tables.py`).
    """
    exact_part = F.when(F.col("unique_estimated_count") == 0, F.col("hll_sketch"))
    estimated = F.sum("unique_estimated_count")
    return (
        with_estimate_columns(partials)
        .groupBy(*WINDOW_KEY)
        .agg(
            F.max("window_end").alias("window_end"),
            F.sum("message_count").alias("message_count"),
            F.sum("bytes").alias("bytes"),
            F.sum("no_event_time_count").alias("no_event_time_count"),
            F.sum("late_count").alias("late_count"),
            F.hll_union_agg("hll_sketch", True).alias("hll_sketch"),
            # A window none of whose batches had a latency (its records had no event time)
            # keeps a null sketch, as window_partials gives it: the MERGE's quantiles fail on
            # the empty one that merging only nulls would give.
            kll_merged_or_null("latency_kll_sketch").alias("latency_kll_sketch"),
            F.max("updated_at").alias("updated_at"),
            F.sum("new_unique_count").alias("new_unique_count"),
            estimated.alias("unique_estimated_count"),
            F.when(estimated > 0, F.hll_union_agg(exact_part, True)).alias("exact_hll_sketch"),
        )
    )
