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
    trigger_seconds: int | None = 1,
    *,
    consumer_group: str | None = None,
    from_earliest: bool = False,
) -> JobGroup:
    """A KAFKA_AUDIT JobGroup on cluster `local`, 60 s windows, a short trigger interval.

    `rate` 0 means no flow control; `trigger_seconds` None leaves the job's default trigger
    (no JobOptions extension). `consumer_group` names the group (else the job derives one);
    `from_earliest` starts a new group at the earliest offsets instead of the latest.
    """
    source: dict = {
        "cluster": "local",
        "topic": topic,
        "auditMetadata": {
            "auditConfigs": [{"auditType": t, "auditIntervalInSeconds": 60} for t in audit_types]
        },
    }
    if consumer_group is not None:
        source["consumerGroup"] = consumer_group
    if from_earliest:
        source["autoOffsetResetPolicy"] = "AUTO_OFFSET_RESET_POLICY_EARLIEST"
    data: dict = {
        "jobGroupId": group_id,
        "type": "JOB_TYPE_KAFKA_AUDIT",
        "kafkaConsumerTaskGroup": source,
    }
    if trigger_seconds is not None:
        data["extension"] = {
            "@type": "type.googleapis.com/uatu.v1.JobOptions",
            "trigger": {"intervalSeconds": trigger_seconds},
        }
    if rate:
        data["flowControl"] = {"messagesPerSec": rate}
    return json_format.ParseDict(data, JobGroup())


def parse(data: dict) -> JobGroup:
    """A JobGroup from its protobuf-JSON mapping as a dict (`extension` types registered)."""
    return json_format.ParseDict(data, JobGroup())
