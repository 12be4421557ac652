"""The audit transforms on small literal frames, against hand-computed expectations, and
how a batch folds into the audit tables."""

from __future__ import annotations

import datetime as dt

import datasketches
from chispa import assert_df_equality
from delta.tables import DeltaTable
from pyspark.sql import functions as F

from jobs.audit import tables
from jobs.audit.spec import AuditWindow, FieldRef
from jobs.audit.transforms import assign_windows, audit_records, window_partials
from jobs.runtime.delta import ensure_tables

UTC = dt.UTC
T0 = dt.datetime(2026, 1, 1, tzinfo=UTC)
AUDIT_TS = T0 + dt.timedelta(minutes=10)
T0_MS = int(T0.timestamp() * 1000)
AUDIT_MS = T0_MS + 600_000

KAFKA_SCHEMA = (
    "key binary, value binary, partition int, offset long, timestamp timestamp, "
    "headers array<struct<key:string,value:binary>>, audit_ts timestamp"
)


def at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


def kafka_rows(spark, rows):
    """rows: (key, value, partition, offset, kafka_ts, headers dict)."""
    data = [
        (k, v, p, o, ts, [(hk, hv) for hk, hv in (h or {}).items()], AUDIT_TS)
        for k, v, p, o, ts, h in rows
    ]
    return spark.createDataFrame(data, KAFKA_SCHEMA)


KAFKA_TS = FieldRef("kafka_timestamp")
KEY_AND_VALUE = FieldRef("key_and_value")


def records(df, event_time=KAFKA_TS, dedupe=KEY_AND_VALUE):
    return df.transform(
        audit_records,
        cluster="c1",
        topic="t1",
        event_time=event_time,
        dedupe_key=dedupe,
        max_future_skew_seconds=3600,
    )


def test_kafka_timestamp_event_time_latency_and_placement(spark):
    df = kafka_rows(
        spark,
        [
            (b"k", b"vv", 0, 0, at(30), None),  # usable
            (b"k", b"vv", 0, 1, at(30 + 86400 * 365), None),  # a year ahead: not usable
            (None, b"v", 1, 7, dt.datetime(1970, 1, 1, tzinfo=UTC), None),  # epoch 0: not usable
        ],
    )
    actual = records(df).select(
        "partition", "offset", "bytes", "event_ms", "placed_ms", "latency_ms"
    )
    expected = spark.createDataFrame(
        [
            (0, 0, 3, T0_MS + 30_000, T0_MS + 30_000, float(AUDIT_MS - T0_MS - 30_000)),
            (0, 1, 3, None, AUDIT_MS, None),
            (1, 7, 1, None, AUDIT_MS, None),
        ],
        "partition int, offset long, bytes long, event_ms long, placed_ms long, latency_ms double",
    )
    assert_df_equality(actual, expected, ignore_row_order=True, ignore_nullable=True)


def test_json_event_time_seconds_millis_missing_and_malformed(spark):
    df = kafka_rows(
        spark,
        [
            (None, b'{"ts": %d}' % (T0_MS + 1000), 0, 0, at(500), None),  # millis
            (None, b'{"ts": %d}' % (T0_MS // 1000 + 2), 0, 1, at(500), None),  # seconds
            (None, b'{"id": 1}', 0, 2, at(500), None),  # missing: Kafka timestamp places it
            (None, b'{"ts": "yesterday"}', 0, 3, at(500), None),  # malformed
            (None, b"not json", 0, 4, at(500), None),
        ],
    )
    actual = records(df, FieldRef("json_field", "ts")).select("offset", "event_ms", "placed_ms")
    fallback = T0_MS + 500_000
    expected = spark.createDataFrame(
        [
            (0, T0_MS + 1000, T0_MS + 1000),
            (1, T0_MS + 2000, T0_MS + 2000),
            (2, None, fallback),
            (3, None, fallback),
            (4, None, fallback),
        ],
        "offset long, event_ms long, placed_ms long",
    )
    assert_df_equality(actual, expected, ignore_row_order=True, ignore_nullable=True)


def test_header_event_time_and_header_dedupe_key(spark):
    df = kafka_rows(
        spark,
        [
            (b"a", b"1", 0, 0, at(500), {"event-ts": str(T0_MS + 5).encode(), "id": b"x"}),
            (b"b", b"2", 0, 1, at(500), {"id": b"x"}),  # same id, different bytes
            (b"c", b"3", 0, 2, at(500), {}),  # no id: falls back to key+value
        ],
    )
    out = records(df, FieldRef("header", "event-ts"), FieldRef("header", "id")).collect()
    by_offset = {r["offset"]: r for r in out}
    assert by_offset[0]["event_ms"] == T0_MS + 5
    assert by_offset[1]["event_ms"] is None
    assert by_offset[0]["dedupe_key"] == by_offset[1]["dedupe_key"]
    assert by_offset[2]["dedupe_key"] != by_offset[0]["dedupe_key"]


def test_windows_are_epoch_aligned_and_lateness_is_flagged(spark):
    df = kafka_rows(
        spark,
        [
            (b"k", b"v", 0, 0, at(59.999), None),
            (b"k", b"v", 0, 1, at(60), None),
            (b"k", b"v", 0, 2, at(9 * 60 + 30), None),
        ],
    )
    windowed = records(df).transform(
        assign_windows, [AuditWindow("AUDIT_TYPE_EXACT_UNIQ", 60)], 120
    )
    actual = windowed.select("offset", "window_start_ms", "window_end_ms", "is_late")
    # Audit time is T0+600 s; a window is late once audit > end + 120 s.
    expected = spark.createDataFrame(
        [
            (0, T0_MS, T0_MS + 60_000, True),
            (1, T0_MS + 60_000, T0_MS + 120_000, True),
            (2, T0_MS + 540_000, T0_MS + 600_000, False),
        ],
        "offset long, window_start_ms long, window_end_ms long, is_late boolean",
    )
    assert_df_equality(actual, expected, ignore_row_order=True, ignore_nullable=True)


def build_partials(spark, rows, windows):
    windowed = records(kafka_rows(spark, rows)).transform(assign_windows, windows, None)
    return windowed, window_partials(windowed, 12)


def test_partials_count_bytes_and_sketches(spark):
    rows = [(b"k%d" % (i % 3), b"value", 0, i, at(i), None) for i in range(10)]
    rows.append((b"k", b"v", 0, 10, at(86400 * 30), None))  # no usable time: placed at audit
    _, partials = build_partials(spark, rows, [AuditWindow("AUDIT_TYPE_APPROX_UNIQ", 60)])
    actual = partials.select(
        "window_start", "message_count", "bytes", "no_event_time_count", "late_count"
    )
    expected = spark.createDataFrame(
        [(T0, 10, 10 * 7, 0, 10), (AUDIT_TS, 1, 2, 1, 0)],
        "window_start timestamp, message_count long, bytes long, no_event_time_count long, "
        "late_count long",
    )
    assert_df_equality(actual, expected, ignore_row_order=True, ignore_nullable=True)

    first = partials.where(F.col("window_start") == T0).first()
    hll = datasketches.hll_sketch.deserialize(bytes(first["hll_sketch"]))
    assert hll.lg_config_k == 12
    assert round(hll.get_estimate()) == 3
    kll = datasketches.kll_doubles_sketch.deserialize(bytes(first["latency_kll_sketch"]))
    assert kll.n == 10
    assert kll.get_min_value() == 600_000 - 9_000
    assert kll.get_max_value() == 600_000
    untimed = partials.where(F.col("window_start") == AUDIT_TS).first()
    assert untimed["latency_kll_sketch"] is None


# --- the tables -----------------------------------------------------------------------------


def fold_batch(spark, counts_path, rows, batch_id, new_unique):
    """What the job's foreachBatch does with one batch of exact and approximate audits, the
    exact keys new to the window (`new_unique`, computed by the fold in the job) given."""
    windows = [AuditWindow("AUDIT_TYPE_EXACT_UNIQ", 60), AuditWindow("AUDIT_TYPE_APPROX_UNIQ", 60)]
    _, partials = build_partials(spark, rows, windows)
    computed = partials.withColumn(
        "new_unique_count",
        F.when(F.col("audit_type") == "AUDIT_TYPE_EXACT_UNIQ", F.lit(new_unique))
        .otherwise(F.lit(0))
        .cast("long"),
    ).localCheckpoint()
    tables.merge_counts(computed, counts_path, "query", batch_id, "g")


def versions(spark, *paths):
    return [DeltaTable.forPath(spark, p).history(1).first()["version"] for p in paths]


def counts_by_type(spark, counts_path):
    table = spark.read.format("delta").load(counts_path)
    return {r["audit_type"]: r for r in table.collect()}


def test_batches_fold_into_audit_counts_once_with_quantiles_of_the_merged_sketch(spark, tmp_path):
    counts_path = str(tmp_path / "counts")
    ensure_tables(spark, [(tables.AUDIT_COUNTS, counts_path)])
    # Batch 0: 6 records, keys k0..k2, latencies 595..600 s. Batch 1: 5 records, keys k0..k4
    # (two new), latencies 586..590 s. Same window.
    batch0 = [(b"k%d" % (i % 3), b"v", 0, i, at(i), None) for i in range(6)]
    batch1 = [(b"k%d" % i, b"v", 0, 6 + i, at(10 + i), None) for i in range(5)]

    fold_batch(spark, counts_path, batch0, 0, 3)
    first = counts_by_type(spark, counts_path)
    assert first["AUDIT_TYPE_EXACT_UNIQ"]["latency_p50_ms"] == 597_000.0  # 3rd of 6
    before = spark.createDataFrame(
        spark.read.format("delta").load(counts_path).collect(), tables.AUDIT_COUNTS.schema
    )
    before_versions = versions(spark, counts_path)

    fold_batch(spark, counts_path, batch0, 0, 3)  # replayed after a crash

    assert_df_equality(spark.read.format("delta").load(counts_path), before, ignore_row_order=True)
    assert versions(spark, counts_path) == before_versions == [1]

    fold_batch(spark, counts_path, batch1, 1, 2)
    got = counts_by_type(spark, counts_path)
    exact, approx = got["AUDIT_TYPE_EXACT_UNIQ"], got["AUDIT_TYPE_APPROX_UNIQ"]
    assert (exact["message_count"], exact["unique_count"], exact["duplicate_count"]) == (11, 5, 6)
    assert (approx["message_count"], approx["unique_count"], approx["duplicate_count"]) == (
        11,
        5,
        None,
    )
    assert exact["bytes"] == 11 * 3
    # The quantiles are the merged sketch's: 11 latencies, the 6th is the median.
    sketch = datasketches.kll_doubles_sketch.deserialize(bytes(exact["latency_kll_sketch"]))
    assert (sketch.n, sketch.get_min_value(), sketch.get_max_value()) == (11, 586_000, 600_000)
    assert (exact["latency_p50_ms"], exact["latency_p95_ms"], exact["latency_p99_ms"]) == (
        595_000.0,
        600_000.0,
        600_000.0,
    )
