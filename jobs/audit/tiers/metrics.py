"""The tiers audit's Prometheus series, from the `audit_verdicts` rows each batch writes (served
by the driver's endpoint, jobs/runtime/metrics.py). Labels of every series: `job_group_id`,
`check_type`, `check_name`, `cluster`, `topic` (one set per check and audited topic, so they
stay bounded however many windows pass).

* `uatu_audit_verdicts_total{..., verdict}`: verdict rows written, a window's first decision
  and each revision, as the webhook notifier sends a LOSS once per revision. The alert on it
  (`increase(uatu_audit_verdicts_total{verdict="LOSS"}[15m]) > 0`) is in
  conf/prometheus/uatu-alerts.yml, so a LOSS routes through Alertmanager like any alert.
* `uatu_audit_check_verdict`: the verdict of the check's newest window, by its index in
  `verdicts.VERDICTS` (0 OK, 1 LOSS, 2 DUPLICATION, 3 INCOMPLETE), as Burrow's status gauge is
  an index.
* `uatu_audit_check_lost_records`, `uatu_audit_check_duplicated_records`: in that window, as
  its newest revision says (`lost_and_duplicated`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from core.audit_verdicts import CHECK_KEY, DUPLICATION, LOSS, VERDICTS
from jobs.runtime.metrics import counter, gauge

VERDICT_ROWS = counter(
    "uatu_audit_verdicts",
    "Verdict rows written to audit_verdicts (first decisions and revisions)",
    (*CHECK_KEY, "verdict"),
)
CHECK_VERDICT = gauge(
    "uatu_audit_check_verdict",
    "Verdict of the check's newest window: 0 OK, 1 LOSS, 2 DUPLICATION, 3 INCOMPLETE",
    CHECK_KEY,
)
CHECK_LOST = gauge(
    "uatu_audit_check_lost_records", "Records lost in the check's newest window", CHECK_KEY
)
CHECK_DUPLICATED = gauge(
    "uatu_audit_check_duplicated_records",
    "Records in excess downstream in the check's newest window",
    CHECK_KEY,
)

# (window_start, revision) of the row each check's gauges show, by the check's labels.
_shown: dict[tuple[str, ...], tuple[int, int]] = {}


def lost_and_duplicated(row: Mapping[str, Any]) -> tuple[int, int]:
    """(records lost, records duplicated) a verdict row states. A LOSS lost the most of: the
    offsets that never arrived (REPLICATION), the records the downstream side lacks, and the
    distinct records it lacks (a loss that duplicates hid from the counts). A DUPLICATION
    duplicated what the downstream side has in excess. Other verdicts state neither."""
    difference = int(row["difference"] or 0)
    if row["verdict"] == LOSS:
        left, right = row.get("left_unique"), row.get("right_unique")
        unique_gap = left - right if left is not None and right is not None else 0
        return max(int(row.get("missing_count") or 0), -difference, unique_gap, 0), 0
    if row["verdict"] == DUPLICATION:
        return 0, max(difference, 0)
    return 0, 0


def verdicts(rows: Iterable[Mapping[str, Any]]) -> None:
    """One batch's written verdict rows -> the counter, and the gauges of each check whose
    newest window (then newest revision) is among them."""
    for row in rows:
        labels = tuple(str(row[name]) for name in CHECK_KEY)
        VERDICT_ROWS.labels(*labels, row["verdict"]).inc()
        start = row["window_start"]
        start_ms = int(start.timestamp() * 1000) if isinstance(start, datetime) else int(start)
        at = (start_ms, int(row["revision"]))
        if labels in _shown and _shown[labels] > at:
            continue  # a revision of an older window: counted, not shown
        _shown[labels] = at
        lost, duplicated = lost_and_duplicated(row)
        CHECK_VERDICT.labels(*labels).set(VERDICTS.index(row["verdict"]))
        CHECK_LOST.labels(*labels).set(lost)
        CHECK_DUPLICATED.labels(*labels).set(duplicated)
