"""Load a JobGroup from its protobuf-JSON file and check the fields every job type relies on.

A JobGroup arrives as a JSON file in the protobuf JSON mapping (`google.protobuf.json_format`),
for example::

    {"jobGroupId": "orders-audit", "type": "JOB_TYPE_KAFKA_AUDIT",
     "kafkaConsumerTaskGroup": {"cluster": "local", "topic": "orders", ...}}

Job-specific checks live with each job (`jobs/audit/spec.py`); everything here runs before a
SparkSession exists, and each failure raises one `InvalidJobGroup` naming the field and value.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from google.protobuf import json_format
from uatu.v1.job_options_pb2 import JobOptions
from uber.data.kafka.datatransfer import job_pb2
from uber.data.kafka.datatransfer.job_group_pb2 import JobGroup

from core.config import ClusterConfig
from core.errors import InvalidJobGroup, UnknownCluster

JOB_OPTIONS_TYPE_URL = "type.googleapis.com/uatu.v1.JobOptions"

# The id names the checkpoint folder and the Spark query, so it must be a safe path segment.
_JOB_GROUP_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9@._-]{0,199}$")


@dataclass(frozen=True)
class SourceTopic:
    """The topic a job reads, checked for existence before it starts."""

    field: str  # the JobGroup field that names it, for error messages
    topic: str
    cluster: str


def parse_jobgroup(text: str, source: str = "<jobgroup>") -> JobGroup:
    """Parse protobuf-JSON text into a JobGroup; unknown or mistyped fields are errors."""
    group = JobGroup()
    try:
        json_format.Parse(text, group, ignore_unknown_fields=False)
    except json_format.ParseError as e:
        raise InvalidJobGroup(source, _first_line(str(e)), "not a valid JobGroup JSON") from None
    return group


def load_jobgroup(path: Path) -> JobGroup:
    try:
        text = path.read_text()
    except OSError as e:
        raise InvalidJobGroup("jobgroup file", str(path), e.strerror or str(e)) from None
    return parse_jobgroup(text, source=str(path))


def job_type_name(group: JobGroup) -> str:
    return job_pb2.JobType.Name(group.type)


def job_options(group: JobGroup) -> JobOptions:
    """The project's own options from `extension`, or all defaults when it is unset."""
    options = JobOptions()
    if not group.HasField("extension"):
        return options
    if group.extension.type_url != JOB_OPTIONS_TYPE_URL:
        raise InvalidJobGroup(
            "extension.@type", group.extension.type_url, f"expected {JOB_OPTIONS_TYPE_URL}"
        )
    group.extension.Unpack(options)
    return options


def check_common(group: JobGroup, clusters: Mapping[str, ClusterConfig]) -> None:
    """Checks that hold for every job type: id, type, flow control, source cluster and topic
    (every type that reads one)."""
    if not _JOB_GROUP_ID.match(group.job_group_id):
        raise InvalidJobGroup(
            "job_group_id",
            group.job_group_id,
            "must be 1-200 characters of letters, digits, '@', '.', '_' or '-'",
        )
    if group.type == job_pb2.JOB_TYPE_INVALID:
        raise InvalidJobGroup("type", job_type_name(group), "a job type is required")
    flow = group.flow_control
    for name in ("messages_per_sec", "bytes_per_sec", "max_inflight_messages"):
        value = getattr(flow, name)
        if math.isnan(value) or value < 0:
            raise InvalidJobGroup(f"flow_control.{name}", value, "must be >= 0 (0 = unlimited)")
    # A LOAD_GEN_PRODUCE group reads nothing: its topic is kafka_dispatcher_task_group's,
    # which its own spec checks.
    if group.type != job_pb2.JOB_TYPE_LOAD_GEN_PRODUCE:
        source = group.kafka_consumer_task_group
        require_cluster("kafka_consumer_task_group.cluster", source.cluster, clusters)
        if not source.topic.strip():
            raise InvalidJobGroup(
                "kafka_consumer_task_group.topic", source.topic, "a topic is required"
            )
    job_options(group)  # a wrong extension type is reported here, before any job-specific check


def require_cluster(field: str, name: str, clusters: Mapping[str, ClusterConfig]) -> ClusterConfig:
    if not name:
        raise InvalidJobGroup(field, name, "a cluster name is required")
    if name not in clusters:
        raise UnknownCluster(field, name, list(clusters))
    return clusters[name]


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else text
