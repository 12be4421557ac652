"""Probe outcomes -> `availability_probes` rows: pure DataFrame transforms, no I/O.

Input: one row per probe whose outcome is final (`PROBE_OUTCOME_DDL`, made by
`ProbeLedger.take_final`). Output (`tables.AVAILABILITY_PROBES`): one row per window, broker
and zone, plus roll-up rows with broker null: one per zone when the job is zone-isolated,
otherwise one for the whole cluster (zone null too). Latencies are KLL sketches (mergeable
across windows, brokers and jobs with `kll_merge_agg_double`) and their p50, p99 and p999,
read from those sketches.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from jobs.runtime.delta import kll_doubles_or_null, kll_quantiles

PROBE_OUTCOME_DDL = (
    "window_start_ms long, window_end_ms long, broker int, zone string, partition int, "
    "seq long, sent_ms long, produced boolean, error string, ack_latency_ms double, "
    "copies int, e2e_latency_ms double"
)
QUANTILES = (("p50", 0.5), ("p99", 0.99), ("p999", 0.999))


def _ratio(part: Column, whole: Column) -> Column:
    return F.when(whole > 0, part / whole)


def _stats(outcomes: DataFrame, keys: list[Column]) -> DataFrame:
    produced = F.col("produced")
    consumed = produced & (F.col("copies") > 0)
    return (
        outcomes.groupBy("window_start_ms", "window_end_ms", *keys)
        .agg(
            F.count(F.lit(1)).alias("probes"),
            F.count_if(produced).alias("produced"),
            F.count_if(consumed).alias("consumed"),
            F.count_if(produced & (F.col("copies") == 0)).alias("lost"),
            F.count_if(F.col("copies") > 1).alias("duplicated"),
            F.sort_array(F.collect_set("partition")).alias("partitions"),
            F.max(F.when(~produced, F.col("error"))).alias("sample_error"),
            kll_doubles_or_null("ack_latency_ms").alias("ack_latency_kll"),
            # Only the first copy of a probe has an end-to-end latency.
            kll_doubles_or_null("e2e_latency_ms").alias("e2e_latency_kll"),
        )
        .withColumn("produce_failed", F.col("probes") - F.col("produced"))
        .withColumn("produce_success_ratio", _ratio(F.col("produced"), F.col("probes")))
        .withColumn("consume_success_ratio", _ratio(F.col("consumed"), F.col("produced")))
    )


def _with_quantiles(stats: DataFrame) -> DataFrame:
    for sketch, prefix in (("ack_latency_kll", "ack_latency"), ("e2e_latency_kll", "e2e_latency")):
        names = {f"{prefix}_{name}_ms": rank for name, rank in QUANTILES}
        stats = stats.withColumns(kll_quantiles(sketch, "double", names))
    return stats


def probe_window_stats(
    outcomes: DataFrame, cluster: str, probe_type: str, zone_isolated: bool
) -> DataFrame:
    """`availability_probes` rows (`tables.AVAILABILITY_PROBES`) for final probe outcomes."""
    per_broker = _stats(outcomes, [F.col("broker"), F.col("zone")])
    if zone_isolated:
        rollup = _stats(outcomes, [F.lit(None).cast("int").alias("broker"), F.col("zone")])
    else:
        rollup = _stats(
            outcomes,
            [F.lit(None).cast("int").alias("broker"), F.lit(None).cast("string").alias("zone")],
        )
    return (
        per_broker.unionByName(rollup)
        .transform(_with_quantiles)
        .select(
            F.lit(cluster).alias("cluster"),
            F.timestamp_millis("window_start_ms").alias("window_start"),
            F.timestamp_millis("window_end_ms").alias("window_end"),
            F.lit(probe_type).alias("probe_type"),
            "broker",
            "zone",
            "partitions",
            "probes",
            "produced",
            "produce_failed",
            "produce_success_ratio",
            "consumed",
            "consume_success_ratio",
            "lost",
            "duplicated",
            "sample_error",
            *(f"ack_latency_{name}_ms" for name, _ in QUANTILES),
            *(f"e2e_latency_{name}_ms" for name, _ in QUANTILES),
            "ack_latency_kll",
            "e2e_latency_kll",
        )
    )
