"""The audit's counts writer (`jobs/audit/counts_writer.py`) on a real Delta table: batches
are MERGEd only once Spark has committed them, batches committed together are combined into
one MERGE, a run's queue is drained at its end, and partials a crashed run saved are written
once at the next start. Spark's commit log is stood in for by the test: it creates
`<checkpoint>/commits/N` itself, which is how the writer learns that batch N is committed.

The truth is computed in Python from the keys each batch carries.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections import defaultdict
from pathlib import Path

import pytest
from chispa import assert_df_equality
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from jobs.audit import tables
from jobs.audit.counts_writer import FOLDER, CountsWriter
from jobs.audit.transforms import WINDOW_KEY, combine_partials
from jobs.runtime.checkpoint_files import CheckpointFiles
from jobs.runtime.delta import ensure_tables, kll_quantiles
from jobs.runtime.saved_rows import decode_rows, encode_rows
from testing.jobrun import log_actions
from testing.polling import wait_for

EXACT = "AUDIT_TYPE_EXACT_UNIQ"
APP_ID = "counts-writer-test"
Batch = dict[tuple[int, int], list[str]]  # (partition, window index) -> the batch's keys


class KeyBook:
    """The keys every earlier batch brought, per (partition, window): the fold's exact state,
    kept in Python so each batch's new_unique_count is known."""

    def __init__(self) -> None:
        self.seen: dict[tuple[int, int], set[str]] = defaultdict(set)
        self.counts: dict[tuple[int, int], int] = defaultdict(int)

    def partials(self, spark, batch: Batch, batch_id: int) -> DataFrame:
        """The batch's partials in fold_partials' columns, as a local relation (as the fold's)."""
        new = {}
        for window, keys in batch.items():
            new[window] = len(set(keys) - self.seen[window])
            self.seen[window] |= set(keys)
            self.counts[window] += len(keys)
        records = spark.createDataFrame(
            [(p, w, k, float(i)) for (p, w), keys in batch.items() for i, k in enumerate(keys)],
            "partition int, w int, key string, latency double",
        )
        news = spark.createDataFrame(
            [(p, w, n) for (p, w), n in new.items()], "partition int, w int, new_unique_count long"
        )
        rows = (
            records.groupBy("partition", "w")
            .agg(
                F.count("*").alias("message_count"),
                F.sum(F.length("key")).cast("long").alias("bytes"),
                F.hll_sketch_agg("key", 12).alias("hll_sketch"),
                F.kll_sketch_agg_double("latency").alias("latency_kll_sketch"),
            )
            .join(news, ["partition", "w"])
            .select(
                F.lit("local").alias("cluster"),
                F.lit("t").alias("topic"),
                "partition",
                F.lit(EXACT).alias("audit_type"),
                F.lit(60).alias("audit_interval_seconds"),
                F.timestamp_seconds(F.col("w") * 60).alias("window_start"),
                F.timestamp_seconds(F.col("w") * 60 + 60).alias("window_end"),
                "message_count",
                "bytes",
                F.lit(0).cast("long").alias("no_event_time_count"),
                F.lit(0).cast("long").alias("late_count"),
                "hll_sketch",
                "latency_kll_sketch",
                F.timestamp_seconds(F.lit(1000 + batch_id)).alias("updated_at"),
                "new_unique_count",
            )
        )
        return spark.createDataFrame(rows.collect(), rows.schema)

    @classmethod
    def truth_of(cls, spark, batches: list[Batch]) -> DataFrame:
        book = cls()
        for batch in batches:
            for window, keys in batch.items():
                book.seen[window] |= set(keys)
                book.counts[window] += len(keys)
        return book.truth(spark)

    def truth(self, spark) -> DataFrame:
        return spark.createDataFrame(
            [
                (p, dt.datetime.fromtimestamp(w * 60, tz=dt.UTC), n, len(self.seen[(p, w)]))
                for (p, w), n in sorted(self.counts.items())
            ],
            "partition int, window_start timestamp, message_count long, unique_count long",
        )


def counts(spark, path: str) -> DataFrame:
    return (
        spark.read.format("delta")
        .load(path)
        .select("partition", "window_start", "message_count", "unique_count")
    )


def txn_versions(path: str) -> list[int]:
    """The idempotent-write markers of the table's commits, in commit order."""
    return [int(t["version"]) for t in log_actions(path, "txn")]


def operations(path: str) -> list[str]:
    """The operation of each of the table's commits, in order."""
    return [c["operation"] for c in log_actions(path, "commitInfo")]


def commit(checkpoint: Path, *batch_ids: int) -> None:
    """Stand in for Spark's commit log; the highest id first, so the writer cannot see a
    lower one alone."""
    (checkpoint / "commits").mkdir(parents=True, exist_ok=True)
    for batch_id in sorted(batch_ids, reverse=True):
        (checkpoint / "commits" / str(batch_id)).write_text("v1\n{}")


def saved(checkpoint: Path) -> list[int]:
    folder = checkpoint / FOLDER
    return sorted(int(f.name) for f in folder.iterdir() if f.name.isdigit())


@pytest.fixture
def table(spark, tmp_path: Path) -> str:
    path = str(tmp_path / "audit_counts")
    ensure_tables(spark, [(tables.AUDIT_COUNTS, path)])
    return path


BATCHES: list[Batch] = [
    {(0, 0): ["a", "b", "a"], (1, 0): ["x"]},
    {(0, 0): ["b", "c"], (0, 1): ["late", "d"]},
    {(0, 0): ["a", "e"], (1, 0): ["x", "y"], (0, 1): ["d"]},
]


def test_merges_follow_sparks_commits_combine_what_is_ready_and_drain(
    spark, tmp_path: Path, table: str
) -> None:
    ck = tmp_path / "ck"
    book = KeyBook()
    writer = CountsWriter(table, str(ck), lambda _spark: APP_ID, "g")
    try:
        commit(ck, 0)
        writer.submit(spark, 0, book.partials(spark, BATCHES[0], 0))
        # Merged, and its file deleted (which follows the MERGE's commit).
        wait_for(lambda: saved(ck) == [], 60, "batch 0 merged after its commit")
        assert txn_versions(table) == [0]
        # Holding the writer's lock keeps its thread from looking at the queue until both
        # batches are queued and committed (else it can take batch 1 alone: its look at the
        # queue and its look at the commits are two steps).
        with writer.batches._changed:
            writer.submit(spark, 1, book.partials(spark, BATCHES[1], 1))
            writer.submit(spark, 2, book.partials(spark, BATCHES[2], 2))
            # Not committed: saved, queued, not in the table.
            assert (saved(ck), txn_versions(table)) == ([1, 2], [0])
            commit(ck, 1, 2)
        wait_for(lambda: saved(ck) == [], 60, "batches 1 and 2 merged after their commits")
        # One MERGE for both, marked with the newer id; the empty table's first write appends.
        assert txn_versions(table) == [0, 2]
        assert operations(table)[1:] == ["WRITE", "MERGE"]
        assert writer.drain() == 2
    finally:
        writer.close()
    assert_df_equality(
        counts(spark, table), book.truth(spark), ignore_row_order=True, ignore_nullable=True
    )


def test_a_groups_first_write_appends_beside_other_groups_and_a_restart_merges(
    spark, tmp_path: Path, table: str
) -> None:
    """A table that holds other groups' rows takes a new group's first write as an append
    (no MERGE reads or rewrites anyone's files), and a group whose rows are there (its run
    restarted, here a new writer) MERGEs: appended again, its windows would be rows twice."""
    books = {"g": KeyBook(), "h": KeyBook()}

    def run(group: str, checkpoint: str, batches: list[tuple[int, Batch]]) -> None:
        writer = CountsWriter(table, str(tmp_path / checkpoint), lambda _s: checkpoint, group)
        try:
            for batch_id, batch in batches:
                writer.submit(spark, batch_id, books[group].partials(spark, batch, batch_id))
            writer.drain()
        finally:
            writer.close()

    run("g", "g-1", [(0, BATCHES[0])])  # the table's first write: an append
    run("h", "h-1", [(0, BATCHES[0])])  # g's rows there, none of h's: an append
    run("g", "g-2", [(0, BATCHES[1]), (1, BATCHES[2])])  # g's rows there: MERGE
    assert operations(table)[1:] == ["WRITE", "WRITE", "MERGE"]
    for group, book in books.items():
        mine = spark.read.format("delta").load(table).where(F.col("job_group_id") == group)
        assert_df_equality(
            mine.select("partition", "window_start", "message_count", "unique_count"),
            book.truth(spark),
            ignore_row_order=True,
            ignore_nullable=True,
        )


def test_drain_writes_batches_spark_has_not_committed(spark, tmp_path: Path, table: str) -> None:
    """After the query, nothing is left to commit: drain writes what is queued."""
    ck = tmp_path / "ck"
    book = KeyBook()
    writer = CountsWriter(table, str(ck), lambda _spark: APP_ID, "g")
    try:
        for batch_id, batch in enumerate(BATCHES):
            writer.submit(spark, batch_id, book.partials(spark, batch, batch_id))
        assert writer.drain() == 2
    finally:
        writer.close()
    assert (saved(ck), txn_versions(table)) == ([], [2])
    assert_df_equality(
        counts(spark, table), book.truth(spark), ignore_row_order=True, ignore_nullable=True
    )


def test_a_released_batch_is_merged_before_its_commit(spark, tmp_path: Path, table: str) -> None:
    """Flow control is about to wait inside foreachBatch, so Spark's commit comes late: the
    released batch is MERGEd without it, a later batch still waits for its commit."""
    ck = tmp_path / "ck"
    book = KeyBook()
    writer = CountsWriter(table, str(ck), lambda _spark: APP_ID, "g")
    try:
        writer.submit(spark, 0, book.partials(spark, BATCHES[0], 0))
        writer.release(0)
        wait_for(lambda: saved(ck) == [], 60, "the released batch 0 merged")
        assert txn_versions(table) == [0]
        writer.submit(spark, 1, book.partials(spark, BATCHES[1], 1))
        assert (saved(ck), txn_versions(table)) == ([1], [0])
        commit(ck, 0, 1)
        wait_for(lambda: txn_versions(table) == [0, 1], 60, "batch 1 merged after its commit")
    finally:
        writer.close()
    assert_df_equality(
        counts(spark, table),
        KeyBook.truth_of(spark, BATCHES[:2]),
        ignore_row_order=True,
        ignore_nullable=True,
    )


def test_recover_writes_saved_partials_once_in_batch_order(
    spark, tmp_path: Path, table: str
) -> None:
    """A crash left three saved batches: batch 0 already MERGEd (the crash came before its
    file was deleted), batches 1 and 2 not. The next start skips 0 (the table's marker holds
    it) and writes 1 and 2 in one MERGE."""
    ck = tmp_path / "ck"
    book = KeyBook()
    first = book.partials(spark, BATCHES[0], 0)
    tables.merge_counts(first, table, APP_ID, 0, "g")
    files = CheckpointFiles(spark, str(ck), FOLDER)
    files.write("0", encode_rows(first))
    for batch_id in (1, 2):
        files.write(str(batch_id), encode_rows(book.partials(spark, BATCHES[batch_id], batch_id)))

    writer = CountsWriter(table, str(ck), lambda _spark: APP_ID, "g")
    try:
        assert writer.recover(spark) == [0, 1, 2]
    finally:
        writer.close()

    assert saved(ck) == []
    assert txn_versions(table) == [0, 2]  # no second MERGE of batch 0; 1 and 2 together
    assert_df_equality(
        counts(spark, table), book.truth(spark), ignore_row_order=True, ignore_nullable=True
    )


def test_a_failed_merge_fails_drain_and_the_next_submit_and_keeps_the_file(
    spark, tmp_path: Path
) -> None:
    """No table at the path: the MERGE fails; drain and any later submit raise, naming where
    the unwritten batches are kept, and batch 0's file is still there."""
    ck = tmp_path / "ck"
    book = KeyBook()
    writer = CountsWriter(str(tmp_path / "no-table"), str(ck), lambda _spark: APP_ID, "g")
    try:
        commit(ck, 0)
        writer.submit(spark, 0, book.partials(spark, BATCHES[0], 0))
        with pytest.raises(
            RuntimeError, match=f"(?s)writing audit_counts failed: .*{re.escape(f'{ck}/{FOLDER}')}"
        ):
            writer.drain()
        with pytest.raises(RuntimeError, match="writing audit_counts failed"):
            writer.submit(spark, 1, book.partials(spark, BATCHES[1], 1))
    finally:
        writer.close()
    assert saved(ck) == [0]


# --- the pure parts, on batch frames ---------------------------------------------------------


def test_saved_partials_decode_to_the_frame_that_was_saved(spark) -> None:
    partials = KeyBook().partials(spark, BATCHES[0], 0)
    restored = decode_rows(spark, json.loads(json.dumps(encode_rows(partials))))
    # Built from JSON in the JVM, every column comes back nullable; the values are the same.
    assert_df_equality(restored, partials, ignore_row_order=True, ignore_nullable=True)


def test_a_window_without_latencies_in_any_batch_combines_to_no_sketch(spark) -> None:
    """Records without an event time carry no latency, so their window's partial has a null
    KLL sketch. Combined with another such batch the window still has none (merging only nulls
    gives an empty sketch, whose quantiles fail the MERGE: a crash loop at every restart); a
    window where one batch had latencies keeps that batch's sketch."""
    book = KeyBook()
    no_latency = F.lit(None).cast("binary")
    first = book.partials(spark, BATCHES[0], 0).withColumn("latency_kll_sketch", no_latency)
    second = book.partials(spark, BATCHES[1], 1)
    combined = first.unionByName(
        second.withColumn(
            "latency_kll_sketch",
            F.when(F.col("partition") == 1, no_latency).otherwise(F.col("latency_kll_sketch")),
        )
    ).transform(combine_partials)
    quantiles = kll_quantiles("latency_kll_sketch", "double", {"p50": 0.5})
    rows = combined.select(
        "partition",
        F.floor(F.unix_timestamp("window_start") / 60).cast("int").alias("w"),
        F.kll_sketch_get_n_double("latency_kll_sketch").alias("latencies"),
        *(column.alias(name) for name, column in quantiles.items()),
    ).collect()
    got = {(r.partition, r.w): (r.latencies, r.p50 is not None) for r in rows}
    # (0, 0) and (0, 1) had latencies in batch 1 (two each); (1, 0) had none in either batch.
    assert got == {(0, 0): (2, True), (0, 1): (2, True), (1, 0): (None, False)}


def test_combined_partials_equal_one_batch_of_all_the_records(spark) -> None:
    """Batches 0-2 combined give what one batch of all their keys gives: counts and new keys
    add up, the HLL union estimates the same, the KLL sketch holds every latency."""
    book = KeyBook()
    parts = [book.partials(spark, b, i) for i, b in enumerate(BATCHES)]
    combined = parts[0].unionByName(parts[1]).unionByName(parts[2]).transform(combine_partials)
    everything: Batch = defaultdict(list)
    for batch in BATCHES:
        for window, keys in batch.items():
            everything[window] += keys
    one = KeyBook().partials(spark, everything, 2)

    def comparable(frame: DataFrame) -> DataFrame:
        return frame.select(
            *WINDOW_KEY,
            "window_end",
            "message_count",
            "bytes",
            "new_unique_count",
            "updated_at",
            F.hll_sketch_estimate("hll_sketch").alias("estimate"),
            F.kll_sketch_get_n_double("latency_kll_sketch").alias("latencies"),
        )

    assert_df_equality(
        comparable(combined),
        comparable(one),
        ignore_row_order=True,
        ignore_nullable=True,
        ignore_column_order=True,
    )
