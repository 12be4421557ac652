"""Is an audit window complete, and what is its verdict? Read from the Delta tables with delta-rs.

The cross-tier audit writes its verdicts to `audit_verdicts` (OK / LOSS / DUPLICATION /
INCOMPLETE per window, decided by jobs/audit/tiers/verdicts.py); this module does not read that
table yet. It computes a verdict from what the counting audit wrote:

* **complete**: the window's end plus its allowed lateness has passed, and the audit job has
  written a batch after that moment (max `updated_at` of the topic's rows), so every record on
  time for the window has been counted;
* **observed**: the exact unique count of the window (sum over partitions and the audit's
  windows inside it; `AUDIT_TYPE_EXACT_UNIQ` rows, else the HLL estimate);
* **expected**, when there is something to compare with: a count the caller knows (a producer's
  own tally), or `replication_audit`: the records a replication job read from the source in the
  same window, when the audited topic is that job's destination;
* the rule (`verdict`): INCOMPLETE while not complete; LOSS when observed < expected;
  DUPLICATION when the window has duplicates; otherwise OK.

`VERDICT_SOURCES` maps a source name to the function that answers; `audit_counts` is the only
one now. `audit_verdicts` would be another entry (it would read the table's row for the window)
with the same `WindowVerdict` result, so the Airflow trigger, the report and the notifier take it
without change.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from integrations.tables import find_tables, read

OK, LOSS, DUPLICATION, INCOMPLETE = "OK", "LOSS", "DUPLICATION", "INCOMPLETE"
VERDICTS = (OK, LOSS, DUPLICATION, INCOMPLETE)


@dataclass(frozen=True)
class WindowQuery:
    """Which window of which audited topic, and what to compare it with."""

    warehouse: str
    cluster: str
    topic: str
    start: datetime
    end: datetime
    allowed_lateness_seconds: int = 0
    expected_count: int | None = None
    replication_job_group_id: str | None = None


@dataclass(frozen=True)
class WindowVerdict:
    verdict: str
    complete: bool
    observed: int | None
    expected: int | None
    duplicates: int
    partitions: int
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def verdict(complete: bool, observed: int | None, expected: int | None, duplicates: int) -> str:
    """The rule of the module docstring (pure)."""
    if not complete:
        return INCOMPLETE
    if expected is not None and (observed or 0) < expected:
        return LOSS
    if duplicates > 0:
        return DUPLICATION
    return OK


def _utc(value: datetime) -> datetime:
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def from_audit_counts(query: WindowQuery, now: datetime | None = None) -> WindowVerdict:
    """The verdict of one window from `audit_counts` (and `replication_audit` if named)."""
    now = now or datetime.now(UTC)
    tables = find_tables(query.warehouse)
    closes = _utc(query.end) + timedelta(seconds=query.allowed_lateness_seconds)
    if "audit_counts" not in tables:
        return WindowVerdict(INCOMPLETE, False, None, None, 0, 0, "no audit_counts table yet")
    counts = read(
        tables["audit_counts"],
        [
            "cluster",
            "topic",
            "partition",
            "audit_type",
            "window_start",
            "unique_count",
            "duplicate_count",
            "updated_at",
        ],
        [("cluster", "=", query.cluster), ("topic", "=", query.topic)],
    ).to_pylist()
    latest = max((_utc(r["updated_at"]) for r in counts), default=None)
    complete = now >= closes and latest is not None and latest >= closes
    inside = [r for r in counts if _utc(query.start) <= _utc(r["window_start"]) < _utc(query.end)]
    exact = [r for r in inside if r["audit_type"] == "AUDIT_TYPE_EXACT_UNIQ"]
    chosen = exact or inside
    observed = sum(r["unique_count"] for r in chosen) if chosen else None
    duplicates = sum(r["duplicate_count"] or 0 for r in exact)
    expected = query.expected_count
    detail = f"{len(inside)} window rows, audited until {latest}, window closes at {closes}"
    if query.replication_job_group_id and "replication_audit" in tables:
        copied = read(
            tables["replication_audit"],
            ["job_group_id", "window_start", "records_read"],
            [("job_group_id", "=", query.replication_job_group_id)],
        ).to_pylist()
        expected = sum(
            r["records_read"]
            for r in copied
            if _utc(query.start) <= _utc(r["window_start"]) < _utc(query.end)
        )
        detail += f"; replication {query.replication_job_group_id} read {expected}"
    return WindowVerdict(
        verdict(complete, observed, expected, duplicates),
        complete,
        observed,
        expected,
        duplicates,
        len({r["partition"] for r in inside}),
        detail,
    )


VERDICT_SOURCES: dict[str, Callable[[WindowQuery], WindowVerdict]] = {
    "audit_counts": from_audit_counts,
    # "audit_verdicts": the cross-tier audit's own verdicts, not read here yet.
}


def window_verdict(query: WindowQuery, source: str = "audit_counts") -> WindowVerdict:
    try:
        answer = VERDICT_SOURCES[source]
    except KeyError:
        known = sorted(VERDICT_SOURCES)
        raise ValueError(f"unknown verdict source {source!r}; known: {known}") from None
    return answer(query)


def warehouse_path(value: str | Path) -> str:
    return str(Path(value).resolve())
