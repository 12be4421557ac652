"""The completeness report: one self-contained HTML page from the jobs' Delta tables.

Read with delta-rs (no Spark); charts are Vega-Lite specs built with Altair and drawn by Vega,
whose JavaScript is inlined in the page (`vl-convert-python`'s bundle): no CDN, it opens
offline. Every time is UTC (text, axes and tooltips). First what an on-call engineer reads in
ten seconds (`grid.py`): a headline of the verdicts, the topic x window grid coloured by the
newest verdict revision of `audit_verdicts`, the per-topic totals and the replication gaps;
then, each shown when its table exists:

1. counts per tier per window (every audited cluster of a topic, and the replication job's
   read/written, from `audit_counts` and `replication_audit`);
2. loss and duplicates over time: the decided verdicts' missing and extra records;
3. audit latency percentiles in seconds (p50/p95/p99 per window, worst partition);
4. replication lag in seconds (MirrorMaker 2's replication-latency-ms and record-age-ms);
5. the consumer-group status timeline (with the rule that decided each status);
6. probe success per broker and zone.

The page sets `data-charts` on <body> to how many charts it holds, and each chart's div gets
`data-drawn` once Vega has rendered it, so a browser test (and a person) can tell it drew.
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cached_property
from pathlib import Path
from typing import Any

import altair as alt
import pandas as pd
import vl_convert

from integrations.report.grid import (
    TimeRange,
    grid,
    grid_html,
    headline_html,
    missing_and_extra,
    newest_gaps,
    totals,
    utc_text,
)
from integrations.tables import find_tables, read
from integrations.verdicts import INCOMPLETE, read_newest

EVERYTHING = TimeRange()
_NO_VERDICTS = (
    "<p>No <code>audit_verdicts</code> table: a verdict needs a cross-tier check "
    "(docs/audit.md), so every window is INCOMPLETE.</p>"
)
STATUS_ORDER = ["OK", "WARN", "ERR", "STOP", "STALL", "REWIND", "NOTFOUND", "NO_COMMITS"]
UTC_AXIS = alt.Axis(format="%Y-%m-%d %H:%M", labelAngle=-30)


class MissingWarehouse(ValueError):
    """The warehouse path is not a directory: the report exits 2 with this one line."""


@dataclass(frozen=True)
class Warehouse:
    """What every section reads: the tables found, the range, and the newest verdict
    revisions of windows overlapping it (read once)."""

    path: Path
    tables: dict[str, str]
    span: TimeRange
    verdicts: list[dict[str, Any]]

    @classmethod
    def open(cls, path: Path | str, span: TimeRange = EVERYTHING) -> Warehouse:
        root = Path(path)
        if not root.is_dir():
            raise MissingWarehouse(f"--warehouse {root}: no such directory")
        verdicts = read_newest(root, start=span.since, end=span.until)
        return cls(root, find_tables(root), span, verdicts)

    @cached_property
    def tiers(self) -> pd.DataFrame:
        """`counts_per_tier` in the range (read once, used by the grid and its chart)."""
        return counts_per_tier(self.tables, self.span)

    def frame(self, table: str, columns: list[str], time_column: str) -> pd.DataFrame:
        """`columns` of `table` whose `time_column` is in the range."""
        frame = read(self.tables[table], columns).to_pandas()
        return frame[self.span.mask(frame[time_column])].reset_index(drop=True)


def _frame(path: str, columns: list[str]) -> pd.DataFrame:
    return read(path, columns).to_pandas()


def _utc_x(field: str, title: str) -> alt.X:
    return alt.X(field, title=f"{title} (UTC)", scale=alt.Scale(type="utc"), axis=UTC_AXIS)


def _utc_tip(field: str) -> alt.Tooltip:
    return alt.Tooltip(field, format="%Y-%m-%d %H:%M:%S", formatType="utc")


def counts_per_tier(tables: dict[str, str], span: TimeRange = EVERYTHING) -> pd.DataFrame:
    """topic, window_start, tier, messages (unique for exact audits): one row per tier and
    window of `span`."""
    frames = []
    if "audit_counts" in tables:
        counts = _frame(
            tables["audit_counts"],
            ["cluster", "topic", "audit_type", "window_start", "message_count", "unique_count",
             "duplicate_count"],
        )  # fmt: skip
        counts = counts[counts["audit_type"] == "AUDIT_TYPE_EXACT_UNIQ"]
        grouped = counts.groupby(["topic", "window_start", "cluster"], as_index=False).agg(
            messages=("message_count", "sum"),
            unique=("unique_count", "sum"),
            duplicates=("duplicate_count", "sum"),
        )
        grouped["tier"] = "audit " + grouped["cluster"]
        frames.append(grouped.drop(columns="cluster"))
    if "replication_audit" in tables:
        copied = _frame(
            tables["replication_audit"],
            ["source_topic", "destination_cluster", "window_start", "records_read",
             "records_written", "records_already_present"],
        )  # fmt: skip
        grouped = copied.groupby(["source_topic", "window_start"], as_index=False).agg(
            read=("records_read", "sum"), written=("records_written", "sum")
        )
        for column in ("read", "written"):
            part = grouped.rename(columns={"source_topic": "topic", column: "messages"})
            part = part[["topic", "window_start", "messages"]].copy()
            part["unique"] = part["messages"]
            part["duplicates"] = 0
            part["tier"] = f"replication {column}"
            frames.append(part)
    if not frames:
        return pd.DataFrame(columns=["topic", "window_start", "tier", "messages", "unique"])
    frame = pd.concat(frames, ignore_index=True)
    frame["window_start"] = pd.to_datetime(frame["window_start"], utc=True)
    return frame[span.mask(frame["window_start"])].reset_index(drop=True)


def loss_over_time(verdict_rows: list[dict[str, Any]]) -> pd.DataFrame:
    """check, window_start (UTC text), kind (missing, extra), value: the decided verdicts'
    records missing downstream and extra (`grid.missing_and_extra`)."""
    rows = []
    for r in verdict_rows:
        if r["verdict"] == INCOMPLETE:
            continue
        missing, extra = missing_and_extra(r)
        start = utc_text(r["window_start"])
        rows.append({"check": r["check_name"], "window_start": start, "kind": "missing",
                     "value": missing})  # fmt: skip
        rows.append({"check": r["check_name"], "window_start": start, "kind": "extra",
                     "value": extra})  # fmt: skip
    return pd.DataFrame(rows, columns=["check", "window_start", "kind", "value"])


Section = tuple[str, str, "alt.TopLevelMixin | None", str]  # anchor, title, chart, html


def sections(data: Warehouse) -> list[Section]:
    """(anchor, title, chart or None, html) per section, for the tables the warehouse holds:
    the grid, totals and gaps first, then the charts."""
    built = [
        _grid_section(data),
        _totals_section(data),
        _gaps_section(data),
        _tiers_section(data),
        _loss_section(data),
        _latency_section(data),
        _replication_section(data),
        _groups_section(data),
        _probes_section(data),
    ]
    return [section for section in built if section is not None]


def _grid_section(data: Warehouse) -> Section | None:
    if data.tiers.empty and "audit_verdicts" not in data.tables:
        return None
    cells = grid(data.verdicts, data.tiers)
    note = "" if "audit_verdicts" in data.tables else _NO_VERDICTS
    legend = (
        "<p>Each cell: the window's verdict (the worst of its checks' newest revisions) and "
        "the worst check's counts upstream &rarr; downstream, difference and percentage; "
        "hover for every check. Newest window first.</p>"
    )
    summary = headline_html(cells, data.span) + legend
    return ("grid", "Verdicts per topic and window", None, summary + note + grid_html(cells))


def totals_of(data: Warehouse) -> pd.DataFrame:
    """`grid.totals` of the warehouse's `audit_counts` and verdicts in the range."""
    audit = pd.DataFrame()
    if "audit_counts" in data.tables:
        audit = data.frame(
            "audit_counts",
            ["cluster", "topic", "audit_type", "window_start", "message_count",
             "duplicate_count", "late_count", "no_event_time_count"],
            "window_start",
        )  # fmt: skip
    return totals(audit, data.verdicts)


def _totals_section(data: Warehouse) -> Section | None:
    if "audit_counts" not in data.tables and "audit_verdicts" not in data.tables:
        return None
    return ("totals", "Totals per cluster and topic", None, _table(totals_of(data)))


def _gaps_section(data: Warehouse) -> Section | None:
    if "replication_gaps" not in data.tables:
        return None
    gaps = read(data.tables["replication_gaps"]).to_pandas()
    frame = newest_gaps(gaps, data.span)
    if frame.empty:
        return ("gaps", "Replication gaps", None, "<p>No source offset is missing.</p>")
    frame["window_start"] = frame["window_start"].map(utc_text)
    return ("gaps", "Replication gaps (source offsets that never arrived)", None, _table(frame))


def _tiers_section(data: Warehouse) -> Section | None:
    if data.tiers.empty:
        return None
    chart = (
        alt.Chart(data.tiers)
        .mark_line(point=True)
        .encode(
            x=_utc_x("window_start:T", "window"),
            y=alt.Y("messages:Q", title="messages"),
            color="tier:N",
            strokeDash="tier:N",
            tooltip=["topic", "tier", _utc_tip("window_start:T"), "messages"],
        )
        .properties(width=900, height=220)
        .facet(row="topic:N")
    )
    return ("tiers", "Counts per tier per window", chart, "")


def _loss_section(data: Warehouse) -> Section | None:
    losses = loss_over_time(data.verdicts)
    if losses.empty:
        return None
    chart = (
        alt.Chart(losses)
        .mark_bar()
        .encode(
            # One band per judged window (ordinal): a window's bar is visible however
            # short the window is next to the time axis.
            x=alt.X("window_start:O", title="window start (UTC)"),
            xOffset="kind:N",
            y=alt.Y("value:Q", title="records"),
            color="kind:N",
            tooltip=["check", "kind", "window_start", "value"],
        )
        .properties(width=900, height=160)
        .facet(row="check:N")
    )
    return ("loss", "Loss and duplicates over time", chart, "")


def _seconds(frame: pd.DataFrame, keys: list[str], name: str) -> pd.DataFrame:
    """The frame's millisecond columns melted into (`name`, seconds) rows."""
    melted = frame.melt(id_vars=keys, var_name=name, value_name="ms").dropna()
    melted["seconds"] = melted.pop("ms") / 1000.0
    melted[name] = melted[name].str.replace("_ms", "", regex=False)
    return melted


def _latency_section(data: Warehouse) -> Section | None:
    if "audit_counts" not in data.tables:
        return None
    latency = data.frame(
        "audit_counts",
        ["topic", "window_start", "latency_p50_ms", "latency_p95_ms", "latency_p99_ms"],
        "window_start",
    )
    latency = latency.groupby(["topic", "window_start"], as_index=False).max()
    melted = _seconds(latency, ["topic", "window_start"], "percentile")
    chart = (
        alt.Chart(melted)
        .mark_line(point=True)
        .encode(
            x=_utc_x("window_start:T", "window"),
            y=alt.Y("seconds:Q", title="audit latency (s)", axis=alt.Axis(format=",~f")),
            color="percentile:N",
            tooltip=["topic", "percentile", _utc_tip("window_start:T"), "seconds"],
        )
        .properties(width=900, height=200)
    )
    return ("latency", "Audit latency percentiles", chart, "")


def _replication_section(data: Warehouse) -> Section | None:
    if "replication_stats" not in data.tables:
        return None
    stats = data.frame(
        "replication_stats",
        ["job_group_id", "batch_time", "replication_latency_ms_p99",
         "replication_latency_ms_max", "record_age_ms_max"],
        "batch_time",
    )  # fmt: skip
    stats = stats.groupby(["job_group_id", "batch_time"], as_index=False).max()
    melted = _seconds(stats, ["job_group_id", "batch_time"], "metric")
    chart = (
        alt.Chart(melted)
        .mark_line(point=True)
        .encode(
            x=_utc_x("batch_time:T", "batch"),
            y=alt.Y("seconds:Q", title="seconds", axis=alt.Axis(format=",~f")),
            color="metric:N",
            tooltip=["job_group_id", "metric", _utc_tip("batch_time:T"), "seconds"],
        )
        .properties(width=900, height=200)
    )
    return ("replication", "Replication lag", chart, "")


def _groups_section(data: Warehouse) -> Section | None:
    if "consumer_group_status" not in data.tables:
        return None
    status = data.frame(
        "consumer_group_status",
        ["group", "evaluated_at", "status", "total_lag", "reason"],
        "evaluated_at",
    )
    chart = (
        alt.Chart(status)
        .mark_tick(thickness=3)
        .encode(
            x=_utc_x("evaluated_at:T", "evaluated at"),
            y=alt.Y("group:N", title="consumer group"),
            color=alt.Color("status:N", scale=alt.Scale(domain=STATUS_ORDER)),
            tooltip=["group", "status", "total_lag", "reason", _utc_tip("evaluated_at:T")],
        )
        .properties(width=900, height=alt.Step(24))
    )
    latest = status.sort_values("evaluated_at").groupby("group", as_index=False).last()
    latest["evaluated_at"] = latest["evaluated_at"].map(utc_text)
    return ("groups", "Consumer-group status timeline", chart, _table(latest))


def _probes_section(data: Warehouse) -> Section | None:
    if "availability_probes" not in data.tables:
        return None
    probes = data.frame(
        "availability_probes",
        ["window_start", "broker", "zone", "produce_success_ratio", "consume_success_ratio"],
        "window_start",
    )
    probes = probes[probes["broker"].notna()].copy()
    probes["target"] = (
        "broker " + probes["broker"].astype("Int64").astype(str) + " / zone "
        + probes["zone"].fillna("-")
    )  # fmt: skip
    melted = probes.melt(
        id_vars=["window_start", "target"],
        value_vars=["produce_success_ratio", "consume_success_ratio"],
        var_name="ratio",
    ).dropna()
    chart = (
        alt.Chart(melted)
        .mark_line(point=True)
        .encode(
            x=_utc_x("window_start:T", "probe window"),
            y=alt.Y("value:Q", title="success", scale=alt.Scale(domain=[0, 1])),
            color="target:N",
            strokeDash="ratio:N",
            tooltip=["target", "ratio", _utc_tip("window_start:T"), "value"],
        )
        .properties(width=900, height=200)
    )
    return ("probes", "Probe success per broker and zone", chart, "")


def _table(frame: pd.DataFrame) -> str:
    """Every row of `frame`, in a scrolled box (never cut)."""
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in frame.columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in row) + "</tr>"
        for row in frame.itertuples(index=False)
    )
    return f'<div class="scroll"><table><tr>{head}</tr>{body}</table></div>'


_STYLE = """
body { font-family: sans-serif; margin: 24px; color: #222; }
table { border-collapse: collapse; font-size: 12px; margin: 8px 0; }
td, th { border: 1px solid #ccc; padding: 2px 6px; text-align: left; vertical-align: top; }
section { margin-bottom: 32px; }
.scroll { max-height: 420px; overflow: auto; margin-bottom: 16px; }
.scroll.grid { max-height: 70vh; }
.scroll.problems { max-height: 160px; }
#grid thead th { position: sticky; top: 0; background: #f5f5f5; z-index: 2; }
#grid tbody th { position: sticky; left: 0; background: #f5f5f5; z-index: 1; white-space: nowrap; }
#grid td.cell { min-width: 150px; white-space: nowrap; }
.v-LOSS { background: #d32f2f; color: #fff; }
.v-DUPLICATION { background: #f57c00; color: #fff; }
.v-INCOMPLETE { background: #e0e0e0; color: #333; }
.v-OK { background: #c8e6c9; color: #1b5e20; }
.none { color: #999; }
.headline { font-size: 15px; }
"""


def build_html(
    warehouse: Path | str, generated_at: datetime | None = None, span: TimeRange = EVERYTHING
) -> str:
    """The page for the tables under `warehouse`, restricted to `span`. Raises
    MissingWarehouse when `warehouse` is not a directory."""
    data = Warehouse.open(warehouse, span)
    specs: dict[str, Any] = {}
    parts = []
    for anchor, title, chart, extra in sections(data):
        parts.append(f'<section id="{anchor}"><h2>{html.escape(title)}</h2>')
        if chart is not None:
            specs[f"chart-{anchor}"] = chart.to_dict()
            parts.append(f'<div class="chart" id="chart-{anchor}"></div>')
        parts.append(f"{extra}</section>")
    if not parts:
        parts.append(f"<p>No tables under {html.escape(str(warehouse))}.</p>")
    payload = json.dumps(specs, default=str).replace("</", "<\\/")
    when = utc_text(generated_at or datetime.now(UTC))
    bundle = vl_convert.javascript_bundle()  # type: ignore[call-arg]  # snippet is optional
    return f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>uatu-spark completeness report</title>
<style>{_STYLE}</style>
<script type="text/javascript">{bundle}</script>
</head>
<body data-charts="{len(specs)}">
<h1>Completeness report</h1>
<p>Warehouse {html.escape(str(warehouse))}, tables: {html.escape(", ".join(sorted(data.tables)))};
generated {when}.</p>
{"".join(parts)}
<script type="text/javascript">
const specs = {payload};
for (const [id, spec] of Object.entries(specs)) {{
  vegaEmbed("#" + id, spec, {{renderer: "svg", actions: false}})
    .then(() => {{ document.getElementById(id).dataset.drawn = "true"; }})
    .catch((error) => console.error(id, error));
}}
</script>
</body></html>
"""


def write_report(warehouse: Path | str, out: Path, span: TimeRange = EVERYTHING) -> Path:
    """Write the page to `out` (its directory made); raises MissingWarehouse first."""
    page = build_html(warehouse, span=span)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(page)
    return out
