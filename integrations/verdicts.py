"""Was data lost in a window? Read from `audit_verdicts` with delta-rs; never decided here.

The verdict (OK, LOSS, DUPLICATION, INCOMPLETE) has one owner: the cross-tier audit job
(`jobs/audit/tiers/verdicts.py` holds the rules). It appends one `audit_verdicts` row per
check, window and revision, and the newest revision of a (check, window) is its verdict. The
Airflow sensor, the report and the notifier all read it through this module, so they give the
job's answer and no other.

* a **check** is one judge of a window: (job_group_id, check_type, check_name, cluster,
  topic), where cluster and topic are the downstream side's (`jobs/audit/tiers/tables.py`);
* `read_newest`: for a (cluster, topic) and/or check names, and a time range, the newest
  revision of every (check, window) whose window overlaps the range;
* several checks may judge one window (e.g. `service->kafka` and `kafka->consumer:<group>`):
  each is reported, and their **overall** verdict is the worst, in the order
  LOSS > DUPLICATION > INCOMPLETE > OK (`worst`): a loss found by one check is not hidden by
  another check that is still waiting, and OK needs every check to say OK;
* a range is **decided** when it has verdict rows and every check judging it (or, when check
  names are given, each of those checks) has a newest revision other than INCOMPLETE. No row
  yet for the range, or for a named check, is INCOMPLETE ("no verdict yet").

A counting audit alone (`audit_counts`) has no verdict: a count says nothing about loss
without something to compare it with. A verdict needs a cross-tier check: SERVICE/KRP
aggregation fed by the audit clients' reports, XDC, REPLICATION or RETENTION (docs/audit.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from core.audit_verdicts import CHECK_KEY, DUPLICATION, INCOMPLETE, LOSS, OK, VERDICTS
from integrations.tables import find_tables, read

TABLE = "audit_verdicts"
# The order of `worst`: a higher rank wins.
SEVERITY = {OK: 0, INCOMPLETE: 1, DUPLICATION: 2, LOSS: 3}
SORT_KEY = ("check_name", "cluster", "topic", "job_group_id", "check_type")
NO_VERDICT = "no verdict yet"


def worst(verdicts: Iterable[str]) -> str:
    """The overall verdict of several checks (order of the module docstring); INCOMPLETE
    for none."""
    return max(verdicts, key=lambda v: SEVERITY[v], default=INCOMPLETE)


def _utc(value: datetime) -> datetime:
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def check_of(row: Mapping[str, Any]) -> tuple[str, ...]:
    return tuple(str(row[k]) for k in CHECK_KEY)


def newest(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The highest revision of every (check, window) in `rows` (any order), sorted by window
    start, check name, cluster and topic (pure)."""
    found: dict[tuple, dict[str, Any]] = {}
    for row in rows:
        key = (*check_of(row), _utc(row["window_start"]))
        if key not in found or row["revision"] > found[key]["revision"]:
            found[key] = dict(row)
    return sorted(
        found.values(),
        key=lambda r: (_utc(r["window_start"]), *(str(r[k]) for k in SORT_KEY)),
    )


def read_newest(
    warehouse: str | Path,
    *,
    cluster: str | None = None,
    topic: str | None = None,
    check_names: Sequence[str] = (),
    start: datetime | None = None,
    end: datetime | None = None,
) -> list[dict[str, Any]]:
    """The newest revision of every (check, window) of `audit_verdicts` under `warehouse`
    matching the given cluster, topic and check names (None / empty: any) whose window
    overlaps [start, end) (None: unbounded). No table yet: no rows."""
    path = find_tables(warehouse).get(TABLE)
    if path is None:
        return []
    filters: list[tuple[str, str, Any]] = []
    if cluster is not None:
        filters.append(("cluster", "=", cluster))
    if topic is not None:
        filters.append(("topic", "=", topic))
    if check_names:
        filters.append(("check_name", "in", list(check_names)))
    rows = read(path, filters=filters or None).to_pylist()
    inside = [
        r
        for r in rows
        if (start is None or _utc(r["window_end"]) > _utc(start))
        and (end is None or _utc(r["window_start"]) < _utc(end))
    ]
    return newest(inside)


def describe(row: Mapping[str, Any]) -> str:
    """One line for a verdict row (or its `Answer.to_dict` form): check, window, verdict,
    both sides' counts, why."""
    when = row["window_start"]
    when = _utc(when).isoformat() if isinstance(when, datetime) else when
    return (
        f"{row['check_name']} {row['cluster']}/{row['topic']} window {when}: {row['verdict']}, "
        f"{row['left_label']} {row['left_count']} -> {row['right_label']} {row['right_count']} "
        f"(revision {row['revision']}: {row['detail']})"
    )


@dataclass(frozen=True)
class Answer:
    """The answer for a window or a range: each check's newest row and their overall."""

    verdict: str  # worst of the checks (INCOMPLETE when there is none)
    decided: bool  # rows exist and no check (no named check) is INCOMPLETE or missing
    checks: tuple[dict[str, Any], ...]  # newest revision rows, sorted as `newest` sorts
    missing: tuple[str, ...]  # named checks without a row
    detail: str

    def failing(self, fail_on: Iterable[str]) -> list[dict[str, Any]]:
        """The checks whose verdict is one of `fail_on`."""
        bad = set(fail_on)
        return [r for r in self.checks if r["verdict"] in bad]

    def to_dict(self) -> dict[str, Any]:
        """JSON-able (timestamps as ISO 8601 text), e.g. for a TriggerEvent."""
        return {
            "verdict": self.verdict,
            "decided": self.decided,
            "checks": [
                {k: v.isoformat() if isinstance(v, datetime) else v for k, v in r.items()}
                for r in self.checks
            ],
            "missing": list(self.missing),
            "detail": self.detail,
        }


def answer(rows: Iterable[Mapping[str, Any]], check_names: Sequence[str] = ()) -> Answer:
    """The answer from verdict rows of one window or range (rules of the module docstring;
    pure). Rows of checks not in `check_names` (when given) are left out."""
    checks = newest(r for r in rows if not check_names or r["check_name"] in check_names)
    missing = tuple(
        n for n in dict.fromkeys(check_names) if n not in {r["check_name"] for r in checks}
    )
    verdicts = [r["verdict"] for r in checks] + [INCOMPLETE] * len(missing)
    overall = worst(verdicts)
    decided = bool(checks) and INCOMPLETE not in verdicts
    if not checks:
        detail = NO_VERDICT + (f" from {', '.join(missing)}" if missing else "")
    else:
        counts = {v: verdicts.count(v) for v in VERDICTS if v in verdicts}
        detail = f"{len(checks)} check window(s): " + ", ".join(
            f"{n} {v}" for v, n in counts.items()
        )
        if missing:
            detail += f"; {NO_VERDICT} from {', '.join(missing)}"
    return Answer(overall, decided, tuple(checks), missing, detail)


@dataclass(frozen=True)
class RangeQuery:
    """Which checks, over which time range: a (cluster, topic), check names, or both."""

    warehouse: str
    start: datetime
    end: datetime
    cluster: str | None = None
    topic: str | None = None
    check_names: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.topic and not self.check_names:
            raise ValueError(f"topic={self.topic!r}: give a topic or check_names")
        if _utc(self.end) <= _utc(self.start):
            raise ValueError(f"window_end={self.end.isoformat()}: not after window_start")


def range_answer(query: RangeQuery) -> Answer:
    """The answer for the query's range, read from `audit_verdicts` now."""
    rows = read_newest(
        query.warehouse,
        cluster=query.cluster or None,
        topic=query.topic or None,
        check_names=query.check_names,
        start=query.start,
        end=query.end,
    )
    return answer(rows, query.check_names)


def window_answers(rows: Iterable[Mapping[str, Any]]) -> list[tuple[tuple, Answer]]:
    """((cluster, topic, window_start, window_end), answer) per window judged in `rows`,
    sorted by window start, cluster and topic (pure)."""
    by_window: dict[tuple, list[Mapping[str, Any]]] = {}
    for row in newest(rows):
        key = (row["cluster"], row["topic"], _utc(row["window_start"]), _utc(row["window_end"]))
        by_window.setdefault(key, []).append(row)
    order = sorted(by_window, key=lambda k: (k[2], k[0], k[1], k[3]))
    return [(key, answer(by_window[key])) for key in order]
