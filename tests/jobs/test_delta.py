"""The Delta idiom every job's tables use (`jobs/runtime/delta.py`), on real Delta tables."""

from __future__ import annotations

import dataclasses
import os
import time
from concurrent.futures import ThreadPoolExecutor

import datasketches
import pytest
from chispa import assert_df_equality
from delta.tables import DeltaTable
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from core.errors import EXIT_BAD_INPUT, TableSchemaMismatch
from jobs.runtime import delta, delta_log, ensured_tables
from jobs.runtime.checkpoint_files import HadoopFiles
from jobs.runtime.delta import (
    STALE_LOG_SECONDS,
    TXN_APP_ID_CONF,
    TXN_VERSION_CONF,
    DeltaTableSpec,
    any_table_exists,
    append_once,
    ensure,
    ensure_tables,
    holds_rows_of,
    kll_quantiles,
    merge_once,
    never_written,
    written_through,
)
from jobs.runtime.delta_log import marker_in_newest_commits
from jobs.runtime.delta_schema import schema_differences

TOTALS = DeltaTableSpec(
    name="totals",
    description="test table: a total per key and day",
    schema=StructType(
        [
            StructField("key", StringType(), False),
            StructField("day", IntegerType(), False),
            StructField("total", LongType(), False),
            StructField("note", StringType(), True),
        ]
    ),
    partition_by=("day",),
    keys=("key", "day"),
)


def rows(spark, *data):
    return spark.createDataFrame(list(data), TOTALS.schema)


def snapshot(spark, path):
    """The table's rows now, materialized (a later read of the path would see later writes)."""
    table = spark.read.format("delta").load(path)
    return spark.createDataFrame(table.collect(), table.schema)


def version(spark, path) -> int:
    return DeltaTable.forPath(spark, path).history(1).first()["version"]


# --- ensure ---------------------------------------------------------------------------------


def test_ensure_creates_the_declared_table_and_a_second_call_commits_nothing(spark, tmp_path):
    path = str(tmp_path / "totals")
    ensure(spark, TOTALS, path)
    ensure_tables(spark, [(TOTALS, path)])

    assert version(spark, path) == 0
    assert spark.read.format("delta").load(path).schema == TOTALS.schema  # nullability too
    detail = DeltaTable.forPath(spark, path).detail().first()
    assert detail["partitionColumns"] == ["day"]
    assert detail["description"] == TOTALS.description


def test_a_worker_ensures_a_table_once_until_its_log_is_gone(spark, tmp_path, monkeypatch):
    """With `ensured_tables.remembering` (a worker application), three start-ups at once
    create the table with one check, a later one checks nothing, and once the table's folder
    is deleted the next one creates it again, as declared."""
    checks = []
    real = delta._ensure_once
    monkeypatch.setattr(delta, "_ensure_once", lambda *a: checks.append(a[2]) or real(*a))
    path = str(tmp_path / "totals")
    with ensured_tables.remembering(), ThreadPoolExecutor(3) as pool:
        list(pool.map(lambda _: ensure(spark, TOTALS, path), range(3)))
        ensure_tables(spark, [(TOTALS, path)])
        assert checks == [path] and version(spark, path) == 0
        HadoopFiles(spark).delete(path, recursive=True)
        ensure(spark, TOTALS, path)
    assert checks == [path, path]
    assert DeltaTable.forPath(spark, path).detail().first()["partitionColumns"] == ["day"]
    ensure(spark, TOTALS, path)  # not remembering: every call checks
    assert len(checks) == 3


def test_any_table_exists_sees_a_delta_log_and_nothing_else(spark, tmp_path):
    table, plain = str(tmp_path / "table"), tmp_path / "plain"
    plain.mkdir()
    (plain / "part-0.parquet").write_bytes(b"")
    assert not any_table_exists(spark, [table, str(plain), str(tmp_path / "absent")])
    ensure(spark, TOTALS, table)
    assert any_table_exists(spark, [str(tmp_path / "absent"), table])


def test_never_written_holds_for_a_table_as_ensure_created_it_only(spark, tmp_path):
    created, written, filled = (str(tmp_path / name) for name in ("created", "written", "filled"))
    assert not never_written(spark, created)  # no table: in doubt
    ensure(spark, TOTALS, created)
    assert never_written(spark, created)

    ensure(spark, TOTALS, written)
    append_once(rows(spark, ("a", 1, 5, None)), TOTALS, written, "app", 0)
    assert not never_written(spark, written)
    # Rows in the table's first commit (a table someone created with data) count too.
    rows(spark, ("a", 1, 5, None)).write.format("delta").save(filled)
    assert not never_written(spark, filled)


def test_holds_rows_of_sees_only_the_rows_of_the_values_asked(spark, tmp_path):
    path = str(tmp_path / "t")
    ensure(spark, TOTALS, path)
    assert not holds_rows_of(spark, path, "key", ["a"])
    append_once(rows(spark, ("a", 1, 5, None)), TOTALS, path, "app", 0)
    assert holds_rows_of(spark, path, "key", ["b", "a"])
    assert not holds_rows_of(spark, path, "key", ["b", "c"])


def test_written_through_reads_the_newest_commits_and_else_asks_delta(spark, tmp_path, monkeypatch):
    """The newest marker of each writer, from the newest commit files or, when they do not
    hold it, from Delta's snapshot; None for a writer that never wrote."""
    path = str(tmp_path / "t")
    assert written_through(spark, path, "a") is None  # no table
    ensure(spark, TOTALS, path)
    for app, batch in (("a", 0), ("a", 1), ("b", 0), ("b", 1), ("b", 2)):
        append_once(rows(spark, (app, batch, 1, None)), TOTALS, path, app, batch)
    seen = {app: written_through(spark, path, app) for app in ("a", "b", "never")}
    assert seen == {"a": 1, "b": 2, "never": None}
    monkeypatch.setattr(delta_log, "NEWEST_COMMITS_READ", 2)  # a's marker is older: Delta's
    assert marker_in_newest_commits(HadoopFiles(spark), path, "a") == (False, None)
    assert marker_in_newest_commits(HadoopFiles(spark), path, "b") == (True, 2)
    assert {app: written_through(spark, path, app) for app in ("a", "b", "never")} == seen


def test_ensure_reads_the_metadata_of_an_as_declared_table_from_its_newest_log_files(
    spark, tmp_path, monkeypatch
):
    """`ensure` on a table as declared runs no Delta operation: its newest checksum file, or
    its newest commits, say so. A table whose newest metadata differs (its schema, or its
    partitioning) is checked by Delta and refused, whatever an older commit said."""
    files, path = HadoopFiles(spark), str(tmp_path / "totals")
    assert delta_log.current_metadata(files, path) is None  # no table
    ensure(spark, TOTALS, path)
    append_once(rows(spark, ("a", 1, 5, None)), TOTALS, path, "app", 0)

    def no_delta(*_):
        raise AssertionError("a Delta operation")

    with monkeypatch.context() as patched:
        patched.setattr(DeltaTable, "createIfNotExists", no_delta)
        ensure(spark, TOTALS, path)  # from the checksum file of version 1
        for crc in (tmp_path / "totals" / "_delta_log").glob("*.crc"):
            crc.unlink()
        ensure(spark, TOTALS, path)  # from commit 0's metaData, two commits back
        patched.setattr(delta_log, "NEWEST_COMMITS_READ", 1)
        assert delta_log.current_metadata(files, path) is None  # beyond reach: ask Delta
    assert version(spark, path) == 1

    other = StructType([StructField("key", StringType()), StructField("total", StringType())])
    (
        spark.createDataFrame([("a", "x")], other)
        .write.format("delta")
        .mode("overwrite")
        .option("overwriteSchema", "true")
        .save(path)
    )
    with pytest.raises(TableSchemaMismatch):
        ensure(spark, TOTALS, path)
    unpartitioned = str(tmp_path / "unpartitioned")
    ensure(spark, dataclasses.replace(TOTALS, partition_by=()), unpartitioned)
    with pytest.raises(TableSchemaMismatch, match="partitioned by"):
        ensure(spark, TOTALS, unpartitioned)


def test_ensure_creates_a_table_over_a_log_that_a_killed_creation_left_without_commits(
    spark, tmp_path
):
    """What a process killed inside `ensure` leaves: an empty `_delta_log` (Delta 4.4 makes
    `_staged_commits` first). Delta alone refuses to create a table there."""
    table = tmp_path / "table"
    (table / "_delta_log" / "_staged_commits").mkdir(parents=True)
    killed_at = time.time() - STALE_LOG_SECONDS - 1  # untouched since: not a creation under way
    for left in (table / "_delta_log", table / "_delta_log" / "_staged_commits"):
        os.utime(left, (killed_at, killed_at))
    assert not any_table_exists(spark, [str(table)])
    ensure(spark, TOTALS, str(table))
    append_once(rows(spark, ("a", 1, 5, None)), TOTALS, str(table), "app", 0)
    assert [r.total for r in spark.read.format("delta").load(str(table)).collect()] == [5]


def test_an_existing_table_whose_schema_breaks_writes_is_an_error_naming_table_and_columns(
    spark, tmp_path
):
    path = str(tmp_path / "totals")
    other = DeltaTableSpec(
        name="other",
        description="written by someone else",
        schema=StructType(
            [
                StructField("key", StringType(), True),
                StructField("day", IntegerType(), True),
                StructField("total", StringType(), True),
            ]
        ),
    )
    ensure(spark, other, path)

    with pytest.raises(TableSchemaMismatch) as raised:
        ensure(spark, TOTALS, path)
    message = str(raised.value)
    assert "totals" in message and path in message
    assert "total: declared bigint, the table has string" in message
    assert "note: declared string, not in the table" in message
    assert raised.value.exit_status == EXIT_BAD_INPUT
    assert version(spark, path) == 0  # nothing was written


def test_a_table_of_an_earlier_release_gets_the_declared_new_columns_once(spark, tmp_path):
    """Columns a later release declares, top-level and nested in an array of structs, are
    added (nullable) in one commit; the rows already there read null in them."""

    def spec(item_fields, *more):
        item = StructType([StructField(n, LongType(), True) for n in item_fields])
        fields = [StructField("id", LongType(), False), StructField("items", ArrayType(item))]
        return DeltaTableSpec("evolving", StructType(fields + list(more)), "evolving table")

    earlier, later = spec(["a"]), spec(["a", "b"], StructField("note", StringType(), True))
    path = str(tmp_path / "evolving")
    ensure(spark, earlier, path)
    append_once(spark.createDataFrame([(1, [(10,)])], earlier.schema), earlier, path, "q", 0)

    ensure(spark, later, path)
    ensure(spark, later, path)

    table = spark.read.format("delta").load(path)
    assert table.schema == later.schema
    assert version(spark, path) == 2  # create, the row, the new columns: once
    assert [tuple(r) for r in table.collect()] == [(1, [(10, None)], None)]
    append_once(spark.createDataFrame([(2, [(20, 21)], "n")], later.schema), later, path, "q", 1)
    assert table.count() == 2


def test_schema_differences_are_what_would_break_a_write():
    def schema(*fields):
        return StructType(list(fields))

    declared = schema(
        StructField("a", LongType(), False),
        StructField("b", ArrayType(IntegerType(), True), True),
    )
    # Extra nullable columns and a laxer table are fine: writes of `declared` succeed.
    laxer = schema(
        StructField("a", LongType(), True),
        StructField("b", ArrayType(IntegerType(), True), True),
        StructField("extra", StringType(), True),
    )
    assert schema_differences(declared, laxer) == []
    stricter = schema(
        StructField("a", LongType(), False),
        StructField("b", ArrayType(IntegerType(), False), True),
        StructField("required", StringType(), False),
    )
    assert schema_differences(declared, stricter) == [
        "b: declared with nullable nested values, NOT NULL in the table",
        "required: NOT NULL in the table, not declared",
    ]
    nullable_b = schema(StructField("b", ArrayType(IntegerType(), True), False))
    assert schema_differences(schema(declared["b"]), nullable_b) == [
        "b: declared nullable, NOT NULL in the table"
    ]


def test_a_spec_whose_keys_or_partitions_are_not_columns_is_refused():
    with pytest.raises(ValueError, match=r"table t: \['nope'\] are not columns"):
        DeltaTableSpec("t", TOTALS.schema, "d", keys=("nope",))


# --- append_once ----------------------------------------------------------------------------


def test_a_replayed_append_changes_nothing_and_the_next_batch_writes(spark, tmp_path):
    path = str(tmp_path / "totals")
    ensure(spark, TOTALS, path)
    first = rows(spark, ("a", 1, 10, None), ("b", 1, 5, "x"))
    append_once(first, TOTALS, path, "query-1", 0)
    before, before_version = snapshot(spark, path), version(spark, path)

    append_once(first, TOTALS, path, "query-1", 0)  # the same batch after a crash

    assert_df_equality(snapshot(spark, path), before, ignore_row_order=True)
    assert version(spark, path) == before_version == 1

    append_once(rows(spark, ("c", 2, 1, None)), TOTALS, path, "query-1", 1)
    append_once(rows(spark, ("d", 2, 1, None)), TOTALS, path, "query-2", 0)  # another query

    expected = rows(
        spark, ("a", 1, 10, None), ("b", 1, 5, "x"), ("c", 2, 1, None), ("d", 2, 1, None)
    )
    assert_df_equality(snapshot(spark, path), expected, ignore_row_order=True)
    assert version(spark, path) == 3


def test_append_takes_columns_in_any_order_and_refuses_others_naming_them(spark, tmp_path):
    path = str(tmp_path / "totals")
    ensure(spark, TOTALS, path)
    shuffled = rows(spark, ("a", 1, 10, "n")).select("note", "total", "key", "day")
    append_once(shuffled, TOTALS, path, "q", 0)
    assert_df_equality(snapshot(spark, path), rows(spark, ("a", 1, 10, "n")))

    wrong = rows(spark, ("a", 1, 10, "n")).drop("note").withColumn("total", F.lit("x"))
    with pytest.raises(
        ValueError,
        match=r"table totals do not match it: missing note, total is string, declared bigint",
    ):
        append_once(wrong, TOTALS, path, "q", 1)
    assert version(spark, path) == 1


# --- merge_once -----------------------------------------------------------------------------

INSERT = {"key": "s.key", "day": "s.day", "total": "s.total", "note": "s.note"}


def add():
    """Totals add up; a note stays unless the batch has one (SQL text and a Column)."""
    return {"total": "t.total + s.total", "note": F.coalesce(F.col("s.note"), F.col("t.note"))}


def merge(source, path, app_id, batch_id):
    merge_once(source, TOTALS, path, app_id, batch_id, update=add(), insert=INSERT)


def test_a_replayed_merge_changes_nothing_and_the_next_batch_merges(spark, tmp_path):
    path = str(tmp_path / "totals")
    ensure(spark, TOTALS, path)
    merge(rows(spark, ("a", 1, 10, None), ("b", 1, 5, "x")), path, "query-1", 0)
    batch = rows(spark, ("a", 1, 1, "y"), ("c", 1, 7, None))
    merge(batch, path, "query-1", 1)
    before, before_version = snapshot(spark, path), version(spark, path)

    merge(batch, path, "query-1", 1)  # the same batch after a crash: would add 1 to a again
    merge(batch, path, "query-1", 0)  # an older one

    assert_df_equality(snapshot(spark, path), before, ignore_row_order=True)
    assert version(spark, path) == before_version == 2
    expected = rows(spark, ("a", 1, 11, "y"), ("b", 1, 5, "x"), ("c", 1, 7, None))
    assert_df_equality(before, expected, ignore_row_order=True)

    merge(rows(spark, ("a", 1, 100, None)), path, "query-1", 2)
    assert snapshot(spark, path).where("key = 'a'").first()["total"] == 111
    # The marker is the MERGE's alone: the session confs are as they were.
    assert spark.conf.get(TXN_APP_ID_CONF, None) is None
    assert spark.conf.get(TXN_VERSION_CONF, None) is None


def test_merge_refuses_columns_the_table_does_not_declare(spark, tmp_path):
    path = str(tmp_path / "totals")
    ensure(spark, TOTALS, path)
    with pytest.raises(ValueError, match=r"table totals: MERGE sets \['nope'\]"):
        merge_once(rows(spark), TOTALS, path, "q", 0, update={"nope": "s.total"}, insert=INSERT)
    no_keys = DeltaTableSpec("plain", TOTALS.schema, "d")
    with pytest.raises(ValueError, match="table plain declares no keys"):
        merge_once(rows(spark), no_keys, path, "q", 0, update=add(), insert=INSERT)


# --- kll_quantiles --------------------------------------------------------------------------

N = 100_000
RANKS = {"p01": 0.01, "p50": 0.5, "p90": 0.9, "p99": 0.99, "p999": 0.999}


@pytest.mark.parametrize(
    ("kind", "aggregate", "value_type"),
    [
        ("double", F.kll_sketch_agg_double, DoubleType()),
        ("bigint", F.kll_sketch_agg_bigint, LongType()),
    ],
)
def test_kll_quantiles_are_within_the_sketch_rank_error_of_the_exact_ones(
    spark, kind, aggregate, value_type
):
    """Values 1..N, so the exact rank of a value v is v / N. KLL is approximate: the rank of
    each answer is within DataSketches' normalized rank error for the sketch's k (Spark's
    default, 200) of the rank asked for, with 99 % confidence per query."""
    values = spark.range(1, N + 1, 1, 2).select(F.col("id").cast(value_type).alias("v"))
    sketches = values.agg(aggregate("v").alias("sketch"))
    if kind == "double":  # Python's datasketches reads only the doubles sketch
        sketch = datasketches.kll_doubles_sketch.deserialize(bytes(sketches.first()["sketch"]))
        # The sketch has compacted: this checks the approximation, not a copy of the values.
        assert (sketch.k, sketch.n, sketch.is_estimation_mode()) == (200, N, True)
    got = sketches.select(*(c.alias(n) for n, c in kll_quantiles("sketch", kind, RANKS).items()))
    assert [f.dataType for f in got.schema.fields] == [value_type] * len(RANKS)
    answers = got.first().asDict()
    epsilon = datasketches.kll_doubles_sketch.get_normalized_rank_error(200, False)
    for name, rank in RANKS.items():
        assert abs(answers[name] / N - rank) <= epsilon, (name, answers[name])


def test_kll_quantiles_of_a_null_sketch_are_null_and_ranks_are_checked(spark):
    frame = spark.createDataFrame([(None,)], StructType([StructField("s", BinaryType(), True)]))
    got = frame.select(*(c.alias(n) for n, c in kll_quantiles("s", "double", RANKS).items()))
    assert set(got.first().asDict().values()) == {None}
    with pytest.raises(ValueError, match="must be in"):
        kll_quantiles("s", "double", {"p100": 100})
    with pytest.raises(ValueError, match="not one of"):
        kll_quantiles("s", "float", {"p50": 0.5})  # type: ignore[arg-type]
