"""Pure DataFrame -> DataFrame transform of the dispatcher job (no I/O, no session).

The dispatch tasks return summary rows (`dev.uatu.dispatch.DispatchStats.SCHEMA`): one per task
(one topic partition of one micro-batch) and stats window, with the counts, the offsets and the
calls' latencies as a KLL sketch with its p50/p95/p99. A batch has one task per topic partition,
so these rows already have the grain of dispatch_stats; `dispatch_stats` adds the labels, the
tier, the batch and the window bounds, without a shuffle.
"""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from jobs.dispatch.tables import STATS_SCHEMA


def dispatch_stats(
    summaries: DataFrame,
    *,
    labels: Mapping[str, str],
    tiers: Mapping[str, str],
    batch_id: int,
    batch_time: Column,
    window_ms: int,
    redelivered: bool,
) -> DataFrame:
    """The dispatch_stats rows of one micro-batch's summary rows.

    `labels` are job_group_id, cluster and source_topic; `tiers` maps a topic to its tier label;
    `redelivered` marks a batch that is a replay of one a crash cut short (all its records
    count as redelivered).
    """
    tier = F.lit(None).cast("string")
    for topic, label in tiers.items():
        tier = F.when(F.col("topic") == topic, F.lit(label)).otherwise(tier)
    derived = {
        **{k: F.lit(v) for k, v in labels.items()},
        "tier": tier,
        "batch_id": F.lit(batch_id),
        "batch_time": batch_time,
        "window_start": F.timestamp_millis("window_start_ms"),
        "window_end": F.timestamp_millis(F.col("window_start_ms") + window_ms),
        "redelivered": F.col("records") if redelivered else F.lit(0),
    }
    return summaries.select(
        *[
            derived.get(f.name, F.col(f.name) if f.name in summaries.columns else F.lit(None))
            .cast(f.dataType)
            .alias(f.name)
            for f in STATS_SCHEMA.fields
        ]
    )
