"""Helpers shared by the test modules: a JobGroup to audit, and polling with a deadline."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from google.protobuf import json_format
from uatu.v1 import job_options_pb2  # noqa: F401  (registers JobOptions for `extension`)
from uber.data.kafka.datatransfer.job_group_pb2 import JobGroup

T = TypeVar("T")


def audit_group(
    group_id: str,
    topic: str,
    rate: float = 0,
    audit_types: tuple[str, ...] = ("AUDIT_TYPE_APPROX_UNIQ",),
    trigger_seconds: int = 1,
) -> JobGroup:
    """A KAFKA_AUDIT JobGroup on cluster `local`, 60 s windows, a short trigger interval."""
    data: dict = {
        "jobGroupId": group_id,
        "type": "JOB_TYPE_KAFKA_AUDIT",
        "kafkaConsumerTaskGroup": {
            "cluster": "local",
            "topic": topic,
            "auditMetadata": {
                "auditConfigs": [
                    {"auditType": t, "auditIntervalInSeconds": 60} for t in audit_types
                ]
            },
        },
        "extension": {
            "@type": "type.googleapis.com/uatu.v1.JobOptions",
            "trigger": {"intervalSeconds": trigger_seconds},
        },
    }
    if rate:
        data["flowControl"] = {"messagesPerSec": rate}
    return json_format.ParseDict(data, JobGroup())


def wait_for(predicate: Callable[[], T], deadline_s: float, what: str) -> T:
    """Poll `predicate` every half second until it returns something truthy, or fail."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out after {deadline_s} s waiting for {what}")
