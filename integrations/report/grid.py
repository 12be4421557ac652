"""The report's first screen: the topic x window grid, the per-topic totals and the
replication gaps, as frames (pure pandas) and their HTML.

Every verdict here is a newest revision of `audit_verdicts`, read and combined by
`integrations.verdicts` (the one reader; nothing is decided here). Times are UTC.

* **grid**: one row per window start (newest first), one column per topic (the worst first),
  each cell the window's overall verdict with the worst check's counts, difference and
  percentage; an audited window no check judged is INCOMPLETE, "no verdict yet", with the
  audit's count. Every window of the range is a row: nothing is cut.
* **totals**: per (cluster, topic): the audit's messages, duplicates, late and untimed
  records (`audit_counts`) and what the checks judging that cluster's copy found (LOSS and
  DUPLICATION windows, records missing and extra).
* **gaps**: the newest revision's `replication_gaps` rows, as offset ranges.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pandas as pd

from integrations.verdicts import INCOMPLETE, NO_VERDICT, SEVERITY, window_answers, worst

GRID_COLUMNS = ["topic", "window_start", "verdict", "summary", "detail"]
TOTAL_COLUMNS = [
    "cluster", "topic", "messages", "duplicates", "late", "untimed", "windows_judged",
    "loss_windows", "duplication_windows", "records_missing", "records_extra",
]  # fmt: skip
GAP_COLUMNS = [
    "window_start", "source_cluster", "source_topic", "partition", "offsets", "missing_count",
    "destination", "check_name", "revision",
]  # fmt: skip


@dataclass(frozen=True)
class TimeRange:
    """[since, until) in UTC; None is unbounded. A row belongs to it by its window start (or
    its batch or evaluation time)."""

    since: datetime | None = None
    until: datetime | None = None

    def mask(self, times: pd.Series) -> pd.Series:
        """True for the times inside the range."""
        stamps = pd.to_datetime(times, utc=True)
        keep = pd.Series(True, index=times.index)
        if self.since is not None:
            keep &= stamps >= pd.Timestamp(self.since)
        if self.until is not None:
            keep &= stamps < pd.Timestamp(self.until)
        return keep

    def describe(self) -> str:
        since = utc_text(self.since) if self.since else "the first window"
        until = utc_text(self.until) if self.until else "the newest"
        return f"windows from {since} to {until}"


def utc_text(when: Any) -> str:
    """`2030-01-01 00:01:00 UTC`: how the report writes a time."""
    return pd.Timestamp(when).tz_convert("UTC").strftime("%Y-%m-%d %H:%M:%S UTC")


def missing_and_extra(row: Mapping[str, Any]) -> tuple[int, int]:
    """A decided check's records missing downstream (REPLICATION's missing offsets, else the
    count difference) and extra; (0, 0) for INCOMPLETE."""
    if row["verdict"] == INCOMPLETE:
        return 0, 0
    difference = row["difference"] or 0
    missing = row["missing_count"] if row["missing_count"] is not None else max(0, -difference)
    return int(missing), max(0, int(difference))


def _numbers(row: Mapping[str, Any]) -> str:
    """`100 → 93, -7 (-7.0%)`: a check's counts, difference and percentage of the left."""
    left, right = row["left_count"], row["right_count"]
    difference = row["difference"] if row["difference"] is not None else right - left
    percent = f" ({difference / left:+.1%})" if left else ""
    return f"{left:,} → {right:,}, {difference:+,}{percent}"


def grid(verdict_rows: Iterable[Mapping[str, Any]], tiers: pd.DataFrame) -> pd.DataFrame:
    """topic, window_start, verdict, summary, detail: one row per judged (topic, window), its
    worst check's numbers as the summary and every check in the detail; then one INCOMPLETE
    row per audited (topic, window start) of `tiers` that no verdict window of the topic
    covers. Newest window first, topics in name order."""
    rows = []
    covered: dict[str, list[tuple[datetime, datetime]]] = {}
    judged: dict[tuple[str, datetime], list] = {}
    for (_cluster, topic, start, end), found in window_answers(verdict_rows):
        covered.setdefault(topic, []).append((start, end))
        judged.setdefault((topic, start), []).extend(found.checks)
    for (topic, start), checks in judged.items():
        verdict = worst(c["verdict"] for c in checks)
        first = max(checks, key=lambda c: (SEVERITY[c["verdict"]], c["check_name"]))
        more = f" · {len(checks) - 1} more check(s)" if len(checks) > 1 else ""
        detail = "\n".join(
            f"{c['check_name']} ({c['cluster']}): {c['verdict']}, {_numbers(c)}, "
            f"revision {c['revision']}"
            for c in checks
        )
        rows.append([topic, pd.Timestamp(start), verdict, _numbers(first) + more, detail])
    audited = tiers.groupby(["topic", "window_start"], as_index=False)["messages"].max()
    for topic, start, messages in audited.itertuples(index=False):
        spans = covered.get(topic, [])
        if not any(s <= start < e for s, e in spans):
            rows.append(
                [topic, pd.Timestamp(start), INCOMPLETE, f"{messages:,} audited", NO_VERDICT]
            )
    frame = pd.DataFrame(rows, columns=GRID_COLUMNS)
    return frame.sort_values(["window_start", "topic"], ascending=[False, True], ignore_index=True)


def topic_order(cells: pd.DataFrame) -> list[str]:
    """The grid's columns: the topics whose worst verdict is worst first, then by name."""
    rank = cells.groupby("topic")["verdict"].agg(lambda v: max(SEVERITY[x] for x in v))
    return sorted(rank.index, key=lambda topic: (-rank[topic], topic))


def grid_html(cells: pd.DataFrame) -> str:
    """The grid as a scrolled table (sticky header and window column): every window, newest
    first. Each cell carries data-topic, data-window (ISO UTC) and data-verdict."""
    if cells.empty:
        return "<p>No audited or judged window in this range.</p>"
    topics = topic_order(cells)
    by_cell = {(r.topic, r.window_start): r for r in cells.itertuples(index=False)}
    head = "".join(f'<th scope="col">{html.escape(t)}</th>' for t in topics)
    body = []
    for start in sorted({w for _, w in by_cell}, reverse=True):
        tds = []
        for topic in topics:
            cell = by_cell.get((topic, start))
            if cell is None:
                tds.append('<td class="cell none">no data</td>')
                continue
            tds.append(
                f'<td class="cell v-{cell.verdict}" data-topic="{html.escape(topic)}" '
                f'data-window="{start.isoformat()}" data-verdict="{cell.verdict}" '
                f'title="{html.escape(cell.detail)}"><b>{cell.verdict}</b><br>'
                f"{html.escape(cell.summary)}</td>"
            )
        body.append(f'<tr><th scope="row">{utc_text(start)}</th>{"".join(tds)}</tr>')
    return (
        '<div class="scroll grid"><table id="grid"><thead><tr><th>window (UTC)</th>'
        f"{head}</tr></thead><tbody>{''.join(body)}</tbody></table></div>"
    )


def headline_html(cells: pd.DataFrame, span: TimeRange) -> str:
    """What an on-call engineer reads first: how many windows carry each verdict (worst
    first), the newest window, and every LOSS or DUPLICATION cell, newest first, with its
    numbers (all of them, in a scrolled box)."""
    if cells.empty:
        return f'<p class="headline">No window ({html.escape(span.describe())}).</p>'
    counts = cells["verdict"].value_counts()
    order = sorted(counts.index, key=lambda v: -SEVERITY[v])
    tally = ", ".join(f'<span class="v-{v}">&nbsp;{counts[v]} {v}&nbsp;</span>' for v in order)
    head = (
        f'<p class="headline">{cells["topic"].nunique()} topic(s), '
        f"{cells['window_start'].nunique()} window(s) ({html.escape(span.describe())}): "
        f"{tally}; newest window {utc_text(cells['window_start'].max())}.</p>"
    )
    bad = cells[cells["verdict"].isin(["LOSS", "DUPLICATION"])]
    if bad.empty:
        return head + "<p>No window lost or duplicated records.</p>"
    items = "".join(
        f'<li><span class="v-{r.verdict}">&nbsp;{r.verdict}&nbsp;</span> '
        f"{html.escape(r.topic)}, window {utc_text(r.window_start)}: "
        f"{html.escape(r.summary)}</li>"
        for r in bad.itertuples(index=False)
    )
    return head + f'<div class="scroll problems"><ul id="problems">{items}</ul></div>'


EXACT = "AUDIT_TYPE_EXACT_UNIQ"


def one_audit_type(audit: pd.DataFrame) -> pd.DataFrame:
    """The rows of one audit type per (cluster, topic): EXACT_UNIQ where the topic has it,
    else its other type. Each audit type counts the same records (an exact and an approximate
    audit of one topic are two rows per window), so a total adds up one of them."""
    if audit.empty:
        return audit
    has_exact = audit.groupby(["cluster", "topic"])["audit_type"].transform(
        lambda types: (types == EXACT).any()
    )
    first = audit.groupby(["cluster", "topic"])["audit_type"].transform("min")
    return audit[(audit["audit_type"] == EXACT) | (~has_exact & (audit["audit_type"] == first))]


def totals(audit: pd.DataFrame, verdict_rows: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    """Per (cluster, topic), the columns of TOTAL_COLUMNS. `audit` is `audit_counts` in range
    (cluster, topic, audit_type, message_count, duplicate_count, late_count,
    no_event_time_count), counted once (`one_audit_type`); the verdict columns come from the
    checks whose downstream side is that cluster and topic. Sorted by records missing, then
    extra, then name."""
    audit = one_audit_type(audit)
    audited = (
        audit.groupby(["cluster", "topic"], as_index=False).agg(
            messages=("message_count", "sum"),
            duplicates=("duplicate_count", "sum"),
            late=("late_count", "sum"),
            untimed=("no_event_time_count", "sum"),
        )
        if not audit.empty
        else pd.DataFrame(columns=["cluster", "topic", "messages", "duplicates", "late", "untimed"])
    )
    judged: dict[tuple[str, str], list[int]] = {}
    for (cluster, topic, _start, _end), found in window_answers(verdict_rows):
        entry = judged.setdefault((cluster, topic), [0, 0, 0, 0, 0])
        entry[0] += 1
        entry[1] += found.verdict == "LOSS"
        entry[2] += found.verdict == "DUPLICATION"
        for check in found.checks:
            missing, extra = missing_and_extra(check)
            entry[3] += missing
            entry[4] += extra
    verdicts = pd.DataFrame(
        [[c, t, *v] for (c, t), v in judged.items()],
        columns=["cluster", "topic", *TOTAL_COLUMNS[6:]],
    )
    merged = audited.merge(verdicts, on=["cluster", "topic"], how="outer")
    for column in TOTAL_COLUMNS[2:]:
        merged[column] = pd.to_numeric(merged[column]).fillna(0).astype("int64")
    merged = merged.sort_values(
        ["records_missing", "records_extra", "topic", "cluster"],
        ascending=[False, False, True, True],
    )
    return merged[TOTAL_COLUMNS].reset_index(drop=True)


def newest_gaps(gaps: pd.DataFrame, span: TimeRange) -> pd.DataFrame:
    """The newest revision's rows of each (check, group, topic, window) of `replication_gaps`
    in `span`, offsets as `first-last`, newest window first."""
    if gaps.empty:
        return pd.DataFrame(columns=GAP_COLUMNS)
    gaps = gaps[span.mask(gaps["window_start"])]
    key = ["check_name", "job_group_id", "source_topic", "window_start"]
    newest = gaps.groupby(key)["revision"].transform("max")
    kept = gaps[gaps["revision"] == newest].copy()
    kept["offsets"] = kept["first_offset"].astype(str) + "-" + kept["last_offset"].astype(str)
    kept = kept.sort_values(
        ["window_start", "source_topic", "partition", "first_offset"],
        ascending=[False, True, True, True],
    )
    return kept[GAP_COLUMNS].reset_index(drop=True)
