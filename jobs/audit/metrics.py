"""The audit job's Prometheus series, served by the driver's endpoint (jobs/runtime/metrics.py).

Per topic and partition `uatu_audit_messages_total` (and duplicates, late, no event time,
bytes), and per window `uatu_audit_window_messages` with `uatu_audit_window_complete` (window
end + allowed lateness has passed) for the newest windows. Exact audits' key state per
partition after each batch: `uatu_audit_exact_keys` (keys in memory), `uatu_audit_exact_key_windows`
(windows in memory) and `uatu_audit_exact_key_windows_dropped_total` (windows whose keys
retention dropped).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from jobs.runtime.metrics import counter, gauge

_AUDIT = ("cluster", "topic", "partition", "audit_type")
AUDIT_COUNTS = {
    column: counter(f"uatu_audit_{name}", doc, _AUDIT)
    for column, name, doc in (
        ("message_count", "messages", "Messages audited"),
        ("duplicate_count", "duplicates", "Duplicates found (exact audits)"),
        ("late_count", "late_messages", "Messages later than window end + allowed lateness"),
        ("no_event_time_count", "no_event_time_messages", "Messages without a usable event time"),
        ("bytes", "bytes", "Key + value bytes audited"),
        (
            "unique_estimated_count",
            "unique_estimated_messages",
            "Messages whose uniqueness came from the window's HLL (its exact keys had expired)",
        ),
    )
}
_PARTITION = ("cluster", "topic", "partition")
EXACT_KEYS = gauge(
    "uatu_audit_exact_keys", "Exact audits' dedupe keys in memory after the batch", _PARTITION
)
EXACT_KEY_WINDOWS = gauge(
    "uatu_audit_exact_key_windows", "Windows with exact keys in memory after the batch", _PARTITION
)
EXACT_KEY_WINDOWS_DROPPED = counter(
    "uatu_audit_exact_key_windows_dropped",
    "Windows whose exact keys were dropped past key_retention_seconds",
    _PARTITION,
)
_WINDOW = (*_AUDIT, "window_start")
AUDIT_WINDOW_MESSAGES = gauge(
    "uatu_audit_window_messages", "Messages in the window so far (newest windows only)", _WINDOW
)
AUDIT_WINDOW_COMPLETE = gauge(
    "uatu_audit_window_complete",
    "1 once window end + allowed lateness has passed (the window's count is final)",
    _WINDOW,
)
AUDIT_WINDOWS_KEPT = 4  # per partition and audit type: label sets stay bounded


_audit_windows: dict[tuple[str, ...], list[str]] = {}


def key_state(cluster: str, state: Mapping[tuple[str, int], Mapping[str, Any]]) -> None:
    """One batch's exact key state per topic partition (`FoldedBatch.state`) -> the key
    gauges."""
    for (topic, partition), figures in state.items():
        labels = (cluster, topic, str(partition))
        EXACT_KEYS.labels(*labels).set(figures["state_keys"] or 0)
        EXACT_KEY_WINDOWS.labels(*labels).set(figures["state_windows"] or 0)
        if figures["state_windows_dropped"]:
            EXACT_KEY_WINDOWS_DROPPED.labels(*labels).inc(figures["state_windows_dropped"])


def audit_windows(
    rows: Iterable[Mapping[str, Any]], lateness_seconds: Mapping[int, int], now: datetime
) -> None:
    """One batch's per-window increments (the audit partials): counters and window gauges.

    `lateness_seconds` maps a window length to its allowed lateness. Only the newest
    AUDIT_WINDOWS_KEPT windows per (cluster, topic, partition, audit type) keep a gauge.
    """
    for row in rows:
        labels = (row["cluster"], row["topic"], str(row["partition"]), row["audit_type"])
        for column, series in AUDIT_COUNTS.items():
            # Every counter of the partition exists from its first batch, at 0 if need be, so
            # a rate or a dashboard panel has a series before the first duplicate arrives.
            series.labels(*labels).inc(row.get(column) or 0)
        start = row["window_start"].isoformat()
        window = (*labels, start)
        AUDIT_WINDOW_MESSAGES.labels(*window).inc(row.get("message_count") or 0)
        closes = row["window_end"].timestamp() + lateness_seconds.get(
            row["audit_interval_seconds"], row["audit_interval_seconds"]
        )
        AUDIT_WINDOW_COMPLETE.labels(*window).set(1 if now.timestamp() >= closes else 0)
        kept = _audit_windows.setdefault(labels, [])
        if start not in kept:
            kept.append(start)
            kept.sort()
            while len(kept) > AUDIT_WINDOWS_KEPT:
                old = kept.pop(0)
                for gauge in (AUDIT_WINDOW_MESSAGES, AUDIT_WINDOW_COMPLETE):
                    gauge.remove(*labels, old)
