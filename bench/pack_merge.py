"""An audit pack's counts write alone: the MERGE of a pack of --groups groups into
`audit_counts` against one group's, on an otherwise idle machine.

Why: under the worker-pool bench (bench/fleet_pool.py) a pack's MERGE takes tens of seconds
on the loaded cores; this tells what the same write costs without that load, and how its
cost grows with the pack's size.

In one local[2] session (testing's small one, --driver-memory), two fresh `audit_counts`
tables: one written by a pack of --groups groups (one topic of 2 partitions each, every
group's rows routed to its own partition, as a pack's are: `jobs.audit.tables.routed`), one by
a single group. Each batch carries 60 records per topic (the fleet bench's 2 records/s over a
30 s trigger), in 60 s windows, two batches per window, as partials the audit's
`window_partials` computes. Batch 0 is the append a pack's first batch makes
(`insert_counts`); every later batch is the MERGE (`merge_counts`) of the job, with its
idempotent-write marker. The two tables are written in alternating order each batch
(pack first on even batches), so a trend in the machine's load falls on both.

Printed and saved (docs/benchmarks/pack-merge-<UTC>-<commit>.json): each batch's seconds for
both, the median MERGE of batches 2 and on (batch 1 is each table's first MERGE), and the
ratio of the pack's median to --groups times one group's: below 1, a pack writes its groups
for less than they would cost alone.

    PYTHONPATH=$PWD:$PWD/build/gen .venv/bin/python -m bench.pack_merge [--groups 75]
        [--batches 8]
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from bench._common import (
    bench_parser,
    parse_args,
    say,
    table_session,
    work_dir,
    write_result,
)

BASE_MS = 1_800_000_000_000  # the first window's start: any fixed epoch
RECORDS_PER_TOPIC = 60
PARTITIONS = 2


def partials(spark: SparkSession, topics: int, batch: int) -> DataFrame:
    """One batch's partials for `topics` topics (`t000`, ...): RECORDS_PER_TOPIC records
    each over PARTITIONS partitions, all in the window of batch // 2, as the fold's SQL path
    computes them."""
    from jobs.audit.transforms import window_partials

    start = BASE_MS + (batch // 2) * 60_000
    records = spark.range(topics * RECORDS_PER_TOPIC).withColumns(
        {
            "cluster": F.lit("local"),
            "topic": F.format_string("t%03d", (F.col("id") % topics).cast("int")),
            "partition": ((F.col("id") / topics).cast("long") % PARTITIONS).cast("int"),
            "audit_type": F.lit("AUDIT_TYPE_APPROX_UNIQ"),
            "audit_interval_seconds": F.lit(60),
            "window_start": F.timestamp_millis(F.lit(start)),
            "window_end_ms": F.lit(start + 60_000),
            "bytes": F.lit(65).cast("long"),
            "event_ms": F.lit(start + 1_000),
            "is_late": F.lit(False),
            "dedupe_key": F.col("id") + batch * 1_000_000,
            "latency_ms": F.lit(5.0),
            "audit_ts": F.timestamp_millis(F.lit(start + 2_000)),
        }
    )
    return window_partials(records, 12).localCheckpoint()


def write_batch(spark: SparkSession, path: str, topics: int, batch: int) -> float:
    """Seconds to write batch `batch` of `topics` groups into the table at `path` (a pack's
    routes when there are several)."""
    from jobs.audit import tables

    rows = partials(spark, topics, batch)
    routes = tuple((f"t{i:03d}", f"g{i:03d}") for i in range(topics)) if topics > 1 else ()
    group = "pack" if routes else "g000"
    started = time.monotonic()
    write = tables.insert_counts if batch == 0 else tables.merge_counts
    write(rows, path, "bench", batch, group, routes)
    return time.monotonic() - started


def run(args, workdir: Path) -> dict[str, Any]:
    from jobs.audit import tables
    from jobs.runtime.delta import ensure

    spark = table_session("bench-pack-merge", workdir, args.driver_memory)
    paths = {
        "pack": str(workdir / "pack" / "audit_counts"),
        "one": str(workdir / "one" / "audit_counts"),
    }
    for path in paths.values():
        ensure(spark, tables.AUDIT_COUNTS, path)
    seconds: dict[str, list[float]] = {"pack": [], "one": []}
    for batch in range(args.batches):
        order = ("pack", "one") if batch % 2 == 0 else ("one", "pack")
        for which in order:
            topics = args.groups if which == "pack" else 1
            seconds[which].append(write_batch(spark, paths[which], topics, batch))
        say(
            f"batch {batch}: pack {seconds['pack'][-1]:.2f} s, one group {seconds['one'][-1]:.2f} s"
        )
    rows = spark.read.format("delta").load(paths["pack"]).count()
    want = args.groups * PARTITIONS * ((args.batches + 1) // 2)
    if rows != want:
        raise SystemExit(f"the pack's table holds {rows} rows, not {want}")
    steady = {k: statistics.median(v[2:]) for k, v in seconds.items()}
    return {
        "seconds": {k: [round(s, 3) for s in v] for k, v in seconds.items()},
        "append_s": {k: round(v[0], 3) for k, v in seconds.items()},
        "merge_median_s": {k: round(v, 3) for k, v in steady.items()},
        "ratio_pack_to_groups_alone": round(steady["pack"] / (args.groups * steady["one"]), 4),
        "pack_rows": rows,
    }


def main(argv: list[str] | None = None) -> int:
    parser = bench_parser("bench.pack_merge", __doc__)
    parser.add_argument("--groups", type=int, default=75, help="groups in the pack")
    parser.add_argument("--batches", type=int, default=8, help="batches written (at least 4)")
    parser.add_argument("--driver-memory", default="2g")
    parser.add_argument("--keep", action="store_true", help="keep the tables under var/bench/")
    args = parse_args(parser, argv, {"groups": 10, "batches": 4})
    if args.batches < 4 or args.groups < 2:
        parser.error("--batches must be at least 4 and --groups at least 2")
    with work_dir("pack-merge", keep=args.keep) as workdir:
        figures = run(args, workdir)
    say(
        f"median MERGE: pack of {args.groups} {figures['merge_median_s']['pack']} s, one group "
        f"{figures['merge_median_s']['one']} s; ratio {figures['ratio_pack_to_groups_alone']}"
    )
    say(f"result: {write_result('pack-merge', figures, args)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
