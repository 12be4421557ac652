"""The completeness report: one self-contained HTML page from the jobs' Delta tables.

Read with delta-rs (no Spark); charts are Vega-Lite specs built with Altair and drawn by Vega,
whose JavaScript is inlined in the page (`vl-convert-python`'s bundle): no CDN, it opens
offline. Sections, each shown when its table exists:

1. counts per tier per window (every audited cluster of a topic, and the replication job's
   read/written: numbers to look at, from `audit_counts` and `replication_audit`), with the
   verdict of each window as the cross-tier audit wrote it in `audit_verdicts`, read through
   `integrations.verdicts` (the one reader; this page decides nothing): every check judging
   the window and their worst; an audited window no check has judged yet is INCOMPLETE;
2. loss and duplicates over time: the decided verdicts' missing and extra records;
3. audit latency percentiles (p50/p95/p99 per window, worst partition);
4. replication lag (MirrorMaker 2's replication-latency-ms and record-age-ms per batch);
5. the consumer-group status timeline (with the rule that decided each status);
6. probe success per broker and zone.

The page sets `data-charts` on <body> to how many charts it holds, and each chart's div gets
`data-drawn` once Vega has rendered it, so a browser test (and a person) can tell it drew.
"""

from __future__ import annotations

import html
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import altair as alt
import pandas as pd
import vl_convert

from integrations.tables import find_tables, read
from integrations.verdicts import INCOMPLETE, NO_VERDICT, read_newest, window_answers

_NO_VERDICTS = (
    "<p>No <code>audit_verdicts</code> table: a verdict needs a cross-tier check "
    "(docs/audit.md), so every window is INCOMPLETE.</p>"
)
STATUS_ORDER = ["OK", "WARN", "ERR", "STOP", "STALL", "REWIND", "NOTFOUND", "NO_COMMITS"]


def _frame(path: str, columns: list[str]) -> pd.DataFrame:
    return read(path, columns).to_pandas()


def counts_per_tier(tables: dict[str, str]) -> pd.DataFrame:
    """topic, window_start, tier, messages (unique for exact audits): one row per tier."""
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
    return frame


def window_verdicts(warehouse: Path | str, tiers: pd.DataFrame) -> pd.DataFrame:
    """Per window judged in `audit_verdicts` (newest revisions): its overall verdict and each
    check's; then each audited (topic, window) of `tiers` that no verdict window of the topic
    covers, as INCOMPLETE with no verdict yet (cluster "-": any audited cluster)."""
    verdict_rows = read_newest(warehouse)
    rows = []
    for (cluster, topic, start, end), found in window_answers(verdict_rows):
        rows.append(
            {
                "cluster": cluster,
                "topic": topic,
                "window_start": pd.Timestamp(start),
                "window_end": pd.Timestamp(end),
                "verdict": found.verdict,
                "checks": "; ".join(
                    f"{c['check_name']}: {c['verdict']} ({c['left_count']} -> "
                    f"{c['right_count']}, revision {c['revision']})"
                    for c in found.checks
                ),
            }
        )
    covered = [(r["topic"], r["window_start"], r["window_end"]) for r in verdict_rows]
    for topic, start in sorted(set(zip(tiers["topic"], tiers["window_start"], strict=True))):
        if not any(t == topic and s <= start < e for t, s, e in covered):
            rows.append(
                {
                    "cluster": "-",
                    "topic": topic,
                    "window_start": start,
                    "window_end": "-",
                    "verdict": INCOMPLETE,
                    "checks": NO_VERDICT,
                }
            )
    columns = ["cluster", "topic", "window_start", "window_end", "verdict", "checks"]
    return pd.DataFrame(rows, columns=columns)


def loss_over_time(warehouse: Path | str) -> pd.DataFrame:
    """check, window_start (ISO text), kind (missing, extra), value: the decided verdicts' records
    missing downstream (REPLICATION's missing offsets, else the count difference) and extra."""
    rows = []
    for r in read_newest(warehouse):
        if r["verdict"] == INCOMPLETE:
            continue
        difference = r["difference"] or 0
        missing = r["missing_count"] if r["missing_count"] is not None else max(0, -difference)
        start = pd.Timestamp(r["window_start"]).isoformat()
        rows.append({"check": r["check_name"], "window_start": start, "kind": "missing",
                     "value": missing})  # fmt: skip
        rows.append({"check": r["check_name"], "window_start": start, "kind": "extra",
                     "value": max(0, difference)})  # fmt: skip
    return pd.DataFrame(rows, columns=["check", "window_start", "kind", "value"])


Section = tuple[str, str, "alt.TopLevelMixin | None", str]  # anchor, title, chart, html


def charts(warehouse: Path | str, tables: dict[str, str]) -> list[Section]:
    """(anchor, title, chart or None, html table or note) per section, for the tables the
    warehouse holds."""
    built = [
        _tiers_section(warehouse, tables),
        _loss_section(warehouse),
        _latency_section(tables),
        _replication_section(tables),
        _groups_section(tables),
        _probes_section(tables),
    ]
    return [section for section in built if section is not None]


def _tiers_section(warehouse: Path | str, tables: dict[str, str]) -> Section | None:
    tiers = counts_per_tier(tables)
    if tiers.empty and "audit_verdicts" not in tables:
        return None
    chart = (
        None
        if tiers.empty
        else (
            alt.Chart(tiers)
            .mark_line(point=True)
            .encode(
                x=alt.X("window_start:T", title="window"),
                y=alt.Y("messages:Q", title="messages"),
                color="tier:N",
                strokeDash="tier:N",
                tooltip=["topic", "tier", "window_start:T", "messages"],
            )
            .properties(width=900, height=220)
            .facet(row="topic:N")
        )
    )
    verdicts = window_verdicts(warehouse, tiers)
    note = "" if "audit_verdicts" in tables else _NO_VERDICTS
    return ("tiers", "Counts per tier per window", chart, note + _table(verdicts))


def _loss_section(warehouse: Path | str) -> Section | None:
    losses = loss_over_time(warehouse)
    if losses.empty:
        return None
    chart = (
        alt.Chart(losses)
        .mark_bar()
        .encode(
            # One band per judged window (ordinal): a window's bar is visible however
            # short the window is next to the time axis.
            x=alt.X("window_start:O", title="window start"),
            xOffset="kind:N",
            y=alt.Y("value:Q", title="records"),
            color="kind:N",
            tooltip=["check", "kind", "window_start", "value"],
        )
        .properties(width=900, height=160)
        .facet(row="check:N")
    )
    return ("loss", "Loss and duplicates over time", chart, "")


def _latency_section(tables: dict[str, str]) -> Section | None:
    if "audit_counts" not in tables:
        return None
    latency = _frame(
        tables["audit_counts"],
        ["topic", "window_start", "latency_p50_ms", "latency_p95_ms", "latency_p99_ms"],
    )
    latency = latency.groupby(["topic", "window_start"], as_index=False).max()
    melted = latency.melt(
        id_vars=["topic", "window_start"], var_name="percentile", value_name="ms"
    ).dropna()
    chart = (
        alt.Chart(melted)
        .mark_line(point=True)
        .encode(
            x=alt.X("window_start:T", title="window"),
            y=alt.Y("ms:Q", title="audit latency (ms)", scale=alt.Scale(type="symlog")),
            color="percentile:N",
            tooltip=["topic", "percentile", "window_start:T", "ms"],
        )
        .properties(width=900, height=200)
    )
    return ("latency", "Audit latency percentiles", chart, "")


def _replication_section(tables: dict[str, str]) -> Section | None:
    if "replication_stats" not in tables:
        return None
    stats = _frame(
        tables["replication_stats"],
        ["job_group_id", "batch_time", "replication_latency_ms_p99",
         "replication_latency_ms_max", "record_age_ms_max"],
    )  # fmt: skip
    stats = stats.groupby(["job_group_id", "batch_time"], as_index=False).max()
    melted = stats.melt(
        id_vars=["job_group_id", "batch_time"], var_name="metric", value_name="ms"
    ).dropna()
    chart = (
        alt.Chart(melted)
        .mark_line(point=True)
        .encode(
            x=alt.X("batch_time:T", title="batch"),
            y=alt.Y("ms:Q", title="ms"),
            color="metric:N",
            tooltip=["job_group_id", "metric", "batch_time:T", "ms"],
        )
        .properties(width=900, height=200)
    )
    return ("replication", "Replication lag", chart, "")


def _groups_section(tables: dict[str, str]) -> Section | None:
    if "consumer_group_status" not in tables:
        return None
    status = _frame(
        tables["consumer_group_status"],
        ["group", "evaluated_at", "status", "total_lag", "reason"],
    )
    chart = (
        alt.Chart(status)
        .mark_tick(thickness=3)
        .encode(
            x=alt.X("evaluated_at:T", title="evaluated at"),
            y=alt.Y("group:N", title="consumer group"),
            color=alt.Color("status:N", scale=alt.Scale(domain=STATUS_ORDER)),
            tooltip=["group", "status", "total_lag", "reason", "evaluated_at:T"],
        )
        .properties(width=900, height=alt.Step(24))
    )
    latest = status.sort_values("evaluated_at").groupby("group", as_index=False).last()
    return ("groups", "Consumer-group status timeline", chart, _table(latest))


def _probes_section(tables: dict[str, str]) -> Section | None:
    if "availability_probes" not in tables:
        return None
    probes = _frame(
        tables["availability_probes"],
        ["window_start", "broker", "zone", "produce_success_ratio", "consume_success_ratio"],
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
            x=alt.X("window_start:T", title="probe window"),
            y=alt.Y("value:Q", title="success", scale=alt.Scale(domain=[0, 1])),
            color="target:N",
            strokeDash="ratio:N",
            tooltip=["target", "ratio", "window_start:T", "value"],
        )
        .properties(width=900, height=200)
    )
    return ("probes", "Probe success per broker and zone", chart, "")


def _table(frame: pd.DataFrame, limit: int = 50) -> str:
    shown = frame.head(limit)
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in shown.columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in row) + "</tr>"
        for row in shown.itertuples(index=False)
    )
    more = f"<p>{len(frame) - limit} more rows</p>" if len(frame) > limit else ""
    return f"<table><tr>{head}</tr>{body}</table>{more}"


def build_html(warehouse: Path | str, generated_at: datetime | None = None) -> str:
    tables = find_tables(warehouse)
    sections = charts(warehouse, tables)
    specs: dict[str, Any] = {}
    parts = []
    for anchor, title, chart, extra in sections:
        parts.append(f'<section id="{anchor}"><h2>{html.escape(title)}</h2>')
        if chart is not None:
            specs[f"chart-{anchor}"] = chart.to_dict()
            parts.append(f'<div class="chart" id="chart-{anchor}"></div>')
        parts.append(f"{extra}</section>")
    if not sections:
        parts.append(f"<p>No tables under {html.escape(str(warehouse))}.</p>")
    payload = json.dumps(specs, default=str).replace("</", "<\\/")
    when = (generated_at or datetime.now(UTC)).isoformat(timespec="seconds")
    bundle = vl_convert.javascript_bundle()  # type: ignore[call-arg]  # snippet is optional
    return f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>uatu-spark completeness report</title>
<style>
body {{ font-family: sans-serif; margin: 24px; color: #222; }}
table {{ border-collapse: collapse; font-size: 12px; margin: 8px 0 24px; }}
td, th {{ border: 1px solid #ccc; padding: 2px 6px; text-align: left; }}
section {{ margin-bottom: 32px; }}
</style>
<script type="text/javascript">{bundle}</script>
</head>
<body data-charts="{len(specs)}">
<h1>Completeness report</h1>
<p>Warehouse {html.escape(str(warehouse))}, tables: {html.escape(", ".join(sorted(tables)))};
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


def write_report(warehouse: Path | str, out: Path) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(build_html(warehouse))
    return out
