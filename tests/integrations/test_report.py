"""The completeness report in a real browser: Debian's headless Chromium opens the page (no
network: everything is inlined), every chart draws, the console stays clean, the LOSS cell of
a known window is red with its numbers and the newest window is on the first screen. Its
verdicts are the newest revisions of `audit_verdicts`, never a rule of its own."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest
from deltalake import write_deltalake
from PIL import Image

from devservices.chromium import render_page
from integrations.report import Warehouse, counts_per_tier, grid, write_report
from tests.integrations.verdict_rows import SCHEMA, row

pytestmark = pytest.mark.integration

T0 = datetime(2030, 1, 1, tzinfo=UTC)
ALL_DRAWN = (
    "document.querySelectorAll('.chart[data-drawn] svg .mark-line, .chart[data-drawn] svg "
    ".mark-rect, .chart[data-drawn] svg .mark-symbol').length > 0 && "
    "document.querySelectorAll('.chart[data-drawn]').length == Number(document.body.dataset.charts)"
)
LOSS_WINDOW = (T0 + timedelta(minutes=1)).isoformat()
# What the page shows once drawn: the LOSS cell's colour and text, the newest row's place.
FACTS = f"""(() => {{
  if (!({ALL_DRAWN})) return false;
  const loss = document.querySelector('#grid td[data-topic="orders"][data-window="{LOSS_WINDOW}"]');
  const newest = document.querySelector('#grid tbody tr');
  return JSON.stringify({{
    background: getComputedStyle(loss).backgroundColor, text: loss.innerText,
    newestTop: newest.getBoundingClientRect().top,
    newestWindow: newest.querySelector('th').innerText,
    screen: window.innerHeight, rows: document.querySelectorAll('#grid tbody tr').length,
    charts: Number(document.body.dataset.charts)}});
}})()"""
PAYMENT_WINDOWS = 150


def write_tables(warehouse: Path) -> None:
    """A small warehouse in the jobs' column names, written with delta-rs: two audited tiers
    of one topic (one window short by 4 at the destination), the cross-tier verdicts of its
    first three windows (minute 1 revised from OK to LOSS) and a gap, a second topic audited
    for PAYMENT_WINDOWS minutes (more rows than a screen), a replication, groups, probes."""
    audit = [
        {
            "cluster": cluster, "topic": "orders", "partition": 0,
            "audit_type": "AUDIT_TYPE_EXACT_UNIQ", "window_start": T0 + timedelta(minutes=i),
            "message_count": 100, "unique_count": 96 if (cluster, i) == ("dest", 3) else 100,
            "duplicate_count": 0, "latency_p50_ms": 5.0, "latency_p95_ms": 9.0,
            "latency_p99_ms": 20.0, "updated_at": T0 + timedelta(minutes=10),
            "late_count": i, "no_event_time_count": 1,
        }
        for cluster in ("local", "dest") for i in range(5)
    ] + [
        {
            "cluster": "local", "topic": "payments", "partition": 0,
            "audit_type": "AUDIT_TYPE_EXACT_UNIQ", "window_start": T0 + timedelta(minutes=i),
            "message_count": 10, "unique_count": 10, "duplicate_count": 0,
            "latency_p50_ms": 1500.0, "latency_p95_ms": 4000.0, "latency_p99_ms": 9000.0,
            "updated_at": T0 + timedelta(minutes=i + 1), "late_count": 0,
            "no_event_time_count": 0,
        }
        for i in range(PAYMENT_WINDOWS)
    ]  # fmt: skip
    write_deltalake(str(warehouse / "audit_counts"), pd.DataFrame(audit))
    minute = timedelta(minutes=1)
    verdicts = [
        row("xdc:local->dest", T0, 1, "OK", cluster="dest", window_end=T0 + minute),
        row("xdc:local->dest", T0 + minute, 1, "OK", cluster="dest", window_end=T0 + 2 * minute),
        row("xdc:local->dest", T0 + 2 * minute, 1, "INCOMPLETE", cluster="dest",
            window_end=T0 + 3 * minute, counts=(100, 0)),
        row("xdc:local->dest", T0 + minute, 2, "LOSS", cluster="dest", window_end=T0 + 2 * minute,
            counts=(100, 93)),
    ]  # fmt: skip
    write_deltalake(
        str(warehouse / "audit_verdicts"), pa.Table.from_pylist(verdicts, schema=SCHEMA)
    )
    copied = [
        {"job_group_id": "dr", "source_topic": "orders", "destination_cluster": "dest",
         "window_start": T0 + timedelta(minutes=i), "records_read": 100, "records_written": 100,
         "records_already_present": 0}
        for i in range(5)
    ]  # fmt: skip
    write_deltalake(str(warehouse / "replication_audit"), pd.DataFrame(copied))
    gaps = [
        {"check_name": "xdc:local->dest", "job_group_id": "orders-tiers",
         "source_cluster": "local", "source_topic": "orders", "partition": 0,
         "window_start": T0 + minute, "first_offset": 140, "last_offset": 146,
         "missing_count": 7, "destination": "dest/orders", "decided_at": T0, "revision": 2}
    ]  # fmt: skip
    write_deltalake(str(warehouse / "replication_gaps"), pd.DataFrame(gaps))
    stats = [
        {"job_group_id": "dr", "batch_time": T0 + timedelta(seconds=10 * i),
         "replication_latency_ms_p99": 30 + i, "replication_latency_ms_max": 40 + i,
         "record_age_ms_max": 20 + i}
        for i in range(5)
    ]  # fmt: skip
    write_deltalake(str(warehouse / "replication_stats"), pd.DataFrame(stats))
    groups = [
        {"group": group, "evaluated_at": T0 + timedelta(seconds=5 * i), "status": status,
         "total_lag": i, "reason": "t/0 STOP: commits_stopped" if status == "STOP" else ""}
        for i in range(5)
        for group, status in (("billing", "OK" if i < 3 else "STOP"), ("idle", "NO_COMMITS"))
    ]  # fmt: skip
    write_deltalake(str(warehouse / "consumer_group_status"), pd.DataFrame(groups))
    probes = [
        {"window_start": T0 + timedelta(seconds=10 * i), "broker": broker, "zone": "a",
         "produce_success_ratio": 1.0, "consume_success_ratio": 0.9}
        for i in range(5) for broker in (1, 2)
    ]  # fmt: skip
    write_deltalake(str(warehouse / "availability_probes"), pd.DataFrame(probes))


def test_the_grid_shows_the_newest_revisions_of_audit_verdicts(tmp_path) -> None:
    """Read back through delta-rs: minute 3 is short at the destination, but no check judged
    it: INCOMPLETE, not LOSS; minute 1 shows its newest revision (LOSS), not its first (OK)."""
    write_tables(tmp_path / "wh")
    data = Warehouse.open(tmp_path / "wh")
    cells = grid(data.verdicts, counts_per_tier(data.tables))
    orders = cells[cells["topic"] == "orders"]
    got = {(r.window_start.to_pydatetime(), r.verdict, r.summary) for r in orders.itertuples()}
    assert got == {
        (T0, "OK", "100 → 100, +0 (+0.0%)"),
        (T0 + timedelta(minutes=1), "LOSS", "100 → 93, -7 (-7.0%)"),
        (T0 + timedelta(minutes=2), "INCOMPLETE", "100 → 0, -100 (-100.0%)"),
        (T0 + timedelta(minutes=3), "INCOMPLETE", "100 audited"),
        (T0 + timedelta(minutes=4), "INCOMPLETE", "100 audited"),
    }
    assert (cells["topic"] == "payments").sum() == PAYMENT_WINDOWS


def test_the_report_draws_every_chart_in_headless_chromium(tmp_path) -> None:
    write_tables(tmp_path / "wh")
    page = write_report(tmp_path / "wh", tmp_path / "report.html")
    text = page.read_text()
    assert "<script src=" not in text and "cdn" not in text.lower()  # self-contained
    result = render_page(
        page.resolve().as_uri(), tmp_path / "report.png", ready_js=FACTS, height=900
    )
    assert result.errors == []
    facts = json.loads(result.ready_value)
    assert facts["charts"] == 6
    assert facts["rows"] == PAYMENT_WINDOWS  # every window, none cut
    assert facts["background"] == "rgb(211, 47, 47)"  # the LOSS cell is red
    assert facts["text"].split("\n") == ["LOSS", "100 → 93, -7 (-7.0%)"]
    newest = (T0 + timedelta(minutes=PAYMENT_WINDOWS - 1)).strftime("%Y-%m-%d %H:%M:%S UTC")
    assert facts["newestWindow"] == newest
    assert 0 < facts["newestTop"] < facts["screen"]  # on the first screen
    shot = Image.open(result.screenshot).convert("L")
    assert shot.size[1] > 1500  # the whole page, not one screen
    histogram = shot.histogram()
    assert sum(histogram[:200]) > 0.01 * shot.size[0] * shot.size[1]  # drawn, not blank
