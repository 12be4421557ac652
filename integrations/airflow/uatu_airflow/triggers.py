"""`AuditWindowTrigger`: async, in the triggerer: "is the audit window complete, and its verdict?"

It polls the Delta tables with delta-rs (`integrations.verdicts`, in a worker thread so the
triggerer's event loop never blocks) every `poll_seconds`, never starts Spark, and gives up
after `timeout_seconds` with verdict INCOMPLETE. `verdict_source` names where verdicts come
from: `audit_counts` now; the cross-tier `audit_verdicts` table plugs in there once it exists.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from integrations.verdicts import INCOMPLETE, WindowQuery, window_verdict


class AuditWindowTrigger(BaseTrigger):
    def __init__(
        self,
        warehouse: str,
        cluster: str,
        topic: str,
        window_start: str,
        window_end: str,
        allowed_lateness_seconds: int = 0,
        expected_count: int | None = None,
        replication_job_group_id: str | None = None,
        verdict_source: str = "audit_counts",
        poll_seconds: float = 5.0,
        timeout_seconds: float = 3600.0,
    ) -> None:
        super().__init__()
        self.kwargs: dict[str, Any] = {
            "warehouse": warehouse,
            "cluster": cluster,
            "topic": topic,
            "window_start": window_start,
            "window_end": window_end,
            "allowed_lateness_seconds": allowed_lateness_seconds,
            "expected_count": expected_count,
            "replication_job_group_id": replication_job_group_id,
            "verdict_source": verdict_source,
            "poll_seconds": poll_seconds,
            "timeout_seconds": timeout_seconds,
        }

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return "uatu_airflow.triggers.AuditWindowTrigger", dict(self.kwargs)

    def query(self) -> WindowQuery:
        k = self.kwargs
        return WindowQuery(
            warehouse=k["warehouse"],
            cluster=k["cluster"],
            topic=k["topic"],
            start=datetime.fromisoformat(k["window_start"]),
            end=datetime.fromisoformat(k["window_end"]),
            allowed_lateness_seconds=k["allowed_lateness_seconds"],
            expected_count=k["expected_count"],
            replication_job_group_id=k["replication_job_group_id"],
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        deadline = time.monotonic() + self.kwargs["timeout_seconds"]
        query = self.query()
        while True:
            result = await asyncio.to_thread(window_verdict, query, self.kwargs["verdict_source"])
            if result.verdict != INCOMPLETE:
                yield TriggerEvent({"status": "done", **result.to_dict()})
                return
            if time.monotonic() >= deadline:
                yield TriggerEvent({"status": "timeout", **result.to_dict()})
                return
            self.log.info("window not complete yet: %s", result.detail)
            await asyncio.sleep(self.kwargs["poll_seconds"])
