"""JobGroup builders for tests, benches and examples."""

from __future__ import annotations

from google.protobuf import json_format
from uatu.v1 import job_options_pb2  # noqa: F401  (registers JobOptions for `extension`)
from uber.data.kafka.datatransfer.job_group_pb2 import JobGroup


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


def parse(data: dict) -> JobGroup:
    """A JobGroup from its protobuf-JSON mapping as a dict (`extension` types registered)."""
    return json_format.ParseDict(data, JobGroup())
