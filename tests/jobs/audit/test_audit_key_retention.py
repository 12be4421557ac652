"""Exact audits' key retention (`key_retention_seconds`, `dev.uatu.audit.PartitionKeys`) on the
job's own data path: records with chosen Kafka timestamps on a real broker, folded by the job's
JVM fold in batches and written by the job's counts MERGE into a real Delta table.

A window's keys are dropped (memory and `<checkpoint>/audit-keys`) once its end is the retention
behind the partition's watermark; a later record of that window is still counted, its
uniqueness taken from the window's HLL sketch and flagged in `unique_estimated_count`. The
truth is computed here from the records sent.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from jobs.audit import tables
from jobs.audit.fold import AuditFolder
from jobs.audit.spec import AuditWindow
from jobs.audit.transforms import combine_partials
from jobs.runtime.delta import ensure_tables
from tests.jobs.audit.test_audit_merge_truth import APPROX, EXACT, produce_all, spec_for

pytestmark = pytest.mark.integration

WINDOW_S = 60
WINDOW_MS = WINDOW_S * 1000
RETENTION_S = 600


def keys_on_disk(keys_dir: Path) -> dict[int, tuple[int, int]]:
    """Window start ms -> (distinct keys, bytes) of partition 0's 60 s windows on disk."""
    out = {}
    for window in sorted((keys_dir / "p0" / f"i{WINDOW_S}").glob("w*")):
        files = [f for f in window.iterdir() if f.name[0].isdigit()]
        seen = set()
        for f in files:  # 12-byte header, then 8-byte keys (KeyFiles)
            data = f.read_bytes()
            seen.update(data[i : i + 8] for i in range(12, len(data), 8))
        out[int(window.name[1:])] = (len(seen), sum(f.stat().st_size for f in files))
    return out


def test_a_late_record_for_a_window_whose_keys_expired_is_counted_and_flagged(
    spark, kafka, tmp_path
) -> None:
    """Batch 0 fills window W (100 keys, 20 sent twice) and W1 (10 keys) three hours ago; batch
    1 brings X an hour later, which moves the partition's watermark 3600 s past W, and a late
    duplicate and new key for W, still exact (the watermark before batch 1 was W's). With a
    600 s retention, batch 2 finds W's keys gone: its duplicate and new key for W are
    estimated; its duplicate for X is exact (X kept). At about 100 keys the sketch is in its
    exact (coupon) mode, so the HLL rule gives the true distinct count. A replay of batch 2 on a
    fresh driver decides the same, and one MERGE of batches 1 and 2 together (as the counts
    writer combines batches ready at once) writes what their two MERGEs wrote."""
    topic = f"key-retention-{tmp_path.name[-12:].replace('_', '-')}"
    kafka.create_topic(topic, partitions=1)
    now_ms = int(time.time() * 1000)
    w = (now_ms // WINDOW_MS - 180) * WINDOW_MS
    w1, x = w + WINDOW_MS, w + 60 * WINDOW_MS
    batch0 = [(b"k%d" % i, w + 1000 + i) for i in range(100)]
    batch0 += [(b"k%d" % i, w + 2000 + i) for i in range(20)]
    batch0 += [(b"j%d" % i, w1 + 1000 + i) for i in range(10)]
    batch1 = [(b"x%d" % i, x + 1000 + i) for i in range(50)]
    batch1 += [(b"k7", w + 4000), (b"late-1", w + 4001)]
    batch2 = [(b"k5", w + 3000), (b"new-1", w + 3001), (b"x0", x + 5000)]
    sent = [batch0, batch1, batch2]
    produce_all(kafka.bootstrap_servers, topic, [(0, k, ts) for b in sent for k, ts in b])
    cuts = [0, len(batch0), len(batch0) + len(batch1), sum(map(len, sent))]

    spec = dataclasses.replace(
        spec_for(
            kafka.bootstrap_servers,
            topic,
            tmp_path,
            (AuditWindow(EXACT, WINDOW_S), AuditWindow(APPROX, WINDOW_S)),
            lateness=WINDOW_S,
        ),
        key_retention_seconds=RETENTION_S,
    )
    keys_dir = tmp_path / "ck" / "audit-keys"
    counts_path = spec.output.table("audit_counts")
    ensure_tables(spark, tables.locations(spec))
    jvm = spark.sparkContext._jvm

    def fold(folder: AuditFolder, batch_id: int):
        ranges = jvm.java.util.ArrayList()
        ranges.add(jvm.dev.uatu.fold.FoldRange(topic, 0, cuts[batch_id], cuts[batch_id + 1]))
        return folder.fold_ranges(spark, ranges, batch_id, now_ms + batch_id)

    folder = AuditFolder(spark, spec)
    try:
        partials = [fold(folder, 0).partials, fold(folder, 1).partials]
        before = keys_on_disk(keys_dir)
        folded = fold(folder, 2)
    finally:
        folder.close()
    after = keys_on_disk(keys_dir)
    print(f"exact keys on disk (keys, bytes) by window start: before {before}, after {after}")

    assert {s: k for s, (k, _) in before.items()} == {w: 101, w1: 10, x: 50}
    assert {s: k for s, (k, _) in after.items()} == {x: 50}  # W and W1 dropped from disk
    assert folded.state[(topic, 0)]["state_windows_dropped"] == 2
    assert folded.state[(topic, 0)]["state_oldest_window_ms"] == x
    assert folded.state[(topic, 0)]["state_window_keys"] == f"i{WINDOW_S}/w{x}=50"

    def exact_rows(partials) -> dict[int, tuple]:
        rows = partials.where(F.col("audit_type") == EXACT).collect()
        return {
            int(r["window_start"].timestamp() * 1000): (
                r["message_count"],
                r["new_unique_count"],
                r["unique_estimated_count"],
            )
            for r in rows
        }

    assert exact_rows(folded.partials) == {w: (2, 0, 2), x: (1, 0, 0)}
    # A crash after batch 2's keys were written: a new driver replays it and decides the same.
    replayed = AuditFolder(spark, spec)
    try:
        again = fold(replayed, 2)
    finally:
        replayed.close()
    assert exact_rows(again.partials) == exact_rows(folded.partials)
    for batch_id, batch in enumerate([*partials, folded.partials, again.partials]):
        # The last is the replay's MERGE, which its marker skips.
        tables.merge_counts(batch, counts_path, "kr", min(batch_id, 2), "kr")
    combined_path = str(tmp_path / "wh" / "combined")
    ensure_tables(spark, [(tables.AUDIT_COUNTS, combined_path)])
    tables.merge_counts(partials[0], combined_path, "kr", 0, "kr")
    both = partials[1].unionByName(folded.partials).transform(combine_partials)
    tables.merge_counts(both, combined_path, "kr", 2, "kr")

    def table(path: str) -> dict[tuple, tuple]:
        return {
            (r["audit_type"], int(r["window_start"].timestamp() * 1000)): (
                r["message_count"],
                r["unique_count"],
                r["duplicate_count"],
                r["unique_estimated_count"],
            )
            for r in spark.read.format("delta").load(path).collect()
        }

    got = table(counts_path)
    assert table(combined_path) == got
    records = {s: [k for b in sent for k, ts in b if s <= ts < s + WINDOW_MS] for s in (w, w1, x)}
    truth = {s: (len(keys), len(set(keys))) for s, keys in records.items()}
    assert truth[w] == (124, 102)
    assert got == {
        # W: its two late records flagged, unique from the sketch (exact at this cardinality).
        (EXACT, w): (*truth[w], truth[w][0] - truth[w][1], 2),
        (EXACT, w1): (*truth[w1], 0, 0),
        (EXACT, x): (*truth[x], 1, 0),  # x0 found in X's kept keys: an exact duplicate
        (APPROX, w): (*truth[w], None, 0),
        (APPROX, w1): (*truth[w1], None, 0),
        (APPROX, x): (*truth[x], None, 0),
    }
