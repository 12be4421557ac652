"""The report's first screen as values (integrations/report/grid.py): the grid's cells are the
newest verdict revisions, every window is a row, the totals and gaps add up. Pure pandas, and
the command line's exit codes; the rendered page is tested in Chromium (test_report.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pandas as pd
import pytest

from integrations.report import TimeRange, grid, newest_gaps, totals
from integrations.report.__main__ import main
from tests.integrations.verdict_rows import HOUR, row

T0 = datetime(2030, 1, 1, tzinfo=UTC)


def tiers(*cells: tuple[str, datetime, int]) -> pd.DataFrame:
    frame = pd.DataFrame(cells, columns=["topic", "window_start", "messages"])
    frame["window_start"] = pd.to_datetime(frame["window_start"], utc=True)
    return frame


def test_a_cell_is_the_newest_revision_and_the_worst_check_with_its_numbers() -> None:
    rows = [
        row("svc->kafka", T0, 1, "OK"),
        row("svc->kafka", T0, 2, "LOSS", counts=(100, 93)),  # revised: the newest counts
        row("kafka->consumer:billing", T0, 1, "DUPLICATION", counts=(93, 95)),
        row("svc->kafka", T0 + HOUR, 1, "OK", counts=(50, 50)),
    ]
    cells = grid(rows, tiers())
    got = {(c.window_start.to_pydatetime(), c.verdict, c.summary) for c in cells.itertuples()}
    assert got == {
        (T0, "LOSS", "100 → 93, -7 (-7.0%) · 1 more check(s)"),
        (T0 + HOUR, "OK", "50 → 50, +0 (+0.0%)"),
    }
    detail = cells.loc[cells["window_start"] == T0, "detail"].item()
    assert "svc->kafka (local): LOSS, 100 → 93, -7 (-7.0%), revision 2" in detail
    assert "kafka->consumer:billing (local): DUPLICATION, 93 → 95, +2 (+2.2%)" in detail


def test_every_window_is_a_row_newest_first_and_unjudged_ones_are_incomplete() -> None:
    minute = timedelta(minutes=1)
    audited = [("orders", T0 + i * minute, 10 + i) for i in range(120)]
    judged = [row("xdc", T0, 1, "LOSS", window_end=T0 + minute, counts=(10, 9))]
    cells = grid(judged, tiers(*audited))
    assert len(cells) == 120  # none cut, none twice
    assert list(cells["window_start"]) == sorted(cells["window_start"], reverse=True)
    newest = cells.iloc[0]
    assert (newest.window_start, newest.verdict, newest.summary, newest.detail) == (
        T0 + 119 * minute, "INCOMPLETE", "129 audited", "no verdict yet",
    )  # fmt: skip
    assert cells.iloc[-1].verdict == "LOSS"  # the judged window is not also an audited row


def test_totals_add_up_per_cluster_and_topic() -> None:
    exact, approx = "AUDIT_TYPE_EXACT_UNIQ", "AUDIT_TYPE_APPROX_UNIQ"
    audit = pd.DataFrame(
        [
            # cluster, topic, type, window, messages, duplicates, late, untimed
            ("local", "orders", exact, T0, 100, 2, 5, 1),
            ("local", "orders", exact, T0 + HOUR, 100, 0, 3, 4),
            # the same records counted by the approximate audit too: not added again
            ("local", "orders", approx, T0, 100, None, 5, 1),
            ("dest", "orders", approx, T0, 93, None, 0, 0),  # only approximate here
        ],
        columns=["cluster", "topic", "audit_type", "window_start", "message_count",
                 "duplicate_count", "late_count", "no_event_time_count"],
    )  # fmt: skip
    verdicts = [
        row("xdc", T0, 1, "LOSS", cluster="dest", counts=(100, 93)),
        row("repl", T0 + HOUR, 1, "LOSS", cluster="dest", counts=(100, 100), missing_count=3),
        row("xdc", T0 + 2 * HOUR, 1, "DUPLICATION", cluster="dest", counts=(100, 104)),
        row("xdc", T0 + 3 * HOUR, 1, "INCOMPLETE", cluster="dest", counts=(100, 0)),
    ]
    got = totals(audit, verdicts).to_dict("records")
    assert got == [
        {"cluster": "dest", "topic": "orders", "messages": 93, "duplicates": 0, "late": 0,
         "untimed": 0, "windows_judged": 4, "loss_windows": 2, "duplication_windows": 1,
         "records_missing": 10, "records_extra": 4},
        {"cluster": "local", "topic": "orders", "messages": 200, "duplicates": 2, "late": 8,
         "untimed": 5, "windows_judged": 0, "loss_windows": 0, "duplication_windows": 0,
         "records_missing": 0, "records_extra": 0},
    ]  # fmt: skip


def test_gaps_are_the_newest_revision_as_offset_ranges_inside_the_range() -> None:
    def gap(window: datetime, revision: int, first: int, last: int) -> dict:
        return {"check_name": "repl", "job_group_id": "dr", "source_cluster": "local",
                "source_topic": "orders", "partition": 0, "window_start": window,
                "first_offset": first, "last_offset": last, "missing_count": last - first + 1,
                "destination": "dest/orders", "revision": revision}  # fmt: skip

    gaps = pd.DataFrame(
        [gap(T0, 1, 10, 19), gap(T0, 2, 12, 19), gap(T0, 2, 30, 30), gap(T0 + HOUR, 1, 5, 6)]
    )
    got = newest_gaps(gaps, TimeRange(until=T0 + HOUR))
    assert list(zip(got["offsets"], got["missing_count"], got["revision"], strict=True)) == [
        ("12-19", 8, 2),
        ("30-30", 1, 2),
    ]


def test_the_range_keeps_windows_from_since_and_before_until() -> None:
    span = TimeRange(T0 + HOUR, T0 + 3 * HOUR)
    times = pd.Series([T0, T0 + HOUR, T0 + 2 * HOUR, T0 + 3 * HOUR])
    assert list(span.mask(times)) == [False, True, True, False]


def test_a_missing_warehouse_exits_2_with_one_line(tmp_path, capsys) -> None:
    assert main(["--warehouse", str(tmp_path / "nope"), "--out", str(tmp_path / "r.html")]) == 2
    line = f"report: --warehouse {tmp_path / 'nope'}: no such directory\n"
    assert capsys.readouterr().err == line
    assert not (tmp_path / "r.html").exists()


def test_a_time_that_is_not_iso_exits_2_naming_it(tmp_path, capsys) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--warehouse", str(tmp_path), "--since", "yesterday"])
    assert exited.value.code == 2
    assert "--since: 'yesterday' is not an ISO 8601 time" in capsys.readouterr().err
