"""Webhook alerts: POST one JSON document when a consumer group turns bad or recovers, or a
verdict table says a window lost data, as Burrow's HTTP notifier does for groups.

    python -m integrations.notifier --warehouse var/warehouse --webhook http://host/hook \\
        [--interval 30] [--state var/notifier.json] [--once]

Source: the Delta tables, read with delta-rs (no Spark): the newest `consumer_group_status`
row of every (cluster, group), and, when the table exists, the verdict of every (check,
window) of `audit_verdicts` as `integrations.verdicts` reads it (the newest revision; the
cross-tier audit job decides, this module only reads).

Sends (Content-Type application/json):

* `{"kind": "consumer_group", "event": "open", "cluster", "group", "status", "previous",
  "total_lag", "max_time_lag_ms", "reason", "evaluated_at"}` when a group enters WARN, ERR,
  STOP or STALL, or moves between those; `"event": "close"` when it is OK again;
* `{"kind": "audit_verdict", "event": "open", ...the verdict row...}` once per (check,
  window, revision) whose newest revision says LOSS (a LOSS revised away before a pass saw
  it is not sent: the newest revision is the verdict).

State (what was already sent) is a small JSON file, so a restart does not send twice and does
not miss a change that happened while it was down. A failed POST is retried on the next pass
and nothing is marked sent until the receiver answered 2xx.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from integrations.tables import find_tables, read
from integrations.verdicts import LOSS, TABLE, read_newest

log = logging.getLogger("uatu.notifier")

ALERT_STATUSES = frozenset({"WARN", "ERR", "STOP", "STALL"})


@dataclass
class NotifierState:
    """What has been sent: each group's last alerted status, and the verdicts announced."""

    groups: dict[str, str] = field(default_factory=dict)  # "cluster/group" -> status
    verdicts: set[str] = field(default_factory=set)

    @classmethod
    def load(cls, path: Path) -> NotifierState:
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            return cls()
        return cls(dict(data.get("groups", {})), set(data.get("verdicts", [])))

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(path.suffix + ".partial")
        partial.write_text(
            json.dumps({"groups": self.groups, "verdicts": sorted(self.verdicts)}, indent=1)
        )
        partial.replace(path)  # atomic: a crash leaves the old state or the new one


def group_events(
    latest: Iterable[Mapping[str, Any]], sent: Mapping[str, str]
) -> list[tuple[str, str, dict[str, Any]]]:
    """(key, new sent status, document) for every group whose alert state changed (pure).

    `latest` holds the newest status row per group; `sent` the status last alerted per group
    (absent: nothing open). A new sent status of "" closes the alert.
    """
    events = []
    for row in latest:
        key = f"{row['cluster']}/{row['group']}"
        status, previous = row["status"], sent.get(key, "")
        opening = status in ALERT_STATUSES and status != previous
        closing = status not in ALERT_STATUSES and previous != ""
        if not (opening or closing):
            continue
        document = {
            "kind": "consumer_group",
            "event": "open" if opening else "close",
            "cluster": row["cluster"],
            "group": row["group"],
            "status": status,
            "previous": previous or "OK",
            "total_lag": row.get("total_lag"),
            "max_time_lag_ms": row.get("max_time_lag_ms"),
            "reason": row.get("reason"),
            "evaluated_at": _text(row.get("evaluated_at")),
        }
        events.append((key, status if opening else "", document))
    return events


def verdict_events(
    rows: Iterable[Mapping[str, Any]], sent: set[str]
) -> list[tuple[str, dict[str, Any]]]:
    """(key, document) for every LOSS verdict row not announced yet (pure). `rows` are the
    newest revisions (`integrations.verdicts.read_newest`)."""
    events = []
    for row in rows:
        if row.get("verdict") != LOSS:
            continue
        key = "/".join(str(row.get(k)) for k in ("check_name", "topic", "window_start", "revision"))
        if key in sent:
            continue
        events.append((key, {"kind": "audit_verdict", "event": "open", **_jsonable(row)}))
    return events


def newest_group_statuses(path: str) -> list[dict[str, Any]]:
    rows = read(
        path,
        ["cluster", "group", "status", "total_lag", "max_time_lag_ms", "reason", "evaluated_at"],
    ).to_pylist()
    newest: dict[tuple[str, str], dict[str, Any]] = {}
    for row in rows:
        key = (row["cluster"], row["group"])
        if key not in newest or row["evaluated_at"] > newest[key]["evaluated_at"]:
            newest[key] = row
    return [newest[k] for k in sorted(newest)]


def post_json(url: str, document: Mapping[str, Any], timeout: float = 10.0) -> None:
    """POST `document`; raises OSError (urllib's errors included) unless the answer is 2xx."""
    request = urllib.request.Request(
        url,
        data=json.dumps(document).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=timeout) as resp:
        if not 200 <= resp.status < 300:
            raise urllib.error.HTTPError(url, resp.status, "not 2xx", resp.headers, None)


def notify_once(
    warehouse: str,
    state: NotifierState,
    send: Callable[[Mapping[str, Any]], None],
) -> int:
    """One pass over the tables; returns how many documents were sent. `state` is updated
    only for what `send` accepted."""
    tables = find_tables(warehouse)
    sent = 0
    if "consumer_group_status" in tables:
        latest = newest_group_statuses(tables["consumer_group_status"])
        for key, status, document in group_events(latest, state.groups):
            send(document)
            if status:
                state.groups[key] = status
            else:
                state.groups.pop(key, None)
            sent += 1
    if TABLE in tables:
        for key, document in verdict_events(read_newest(warehouse), state.verdicts):
            send(document)
            state.verdicts.add(key)
            sent += 1
    return sent


def run(args: argparse.Namespace) -> int:
    state = NotifierState.load(args.state)
    while True:
        try:
            count = notify_once(
                str(args.warehouse), state, lambda doc: post_json(args.webhook, doc)
            )
            if count:
                log.info("sent %d notification(s) to %s", count, args.webhook)
        except OSError as e:
            log.warning("webhook %s: %s; retrying next pass", args.webhook, e)
        finally:
            state.save(args.state)
        if args.once:
            return 0
        time.sleep(args.interval)


def _text(value: Any) -> Any:
    return value.isoformat() if isinstance(value, datetime) else value


def _jsonable(row: Mapping[str, Any]) -> dict[str, Any]:
    return {k: _text(v) for k, v in row.items() if not isinstance(v, bytes | bytearray)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m integrations.notifier",
        description="POST a JSON webhook when a consumer group turns WARN/ERR/STOP/STALL "
        "(and when it recovers) or a verdict is LOSS.",
    )
    parser.add_argument("--warehouse", type=Path, required=True, help="the jobs' warehouse")
    parser.add_argument("--webhook", required=True, help="URL that receives the JSON POSTs")
    parser.add_argument("--interval", type=float, default=30.0, help="seconds between passes")
    parser.add_argument(
        "--state",
        type=Path,
        default=Path("var/notifier-state.json"),
        help="what was sent already (default: var/notifier-state.json)",
    )
    parser.add_argument("--once", action="store_true", help="one pass, then exit")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
