"""Pure functions of the replication job's rows (no I/O, no session, no Spark job).

Pipeline (`jobs/replication/job.py` composes it)::

    planned offset ranges --(writer.copy_ranges, JVM copy tasks)--> one summary row per
                                                                     (partition, audit window)
               --stats_rows--> one `replication_stats` row per (batch, source partition)
               --audit_rows--> one `replication_audit` row per (batch, partition, window)

Summary rows (`writer.SUMMARY_SCHEMA`) are few (one per partition and window of a batch) and
come to the driver with the copy's own Spark job, so the table rows are computed here, in the
driver, rather than by more Spark jobs that would wait for task slots behind every other
JobGroup of the application. A summary row holds counts of records read, replicated and
already present (the destination held them), value and key+value bytes written, first and last
offset, record age min/sum/max, replication latency min/sum/max with a KLL sketch of the
latencies (Spark's bigint form), and the row's source and destination topic (a copy of many
topics has many of each).

Metrics follow MirrorMaker 2 (`MirrorSourceTask`): record-age-ms = read time - source
timestamp; replication-latency-ms = ack time - source timestamp; byte counts are value bytes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol

from jobs.runtime.saved_rows import timestamp_millis

# One row of writer.SUMMARY_SCHEMA, as a mapping of column -> value.
Summary = Mapping[str, Any]

_COUNTS = (
    "records_read",
    "records_replicated",
    "records_already_present",
    "bytes_replicated",
    "record_bytes_replicated",
)
LATENCY_P99 = 0.99


class LatencySketches(Protocol):
    """KLL bigint sketches in Spark's form (`writer.JvmSketches` asks the JVM's owner)."""

    def merged(self, images: Sequence[bytes]) -> bytes:
        """kll_merge_agg_bigint of `images` (at least one)."""
        ...

    def quantile(self, image: bytes, rank: float) -> int:
        """kll_sketch_get_quantile_bigint(image, rank)."""
        ...


def stats_rows(
    summaries: Iterable[Summary],
    batch_id: int,
    batch_time: datetime,
    labels: Mapping[str, str],
    sketches: LatencySketches,
) -> list[dict[str, Any]]:
    """One `replication_stats` row per source topic and partition of a batch, in (topic,
    partition) order: counts, bytes, age and latency.

    `labels` (job_group_id, clusters) are copied into every row. Latency min/avg/max are
    exact; the sketch is the merge of the windows' sketches and p99 is its answer, so it agrees
    with any later merge of the rows' sketches. A partition whose records were all present
    already has no latency: nulls, as in MirrorMaker 2.
    """
    groups: dict[tuple[str, str, int, int], list[Summary]] = {}
    for row in summaries:
        key = (
            row["source_topic"],
            row["destination_topic"],
            row["partition"],
            row["destination_partition"],
        )
        groups.setdefault(key, []).append(row)
    return [
        {
            **labels,
            "source_topic": source_topic,
            "destination_topic": destination_topic,
            "batch_id": batch_id,
            "batch_time": batch_time,
            "partition": partition,
            "destination_partition": destination_partition,
            **_counts(rows),
            **_latency(rows, sketches),
        }
        for (source_topic, destination_topic, partition, destination_partition), rows in sorted(
            groups.items()
        )
    ]


def audit_rows(
    summaries: Iterable[Summary], interval_seconds: int, batch_id: int, labels: Mapping[str, str]
) -> list[dict[str, Any]]:
    """Per source-timestamp window, topic and partition: records read, written, already
    present, in (topic, partition, window) order.

    The copy's summaries are already per window of `interval_seconds`. This is the audit hook
    for AUDIT_TYPE_REPLICATION: summing a window's rows over all batches gives what the job
    read from the source and what the destination holds from it (written + already_present),
    to compare with independent counts of both topics.
    """
    interval_ms = interval_seconds * 1000
    windows: dict[tuple[str, str, int, int], list[int]] = {}
    for row in summaries:
        key = (
            row["source_topic"],
            row["destination_topic"],
            row["partition"],
            row["window_start_ms"],
        )
        counts = windows.setdefault(key, [0, 0, 0])
        counts[0] += row["records_read"]
        counts[1] += row["records_replicated"]
        counts[2] += row["records_already_present"]
    return [
        {
            **labels,
            "source_topic": source_topic,
            "destination_topic": destination_topic,
            "batch_id": batch_id,
            "partition": partition,
            "window_start": timestamp_millis(start_ms),
            "window_end": timestamp_millis(start_ms + interval_ms),
            "records_read": read,
            "records_written": written,
            "records_already_present": present,
        }
        for (source_topic, destination_topic, partition, start_ms), (
            read,
            written,
            present,
        ) in sorted(windows.items())
    ]


def _counts(rows: Sequence[Summary]) -> dict[str, Any]:
    """A partition's counts, offsets and record ages over its windows."""
    read = sum(r["records_read"] for r in rows)
    return {
        **{name: sum(r[name] for r in rows) for name in _COUNTS},
        "first_offset": min(r["first_offset"] for r in rows),
        "last_offset": max(r["last_offset"] for r in rows),
        "record_age_ms_min": min(r["record_age_ms_min"] for r in rows),
        "record_age_ms_avg": sum(r["record_age_ms_sum"] for r in rows) / read if read else None,
        "record_age_ms_max": max(r["record_age_ms_max"] for r in rows),
    }


def _latency(rows: Sequence[Summary], sketches: LatencySketches) -> dict[str, Any]:
    """A partition's replication latency over its windows' written records."""
    written = [r for r in rows if r["records_replicated"]]
    if not written:
        return dict.fromkeys(
            (
                "replication_latency_ms_min",
                "replication_latency_ms_avg",
                "replication_latency_ms_max",
                "replication_latency_ms_p99",
                "replication_latency_kll_sketch",
            )
        )
    images = [r["replication_latency_kll_sketch"] for r in written]
    sketch = images[0] if len(images) == 1 else sketches.merged(images)
    return {
        "replication_latency_ms_min": min(r["replication_latency_ms_min"] for r in written),
        "replication_latency_ms_avg": sum(r["replication_latency_ms_sum"] for r in written)
        / sum(r["records_replicated"] for r in written),
        "replication_latency_ms_max": max(r["replication_latency_ms_max"] for r in written),
        "replication_latency_ms_p99": sketches.quantile(sketch, LATENCY_P99),
        "replication_latency_kll_sketch": sketch,
    }
