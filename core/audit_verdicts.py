"""The `audit_verdicts` contract between its writer and its readers.

The cross-tier audit (jobs/audit/tiers) writes one row per check, window and revision; the
readers (integrations/verdicts.py, and through it the report, the notifier and the Airflow
sensor) take its newest revisions. What both sides must spell the same lives here: the
verdict names, in the order the `uatu_audit_check_verdict` gauge numbers them, and the
columns that name one check.
"""

from __future__ import annotations

OK, LOSS, DUPLICATION, INCOMPLETE = "OK", "LOSS", "DUPLICATION", "INCOMPLETE"
VERDICTS = (OK, LOSS, DUPLICATION, INCOMPLETE)  # the gauge's 0, 1, 2, 3
# One judge of a window: the job group, the check's type and name, and the downstream side.
CHECK_KEY = ("job_group_id", "check_type", "check_name", "cluster", "topic")
