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

Many writers, one table: any number of JobGroups, queries and applications share a warehouse.
* Creation: `ensure` takes a concurrent creation of the same table (Delta fails all but one
  writer of commit 0) as the table existing, and checks it as it would any existing table.
* Conflicts: a MERGEd table declares a `writer_column` (the JobGroup id), partitions by it,
  and every MERGE names its writer's partition as a literal in its condition, so Delta's
  conflict detection sees each writer read and rewrite only its own files. Appends never
  read, so they never conflict. One query may write for several writers at once (an audit
  pack, jobs/audit/packs.py): its rows carry their writer and its condition lists them all.
* What still can conflict (a writer against table maintenance, which compacts files every
  writer reads) is retried, a bounded number of times, with the same idempotent-write
  marker: a write that did commit is skipped by it, one that did not commits once.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from delta.tables import DeltaTable
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from core.errors import TableSchemaMismatch
from core.spec import OutputSpec
from jobs.runtime import ensured_tables
from jobs.runtime.checkpoint_files import HadoopFiles
from jobs.runtime.delta_log import (
    current_metadata,
    log_dir,
    log_files,
    marker_in_newest_commits,
    only_commit_zero,
)
from jobs.runtime.delta_retries import with_retries
from jobs.runtime.delta_schema import nullable, schema_differences, with_declared_columns
from jobs.runtime.py4j import java_class
from jobs.runtime.session import session_conf

log = logging.getLogger("uatu.delta")

KllKind = Literal["double", "bigint"]

# MERGE takes no writer options: Delta reads its idempotency marker from these session confs
# (DeltaCommand.hasBeenExecuted, shared by MERGE, UPDATE, DELETE and writes).
TXN_APP_ID_CONF = "spark.databricks.delta.write.txnAppId"
TXN_VERSION_CONF = "spark.databricks.delta.write.txnVersion"

# A Delta log without a commit that changed this recently may be another writer's creation
# in progress, not the leftover of a killed one: `ensure` waits for its commit that long.
STALE_LOG_SECONDS = 60


@dataclass(frozen=True)
class DeltaTableSpec:
    """A Delta table as a job declares it.

    name: the table's name in docs and errors (its folder is the job's to choose).
    schema: every column, its type and nullability, in order; writes must match it.
    description: one line stored as the table's comment (DESCRIBE DETAIL shows it).
    partition_by: partition columns, applied when the table is created.
    keys: the columns that identify a row of one writer, for `merge_once`; empty for
        append-only tables.
    writer_column: for a table many writers MERGE into, the column that names the writer
        (its rows are the writer's alone); it is the first partition column, and
        `merge_once` and `append_once` fill it in.
    """

    name: str
    schema: StructType
    description: str
    partition_by: tuple[str, ...] = ()
    keys: tuple[str, ...] = ()
    writer_column: str = ""

    def __post_init__(self) -> None:
        named = (*self.partition_by, *self.keys, *([self.writer_column] * bool(self.writer_column)))
        unknown = [c for c in named if c not in self.columns]
        if unknown:
            raise ValueError(f"table {self.name}: {unknown} are not columns of its schema")
        if self.writer_column and self.partition_by[:1] != (self.writer_column,):
            raise ValueError(f"table {self.name}: partition it by {self.writer_column} first")

    @property
    def columns(self) -> list[str]:
        return self.schema.fieldNames()


def ensure(spark: SparkSession, table: DeltaTableSpec, path: str) -> None:
    """Create `table` at `path` with its declared schema, partitioning and description unless
    a Delta table is there already; then make sure the table takes the declared rows.

    Idempotent: on a table that matches, it commits nothing. A table that lacks declared
    columns and differs in nothing else (one an earlier release created) gets them, top-level
    or nested, as nullable columns in one commit. Any other difference that would make the
    job's writes fail (see `schema_differences`) raises TableSchemaMismatch naming the table,
    the path and each differing column, and commits nothing.

    A log without a single commit is another writer's creation in progress, or what a
    process killed while it created the table left: `ensure` waits for its commit until the
    log has not changed for STALE_LOG_SECONDS, then removes it (Delta refuses to create a
    table over it, and it holds no data). Writers that create the same table at once all
    succeed: Delta commits one creation and fails the others, which then find the table and
    check it.

    In a worker application (`ensured_tables.remembering`), a table ensured once is not
    checked again while its log is there, and callers that come at once share one check.
    """

    def ensure_it() -> None:
        with_retries(f"creating {table.name} at {path}", lambda: _ensure_once(spark, table, path))

    remembered = ensured_tables.current()
    if remembered is None:
        ensure_it()
        return
    key = (path, table.name, table.schema.json(), table.partition_by)
    remembered.once(key, ensure_it, lambda: bool(log_files(spark, path)))


def _ensure_once(spark: SparkSession, table: DeltaTableSpec, path: str) -> None:
    _await_uncommitted_log(spark, path)
    # A table whose log files say it is as declared takes the declared rows: no Delta
    # snapshot (seconds in a cold JVM, more for a busy table).
    if _as_declared_in_log(spark, table, path):
        return
    builder = (
        DeltaTable.createIfNotExists(spark)
        .location(path)
        .addColumns(table.schema)
        .comment(table.description)
    )
    if table.partition_by:
        builder = builder.partitionedBy(*table.partition_by)
    builder.execute()
    # The table just created, by this call or another writer at once.
    if _as_declared_in_log(spark, table, path):
        return
    # On an existing table the create does nothing, whatever schema it was given: only this
    # check catches one that differs (or that someone else created meanwhile).
    existing = DeltaTable.forPath(spark, path)
    detail = existing.detail().first()
    assert detail is not None  # DESCRIBE DETAIL answers one row
    actual = existing.toDF().schema
    differences = schema_differences(table.schema, actual)
    partitioning = _partitioning_difference(table, detail["partitionColumns"])
    if partitioning:
        raise TableSchemaMismatch(table.name, path, [*differences, partitioning])
    if not differences:
        return
    added = with_declared_columns(actual, table.schema)
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


def _partitioning_difference(table: DeltaTableSpec, actual: list[str]) -> str:
    """A line when the table is partitioned otherwise than declared, which cannot change in
    place (an earlier release's table without the writer column would mix every writer's
    rows); "" when it is as declared."""
    if list(table.partition_by) == list(actual):
        return ""
    return (
        f"partitioned by {list(actual)}, declared {list(table.partition_by)} "
        "(docs/operations.md, 'Shared tables': copy it into a new table)"
    )


def any_table_exists(spark: SparkSession, paths: Iterable[str]) -> bool:
    """Whether a Delta table with at least one commit is at any of `paths`: Hadoop file
    system calls, no Delta code (the first Delta operation of a session costs seconds)."""
    return any(log_files(spark, path) for path in paths)


def _await_uncommitted_log(spark: SparkSession, path: str) -> None:
    """Return once the table's log has a commit or there is no log: a log without one is
    waited for while it changed within STALE_LOG_SECONDS (a creation in progress), then
    removed (a creation cut short)."""
    files = HadoopFiles(spark)
    while log_files(spark, path) == 0:
        idle = time.time() - files.newest_modification_ms(log_dir(path)) / 1000
        if idle >= STALE_LOG_SECONDS:
            _delete_log(spark, path)
            return
        time.sleep(min(1.0, STALE_LOG_SECONDS - idle))


def never_written(spark: SparkSession, path: str) -> bool:
    """Whether the Delta table at `path` is still as `ensure` created it: its log holds commit
    0 only, and that commit adds no data file. Read as files, no Delta code: on a table the
    job has just created, a Delta read to find that it is empty costs seconds in a cold JVM.
    False when in doubt (no log, a checkpoint, a second commit), so a caller that MERGEs
    unless this is True is always right."""
    actions = only_commit_zero(spark, path)
    return actions is not None and not any("add" in action for action in actions)


def holds_rows_of(spark: SparkSession, path: str, column: str, values: Iterable[str]) -> bool:
    """Whether the Delta table at `path` has a row whose `column` (its partition column: the
    read lists no file of another partition) is one of `values`."""
    rows = spark.read.format("delta").load(path).where(F.col(column).isin(sorted(values)))
    return not rows.isEmpty()


def _as_declared_in_log(spark: SparkSession, table: DeltaTableSpec, path: str) -> bool:
    """Whether the table's current metadata, read from its log files
    (`delta_log.current_metadata`), has the declared schema and partitioning; False when
    the files do not tell."""
    metadata = current_metadata(HadoopFiles(spark), path)
    if metadata is None:
        return False
    schema = StructType.fromJson(json.loads(metadata["schemaString"]))
    partitioning = list(metadata.get("partitionColumns") or [])
    return schema == table.schema and partitioning == list(table.partition_by)


def _delete_log(spark: SparkSession, path: str) -> None:
    folder = log_dir(path)
    log.warning("removing %s: a Delta log without a commit (its creation was cut short)", folder)
    HadoopFiles(spark).delete(folder, recursive=True)


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
    rows: DataFrame,
    table: DeltaTableSpec,
    path: str,
    app_id: str,
    batch_id: int,
    *,
    writer: Writer = "",
) -> None:
    """Append `rows` to `table` at `path` unless this (app_id, batch_id) was committed there.

    `rows` has exactly the declared columns (any order) with the declared types, but the
    writer column, which `writer` fills in (required for a table that declares one; with
    several writers, the rows carry it themselves); anything else raises ValueError naming
    the table before Spark runs. Keyed by (app_id = the
    streaming query's id, batch_id): Delta's txnAppId/txnVersion writer options, so a
    replayed batch, or any batch id not above the last one committed for app_id, is a no-op.
    """
    rows = _with_writer(rows, table, writer)
    _check_columns(table, rows.schema)
    write = (
        rows.select(*table.columns)  # the declared order, whatever the order of `rows`
        .write.format("delta")
        .mode("append")
        .option("txnAppId", app_id)
        .option("txnVersion", batch_id)
    )
    with_retries(f"appending batch {batch_id} to {table.name}", lambda: write.save(path))


# Whose rows a write is: one writer (the column is set to it), or several (each row names
# its own, one of them).
Writer = str | Sequence[str]


def _with_writer(rows: DataFrame, table: DeltaTableSpec, writer: Writer) -> DataFrame:
    """`rows` with the table's writer column set to `writer` (as it is without one); for
    several writers, `rows` as they are, which must carry the column."""
    if not table.writer_column:
        if writer:
            raise ValueError(f"table {table.name} has no writer column for {writer!r}")
        return rows
    if not writer:
        raise ValueError(f"table {table.name}: name the writer of its rows")
    if isinstance(writer, str):
        return rows.withColumn(table.writer_column, F.lit(writer))
    if table.writer_column not in rows.columns:
        raise ValueError(
            f"table {table.name}: rows of several writers must carry {table.writer_column}"
        )
    return rows


def _writer_condition(table: DeltaTableSpec, writer: Writer) -> Column:
    """The target-only predicate naming the writers' partitions as literals: Delta reads
    it as the MERGE's read set, which keeps other writers' commits out of its conflicts."""
    column = F.col(f"t.`{table.writer_column}`")
    if isinstance(writer, str):
        return column == F.lit(writer)
    own = column == F.col(f"s.`{table.writer_column}`")
    return column.isin([F.lit(w) for w in sorted(set(writer))]) & own


def written_through(spark: SparkSession, path: str, app_id: str) -> int | None:
    """The newest batch id `app_id` committed to the Delta table at `path` (its
    idempotent-write marker, as `append_once` and `merge_once` record it); None when it
    committed none, or there is no table. Reads the newest commit files first (a marker is
    most often in one of them: a Delta snapshot of a busy table costs seconds to tens of
    seconds on loaded cores), else the table's latest snapshot."""
    if log_files(spark, path) is None:
        return None
    decided, version = marker_in_newest_commits(HadoopFiles(spark), path, app_id)
    if decided:
        return version
    none = java_class(spark, "scala.Option").apply(None)
    delta_log = java_class(spark, "org.apache.spark.sql.delta.DeltaLog").forTable(
        spark._jsparkSession, path
    )
    version = delta_log.update(False, none, none).transactions().get(app_id)
    return int(version.get()) if version.isDefined() else None


# The marker is a setting of the session: one lock per session keeps two threads' MERGEs
# from trading markers, and lets MERGEs of different sessions (`spark.newSession()`, one per
# query that writes concurrently) run at once.
_MERGE_LOCKS: dict[str, threading.Lock] = {}
_MERGE_LOCKS_GUARD = threading.Lock()


def _merge_lock(spark: SparkSession) -> threading.Lock:
    key = str(spark._jsparkSession.sessionUUID())  # type: ignore[union-attr]
    with _MERGE_LOCKS_GUARD:
        return _MERGE_LOCKS.setdefault(key, threading.Lock())


def merge_once(
    source: DataFrame,
    table: DeltaTableSpec,
    path: str,
    app_id: str,
    batch_id: int,
    *,
    update: Mapping[str, str | Column],
    insert: Mapping[str, str | Column],
    writer: Writer = "",
) -> None:
    """MERGE `source` into `table` at `path` on the table's keys, unless this (app_id,
    batch_id) was committed there.

    A table with a writer column takes the MERGE into `writer`'s rows only: the column is
    set on every inserted row, and the condition names the writer's partition as a literal,
    so MERGEs of other writers never conflict with this one. With several writers, a source
    row matches only its own writer's rows.

    The table is aliased `t` and the source `s`: a row of `s` whose keys equal a row of `t`
    sets `update` (column -> SQL expression or Column) on it, any other row of `s` inserts
    `insert`. Every key of both mappings must be a declared column (ValueError otherwise).

    Exactly-once like `append_once`: MERGE has no txnAppId option, so the same marker goes
    through Delta's session confs for the duration of the MERGE, which then commits the
    `txn` action with its changes, or skips them all when (app_id, batch_id) is recorded.
    Other Delta writes of the same session meanwhile must pass their own marker, as
    `append_once` does; the confs' previous values are restored afterwards. MERGEs of one
    session run one at a time; of different sessions, at once.
    """
    if not table.keys:
        raise ValueError(f"table {table.name} declares no keys to MERGE on")
    unknown = sorted((set(update) | set(insert)) - set(table.columns))
    if unknown:
        raise ValueError(f"table {table.name}: MERGE sets {unknown}, which are not its columns")
    source = _with_writer(source, table, writer)
    condition = F.expr(" AND ".join(f"t.`{k}` = s.`{k}`" for k in table.keys))
    if table.writer_column:
        condition = _writer_condition(table, writer) & condition
        insert = {**insert, table.writer_column: f"s.`{table.writer_column}`"}
    with_retries(
        f"merging batch {batch_id} into {table.name}",
        lambda: _merge(source, path, app_id, batch_id, condition, update, insert),
    )


def _merge(
    source: DataFrame,
    path: str,
    app_id: str,
    batch_id: int,
    condition: Column,
    update: Mapping[str, str | Column],
    insert: Mapping[str, str | Column],
) -> None:
    spark = source.sparkSession
    txn = {TXN_APP_ID_CONF: app_id, TXN_VERSION_CONF: str(batch_id)}
    with _merge_lock(spark), session_conf(spark, txn):
        (
            DeltaTable.forPath(spark, path)
            .alias("t")
            .merge(source.alias("s"), condition)
            .whenMatchedUpdate(set=dict(update))
            .whenNotMatchedInsert(values=dict(insert))
            .execute()
        )


_GET_QUANTILE = {
    "double": F.kll_sketch_get_quantile_double,
    "bigint": F.kll_sketch_get_quantile_bigint,
}


def kll_doubles_or_null(values: str) -> Column:
    """kll_sketch_agg_double of a group's `values`; null, not an empty sketch, when none of
    them is non-null (an empty sketch fails `kll_quantiles`)."""
    return F.when(F.count(values) > 0, F.kll_sketch_agg_double(values))


def kll_merged_or_null(sketches: str) -> Column:
    """kll_merge_agg_double of a group's double `sketches`; null when all of them are null
    (merging only nulls gives an empty sketch, which fails `kll_quantiles`)."""
    return F.when(F.count(sketches) > 0, F.kll_merge_agg_double(sketches))


def kll_quantiles(
    sketch: Column | str, kind: KllKind, quantiles: Mapping[str, float]
) -> dict[str, Column]:
    """Quantile columns read from a KLL sketch column: {name: quantile at rank} per entry of
    `quantiles` (name -> rank in [0, 1]); for `withColumns`, a select, or a MERGE's mappings.

    `sketch` is a column (or its name) holding sketches of `kind`: "double" sketches
    (kll_sketch_agg_double) answer doubles, "bigint" sketches (kll_sketch_agg_bigint) answer
    bigints. A null sketch gives null quantiles. A non-null sketch must hold at least one
    value, since an empty sketch makes the query fail: aggregate with `kll_doubles_or_null`
    and `kll_merged_or_null`. The answer at rank r is a value of the sketch whose rank
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
        if c in given and nullable(given[c]) != nullable(t)
    ]
    if problems:
        raise ValueError(f"rows for table {table.name} do not match it: {', '.join(problems)}")
