"""The audit's own data path end to end, minus Spark's planning: records on a real broker, read
and folded by the job's JVM fold (`AuditFolder.fold_ranges`) in several batches, each batch
written by the job's counts MERGE (`tables.merge_counts`) into a real Delta table.

Two truths the per-batch fold tests cannot show: HLL accuracy after the MERGE has unioned the
sketches of several batches, and a window written in batch N updated by late records in batch
N+2. The offset ranges stand in for what Spark's Kafka source would plan; the job's
micro-batch planning is covered by the job runs in test_audit_job.py.
"""

from __future__ import annotations

import datetime as dt
import math
import time
from pathlib import Path

from chispa import assert_df_equality
from confluent_kafka import Producer

from core.config import ClusterConfig
from core.spec import OutputSpec, SourceSpec
from jobs.audit import tables
from jobs.audit.fold import AuditFolder
from jobs.audit.spec import AuditSpec, AuditWindow, FieldRef
from jobs.runtime.delta import ensure_tables

EXACT = "AUDIT_TYPE_EXACT_UNIQ"
APPROX = "AUDIT_TYPE_APPROX_UNIQ"
WINDOW_MS = 60_000


def utc(ms: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC)


def spec_for(
    bootstrap: str, topic: str, tmp_path: Path, windows: tuple[AuditWindow, ...], lateness
) -> AuditSpec:
    return AuditSpec(
        job_group_id="merge-truth",
        source=SourceSpec(ClusterConfig("local", bootstrap), topic, "merge-truth-cg"),
        audited_cluster="local",
        audited_topic=topic,
        windows=windows,
        event_time=FieldRef("kafka_timestamp"),
        dedupe_key=FieldRef("key_and_value"),
        allowed_lateness_seconds=lateness,
        max_future_skew_seconds=86400,
        hll_lg_config_k=12,
        max_messages_per_sec=0,
        trigger_interval_seconds=1,
        output=OutputSpec(
            str(tmp_path / "ck"), {"audit_counts": str(tmp_path / "wh" / "audit_counts")}
        ),
    )


def produce_all(bootstrap: str, topic: str, records) -> None:
    """(partition, key, timestamp ms) records, value b"v", acks=all; raise on any failure."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 50,
            "batch.size": 1 << 20,
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    failures: list[str] = []

    def on_delivery(err, _msg) -> None:
        if err is not None:
            failures.append(str(err))

    for partition, key, ts_ms in records:
        while True:
            try:
                producer.produce(
                    topic,
                    key=key,
                    value=b"v",
                    partition=partition,
                    timestamp=ts_ms,
                    on_delivery=on_delivery,
                )
                break
            except BufferError:  # the local queue is full: let deliveries drain it
                producer.poll(0.1)
    remaining = producer.flush(120)
    assert not remaining and not failures, f"{remaining} unsent, failures {failures[:3]}"


def fold_and_merge(spark, spec: AuditSpec, batches: list[dict[int, tuple[int, int]]], audit_ms):
    """Each batch's offset ranges folded by the job's fold and written by the job's MERGE."""
    ensure_tables(spark, tables.locations(spec))
    folder = AuditFolder(spark, spec)
    jvm = spark.sparkContext._jvm
    try:
        for batch_id, ranges in enumerate(batches):
            jranges = jvm.java.util.ArrayList()
            for p, (a, b) in sorted(ranges.items()):
                jranges.add(jvm.dev.uatu.fold.FoldRange(spec.source.topic, p, a, b))
            folded = folder.fold_ranges(spark, jranges, batch_id, audit_ms[batch_id])
            assert folded.records == sum(b - a for a, b in ranges.values())
            tables.merge_counts(
                folded.partials,
                spec.output.table("audit_counts"),
                "merge-truth",
                batch_id,
                spec.job_group_id,
            )
    finally:
        folder.close()


# --- HLL accuracy after the MERGE ------------------------------------------------------------

SEEDS = (11, 23, 37, 41)  # one fixed seed per partition: its keys are its own
WINDOWS_PER_PARTITION = 2
DISTINCT = 125_000  # per (partition, window): 4 x 2 x 125k = 1M distinct keys in all
RESENT_EVERY = 10  # every tenth key is sent a second time, after all the originals
BATCHES = 3


def test_hll_after_the_jobs_merge_stays_within_2_percent_rms(spark, kafka, tmp_path) -> None:
    """lgConfigK 12 promises about 1.6 % standard error (1.04 / sqrt(4096)). Eight windows of
    125k distinct keys (four fixed seeds, so the result is the same on every run), each built
    from three batches' sketches unioned by the MERGE: the RMS relative error of unique_count
    over the eight is at most 2 %, and every record, duplicates included, is counted once."""
    topic = f"hll-merge-{tmp_path.name[-12:].replace('_', '-')}"
    kafka.create_topic(topic, partitions=len(SEEDS))
    t0_ms = (int(time.time() * 1000) // WINDOW_MS - 30) * WINDOW_MS
    per_partition = DISTINCT * WINDOWS_PER_PARTITION

    def records():
        for p, seed in enumerate(SEEDS):
            # Windows interleave (record i lands in window i % 2), so each third of the
            # partition's offsets, one batch, brings keys of both windows.
            keys = [(f"k{seed}-{i}".encode(), i % 2) for i in range(per_partition)]
            for key, window in keys:
                yield p, key, t0_ms + window * WINDOW_MS + 7
            # Every tenth pair of keys (one of each window) again, after all the originals.
            for i, (key, window) in enumerate(keys):
                if i // 2 % RESENT_EVERY == 0:
                    yield p, key, t0_ms + window * WINDOW_MS + 9

    produce_all(kafka.bootstrap_servers, topic, records())
    total = per_partition + per_partition // RESENT_EVERY
    cuts = [total * b // BATCHES for b in range(BATCHES + 1)]
    batches = [{p: (cuts[b], cuts[b + 1]) for p in range(len(SEEDS))} for b in range(BATCHES)]
    spec = spec_for(
        kafka.bootstrap_servers, topic, tmp_path, (AuditWindow(APPROX, 60),), lateness=None
    )
    fold_and_merge(spark, spec, batches, [t0_ms + 10 * WINDOW_MS] * BATCHES)

    counts = spark.read.format("delta").load(spec.output.table("audit_counts")).collect()
    assert len(counts) == len(SEEDS) * WINDOWS_PER_PARTITION
    assert {r["message_count"] for r in counts} == {DISTINCT + DISTINCT // RESENT_EVERY}
    errors = [(r["unique_count"] - DISTINCT) / DISTINCT for r in counts]
    rms = math.sqrt(sum(e * e for e in errors) / len(errors))
    assert rms <= 0.02, f"RMS relative error {rms:.2%}, per window {errors}"
    # The union is what keeps the error small: one batch's sketch alone would see about a
    # third of a window's keys, so a MERGE that replaced instead of unioned fails above.


# --- late data across batches ---------------------------------------------------------------


def test_late_records_update_a_window_written_two_batches_earlier(spark, kafka, tmp_path) -> None:
    """Window [T0, T0+60 s) is written by batch 0 (on time), left alone by batch 1, and updated
    by late records in batch 2, audited 10 minutes later (lateness 120 s): its counts add up,
    late_count counts only batch 2's records, updated_at is batch 2's audit time."""
    topic = f"late-merge-{tmp_path.name[-12:].replace('_', '-')}"
    kafka.create_topic(topic, partitions=1)
    t0_ms = (int(time.time() * 1000) // WINDOW_MS - 30) * WINDOW_MS
    sent = [(b"a", 1), (b"b", 2), (b"c", 3), (b"x", 130), (b"a", 5), (b"d", 6)]  # (key, s)
    produce_all(kafka.bootstrap_servers, topic, [(0, k, t0_ms + s * 1000) for k, s in sent])
    windows = (AuditWindow(EXACT, 60), AuditWindow(APPROX, 60))
    spec = spec_for(kafka.bootstrap_servers, topic, tmp_path, windows, lateness=120)
    audit_ms = [t0_ms + s * 1000 for s in (90, 150, 600)]
    # Batch 0: a, b, c; batch 1: x (the next window); batch 2: "a" again and "d", both late.
    fold_and_merge(spark, spec, [{0: (0, 3)}, {0: (3, 4)}, {0: (4, 6)}], audit_ms)

    at = [utc(ms) for ms in audit_ms]
    t0, t1 = utc(t0_ms), utc(t0_ms + 2 * WINDOW_MS)
    expected = spark.createDataFrame(
        [
            (EXACT, t0, 5, 4, 1, 2, at[2]),
            (APPROX, t0, 5, 4, None, 2, at[2]),
            (EXACT, t1, 1, 1, 0, 0, at[1]),
            (APPROX, t1, 1, 1, None, 0, at[1]),
        ],
        "audit_type string, window_start timestamp, message_count long, unique_count long, "
        "duplicate_count long, late_count long, updated_at timestamp",
    )
    actual = (
        spark.read.format("delta").load(spec.output.table("audit_counts")).select(*expected.columns)
    )
    assert_df_equality(actual, expected, ignore_row_order=True, ignore_nullable=True)
