"""LOAD_GEN_CONSUME's Delta table, `loadgen_stats`, and its exactly-once append.

One row per micro-batch, partition, window of fetch time (`stats_window_seconds`, 10 s by
default, epoch-aligned) and generator: what the batch read of that generator in that
partition and window. A window that two batches read has two rows; every count and rate
column is additive, so a window's figures are the sums over its rows (and its latency
quantiles come from merging the sketches).

===========================  =========  ======================================================
column                       type       meaning
===========================  =========  ======================================================
job_group_id                 string     the LOAD_GEN_CONSUME JobGroup
cluster, topic               string     what was read
batch_id                     long       the micro-batch
batch_time                   timestamp  when the batch's rows were made
partition                    int        Kafka partition
window_start, window_end     timestamp  [start, end) of fetch time (UTC)
generator                    string     the `loadgen` header's generator id; null for records
                                        without a valid header (counted, nothing else)
records                      long       records read
bytes                        long       key + value bytes
records_per_sec              double     records / window length (sum rows for a window)
mb_per_sec                   double     bytes / 2^20 / window length (as the perf tools' MB)
first_seq, last_seq          long       lowest and highest sequence number in the row
duplicates                   long       records whose sequence number had been seen before
                                        (in this batch or any earlier one)
lost                         long       change in the generator's missing sequence numbers
                                        (between its lowest and highest seen): gaps opened
                                        minus gaps filled; sum over rows for what is missing
missing_ranges               array      the gaps this row opened, [from_seq, until_seq) (at
                                        most 100 per row; `lost` counts them all)
duplicate_seqs               array      the duplicated sequence numbers (at most 100 per row)
latency_ms_p50/p95/p99/p999  double     end to end: fetch time - send time (the header's),
latency_ms_max                          from the KLL sketch (about 1.65 % rank error)
latency_kll_sketch           binary     DataSketches KLL doubles sketch of the latencies:
                                        kll_merge_agg_double across rows, or Python's
                                        datasketches.kll_doubles_sketch
fetch_to_batch_ms            long       from the row's first fetched record to the end of
                                        the batch's fold: how long the micro-batch held it
===========================  =========  ======================================================

Written every 30 s and when the query ends, one commit for all the batches since the last
(`jobs/loadgen/measure.py`). Exactly-once: each commit carries Delta's idempotent-write marker
(txnAppId = the streaming query id, txnVersion = the newest batch it covers). The sequence
numbers seen are kept next to the checkpoint per batch (`dev.uatu.fold.BatchState`), written
before the batch's rows are kept, so a batch replayed after a crash finds the same duplicates
and gaps.
"""

from __future__ import annotations

from pyspark.sql import SparkSession
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from jobs.loadgen.spec import ConsumeSpec
from jobs.runtime.checkpoint_files import HadoopFiles
from jobs.runtime.delta import DeltaTableSpec, located

MISSING_RANGE = StructType(
    [StructField("from_seq", LongType(), True), StructField("until_seq", LongType(), True)]
)

LOADGEN_STATS = DeltaTableSpec(
    name="loadgen_stats",
    description=(
        "Kafka load generator: records, bytes, latency, lost and duplicated sequence numbers "
        "per batch, partition, window and generator"
    ),
    schema=StructType(
        [
            StructField(name, kind, True)
            for name, kind in (
                ("job_group_id", StringType()),
                ("cluster", StringType()),
                ("topic", StringType()),
                ("batch_id", LongType()),
                ("batch_time", TimestampType()),
                ("partition", IntegerType()),
                ("window_start", TimestampType()),
                ("window_end", TimestampType()),
                ("generator", StringType()),
                ("records", LongType()),
                ("bytes", LongType()),
                ("records_per_sec", DoubleType()),
                ("mb_per_sec", DoubleType()),
                ("first_seq", LongType()),
                ("last_seq", LongType()),
                ("duplicates", LongType()),
                ("lost", LongType()),
                ("missing_ranges", ArrayType(MISSING_RANGE, True)),
                ("duplicate_seqs", ArrayType(LongType(), True)),
                ("latency_ms_p50", DoubleType()),
                ("latency_ms_p95", DoubleType()),
                ("latency_ms_p99", DoubleType()),
                ("latency_ms_p999", DoubleType()),
                ("latency_ms_max", DoubleType()),
                ("latency_kll_sketch", BinaryType()),
                ("fetch_to_batch_ms", LongType()),
            )
        ]
    ),
)
STATS_SCHEMA = LOADGEN_STATS.schema


def locations(spec: ConsumeSpec) -> list[tuple[DeltaTableSpec, str]]:
    """LOAD_GEN_CONSUME's table and where the JobGroup puts it."""
    return located([LOADGEN_STATS], spec.output)


def warm_up_writes(spark: SparkSession, scratch_path: str) -> None:
    """Write one empty row to a scratch Delta table at `scratch_path`, then delete it.

    The first Delta write of a JVM loads and compiles the Parquet writer and Delta's commit
    path, by far the slowest write of the run (docs/loadgen.md has the figures). Paid here,
    before the first batch, it is start-up, not a stall in the middle of the stream.
    """
    row = tuple(None for _ in STATS_SCHEMA.fields)
    spark.createDataFrame([row], STATS_SCHEMA).write.format("delta").mode("overwrite").save(
        scratch_path
    )
    HadoopFiles(spark).delete(scratch_path, recursive=True)
