"""`AuditWindowTrigger`: async, in the triggerer: "has the cross-tier audit decided the window?"

It reads `audit_verdicts` with delta-rs through `integrations.verdicts` (the one reader of the
verdict; in a worker thread so the triggerer's event loop never blocks) every `poll_seconds`,
never starts Spark, and fires once the range is decided: every check judging it (or each of
`check_names`) has a newest revision other than INCOMPLETE. After `timeout_seconds` it fires
with status "timeout" and the answer so far (INCOMPLETE).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Sequence
from datetime import datetime
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from integrations.verdicts import RangeQuery, range_answer


class AuditWindowTrigger(BaseTrigger):
    def __init__(
        self,
        warehouse: str,
        window_start: str,
        window_end: str,
        cluster: str | None = None,
        topic: str | None = None,
        check_names: Sequence[str] = (),
        poll_seconds: float = 5.0,
        timeout_seconds: float = 3600.0,
    ) -> None:
        super().__init__()
        self.kwargs: dict[str, Any] = {
            "warehouse": warehouse,
            "window_start": window_start,
            "window_end": window_end,
            "cluster": cluster,
            "topic": topic,
            "check_names": list(check_names),
            "poll_seconds": poll_seconds,
            "timeout_seconds": timeout_seconds,
        }
        self.query()  # a bad query fails where it is built, not in the triggerer

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return "uatu_airflow.triggers.AuditWindowTrigger", dict(self.kwargs)

    def query(self) -> RangeQuery:
        k = self.kwargs
        return RangeQuery(
            warehouse=k["warehouse"],
            start=datetime.fromisoformat(k["window_start"]),
            end=datetime.fromisoformat(k["window_end"]),
            cluster=k["cluster"],
            topic=k["topic"],
            check_names=tuple(k["check_names"]),
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        deadline = time.monotonic() + self.kwargs["timeout_seconds"]
        query = self.query()
        while True:
            answer = await asyncio.to_thread(range_answer, query)
            if answer.decided:
                yield TriggerEvent({"status": "done", **answer.to_dict()})
                return
            if time.monotonic() >= deadline:
                yield TriggerEvent({"status": "timeout", **answer.to_dict()})
                return
            self.log.info("window not decided yet: %s", answer.detail)
            await asyncio.sleep(self.kwargs["poll_seconds"])
