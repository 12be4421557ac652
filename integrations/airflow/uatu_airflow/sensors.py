"""`AuditWindowSensor`: wait, deferred, until the cross-tier audit has decided a window; fail
on a bad verdict."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseSensorOperator
from airflow.sdk.exceptions import AirflowFailException

from integrations.verdicts import LOSS, VERDICTS, describe
from uatu_airflow.triggers import AuditWindowTrigger


class AuditWindowSensor(BaseSensorOperator):
    """Defers to `AuditWindowTrigger` at once (no worker slot while waiting).

    What it waits for is `audit_verdicts`, the cross-tier audit's table (a counting audit alone
    writes no verdict): the verdicts of `cluster`/`topic` (the checked, downstream side), or of
    the checks named in `check_names` (a list, or names separated by commas), or of those
    checks on that topic, for every check window overlapping [`window_start`, `window_end`)
    (templated; default: the run's data interval). The range is decided when every check
    judging it (every named check) has a newest revision other than INCOMPLETE.

    The task fails when any check's verdict is in `fail_on` (default LOSS), or when the range
    is still undecided at the sensor's `timeout`; otherwise it returns the answer (verdict:
    the worst of the checks; each check's row), pushed to XCom.
    """

    template_fields: Sequence[str] = (
        "warehouse",
        "cluster",
        "topic",
        "check_names",
        "window_start",
        "window_end",
    )

    def __init__(
        self,
        *,
        warehouse: str,
        cluster: str | None = None,
        topic: str | None = None,
        check_names: Sequence[str] | str | None = None,
        window_start: str = "{{ data_interval_start.isoformat() }}",
        window_end: str = "{{ data_interval_end.isoformat() }}",
        fail_on: Sequence[str] = (LOSS,),
        poll_seconds: float = 5.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        unknown = sorted(set(fail_on) - set(VERDICTS))
        if unknown:
            raise ValueError(f"fail_on={unknown}: not a verdict (one of {list(VERDICTS)})")
        self.warehouse = warehouse
        self.cluster = cluster
        self.topic = topic
        self.check_names = check_names
        self.window_start = window_start
        self.window_end = window_end
        self.fail_on = tuple(fail_on)
        self.poll_seconds = poll_seconds

    def execute(self, context: Any) -> None:
        self.defer(
            trigger=AuditWindowTrigger(
                warehouse=str(self.warehouse),
                window_start=str(self.window_start),
                window_end=str(self.window_end),
                cluster=_optional(self.cluster),
                topic=_optional(self.topic),
                check_names=names(self.check_names),
                poll_seconds=self.poll_seconds,
                timeout_seconds=self.timeout,
            ),
            method_name="execute_complete",
        )

    def execute_complete(self, context: Any, event: dict[str, Any]) -> dict[str, Any]:
        self.log.info("audit window %s: %s", self.topic or self.check_names, event)
        if event["status"] == "timeout":
            raise AirflowFailException(f"audit window still INCOMPLETE: {event['detail']}")
        failing = [c for c in event["checks"] if c["verdict"] in self.fail_on]
        if failing:
            raise AirflowFailException(
                f"verdict {event['verdict']}: " + "; ".join(describe(c) for c in failing)
            )
        return event


def _optional(value: object) -> str | None:
    """A rendered template of a null param is "None": treat it (and "") as absent."""
    return None if value in (None, "", "None") else str(value)


def names(value: Sequence[str] | str | None) -> list[str]:
    """Check names from a list, or from text separated by commas (a rendered template);
    None, "" and "None" are none."""
    if isinstance(value, str):
        value = [] if _optional(value) is None else value.split(",")
    return [n.strip() for n in value or () if n and n.strip()]
