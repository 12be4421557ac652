"""The webhook notifier: group alerts open and close once, a LOSS verdict is announced once, a
failed POST is retried, and a restart sends nothing twice. Real Delta tables (delta-rs) and a
real HTTP receiver on loopback."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest
from deltalake import write_deltalake

from integrations.notifier import NotifierState, group_events, main, verdict_events
from tests.integrations.verdict_rows import SCHEMA, row

T0 = datetime(2026, 11, 24, 3, 0, tzinfo=UTC)


class Receiver:
    """An HTTP server that records JSON POSTs; `failing` makes it answer 500."""

    def __init__(self) -> None:
        self.documents: list[dict[str, Any]] = []
        self.failing = False
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if receiver.failing:
                    self.send_response(500)
                else:
                    receiver.documents.append(json.loads(body))
                    self.send_response(204)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    try:
        yield r
    finally:
        r.server.shutdown()


def statuses(warehouse: Path, at: datetime, **by_group: str) -> None:
    rows = [
        {
            "cluster": "local",
            "evaluated_at": at,
            "group": group,
            "status": status,
            "total_lag": 7,
            "max_time_lag_ms": 1500,
            "reason": f"rule for {status}",
        }
        for group, status in by_group.items()
    ]
    write_deltalake(str(warehouse / "consumer_group_status"), pd.DataFrame(rows), mode="append")


def run_once(warehouse: Path, receiver: Receiver, state: Path) -> int:
    argv = ["--warehouse", str(warehouse), "--webhook", receiver.url, "--state", str(state)]
    return main([*argv, "--once"])


def test_group_alerts_open_once_close_once_and_survive_a_restart(tmp_path, receiver) -> None:
    warehouse, state = tmp_path / "wh", tmp_path / "state.json"
    statuses(warehouse, T0, orders="WARN", billing="OK")
    assert run_once(warehouse, receiver, state) == 0
    assert [(d["group"], d["event"], d["status"]) for d in receiver.documents] == [
        ("orders", "open", "WARN")
    ]
    assert receiver.documents[0]["reason"] == "rule for WARN"

    assert run_once(warehouse, receiver, state) == 0  # a new process: nothing sent twice
    assert len(receiver.documents) == 1

    statuses(warehouse, T0 + timedelta(minutes=1), orders="OK", billing="STOP")
    receiver.failing = True  # the receiver is down: nothing is marked sent
    run_once(warehouse, receiver, state)
    assert len(receiver.documents) == 1
    receiver.failing = False
    run_once(warehouse, receiver, state)
    assert sorted((d["group"], d["event"], d["previous"]) for d in receiver.documents[1:]) == [
        ("billing", "open", "OK"),
        ("orders", "close", "WARN"),
    ]
    run_once(warehouse, receiver, state)
    assert len(receiver.documents) == 3


def test_loss_verdicts_are_announced_once_per_newest_revision(tmp_path, receiver) -> None:
    """Only a newest revision is a verdict: a LOSS revised to OK before the pass is not sent,
    a window whose newest revision is LOSS is sent once, and again when revised (new counts)."""
    warehouse, state = tmp_path / "wh", tmp_path / "state.json"
    path = str(warehouse / "audit_verdicts")

    def append(*rows: dict) -> None:
        write_deltalake(path, pa.Table.from_pylist(list(rows), schema=SCHEMA), mode="append")

    later = T0 + timedelta(hours=1)
    append(
        row("svc->kafka", T0, 1, "LOSS", counts=(10, 8)),
        row("svc->kafka", T0, 2, "OK", counts=(10, 10)),
        row("svc->kafka", later, 2, "LOSS", counts=(10, 7)),  # newest, written first
        row("svc->kafka", later, 1, "OK", counts=(10, 10)),
    )
    run_once(warehouse, receiver, state)
    run_once(warehouse, receiver, state)
    sent = [(d["kind"], d["window_start"], d["verdict"], d["revision"], d["right_count"])
            for d in receiver.documents]  # fmt: skip
    assert sent == [("audit_verdict", later.isoformat(), "LOSS", 2, 7)]
    append(row("svc->kafka", later, 3, "LOSS", counts=(10, 6)))
    run_once(warehouse, receiver, state)
    run_once(warehouse, receiver, state)
    assert [(d["revision"], d["right_count"]) for d in receiver.documents] == [(2, 7), (3, 6)]


def test_the_event_rules_alone() -> None:
    rows = [
        {"cluster": "c", "group": "a", "status": "STALL"},
        {"cluster": "c", "group": "b", "status": "ERR"},
        {"cluster": "c", "group": "d", "status": "OK"},
    ]
    events = group_events(rows, {"c/b": "ERR", "c/d": "STOP"})
    assert [(k, s, d["event"]) for k, s, d in events] == [
        ("c/a", "STALL", "open"),
        ("c/d", "", "close"),
    ]
    assert verdict_events([{"verdict": "OK"}], set()) == []
    assert NotifierState().groups == {}
