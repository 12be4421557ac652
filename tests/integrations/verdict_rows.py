"""Rows of `audit_verdicts` in the job's schema (jobs/audit/tiers/tables.py), for tests that
write the table with delta-rs."""

from __future__ import annotations

from datetime import datetime, timedelta

import pyarrow as pa

HOUR = timedelta(hours=1)
SCHEMA = pa.schema(
    [
        ("check_type", pa.string()), ("check_name", pa.string()), ("job_group_id", pa.string()),
        ("cluster", pa.string()), ("topic", pa.string()),
        ("window_start", pa.timestamp("us", tz="UTC")),
        ("window_end", pa.timestamp("us", tz="UTC")),
        ("left_label", pa.string()), ("right_label", pa.string()),
        ("left_count", pa.int64()), ("right_count", pa.int64()),
        ("left_unique", pa.int64()), ("right_unique", pa.int64()),
        ("difference", pa.int64()), ("relative_difference", pa.float64()),
        ("threshold", pa.float64()), ("verdict", pa.string()), ("detail", pa.string()),
        ("missing_count", pa.int64()), ("decided_at", pa.timestamp("us", tz="UTC")),
        ("revision", pa.int32()),
    ]
)  # fmt: skip


def row(check: str, start: datetime, revision: int, verdict: str, **more) -> dict:
    left, right = more.pop("counts", (100, 100))
    base = {
        "check_type": "AUDIT_TYPE_SERVICE_AUDIT_AGGREGATION",
        "check_name": check,
        "job_group_id": "orders-tiers",
        "cluster": "local",
        "topic": "orders",
        "window_start": start,
        "window_end": start + HOUR,
        "left_label": "SERVICE local/orders",
        "right_label": "kafka local/orders",
        "left_count": left,
        "right_count": right,
        "left_unique": left,
        "right_unique": right,
        "difference": right - left,
        "relative_difference": abs(right - left) / left if left else None,
        "threshold": 0.0,
        "verdict": verdict,
        "detail": f"{verdict} at revision {revision}",
        "missing_count": None,
        "decided_at": start + 2 * HOUR + timedelta(minutes=revision),
        "revision": revision,
    }
    return {**base, **more}
