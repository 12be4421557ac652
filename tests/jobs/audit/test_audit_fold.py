"""The JVM fold (`jobs/audit/fold.py`, `dev.uatu.audit`) against the SQL it replaces.

The same Kafka records are audited twice: by the SQL definitions in `jobs/audit/transforms.py`
(Spark's Kafka source -> audit_records -> assign_windows -> window_partials) and by the fold,
which reads the offset ranges itself. Every column of the counts MERGE's source must agree, the
sketches must be readable by Python's datasketches, and exact audits' new keys are checked
against a set computed in plain Python, across two batches, a late batch and a replay.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from pathlib import Path

import datasketches
import pytest
from pyspark.sql import functions as F

from core.config import ClusterConfig
from core.spec import OutputSpec, SourceSpec
from jobs.audit.fold import AuditFolder
from jobs.audit.spec import AuditSpec, AuditWindow, FieldRef
from jobs.audit.transforms import assign_windows, audit_records, window_partials
from testing.demo_data import SentRecord, audit_dataset, produce

pytestmark = pytest.mark.integration

WINDOW_S = 60
LATENESS_S = 900
EXACT = "AUDIT_TYPE_EXACT_UNIQ"
APPROX = "AUDIT_TYPE_APPROX_UNIQ"
WINDOWS = (AuditWindow(EXACT, WINDOW_S), AuditWindow(APPROX, WINDOW_S))
EVENT_TIME = FieldRef("json_field", "ts")
DEDUPE = FieldRef("key_and_value")
COUNTS = ["message_count", "bytes", "no_event_time_count", "late_count"]


def spec_for(
    bootstrap: str,
    topic: str,
    checkpoint: Path,
    event_time: FieldRef = EVENT_TIME,
    max_future_skew_seconds: int = 86400,
) -> AuditSpec:
    return AuditSpec(
        job_group_id="fold-test",
        source=SourceSpec(ClusterConfig("local", bootstrap), topic, "fold-test-cg"),
        audited_cluster="local",
        audited_topic=topic,
        windows=WINDOWS,
        event_time=event_time,
        dedupe_key=DEDUPE,
        allowed_lateness_seconds=LATENESS_S,
        max_future_skew_seconds=max_future_skew_seconds,
        hll_lg_config_k=12,
        max_messages_per_sec=0,
        trigger_interval_seconds=1,
        output=OutputSpec(str(checkpoint), {"audit_counts": str(checkpoint.parent / "counts")}),
    )


def sql_partials(spark, spec: AuditSpec, ranges: dict[int, tuple[int, int]], audit_ms: int):
    """The batch as the SQL definitions audit it (Spark's Kafka source reads the rows)."""
    bootstrap, topic = spec.source.cluster.bootstrap_servers, spec.source.topic
    start = json.dumps({topic: {str(p): a for p, (a, _) in ranges.items()}})
    end = json.dumps({topic: {str(p): b for p, (_, b) in ranges.items()}})
    rows = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("assign", json.dumps({topic: sorted(ranges)}))
        .option("startingOffsets", start)
        .option("endingOffsets", end)
        .load()
        .select(
            "key",
            "value",
            "partition",
            "offset",
            "timestamp",
            F.lit(None).cast("array<struct<key:string,value:binary>>").alias("headers"),
            F.timestamp_millis(F.lit(audit_ms)).alias("audit_ts"),
        )
    )
    windowed = rows.transform(
        audit_records,
        cluster="local",
        topic=topic,
        event_time=spec.event_time,
        dedupe_key=spec.dedupe_key,
        max_future_skew_seconds=spec.max_future_skew_seconds,
    ).transform(assign_windows, WINDOWS, LATENESS_S)
    return window_partials(windowed, 12)


def by_window(df) -> dict[tuple, dict]:
    with_estimate = df.withColumn("estimate", F.hll_sketch_estimate("hll_sketch"))
    return {
        (r["partition"], r["audit_type"], r["window_start"]): r.asDict()
        for r in with_estimate.collect()
    }


def assert_same_partials(got: dict[tuple, dict], want: dict[tuple, dict]) -> int:
    """The fold's partials (`by_window`) equal the SQL's, window by window, sketches included;
    returns the late records counted."""
    assert set(got) == set(want)
    late = 0
    for window, w in want.items():
        g = got[window]
        assert {c: g[c] for c in COUNTS} == {c: w[c] for c in COUNTS}, window
        assert g["window_end"] == w["window_end"]
        assert g["estimate"] == pytest.approx(w["estimate"], rel=1e-9), window
        late += g["late_count"]
        # Readable by Python's datasketches, and the same latencies as the SQL's.
        mine_hll = datasketches.hll_sketch.deserialize(bytes(g["hll_sketch"]))
        sql_hll = datasketches.hll_sketch.deserialize(bytes(w["hll_sketch"]))
        assert mine_hll.lg_config_k == 12
        assert mine_hll.get_estimate() == pytest.approx(sql_hll.get_estimate(), rel=1e-9)
        # The same dedupe hashes, not only as many: their union counts no more keys.
        union = datasketches.hll_union(12)
        union.update(mine_hll)
        union.update(sql_hll)
        assert union.get_estimate() == pytest.approx(sql_hll.get_estimate(), rel=1e-9), window
        if w["latency_kll_sketch"] is None:
            assert g["latency_kll_sketch"] is None, window
            continue
        mine = datasketches.kll_doubles_sketch.deserialize(bytes(g["latency_kll_sketch"]))
        sql = datasketches.kll_doubles_sketch.deserialize(bytes(w["latency_kll_sketch"]))
        assert (mine.n, mine.get_min_value(), mine.get_max_value()) == (
            sql.n,
            sql.get_min_value(),
            sql.get_max_value(),
        ), window
    return late


def fold(folder: AuditFolder, spark, topic: str, ranges, batch_id: int, audit_ms: int):
    jvm = spark.sparkContext._jvm
    jranges = jvm.java.util.ArrayList()
    for p, (a, b) in sorted(ranges.items()):
        jranges.add(jvm.dev.uatu.fold.FoldRange(topic, p, a, b))
    return folder.fold_ranges(spark, jranges, batch_id, audit_ms)


def distinct_keys(records: list[SentRecord]) -> dict[tuple[int, int], set]:
    """(partition, window start ms) -> the distinct (key, value) pairs placed there."""
    window_ms = WINDOW_S * 1000
    keys: dict[tuple[int, int], set] = defaultdict(set)
    for r in records:
        placed = r.event_ms if r.event_ms is not None else r.kafka_ts_ms
        keys[(r.partition, placed - placed % window_ms)].add((r.key, r.value))
    return keys


def test_fold_equals_the_sql_and_counts_new_exact_keys_once_across_batches(spark, kafka, tmp_path):
    """Five partitions on the session's two slots: the folds share tasks (RangeFolds.packed),
    each task's consumer reads several partitions, and batch 1 starts from what batch 0's
    consumers fetched past their ranges' ends."""
    partitions = 5
    topic = f"fold-{tmp_path.name[-20:].replace('_', '-')}"
    kafka.create_topic(topic, partitions=partitions)
    now_ms = int(time.time() * 1000)
    first = audit_dataset(200, partitions=partitions, now_ms=now_ms)
    # Batch 1 repeats 60 records of batch 0 (not new to their windows) and brings 80 others.
    second = first[:60] + audit_dataset(80, partitions=partitions, now_ms=now_ms, seed=11)
    produce(kafka.bootstrap_servers, topic, first)
    produce(kafka.bootstrap_servers, topic, second)
    per_partition = [
        (sum(r.partition == p for r in first), sum(r.partition == p for r in second))
        for p in range(partitions)
    ]
    assert all(n0 and n1 for n0, n1 in per_partition)  # every task reads every batch
    batch0 = {p: (0, n0) for p, (n0, _) in enumerate(per_partition)}
    batch1 = {p: (n0, n0 + n1) for p, (n0, n1) in enumerate(per_partition)}
    # Batch 1 is audited two hours later: every window of its records is then late.
    audits = {0: now_ms + 1_000, 1: now_ms + 7_200_000}

    spec = spec_for(kafka.bootstrap_servers, topic, tmp_path / "ck")
    folder = AuditFolder(spark, spec)
    assert folder.fields_kind() == "projection"  # the event time is a JSON field
    try:
        seen: dict[tuple[int, int], set] = defaultdict(set)
        for batch_id, ranges, records in ((0, batch0, first), (1, batch1, second)):
            folded = fold(folder, spark, topic, ranges, batch_id, audits[batch_id])
            assert folded.records == len(records)
            assert folded.bytes == sum(len(r.key) + len(r.value) for r in records)
            got = by_window(folded.partials)
            want = by_window(sql_partials(spark, spec, ranges, audits[batch_id]))
            assert set(got) == set(want)
            late = assert_same_partials(got, want)
            if batch_id == 1:
                assert late == 2 * len(records)  # both audit types, every record late
            # Exact audits: the keys new to each window, against what earlier batches saw.
            batch_keys = distinct_keys(records)
            new = {}
            for window, keys in batch_keys.items():
                new[window] = len(keys - seen[window])
                seen[window] |= keys
            got_new = {
                (r["partition"], int(r["window_start"].timestamp() * 1000)): r["new_unique_count"]
                for r in folded.partials.where(F.col("audit_type") == EXACT).collect()
            }
            assert got_new == new
            assert all(
                r["new_unique_count"] == 0
                for r in folded.partials.where(F.col("audit_type") == APPROX).collect()
            )
            if batch_id == 1:
                assert 0 < sum(new.values()) < sum(len(k) for k in batch_keys.values())
                # A replay of batch 1 (a crash before its counts MERGE) finds the same keys new.
                again = fold(folder, spark, topic, ranges, batch_id, audits[batch_id])
                replayed = {
                    (r["partition"], int(r["window_start"].timestamp() * 1000)): r[
                        "new_unique_count"
                    ]
                    for r in again.partials.where(F.col("audit_type") == EXACT).collect()
                }
                assert replayed == new
    finally:
        folder.close()


def test_fold_of_the_default_fields_equals_the_sql_at_every_edge(spark, kafka, tmp_path):
    """Event time = the Kafka timestamp and dedupe key = key and value: the fold computes the
    fields directly (`KafkaTimestampFields`), and must give the SQL's partials for timestamps
    at and past the future skew, early ones, and null or empty keys and values."""
    topic = f"foldk-{tmp_path.name[-20:].replace('_', '-')}"
    kafka.create_topic(topic, partitions=2)
    now_ms = int(time.time() * 1000)
    audit_ms = now_ms - 3_600_000  # audited "an hour ago": records of now are in its future
    skew_s = 600
    timestamps = [
        audit_ms - 2 * 3_600_000,  # two hours before the audit: late
        audit_ms - 5_000,
        audit_ms + skew_s * 1000,  # the last usable instant
        audit_ms + skew_s * 1000 + 1,  # past the skew: no event time, placed at the audit
        now_ms,
        1,  # 1970, the earliest usable
    ]
    keys_and_values = [(b"k", b"v" * 50), (None, b"v"), (b"k", None), (None, None), (b"", b"")]
    records = [
        SentRecord(i % 2, key, value, None, ts, "edge")
        for i, (ts, (key, value)) in enumerate(
            (ts, kv) for ts in timestamps for kv in keys_and_values
        )
    ]
    records += records[:7]  # duplicates
    produce(kafka.bootstrap_servers, topic, records)
    ranges = {p: (0, sum(r.partition == p for r in records)) for p in range(2)}

    spec = spec_for(
        kafka.bootstrap_servers,
        topic,
        tmp_path / "ck",
        event_time=FieldRef("kafka_timestamp"),
        max_future_skew_seconds=skew_s,
    )
    folder = AuditFolder(spark, spec)
    assert folder.fields_kind() == "kafka_timestamp"
    try:
        folded = fold(folder, spark, topic, ranges, 0, audit_ms)
        assert folded.records == len(records)
        want = by_window(sql_partials(spark, spec, ranges, audit_ms))
        assert_same_partials(by_window(folded.partials), want)
        untimed = sum(w["no_event_time_count"] for w in want.values())
        assert untimed == 2 * 2 * len(keys_and_values)  # two timestamps, both audit types
    finally:
        folder.close()


def test_exact_keys_are_read_back_by_a_new_driver(spark, kafka, tmp_path):
    """A restarted job (nothing in memory) still knows the keys of earlier batches."""
    topic = f"foldr-{tmp_path.name[-20:].replace('_', '-')}"
    kafka.create_topic(topic, partitions=1)
    now_ms = int(time.time() * 1000)
    records = audit_dataset(50, partitions=1, now_ms=now_ms)
    produce(kafka.bootstrap_servers, topic, records)
    produce(kafka.bootstrap_servers, topic, records)  # the same records again
    n = len(records)
    spec = spec_for(kafka.bootstrap_servers, topic, tmp_path / "ck")
    folder = AuditFolder(spark, spec)
    fold(folder, spark, topic, {0: (0, n)}, 0, now_ms)
    folder.close()  # the job ends: the executor forgets its keys

    restarted = AuditFolder(spark, spec)
    try:
        again = fold(restarted, spark, topic, {0: (n, 2 * n)}, 1, now_ms + 1_000)
        exact = again.partials.where(F.col("audit_type") == EXACT).collect()
        assert sum(r["message_count"] for r in exact) == n
        assert [r["new_unique_count"] for r in exact] == [0] * len(exact)
    finally:
        restarted.close()


def test_ranges_are_packed_a_task_per_slot_with_a_busy_partition_alone(spark):
    """RangeFolds.packed: about one task per slot, each range in one task, biggest first to
    the lightest task; more tasks than slots only when the records call for it, never more
    than ranges."""
    jvm = spark.sparkContext._jvm
    folds = jvm.dev.uatu.fold

    def packed(sizes: list[int], slots: int, per_task: int) -> list[list[tuple[str, int]]]:
        ranges = jvm.java.util.ArrayList()
        for i, size in enumerate(sizes):
            ranges.add(folds.FoldRange(f"t{i // 4}", i % 4, 100, 100 + size))
        return [
            [(r.topic(), r.partition()) for r in pack]
            for pack in folds.RangeFolds.packed(ranges, slots, per_task)
        ]

    # 4,000 quiet partitions on two slots: two tasks of 2,000, in the given order.
    many = packed([150] * 4000, 2, 1_000_000)
    assert [len(p) for p in many] == [2000, 2000]
    assert sorted(r for p in many for r in p) == sorted((f"t{i // 4}", i % 4) for i in range(4000))
    given = {(f"t{i // 4}", i % 4): i for i in range(4000)}
    assert all([given[r] for r in p] == sorted(given[r] for r in p) for p in many)
    # One busy partition among quiet ones has a task to itself.
    busy = packed([10, 10, 900, 10, 10, 10], 2, 1_000_000)
    assert busy == [[("t0", 2)], [("t0", 0), ("t0", 1), ("t0", 3), ("t1", 0), ("t1", 1)]]
    # More records than a task should read: more tasks than slots, never more than ranges.
    six = [("t0", 0), ("t0", 1), ("t0", 2), ("t0", 3), ("t1", 0), ("t1", 1)]
    assert packed([600] * 6, 2, 1000) == [
        [six[0], six[4]],
        [six[1], six[5]],
        [six[2]],
        [six[3]],
    ]
    assert len(packed([5000] * 3, 2, 1000)) == 3
    assert packed([], 2, 1000) == []
