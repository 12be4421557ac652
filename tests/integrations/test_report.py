"""The completeness report in a real browser: Debian's headless Chromium opens the page (no
network: everything is inlined), every chart draws, the console stays clean. Its verdicts are
the newest revisions of `audit_verdicts`, never a rule of its own."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest
from deltalake import write_deltalake
from PIL import Image

from devservices.chromium import render_page
from integrations.report import counts_per_tier, window_verdicts, write_report
from integrations.tables import find_tables
from tests.integrations.verdict_rows import SCHEMA, row

pytestmark = pytest.mark.integration

T0 = datetime(2030, 1, 1, tzinfo=UTC)
ALL_DRAWN = (
    "document.querySelectorAll('.chart[data-drawn] svg .mark-line, .chart[data-drawn] svg "
    ".mark-rect, .chart[data-drawn] svg .mark-symbol').length > 0 && "
    "document.querySelectorAll('.chart[data-drawn]').length == Number(document.body.dataset.charts)"
)


def write_tables(warehouse: Path) -> None:
    """A small warehouse in the jobs' column names, written with delta-rs: two audited tiers
    of one topic (one window short by 4 at the destination), the cross-tier verdicts of its
    first three windows (minute 1 revised from OK to LOSS), a replication, groups, probes."""
    audit = [
        {
            "cluster": cluster, "topic": "orders", "partition": 0,
            "audit_type": "AUDIT_TYPE_EXACT_UNIQ", "window_start": T0 + timedelta(minutes=i),
            "message_count": 100, "unique_count": 96 if (cluster, i) == ("dest", 3) else 100,
            "duplicate_count": 0, "latency_p50_ms": 5.0, "latency_p95_ms": 9.0,
            "latency_p99_ms": 20.0, "updated_at": T0 + timedelta(minutes=10),
        }
        for cluster in ("local", "dest") for i in range(5)
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


def test_the_verdicts_shown_are_the_newest_revisions_of_audit_verdicts(tmp_path) -> None:
    """Minute 3 is short at the destination, but no check judged it: INCOMPLETE, not LOSS;
    minute 1 shows its newest revision (LOSS), not its first (OK)."""
    write_tables(tmp_path / "wh")
    tiers = counts_per_tier(find_tables(tmp_path / "wh"))
    shown = window_verdicts(tmp_path / "wh", tiers)
    got = {
        (r.window_start.to_pydatetime(), r.cluster, r.verdict, r.checks) for r in shown.itertuples()
    }
    assert got == {
        (T0, "dest", "OK", "xdc:local->dest: OK (100 -> 100, revision 1)"),
        (T0 + timedelta(minutes=1), "dest", "LOSS",
         "xdc:local->dest: LOSS (100 -> 93, revision 2)"),
        (T0 + timedelta(minutes=2), "dest", "INCOMPLETE",
         "xdc:local->dest: INCOMPLETE (100 -> 0, revision 1)"),
        (T0 + timedelta(minutes=3), "-", "INCOMPLETE", "no verdict yet"),
        (T0 + timedelta(minutes=4), "-", "INCOMPLETE", "no verdict yet"),
    }  # fmt: skip


def test_the_report_draws_every_chart_in_headless_chromium(tmp_path) -> None:
    write_tables(tmp_path / "wh")
    page = write_report(tmp_path / "wh", tmp_path / "report.html")
    text = page.read_text()
    assert "<script src=" not in text and "cdn" not in text.lower()  # self-contained
    result = render_page(
        page.resolve().as_uri(), tmp_path / "report.png", ready_js=ALL_DRAWN, height=900
    )
    assert result.errors == []
    charts = int(
        render_page(
            page.resolve().as_uri(),
            tmp_path / "again.png",
            ready_js="document.body.dataset.charts",
        ).ready_value
    )
    assert charts == 6
    shot = Image.open(result.screenshot).convert("L")
    assert shot.size[1] > 1500  # the whole page, not one screen
    histogram = shot.histogram()
    assert sum(histogram[:200]) > 0.01 * shot.size[0] * shot.size[1]  # drawn, not blank
