"""`AuditWindowSensor`: wait, deferred, until an audit window is complete; fail on a bad verdict."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.exceptions import AirflowFailException
from airflow.sdk import BaseSensorOperator

from uatu_airflow.triggers import AuditWindowTrigger


class AuditWindowSensor(BaseSensorOperator):
    """Defers to `AuditWindowTrigger` at once (no worker slot while waiting).

    `window_start`/`window_end` are templated (default: the run's data interval). The task
    fails when the verdict is in `fail_on` (default LOSS), or the window is still INCOMPLETE at
    the trigger's timeout; otherwise it returns the verdict (pushed to XCom).
    """

    template_fields: Sequence[str] = (
        "warehouse",
        "cluster",
        "topic",
        "window_start",
        "window_end",
        "expected_count",
        "replication_job_group_id",
    )

    def __init__(
        self,
        *,
        warehouse: str,
        cluster: str,
        topic: str,
        window_start: str = "{{ data_interval_start.isoformat() }}",
        window_end: str = "{{ data_interval_end.isoformat() }}",
        allowed_lateness_seconds: int = 0,
        expected_count: int | str | None = None,
        replication_job_group_id: str | None = None,
        verdict_source: str = "audit_counts",
        fail_on: Sequence[str] = ("LOSS",),
        poll_seconds: float = 5.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.warehouse = warehouse
        self.cluster = cluster
        self.topic = topic
        self.window_start = window_start
        self.window_end = window_end
        self.allowed_lateness_seconds = allowed_lateness_seconds
        self.expected_count = expected_count
        self.replication_job_group_id = replication_job_group_id
        self.verdict_source = verdict_source
        self.fail_on = tuple(fail_on)
        self.poll_seconds = poll_seconds

    def execute(self, context: Any) -> None:
        expected = _optional(self.expected_count)
        self.defer(
            trigger=AuditWindowTrigger(
                warehouse=self.warehouse,
                cluster=self.cluster,
                topic=self.topic,
                window_start=str(self.window_start),
                window_end=str(self.window_end),
                allowed_lateness_seconds=self.allowed_lateness_seconds,
                expected_count=int(expected) if expected is not None else None,
                replication_job_group_id=_optional(self.replication_job_group_id),
                verdict_source=self.verdict_source,
                poll_seconds=self.poll_seconds,
                timeout_seconds=self.timeout,
            ),
            method_name="execute_complete",
        )

    def execute_complete(self, context: Any, event: dict[str, Any]) -> dict[str, Any]:
        self.log.info("audit window %s/%s: %s", self.cluster, self.topic, event)
        if event["status"] == "timeout":
            raise AirflowFailException(f"audit window still INCOMPLETE: {event['detail']}")
        if event["verdict"] in self.fail_on:
            raise AirflowFailException(
                f"verdict {event['verdict']}: observed {event['observed']}, expected "
                f"{event['expected']} ({event['detail']})"
            )
        return event


def _optional(value: object) -> str | None:
    """A rendered template of a null param is "None": treat it (and "") as absent."""
    return None if value in (None, "", "None") else str(value)
