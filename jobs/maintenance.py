"""`spark-submit.sh maintain`: compact and vacuum the warehouse's Delta tables.

Every micro-batch of every job commits a few small files to each table it writes, so a
warehouse that thousands of topics write into gathers small files fast, and every read (the
tiers audit's, the report's, analysts' SQL) pays for opening them. This command, run from a
scheduler (hourly, say), asks Delta to:

1. OPTIMIZE each table: bin-packing compaction of its small files into large ones, one
   commit; the rows do not change. Jobs may be writing meanwhile: a job's MERGE that meets
   the compaction is retried by the job (`jobs/runtime/delta.with_retries`), and the
   compaction that meets a job's commit is retried here the same way.
2. VACUUM each table: delete the files no version within the retention refers to any more
   (those the compaction and the MERGEs replaced). The retention may not be shorter than
   the table's `delta.deletedFileRetentionDuration` (Delta's default is 7 days): a reader
   or a time-travel query of an older version still needs those files.

Tables: every Delta table directly under the warehouse (conf/uatu.yaml), or those named with
--table, each of which must lie under the warehouse. Bad input is exit 2 with one line;
nothing is touched then.
"""

from __future__ import annotations

import argparse
import logging
import re
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

from delta.tables import DeltaTable
from pyspark.sql import SparkSession

from core.config import Settings, add_conf_dir_argument, load_settings
from core.errors import EXIT_OK, ConfigError, InvalidJobGroup, UatuError
from core.storage import table_location
from jobs.runtime.checkpoint_files import HadoopFiles
from jobs.runtime.delta_retries import with_retries
from jobs.runtime.session import build_session, session_conf

log = logging.getLogger("uatu.maintain")

DEFAULT_RETENTION_HOURS = 168  # Delta's default deletedFileRetentionDuration
_INTERVAL = re.compile(r"interval\s+(\d+)\s+(second|minute|hour|day|week)s?", re.IGNORECASE)
_HOURS_PER = {"second": 1 / 3600, "minute": 1 / 60, "hour": 1, "day": 24, "week": 168}


@dataclass(frozen=True)
class TableReport:
    """What maintenance did to one table."""

    path: str
    files_before: int
    files_after: int
    files_vacuumed: int
    seconds: float

    def __str__(self) -> str:
        return (
            f"{self.path}: {self.files_before} -> {self.files_after} files, "
            f"{self.files_vacuumed} unreferenced files deleted, {self.seconds:.1f} s"
        )


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="spark-submit.sh maintain",
        description="Compact (OPTIMIZE) and VACUUM the warehouse's Delta tables.",
    )
    parser.add_argument(
        "--table",
        action="append",
        default=[],
        metavar="PATH",
        help="a table to maintain (repeatable; under the warehouse). Default: every Delta "
        "table directly under the warehouse",
    )
    parser.add_argument(
        "--vacuum-retention-hours",
        type=float,
        default=DEFAULT_RETENTION_HOURS,
        help="keep files a version of the last this many hours refers to (default "
        f"{DEFAULT_RETENTION_HOURS}; at least the table's delta.deletedFileRetentionDuration)",
    )
    parser.add_argument("--no-optimize", action="store_true", help="vacuum only")
    parser.add_argument("--no-vacuum", action="store_true", help="compact only")
    add_conf_dir_argument(parser)
    return parser.parse_args(argv)


def requested_tables(settings: Settings, tables: Sequence[str]) -> list[str]:
    """The --table locations, each checked to lie under the warehouse (exit 2 otherwise)."""
    located = []
    for requested in tables:
        try:
            located.append(table_location("--table", requested, settings.warehouse, ""))
        except InvalidJobGroup as error:
            raise ConfigError(f"--table {requested}", error.reason) from None
    return located


def warehouse_tables(spark: SparkSession, warehouse: str) -> list[str]:
    """Every Delta table directly under `warehouse` (a folder with a `_delta_log`), sorted."""
    files = HadoopFiles(spark)
    root = warehouse.rstrip("/")
    return sorted(
        f"{root}/{name}" for name in files.names(root) if files.exists(f"{root}/{name}/_delta_log")
    )


def retention_floor_hours(table: DeltaTable) -> float:
    """The table's delta.deletedFileRetentionDuration in hours (Delta's default without one)."""
    detail = table.detail().first()
    assert detail is not None  # DESCRIBE DETAIL answers one row
    value = (detail["properties"] or {}).get("delta.deletedFileRetentionDuration")
    match = _INTERVAL.fullmatch(value.strip()) if value else None
    if match is None:
        return DEFAULT_RETENTION_HOURS
    return int(match.group(1)) * _HOURS_PER[match.group(2).lower()]


def check_retention(spark: SparkSession, paths: Sequence[str], vacuum_hours: float) -> None:
    """ConfigError when `vacuum_hours` is below any table's retention floor."""
    for path in paths:
        floor = retention_floor_hours(DeltaTable.forPath(spark, path))
        if vacuum_hours < floor:
            raise ConfigError(
                "--vacuum-retention-hours",
                f"{vacuum_hours:g} is below {path}'s delta.deletedFileRetentionDuration "
                f"({floor:g} h)",
            )


def maintain(
    spark: SparkSession, path: str, *, optimize: bool, vacuum_hours: float | None
) -> TableReport:
    """OPTIMIZE (when `optimize`) and VACUUM (unless `vacuum_hours` is None) one table, whose
    retention floor `check_retention` has checked."""
    started = time.monotonic()
    table = DeltaTable.forPath(spark, path)
    before = _live_files(table)
    if optimize:
        with_retries(f"compacting {path}", lambda: table.optimize().executeCompaction())
    vacuumed = 0
    if vacuum_hours is not None:
        on_disk = _parquet_files(spark, path)
        with session_conf(spark, vacuum_conf(spark.sparkContext.defaultParallelism)):
            table.vacuum(vacuum_hours)
        vacuumed = on_disk - _parquet_files(spark, path)
    return TableReport(path, before, _live_files(table), vacuumed, time.monotonic() - started)


def vacuum_conf(cores: int) -> dict[str, str]:
    """The session settings VACUUM runs with on an application of `cores` task slots (pure).

    * Delta's own safety check would refuse a retention below its default even where the
      table allows it; the floor was checked before, against the table's setting.
    * VACUUM lists the table's files in `spark.sql.sources.parallelPartitionDiscovery.
      parallelism` tasks, 10,000 by default, however few directories the table has: tens of
      seconds of empty tasks per table on a small application. One task per slot lists a
      table of this warehouse's layout (a few partition directories) as fast.
    """
    return {
        "spark.databricks.delta.retentionDurationCheck.enabled": "false",
        "spark.sql.sources.parallelPartitionDiscovery.parallelism": str(max(cores, 1)),
    }


def _live_files(table: DeltaTable) -> int:
    detail = table.detail().first()
    assert detail is not None
    return int(detail["numFiles"])


def _parquet_files(spark: SparkSession, path: str) -> int:
    """Data files on disk under the table (partition folders one level deep)."""
    files = HadoopFiles(spark)
    count = 0
    for name in files.names(path):
        if name.endswith(".parquet"):
            count += 1
        elif "=" in name:
            count += sum(1 for n in files.names(f"{path}/{name}") if n.endswith(".parquet"))
    return count


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        if args.no_optimize and args.no_vacuum:
            raise ConfigError("--no-optimize --no-vacuum", "nothing left to do")
        if args.vacuum_retention_hours < 0:
            raise ConfigError("--vacuum-retention-hours", "must be >= 0")
        settings = load_settings(args.conf_dir)
        tables = requested_tables(settings, args.table)
        spark = build_session("uatu-maintain")
        tables = tables or warehouse_tables(spark, settings.warehouse)
        if not args.no_vacuum:
            check_retention(spark, tables, args.vacuum_retention_hours)
        log.info("maintaining %d tables under %s", len(tables), settings.warehouse)
        for number, path in enumerate(tables, start=1):
            report = maintain(
                spark,
                path,
                optimize=not args.no_optimize,
                vacuum_hours=None if args.no_vacuum else args.vacuum_retention_hours,
            )
            log.info("table %d of %d: %s", number, len(tables), report)
            print(report, flush=True)
        return EXIT_OK
    except UatuError as error:
        print(f"error: {error}", file=sys.stderr)
        return error.exit_status
