"""The one Delta idiom of every job: a declared table, created once, written exactly once.

A job's `tables.py` declares each of its tables as a `DeltaTableSpec` (the schema is written
there and nowhere else) and says where each one lives (`locations(spec)`). Its `job.py` calls
`ensure_tables` before the query starts and, in its foreachBatch function, `append_once` or
`merge_once` with the streaming query id and the batch id. Percentile columns are read from
the rows' own KLL sketches with `kll_quantiles`.

Exactly-once: every write of batch N commits, atomically with its data, Delta's `txn` action
(appId = an id of the streaming query that is stable across restarts, version = N). Delta
skips a write whose version is not above the one it recorded for that appId in that table,
so a batch replayed after a crash changes nothing in a table that already committed it.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from delta.tables import DeltaTable
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, DataType, MapType, StructField, StructType

from core.errors import TableSchemaMismatch
from core.spec import OutputSpec
from jobs.runtime.checkpoint_files import HadoopFiles

log = logging.getLogger("uatu.delta")

KllKind = Literal["double", "bigint"]

# MERGE takes no writer options: Delta reads its idempotency marker from these session confs
# (DeltaCommand.hasBeenExecuted, shared by MERGE, UPDATE, DELETE and writes).
TXN_APP_ID_CONF = "spark.databricks.delta.write.txnAppId"
TXN_VERSION_CONF = "spark.databricks.delta.write.txnVersion"


@dataclass(frozen=True)
class DeltaTableSpec:
    """A Delta table as a job declares it.

    name: the table's name in docs and errors (its folder is the job's to choose).
    schema: every column, its type and nullability, in order; writes must match it.
    description: one line stored as the table's comment (DESCRIBE DETAIL shows it).
    partition_by: partition columns, applied when the table is created.
    keys: the columns that identify a row, for `merge_once`; empty for append-only tables.
    """

    name: str
    schema: StructType
    description: str
    partition_by: tuple[str, ...] = ()
    keys: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        unknown = [c for c in (*self.partition_by, *self.keys) if c not in self.columns]
        if unknown:
            raise ValueError(f"table {self.name}: {unknown} are not columns of its schema")

    @property
    def columns(self) -> list[str]:
        return self.schema.fieldNames()


def schema_differences(declared: StructType, actual: StructType) -> list[str]:
    """What in an existing table's schema (`actual`) would make writes of `declared` fail.

    One line per column: a declared column the table lacks, a different type, a column that
    is NOT NULL in the table where the declaration allows null (nested fields included), and
    a NOT NULL column of the table that is not declared (a write would leave it null). Extra
    nullable columns and stricter declarations are not differences: writes still succeed.
    Empty when the table takes the declared rows.
    """
    existing = {f.name: f for f in actual.fields}
    lines = []
    for field in declared.fields:
        have = existing.get(field.name)
        if have is None:
            lines.append(
                f"{field.name}: declared {field.dataType.simpleString()}, not in the table"
            )
        elif _nullable(have.dataType) != _nullable(field.dataType):
            lines.append(
                f"{field.name}: declared {field.dataType.simpleString()}, "
                f"the table has {have.dataType.simpleString()}"
            )
        elif field.nullable and not have.nullable:
            lines.append(f"{field.name}: declared nullable, NOT NULL in the table")
        elif not _accepts(have.dataType, field.dataType):
            lines.append(
                f"{field.name}: declared with nullable nested values, NOT NULL in the table"
            )
    declared_names = set(declared.fieldNames())
    lines += [
        f"{f.name}: NOT NULL in the table, not declared"
        for f in actual.fields
        if f.name not in declared_names and not f.nullable
    ]
    return lines


def ensure(spark: SparkSession, table: DeltaTableSpec, path: str) -> None:
    """Create `table` at `path` with its declared schema, partitioning and description unless
    a Delta table is there already; then make sure the table takes the declared rows.

    Idempotent: on a table that matches, it commits nothing. A table that lacks declared
    columns and differs in nothing else (one an earlier release created) gets them, top-level
    or nested, as nullable columns in one commit. Any other difference that would make the
    job's writes fail (see `schema_differences`) raises TableSchemaMismatch naming the table,
    the path and each differing column, and commits nothing.

    A log without a single commit (a process killed while it created the table) is removed
    first: Delta refuses to create a table over it, and it holds no data.
    """
    if _log_commits(spark, path) == 0:
        _delete_log(spark, path)
    builder = (
        DeltaTable.createIfNotExists(spark)
        .location(path)
        .addColumns(table.schema)
        .comment(table.description)
    )
    if table.partition_by:
        builder = builder.partitionedBy(*table.partition_by)
    builder.execute()
    # A table whose only commit is its creation with the declared schema takes the declared
    # rows, whoever created it: seen in the log file, without the Delta read below (a snapshot
    # of the new table, a second or more in a cold JVM).
    if _schema_at_creation(spark, path) == table.schema:
        return
    # On an existing table the create does nothing, whatever schema it was given: only this
    # check catches one that differs (or that someone else created meanwhile).
    actual = DeltaTable.forPath(spark, path).toDF().schema
    differences = schema_differences(table.schema, actual)
    if not differences:
        return
    added = _with_declared_columns(actual, table.schema)
    assert isinstance(added, StructType)  # a struct with a struct's fields added
    if schema_differences(table.schema, added):  # not only missing columns: refuse, as is
        raise TableSchemaMismatch(table.name, path, differences)
    # An empty append with mergeSchema is Delta's one operation that adds nested fields
    # (inside arrays too) as well as top-level columns, in a single metadata-only commit.
    (
        spark.createDataFrame([], table.schema)
        .write.format("delta")
        .mode("append")
        .option("mergeSchema", "true")
        .save(path)
    )
    differences = schema_differences(table.schema, DeltaTable.forPath(spark, path).toDF().schema)
    if differences:
        raise TableSchemaMismatch(table.name, path, differences)


def any_table_exists(spark: SparkSession, paths: Iterable[str]) -> bool:
    """Whether a Delta table with at least one commit is at any of `paths`: Hadoop file
    system calls, no Delta code (the first Delta operation of a session costs seconds)."""
    return any(_log_commits(spark, path) for path in paths)


def _log_dir(path: str) -> str:
    return path.rstrip("/") + "/_delta_log"


def _log_commits(spark: SparkSession, path: str) -> int | None:
    """None: no Delta log at `path`; else how many commit and checkpoint files it has."""
    files = HadoopFiles(spark)
    if not files.exists(_log_dir(path)):
        return None
    names = files.names(_log_dir(path))
    return sum(1 for name in names if name.endswith((".json", ".parquet")))


def never_written(spark: SparkSession, path: str) -> bool:
    """Whether the Delta table at `path` is still as `ensure` created it: its log holds commit
    0 only, and that commit adds no data file. Read as files, no Delta code: on a table the
    job has just created, a Delta read to find that it is empty costs seconds in a cold JVM.
    False when in doubt (no log, a checkpoint, a second commit), so a caller that MERGEs
    unless this is True is always right."""
    actions = _only_commit_zero(spark, path)
    return actions is not None and not any("add" in action for action in actions)


def _schema_at_creation(spark: SparkSession, path: str) -> StructType | None:
    """The schema commit 0 of the table at `path` recorded, if its log holds commit 0 only
    (read as a file, as `never_written`); None otherwise."""
    for action in _only_commit_zero(spark, path) or ():
        if "metaData" in action:
            return StructType.fromJson(json.loads(action["metaData"]["schemaString"]))
    return None


def _only_commit_zero(spark: SparkSession, path: str) -> list[dict] | None:
    """The actions of commit 0 of the Delta log at `path` when it is the log's only commit
    or checkpoint file; None when there is no log or more than that commit."""
    files = HadoopFiles(spark)
    log_dir = _log_dir(path)
    names = set(files.names(log_dir))
    logged = {name for name in names if name.endswith((".json", ".parquet"))}
    first = f"{0:020d}.json"
    if logged != {first}:
        return None
    text = files.read_text(f"{log_dir}/{first}")
    if text is None:
        return None
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _delete_log(spark: SparkSession, path: str) -> None:
    log_dir = _log_dir(path)
    log.warning("removing %s: a Delta log without a commit (its creation was cut short)", log_dir)
    HadoopFiles(spark).delete(log_dir, recursive=True)


def located(
    tables: Iterable[DeltaTableSpec], output: OutputSpec
) -> list[tuple[DeltaTableSpec, str]]:
    """Each of `tables` that the job's OutputSpec places, with its location (by table name):
    the one way from a declared schema to where it lives."""
    return [(table, output.tables[table.name]) for table in tables if table.name in output.tables]


def ensure_tables(spark: SparkSession, located: Iterable[tuple[DeltaTableSpec, str]]) -> None:
    """`ensure` every (table, path) of a job, in order: what a job does before its query."""
    for table, path in located:
        ensure(spark, table, path)


def append_once(
    rows: DataFrame, table: DeltaTableSpec, path: str, app_id: str, batch_id: int
) -> None:
    """Append `rows` to `table` at `path` unless this (app_id, batch_id) was committed there.

    `rows` has exactly the declared columns (any order) with the declared types; anything
    else raises ValueError naming the table before Spark runs. Keyed by (app_id = the
    streaming query's id, batch_id): Delta's txnAppId/txnVersion writer options, so a
    replayed batch, or any batch id not above the last one committed for app_id, is a no-op.
    """
    _check_columns(table, rows.schema)
    (
        rows.select(*table.columns)  # the declared order, whatever the order of `rows`
        .write.format("delta")
        .mode("append")
        .option("txnAppId", app_id)
        .option("txnVersion", batch_id)
        .save(path)
    )


# The marker is session-wide; a lock keeps two threads' MERGEs from trading markers.
_MERGE_LOCK = threading.Lock()


def merge_once(
    source: DataFrame,
    table: DeltaTableSpec,
    path: str,
    app_id: str,
    batch_id: int,
    *,
    update: Mapping[str, str | Column],
    insert: Mapping[str, str | Column],
) -> None:
    """MERGE `source` into `table` at `path` on the table's keys, unless this (app_id,
    batch_id) was committed there.

    The table is aliased `t` and the source `s`: a row of `s` whose keys equal a row of `t`
    sets `update` (column -> SQL expression or Column) on it, any other row of `s` inserts
    `insert`. Every key of both mappings must be a declared column (ValueError otherwise).

    Exactly-once like `append_once`: MERGE has no txnAppId option, so the same marker goes
    through Delta's session confs for the duration of the MERGE, which then commits the
    `txn` action with its changes, or skips them all when (app_id, batch_id) is recorded.
    Other Delta writes of the same session meanwhile must pass their own marker, as
    `append_once` does; the confs' previous values are restored afterwards.
    """
    if not table.keys:
        raise ValueError(f"table {table.name} declares no keys to MERGE on")
    unknown = sorted((set(update) | set(insert)) - set(table.columns))
    if unknown:
        raise ValueError(f"table {table.name}: MERGE sets {unknown}, which are not its columns")
    condition = " AND ".join(f"t.`{k}` = s.`{k}`" for k in table.keys)
    spark = source.sparkSession
    with _MERGE_LOCK:
        previous = {
            conf: spark.conf.get(conf, None) for conf in (TXN_APP_ID_CONF, TXN_VERSION_CONF)
        }
        spark.conf.set(TXN_APP_ID_CONF, app_id)
        spark.conf.set(TXN_VERSION_CONF, str(batch_id))
        try:
            (
                DeltaTable.forPath(spark, path)
                .alias("t")
                .merge(source.alias("s"), condition)
                .whenMatchedUpdate(set=dict(update))
                .whenNotMatchedInsert(values=dict(insert))
                .execute()
            )
        finally:
            for conf, value in previous.items():
                if value is None:
                    spark.conf.unset(conf)
                else:
                    spark.conf.set(conf, value)


_GET_QUANTILE = {
    "double": F.kll_sketch_get_quantile_double,
    "bigint": F.kll_sketch_get_quantile_bigint,
}


def kll_quantiles(
    sketch: Column | str, kind: KllKind, quantiles: Mapping[str, float]
) -> dict[str, Column]:
    """Quantile columns read from a KLL sketch column: {name: quantile at rank} per entry of
    `quantiles` (name -> rank in [0, 1]); for `withColumns`, a select, or a MERGE's mappings.

    `sketch` is a column (or its name) holding sketches of `kind`: "double" sketches
    (kll_sketch_agg_double) answer doubles, "bigint" sketches (kll_sketch_agg_bigint) answer
    bigints. A null sketch gives null quantiles. A non-null sketch must hold at least one
    value: aggregate as `F.when(F.count(c) > 0, F.kll_sketch_agg_double(c))`, since an empty
    sketch makes the query fail. The answer at rank r is a value of the sketch whose rank
    among all values the sketch saw is within the sketch's normalized rank error of r (a
    function of its k, Spark's default k being 200; DataSketches states it at 99 %
    confidence).
    """
    if kind not in _GET_QUANTILE:
        raise ValueError(f"KLL sketch kind {kind!r} is not one of {sorted(_GET_QUANTILE)}")
    bad = {name: rank for name, rank in quantiles.items() if not 0.0 <= rank <= 1.0}
    if bad:
        raise ValueError(f"quantile ranks must be in [0, 1]: {bad}")
    column = F.col(sketch) if isinstance(sketch, str) else sketch
    get = _GET_QUANTILE[kind]
    return {
        name: F.when(column.isNotNull(), get(column, F.lit(rank)))
        for name, rank in quantiles.items()
    }


def _check_columns(table: DeltaTableSpec, rows: StructType) -> None:
    """ValueError naming the table and the columns unless `rows` has the declared columns
    with the declared types (nullability aside: Delta checks NOT NULL on the values)."""
    declared = {f.name: f.dataType for f in table.schema.fields}
    given = {f.name: f.dataType for f in rows.fields}
    problems = [f"missing {c}" for c in declared if c not in given]
    problems += [f"unexpected {c}" for c in given if c not in declared]
    problems += [
        f"{c} is {given[c].simpleString()}, declared {t.simpleString()}"
        for c, t in declared.items()
        if c in given and _nullable(given[c]) != _nullable(t)
    ]
    if problems:
        raise ValueError(f"rows for table {table.name} do not match it: {', '.join(problems)}")


def _nullable(kind: DataType) -> DataType:
    """`kind` with every nested field, element and value nullable: its shape alone."""
    if isinstance(kind, StructType):
        return StructType([StructField(f.name, _nullable(f.dataType), True) for f in kind.fields])
    if isinstance(kind, ArrayType):
        return ArrayType(_nullable(kind.elementType), True)
    if isinstance(kind, MapType):
        return MapType(_nullable(kind.keyType), _nullable(kind.valueType), True)
    return kind


def _with_declared_columns(actual: DataType, declared: DataType) -> DataType:
    """`actual` plus, at every depth, the struct fields `declared` has and `actual` lacks
    (nullable): what adding the missing columns would make of the table's schema."""
    if isinstance(actual, StructType) and isinstance(declared, StructType):
        wanted = {f.name: f for f in declared.fields}
        fields = [
            StructField(
                f.name,
                _with_declared_columns(f.dataType, wanted[f.name].dataType)
                if f.name in wanted
                else f.dataType,
                f.nullable,
                f.metadata,
            )
            for f in actual.fields
        ]
        have = set(actual.fieldNames())
        fields += [
            StructField(f.name, f.dataType, True) for f in declared.fields if f.name not in have
        ]
        return StructType(fields)
    if isinstance(actual, ArrayType) and isinstance(declared, ArrayType):
        element = _with_declared_columns(actual.elementType, declared.elementType)
        return ArrayType(element, actual.containsNull)
    if isinstance(actual, MapType) and isinstance(declared, MapType):
        value = _with_declared_columns(actual.valueType, declared.valueType)
        return MapType(actual.keyType, value, actual.valueContainsNull)
    return actual


def _accepts(target: DataType, source: DataType) -> bool:
    """Whether values of `source` fit a column of `target` of the same shape: wherever
    `source` allows null (nested fields, elements, map values), `target` does too."""
    if isinstance(target, StructType) and isinstance(source, StructType):
        fields = {f.name: f for f in target.fields}
        return all(
            (fields[f.name].nullable or not f.nullable)
            and _accepts(fields[f.name].dataType, f.dataType)
            for f in source.fields
        )
    if isinstance(target, ArrayType) and isinstance(source, ArrayType):
        return (target.containsNull or not source.containsNull) and _accepts(
            target.elementType, source.elementType
        )
    if isinstance(target, MapType) and isinstance(source, MapType):
        return (target.valueContainsNull or not source.valueContainsNull) and _accepts(
            target.valueType, source.valueType
        )
    return True
