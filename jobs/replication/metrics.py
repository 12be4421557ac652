"""The replication job's Prometheus series, served by the driver's endpoint
(jobs/runtime/metrics.py).

MirrorMaker 2's source-connector metrics as Strimzi's JMX exporter names them
(`kafka_connect_mirror_mirrorsourceconnector_record_age_ms`, `..._replication_latency_ms`,
`..._record_count`, `..._byte_count`, ...), plus `uatu_replication_records_total` and
`uatu_replication_records_already_present_total`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from jobs.runtime.metrics import counter, gauge

_MM2 = ("source", "target", "topic", "partition")
MM2 = {
    attribute: gauge(
        f"kafka_connect_mirror_mirrorsourceconnector_{attribute}",
        f"MirrorMaker 2 MirrorSourceConnector {attribute.replace('_', '-')} (last batch)",
        _MM2,
    )
    for attribute in (
        "record_age_ms",
        "record_age_ms_min",
        "record_age_ms_max",
        "record_age_ms_avg",
        "replication_latency_ms",
        "replication_latency_ms_min",
        "replication_latency_ms_max",
        "replication_latency_ms_avg",
        "record_count",
        "byte_count",
    )
}
_REPLICATION = ("job_group_id", "source_topic", "destination_topic", "partition")
REPLICATION_RECORDS = counter(
    "uatu_replication_records", "Records written to the destination", _REPLICATION
)
REPLICATION_PRESENT = counter(
    "uatu_replication_records_already_present",
    "Records skipped because the destination already held them (a retried batch)",
    _REPLICATION,
)
REPLICATION_BATCHES = counter(
    "uatu_replication_batches", "Replication micro-batches with records", ("job_group_id",)
)


def replication(labels: Mapping[str, str], rows: Iterable[Mapping[str, Any]]) -> None:
    """One batch's `replication_stats` rows -> MirrorMaker 2 gauges and uatu counters; each
    row names its topics, `labels` the job and clusters."""
    REPLICATION_BATCHES.labels(labels["job_group_id"]).inc()
    for row in rows:
        mm2 = (
            labels["source_cluster"],
            labels["destination_cluster"],
            row["destination_topic"],
            str(row["destination_partition"]),
        )
        values = {
            "record_age_ms": row.get("record_age_ms_max"),
            "record_age_ms_min": row.get("record_age_ms_min"),
            "record_age_ms_max": row.get("record_age_ms_max"),
            "record_age_ms_avg": row.get("record_age_ms_avg"),
            "replication_latency_ms": row.get("replication_latency_ms_max"),
            "replication_latency_ms_min": row.get("replication_latency_ms_min"),
            "replication_latency_ms_max": row.get("replication_latency_ms_max"),
            "replication_latency_ms_avg": row.get("replication_latency_ms_avg"),
        }
        for attribute, value in values.items():
            if value is not None:
                MM2[attribute].labels(*mm2).set(value)
        MM2["record_count"].labels(*mm2).inc(row.get("records_replicated") or 0)
        MM2["byte_count"].labels(*mm2).inc(row.get("bytes_replicated") or 0)
        partition = (
            labels["job_group_id"],
            row["source_topic"],
            row["destination_topic"],
            str(row["partition"]),
        )
        REPLICATION_RECORDS.labels(*partition).inc(row.get("records_replicated") or 0)
        REPLICATION_PRESENT.labels(*partition).inc(row.get("records_already_present") or 0)
