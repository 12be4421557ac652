"""Many writers, one Delta table (jobs/runtime/delta.py): creation at once, MERGEs that never
conflict across writers, and the bounded retry, with its idempotent marker, of a MERGE that
another writer did overtake.

"Overtaken" is made to happen, not hoped for: the first writer's MERGE source passes a gate
(a Python UDF that waits for a file) after Delta has read the table's snapshot and before it
commits; the test commits the second writer's MERGE meanwhile, from another session, then
opens the gate.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import pytest
from delta.tables import DeltaTable
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

from jobs.runtime.delta import DeltaTableSpec, append_once, ensure, merge_once
from jobs.runtime.delta_retries import conflicting

pytestmark = pytest.mark.spark

_COLUMNS = [
    StructField("job_group_id", StringType(), False),
    StructField("key", StringType(), False),
    StructField("total", LongType(), False),
]
SHARED = DeltaTableSpec(
    name="shared",
    description="test table: many writers' totals, partitioned by writer",
    schema=StructType(_COLUMNS),
    partition_by=("job_group_id",),
    keys=("key",),
    writer_column="job_group_id",
)
# The same rows in one unpartitioned table, the writer a plain key: what every MERGEd table
# of the project was before the writer column (any two MERGEs conflict).
UNPARTITIONED = DeltaTableSpec(
    name="unpartitioned",
    description="test table: many writers' totals in one partition",
    schema=StructType(_COLUMNS),
    keys=("job_group_id", "key"),
)
ADD = {"total": "t.total + s.total"}
GATE_SECONDS = 120


def _merge(spark, table, path, writer, key, amount, batch_id, *, gate: Path | None = None):
    source = spark.createDataFrame([(writer, key, amount)], StructType(_COLUMNS)).coalesce(1)
    if gate is not None:
        source = source.withColumn("total", _gated(gate)(F.col("total")))
    if table.writer_column:
        source = source.drop(table.writer_column)
    merge_once(
        source,
        table,
        path,
        f"app-{writer}",
        batch_id,
        update=ADD,
        insert={c: f"s.{c}" for c in ("key", "total", *table.keys)},
        writer=writer if table.writer_column else "",
    )


def _gated(gate: Path):
    """A UDF that returns its value once `gate`/open exists, after creating `gate`/reached:
    it runs while Delta's MERGE reads its source, after the snapshot it will commit on."""
    reached, opened = str(gate / "reached"), str(gate / "open")

    def wait(value):
        import os
        import time

        open(reached, "w").close()
        deadline = time.monotonic() + GATE_SECONDS
        while not os.path.exists(opened) and time.monotonic() < deadline:
            time.sleep(0.05)
        return value

    return F.udf(wait, LongType())


def _await(path: Path, what: str) -> None:
    deadline = time.monotonic() + GATE_SECONDS
    while not path.exists():
        assert time.monotonic() < deadline, f"{what}: {path} never appeared"
        time.sleep(0.05)


def _overtaken(spark, tmp_path, table) -> tuple[dict, int]:
    """Writer a's MERGE overtaken by writer b's; (the table's totals, the retries logged)."""
    path = str(tmp_path / table.name)
    ensure(spark, table, path)
    for writer in ("a", "b"):  # one file per writer to read and rewrite
        seed = spark.createDataFrame([(writer, "k", 1)], StructType(_COLUMNS)).coalesce(1)
        if table.writer_column:
            seed = seed.drop(table.writer_column)
        append_once(
            seed, table, path, f"seed-{writer}", 0, writer=writer if table.writer_column else ""
        )
    gate = tmp_path / "gate"
    gate.mkdir()
    first, second = spark.newSession(), spark.newSession()
    failure: list[BaseException] = []

    def overtaken_writer() -> None:
        try:
            _merge(first, table, path, "a", "k", 10, 0, gate=gate)
        except BaseException as error:  # handed to the test's thread
            failure.append(error)

    thread = threading.Thread(target=overtaken_writer)
    thread.start()
    try:
        _await(gate / "reached", "writer a's MERGE")
        _merge(second, table, path, "b", "k", 100, 0)
    finally:
        (gate / "open").touch()
        thread.join(GATE_SECONDS)
    assert not failure, failure
    totals = {r.job_group_id: r.total for r in spark.read.format("delta").load(path).collect()}
    return totals, len(DeltaTable.forPath(spark, path).history().collect())


def test_writers_of_one_shared_table_never_conflict(spark, tmp_path, caplog):
    """The writer column: b's commit lands in b's partition, which a's MERGE never read."""
    with caplog.at_level(logging.WARNING, logger="uatu.delta"):
        totals, _ = _overtaken(spark, tmp_path, SHARED)
    assert totals == {"a": 11, "b": 101}
    assert [r.message for r in caplog.records if "met another writer" in r.message] == []


def test_a_merge_another_writer_overtook_is_retried_and_counted_once(spark, tmp_path, caplog):
    """Without the writer column every MERGE reads every file: a's commit fails on b's, and
    the retry, with the same marker, adds a's 10 once."""
    with caplog.at_level(logging.WARNING, logger="uatu.delta"):
        totals, _ = _overtaken(spark, tmp_path, UNPARTITIONED)
    assert totals == {"a": 11, "b": 101}
    retries = [r.message for r in caplog.records if "met another writer" in r.message]
    assert len(retries) == 1 and "Concurrent" in retries[0], retries


def test_writers_creating_one_table_at_once_all_succeed(spark, tmp_path):
    """Delta commits one creation; the others find the table there and check it."""
    path = str(tmp_path / "created-at-once")
    start = threading.Barrier(4)
    failures: list[BaseException] = []

    def create(session) -> None:
        start.wait()
        try:
            ensure(session, SHARED, path)
        except BaseException as error:
            failures.append(error)

    threads = [threading.Thread(target=create, args=(spark.newSession(),)) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    detail = DeltaTable.forPath(spark, path).detail().first()
    assert detail["partitionColumns"] == ["job_group_id"]
    assert spark.read.format("delta").load(path).schema == SHARED.schema


@pytest.mark.parametrize(
    ("error", "retried"),
    [
        # Seen from a writer whose session found no table while another created it: the
        # error class comes in a generic Python class, not an AnalysisException.
        (Exception("[DELTA_TABLE_NOT_FOUND] Delta table `/w/audit_counts` doesn't exist."), True),
        (Exception("[DELTA_CREATE_TABLE_WITH_NON_EMPTY_LOCATION] Cannot create table"), True),
        (Exception("[DELTA_TABLE_ALREADY_EXISTS] Table already exists."), True),
        (Exception("[DELTA_MERGE_INCOMPATIBLE_DATATYPE] Failed to merge"), False),
        (ValueError("table audit_counts: MERGE sets ['x']"), False),
    ],
)
def test_what_counts_as_meeting_another_writer(error, retried):
    assert conflicting(error) is retried
