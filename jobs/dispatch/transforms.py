"""Pure functions of the dispatcher job's rows (no I/O, no session, no Spark job).

The dispatch tasks return summary rows (`dev.uatu.dispatch.DispatchStats.SCHEMA`): one per task
(one topic partition of one micro-batch) and stats window, with the counts, the offsets and the
calls' latencies as a KLL sketch with its p50/p95/p99. A batch has one task per topic partition,
so these rows already have the grain of dispatch_stats; they come to the driver with the
dispatch's own Spark job, and `dispatch_stats_rows` adds the labels, the tier, the batch and
the window bounds there, rather than in more Spark jobs that would wait for task slots behind
every other JobGroup of the application.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from jobs.dispatch.tables import STATS_SCHEMA
from jobs.runtime.saved_rows import timestamp_millis


def dispatch_stats_rows(
    summaries: Iterable[Mapping[str, Any]],
    *,
    labels: Mapping[str, str],
    tiers: Mapping[str, str],
    batch_id: int,
    batch_time: datetime,
    window_ms: int,
    redelivered: bool,
) -> list[dict[str, Any]]:
    """The dispatch_stats rows of one micro-batch's summary rows, one per summary row, with
    STATS_SCHEMA's columns (a column no summary row has is null).

    `labels` are job_group_id, cluster and source_topic; `tiers` maps a topic to its tier label;
    `redelivered` marks a batch that is a replay of one a crash cut short (all its records
    count as redelivered).
    """
    rows = []
    for summary in summaries:
        start_ms = summary["window_start_ms"]
        derived = {
            **labels,
            "tier": tiers.get(summary["topic"]),
            "batch_id": batch_id,
            "batch_time": batch_time,
            "window_start": timestamp_millis(start_ms),
            "window_end": timestamp_millis(start_ms + window_ms),
            "redelivered": summary["records"] if redelivered else 0,
        }
        rows.append(
            {
                f.name: derived[f.name] if f.name in derived else summary.get(f.name)
                for f in STATS_SCHEMA.fields
            }
        )
    return rows
