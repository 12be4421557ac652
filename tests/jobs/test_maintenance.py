"""`spark-submit.sh maintain` (jobs/maintenance.py): compaction keeps every row and leaves
one file per partition; VACUUM deletes exactly the files no version needs, never below the
table's retention; bad input is exit 2 with one line, before anything is touched."""

from __future__ import annotations

import pytest
from chispa import assert_df_equality
from pyspark.sql.types import LongType, StringType, StructField, StructType

from jobs import main as job_main
from jobs.maintenance import check_retention, maintain, warehouse_tables
from jobs.runtime.delta import DeltaTableSpec, append_once, ensure

SMALL = DeltaTableSpec(
    name="small",
    description="test table: one small file per batch and writer",
    schema=StructType(
        [
            StructField("job_group_id", StringType(), False),
            StructField("key", StringType(), False),
            StructField("total", LongType(), False),
        ]
    ),
    partition_by=("job_group_id",),
    keys=("key",),
    writer_column="job_group_id",
)
ROWS = "key string, total long"


def _small_files(spark, path: str, batches: int) -> None:
    ensure(spark, SMALL, path)
    for batch in range(batches):
        for writer in ("a", "b"):
            rows = spark.createDataFrame([(f"k{batch}", batch)], ROWS).coalesce(1)
            append_once(rows, SMALL, path, f"app-{writer}", batch, writer=writer)


def _parquet_on_disk(root) -> int:
    """Data files (Delta's log checkpoints are parquet files too)."""
    return sum(1 for f in root.rglob("*.parquet") if "_delta_log" not in f.parts)


@pytest.mark.spark
def test_maintain_compacts_every_partition_and_vacuums_what_no_version_needs(spark, tmp_path):
    path = tmp_path / "warehouse" / "small"
    _small_files(spark, str(path), batches=3)
    spark.sql(
        f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES "
        "('delta.deletedFileRetentionDuration' = 'interval 0 hours')"
    )
    before = spark.read.format("delta").load(str(path)).collect()
    assert _parquet_on_disk(path) == 6  # 3 batches x 2 writers
    listing = "spark.sql.sources.parallelPartitionDiscovery.parallelism"
    session_listing = spark.conf.get(listing)

    with pytest.raises(Exception, match="below"):
        check_retention(spark, [str(path)], -1)
    report = maintain(spark, str(path), optimize=True, vacuum_hours=0)

    assert (report.files_before, report.files_after) == (6, 2)  # one per writer's partition
    assert report.files_vacuumed == 6  # the compacted small files, no longer referenced
    assert spark.conf.get(listing) == session_listing  # VACUUM's settings were for it only
    assert _parquet_on_disk(path) == 2
    after = spark.read.format("delta").load(str(path))
    assert_df_equality(after, spark.createDataFrame(before, after.schema), ignore_row_order=True)
    assert warehouse_tables(spark, str(tmp_path / "warehouse")) == [str(path)]


@pytest.mark.spark
def test_vacuum_below_the_tables_retention_is_refused_before_any_table_is_touched(spark, tmp_path):
    path = tmp_path / "kept"
    _small_files(spark, str(path), batches=1)
    with pytest.raises(Exception, match=r"--vacuum-retention-hours.*below.*168 h"):
        check_retention(spark, [str(path)], 24)


@pytest.mark.parametrize(
    ("argv", "names"),
    [
        (["--table", "/etc/passwd"], "--table /etc/passwd"),
        (["--table", "../outside"], "--table ../outside"),
        (["--no-optimize", "--no-vacuum"], "--no-optimize --no-vacuum"),
        (["--vacuum-retention-hours", "-1"], "--vacuum-retention-hours"),
    ],
)
def test_bad_input_is_exit_2_with_one_line_naming_it(argv, names, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("UATU_WAREHOUSE", str(tmp_path / "warehouse"))
    assert job_main.main(["maintain", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and names in err[0], err
