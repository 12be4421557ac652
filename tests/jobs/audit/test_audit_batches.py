"""The audit job's batch writer (`AuditBatchWriter`, what foreachBatch calls) fed generated
micro-batches, without Kafka: HLL accuracy after the job's own MERGE across batches, and late
records updating a window written batches earlier.

Each micro-batch is built as the job's stream builds it after reading Kafka (`audit_ts`, then
`audit_records`); a million distinct keys through a broker would cost minutes and test nothing
more of the counting path. Truths are computed here in plain Python.
"""

from __future__ import annotations

import datetime as dt
import math
import uuid
from pathlib import Path

from chispa import assert_df_equality
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from core.config import ClusterConfig
from jobs.audit import tables
from jobs.audit.job import AuditBatchWriter
from jobs.audit.spec import AuditSpec, AuditWindow, FieldRef
from jobs.audit.transforms import audit_records
from jobs.runtime.delta import ensure_tables

UTC = dt.UTC
T0 = dt.datetime(2026, 1, 1, tzinfo=UTC)
T0_MS = int(T0.timestamp() * 1000)
EXACT = "AUDIT_TYPE_EXACT_UNIQ"
APPROX = "AUDIT_TYPE_APPROX_UNIQ"


def spec_at(tmp_path: Path, windows: tuple[AuditWindow, ...], lateness: int | None) -> AuditSpec:
    """An audit spec writing under tmp_path, with a checkpoint whose query id is fixed (what
    the batch writer reads to key its exactly-once writes)."""
    checkpoint = tmp_path / "ck"
    checkpoint.mkdir()
    (checkpoint / "metadata").write_text(f'{{"id":"{uuid.uuid4()}"}}\n')
    return AuditSpec(
        job_group_id="batches",
        source_cluster=ClusterConfig("local", "127.0.0.1:9"),
        source_topic="t",
        consumer_group="",
        audited_cluster="local",
        audited_topic="t",
        windows=windows,
        event_time=FieldRef("kafka_timestamp"),
        dedupe_key=FieldRef("key_and_value"),
        allowed_lateness_seconds=lateness,
        max_future_skew_seconds=86400,
        hll_lg_config_k=12,
        starting_offsets="earliest",
        read_committed=False,
        max_messages_per_sec=0,
        trigger_interval_seconds=1,
        audit_counts_path=str(tmp_path / "wh" / "audit_counts"),
        audit_keys_path=str(tmp_path / "wh" / "audit_keys"),
        checkpoint_path=str(checkpoint),
    )


def micro_batch(kafka_rows: DataFrame, spec: AuditSpec, audit_ts: dt.datetime) -> DataFrame:
    """Kafka-shaped rows (key, value, partition, offset, timestamp) -> what foreachBatch gets:
    jobs/audit/job.build_stream's steps after the source (audit_ts = the batch's time)."""
    return kafka_rows.withColumn("audit_ts", F.lit(audit_ts)).transform(
        audit_records,
        cluster=spec.audited_cluster,
        topic=spec.audited_topic,
        event_time=spec.event_time,
        dedupe_key=spec.dedupe_key,
        max_future_skew_seconds=spec.max_future_skew_seconds,
    )


def writer_for(spark: SparkSession, spec: AuditSpec) -> AuditBatchWriter:
    ensure_tables(spark, tables.locations(spec))
    return AuditBatchWriter(spec)


# --- HLL accuracy ---------------------------------------------------------------------------

# One fixed seed per partition; each (partition, window) holds DISTINCT keys of its own.
SEEDS = (11, 23, 37, 41)
WINDOWS_PER_SEED = 2
DISTINCT = 125_000  # per (partition, window): 4 x 2 x 125k = 1M distinct keys in all
BATCHES = 3


def generated_rows(spark: SparkSession) -> DataFrame:
    """1M distinct (key, value) records, each in batch id % 3, and every fifth sent again in
    the next batch: a window's keys arrive over all three batches, and 200k of them twice."""
    per_seed = DISTINCT * WINDOWS_PER_SEED
    ids = spark.range(0, per_seed * len(SEEDS), 1, 2)
    seed = F.element_at(
        F.array(*[F.lit(s) for s in SEEDS]), (F.col("id") / per_seed).cast("int") + 1
    )
    window = ((F.col("id") % per_seed) / DISTINCT).cast("int")
    originals = ids.select(
        "id",
        (F.col("id") / per_seed).cast("int").alias("partition"),
        (F.col("id") % BATCHES).alias("batch"),
        F.concat(F.lit("k"), seed.cast("string"), F.lit("-"), F.col("id").cast("string"))
        .cast("binary")
        .alias("key"),
        F.lit(b"v").alias("value"),
        F.timestamp_millis(F.lit(T0_MS) + window * 60_000 + F.col("id") % 60_000).alias(
            "timestamp"
        ),
    )
    again = originals.where(F.col("id") % 5 == 0).withColumn(
        "batch", (F.col("batch") + 1) % BATCHES
    )
    return originals.unionByName(again).withColumn("offset", F.col("id"))


def test_hll_estimates_after_the_jobs_merge_stay_within_2_percent_rms(spark, tmp_path) -> None:
    """lgConfigK 12 promises about 1.6 % standard error (1.04 / sqrt(4096)). Eight windows of
    125k distinct keys (four fixed seeds), each built from three batches' sketches unioned by
    the job's MERGE in Delta: the RMS relative error of their unique_count is at most 2 %."""
    spec = spec_at(tmp_path, (AuditWindow(APPROX, 60),), None)
    write = writer_for(spark, spec)
    rows = generated_rows(spark)
    for batch_id in range(BATCHES):
        batch = rows.where(F.col("batch") == batch_id).drop("batch", "id")
        write(micro_batch(batch, spec, T0 + dt.timedelta(minutes=10)), batch_id)

    counts = spark.read.format("delta").load(spec.audit_counts_path).collect()
    assert len(counts) == len(SEEDS) * WINDOWS_PER_SEED
    # Every record counted once, duplicates included (every fifth key twice).
    assert {r["message_count"] for r in counts} == {DISTINCT + DISTINCT // 5}
    errors = [(r["unique_count"] - DISTINCT) / DISTINCT for r in counts]
    rms = math.sqrt(sum(e * e for e in errors) / len(errors))
    assert rms <= 0.02, f"RMS relative error {rms:.2%}, per window {errors}"


# --- late data across batches ---------------------------------------------------------------


def kafka_rows(spark: SparkSession, rows: list[tuple[bytes, int, int]]) -> DataFrame:
    """(key, offset, event seconds after T0) of partition 0."""
    return spark.createDataFrame(
        [(key, b"v", 0, offset, T0 + dt.timedelta(seconds=s)) for key, offset, s in rows],
        "key binary, value binary, partition int, offset long, timestamp timestamp",
    )


def test_late_records_update_a_window_written_two_batches_earlier(spark, tmp_path) -> None:
    """Window [T0, T0+60 s) is written by batch 0 (on time), left alone by batch 1, and updated
    by late records in batch 2, audited 10 minutes later (lateness 120 s): its counts add up,
    late_count counts only batch 2's records, updated_at is batch 2's audit time."""
    spec = spec_at(tmp_path, (AuditWindow(EXACT, 60), AuditWindow(APPROX, 60)), 120)
    write = writer_for(spark, spec)
    at = [T0 + dt.timedelta(seconds=s) for s in (90, 150, 600)]
    write(
        micro_batch(kafka_rows(spark, [(b"a", 0, 1), (b"b", 1, 2), (b"c", 2, 3)]), spec, at[0]), 0
    )
    write(micro_batch(kafka_rows(spark, [(b"x", 3, 130)]), spec, at[1]), 1)
    # Batch 2: "a" again (a duplicate of batch 0's) and a new key, both for the first window.
    write(micro_batch(kafka_rows(spark, [(b"a", 4, 5), (b"d", 5, 6)]), spec, at[2]), 2)

    columns = (
        "audit_type string, window_start timestamp, message_count long, unique_count long, "
        "duplicate_count long, late_count long, updated_at timestamp"
    )
    expected = spark.createDataFrame(
        [
            (EXACT, T0, 5, 4, 1, 2, at[2]),
            (APPROX, T0, 5, 4, None, 2, at[2]),
            (EXACT, T0 + dt.timedelta(seconds=120), 1, 1, 0, 0, at[1]),
            (APPROX, T0 + dt.timedelta(seconds=120), 1, 1, None, 0, at[1]),
        ],
        columns,
    )
    actual = spark.read.format("delta").load(spec.audit_counts_path)
    assert_df_equality(
        actual.select(*expected.columns),
        expected,
        ignore_row_order=True,
        ignore_nullable=True,
    )
