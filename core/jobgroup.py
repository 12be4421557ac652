"""Load a JobGroup from its protobuf-JSON file and check the fields every job type relies on.

A JobGroup arrives as a JSON file in the protobuf JSON mapping (`google.protobuf.json_format`),
for example::

    {"jobGroupId": "orders-audit", "type": "JOB_TYPE_KAFKA_AUDIT",
     "kafkaConsumerTaskGroup": {"cluster": "local", "topic": "orders", ...}}

Job-specific checks live with each job (`jobs/audit/spec.py`); everything here runs before a
SparkSession exists, and each failure raises one `InvalidJobGroup` naming the field and value
(long values truncated).

Limits, the same for a file and for a JobGroup that arrives over gRPC: the file is at most
MAX_JOBGROUP_BYTES of UTF-8 JSON, with no key given twice (``jobGroupId`` and
``job_group_id`` are one key); every string field is at most MAX_STRING_CHARS, every list at
most MAX_LIST_ITEMS; every enum field holds a value the enum defines; rates are finite and
at most MAX_RATE; the id is matched whole (a trailing newline is not part of an id); topic
names follow Kafka's rules.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from google.protobuf import json_format
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message
from uatu.v1.job_options_pb2 import JobOptions
from uber.data.kafka.datatransfer import job_pb2
from uber.data.kafka.datatransfer.job_group_pb2 import JobGroup

from core.config import ClusterConfig
from core.errors import InvalidJobGroup, UnknownCluster

JOB_OPTIONS_TYPE_URL = "type.googleapis.com/uatu.v1.JobOptions"

# The id names the checkpoint folder and the Spark query, so it must be a safe path segment.
_JOB_GROUP_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9@._-]{0,199}")
# Kafka's own rule (org.apache.kafka.common.internals.Topic): 1-249 of these, not . or ..
_TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}")

MAX_JOBGROUP_BYTES = 1 << 20  # 1 MiB: a JobGroup is a few hundred bytes
MAX_STRING_CHARS = 4096
MAX_LIST_ITEMS = 10_000  # partition_offset_ranges: one per partition
MAX_AUDIT_CONFIGS = 64
MAX_RATE = 1e12  # messages or bytes per second: far above any cluster, far below overflow


@dataclass(frozen=True)
class SourceTopic:
    """The topic a job reads, checked for existence before it starts."""

    field: str  # the JobGroup field that names it, for error messages
    topic: str
    cluster: str


def parse_jobgroup(text: str, source: str = "<jobgroup>") -> JobGroup:
    """Parse protobuf-JSON text into a JobGroup; unknown, mistyped or repeated fields are
    errors."""
    if len(text) > MAX_JOBGROUP_BYTES:
        raise InvalidJobGroup("jobgroup", source, f"over {MAX_JOBGROUP_BYTES} characters")
    try:
        data = json.loads(text, object_pairs_hook=_unique_keys)
    except ValueError as e:
        raise InvalidJobGroup("jobgroup", source, _not_valid(e)) from None
    except RecursionError:
        raise InvalidJobGroup("jobgroup", source, "JSON nested too deep") from None
    group = JobGroup()
    try:
        json_format.ParseDict(data, group, ignore_unknown_fields=False)
    except (json_format.ParseError, TypeError, AttributeError) as e:
        raise InvalidJobGroup("jobgroup", source, _not_valid(e)) from None
    return group


class _DuplicateKey(ValueError):
    pass


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object, refusing a key given twice, also as its other protobuf JSON name."""
    seen: dict[str, str] = {}
    for key, _ in pairs:
        canonical = key.replace("_", "").lower()
        if canonical in seen:
            first = seen[canonical]
            names = f"{first!r} and {key!r}" if first != key else f"{key!r} twice"
            raise _DuplicateKey(f"key given twice: {names}")
        seen[canonical] = key
    return dict(pairs)


def load_jobgroup(path: Path) -> JobGroup:
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_JOBGROUP_BYTES + 1)
    except OSError as e:
        raise InvalidJobGroup("jobgroup file", str(path), e.strerror or str(e)) from None
    if len(raw) > MAX_JOBGROUP_BYTES:
        raise InvalidJobGroup("jobgroup file", str(path), f"larger than {MAX_JOBGROUP_BYTES} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InvalidJobGroup(
            "jobgroup file",
            str(path),
            f"not UTF-8 (byte {e.start}: {raw[e.start : e.start + 1]!r})",
        ) from None
    return parse_jobgroup(text, source=str(path))


def check_limits(message: Message, prefix: str = "") -> None:
    """Every string, bytes, list and enum field of `message` (recursively) within limits."""
    for descriptor, value in message.ListFields():
        field = f"{prefix}{descriptor.name}"
        if descriptor.is_repeated:
            if len(value) > MAX_LIST_ITEMS:
                raise InvalidJobGroup(field, f"{len(value)} items", f"over {MAX_LIST_ITEMS}")
            for i, item in enumerate(value):
                _check_value(descriptor, item, f"{field}[{i}]")
        else:
            _check_value(descriptor, value, field)


def _check_value(descriptor: FieldDescriptor, value: Any, field: str) -> None:
    kind = descriptor.type
    if kind == FieldDescriptor.TYPE_MESSAGE:
        check_limits(value, f"{field}.")
    elif kind in (FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_BYTES):
        if len(value) > MAX_STRING_CHARS * (16 if kind == FieldDescriptor.TYPE_BYTES else 1):
            raise InvalidJobGroup(field, value, f"longer than {MAX_STRING_CHARS}")
    elif kind == FieldDescriptor.TYPE_ENUM and value not in descriptor.enum_type.values_by_number:
        raise InvalidJobGroup(field, value, f"not a value of {descriptor.enum_type.name}")


def job_type_name(group: JobGroup) -> str:
    value = job_pb2.JobType.DESCRIPTOR.values_by_number.get(group.type)
    return value.name if value is not None else str(group.type)


def job_options(group: JobGroup) -> JobOptions:
    """The project's own options from `extension`, or all defaults when it is unset."""
    options = JobOptions()
    if not group.HasField("extension"):
        return options
    if group.extension.type_url != JOB_OPTIONS_TYPE_URL:
        raise InvalidJobGroup(
            "extension.@type", group.extension.type_url, f"expected {JOB_OPTIONS_TYPE_URL}"
        )
    if not group.extension.Unpack(options):
        raise InvalidJobGroup("extension", "value", "not a valid uatu.v1.JobOptions")
    check_limits(options, "extension.")
    return options


def check_common(group: JobGroup, clusters: Mapping[str, ClusterConfig]) -> None:
    """Checks that hold for every job type: limits, id, type, flow control, source cluster
    and topic (every type that reads one)."""
    check_limits(group)
    if not _JOB_GROUP_ID.fullmatch(group.job_group_id):
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
        if not math.isfinite(value) or not 0 <= value <= MAX_RATE:
            raise InvalidJobGroup(
                f"flow_control.{name}", value, f"must be 0 (unlimited) to {MAX_RATE:g}"
            )
    # A LOAD_GEN_PRODUCE group reads nothing: its topic is kafka_dispatcher_task_group's,
    # which its own spec checks.
    if group.type != job_pb2.JOB_TYPE_LOAD_GEN_PRODUCE:
        source = group.kafka_consumer_task_group
        require_cluster("kafka_consumer_task_group.cluster", source.cluster, clusters)
        if not source.topic.strip():
            raise InvalidJobGroup(
                "kafka_consumer_task_group.topic", source.topic, "a topic is required"
            )
        check_topic("kafka_consumer_task_group.topic", source.topic)
    check_secure(group, clusters)
    job_options(group)  # a wrong extension type is reported here, before any job-specific check


def check_topic(field: str, topic: str) -> None:
    """Kafka's topic-name rules; an empty name is the caller's business (optional topics)."""
    if topic and (not _TOPIC.fullmatch(topic) or topic in (".", "..")):
        raise InvalidJobGroup(
            field, topic, "not a Kafka topic name (1-249 of letters, digits, '.', '_', '-')"
        )


def check_secure(group: JobGroup, clusters: Mapping[str, ClusterConfig]) -> None:
    """`security_config.is_secure` (and the dispatcher's `is_secure`) are honoured: every
    cluster the group touches must be reached over TLS (security.protocol SSL or SASL_SSL)."""
    wanted = []
    if group.security_config.is_secure:
        wanted.append(("security_config.is_secure", group.kafka_consumer_task_group.cluster))
        if group.kafka_dispatcher_task_group.cluster:
            wanted.append(("security_config.is_secure", group.kafka_dispatcher_task_group.cluster))
    if group.kafka_dispatcher_task_group.is_secure:
        wanted.append(
            ("kafka_dispatcher_task_group.is_secure", group.kafka_dispatcher_task_group.cluster)
        )
    for field, name in wanted:
        cluster = clusters.get(name)
        if cluster is not None and not cluster.encrypted:
            raise InvalidJobGroup(
                field,
                True,
                f"cluster {name!r} is not reached over TLS (clusters.yaml security.protocol "
                "must be SSL or SASL_SSL)",
            )


def require_cluster(field: str, name: str, clusters: Mapping[str, ClusterConfig]) -> ClusterConfig:
    if not name:
        raise InvalidJobGroup(field, name, "a cluster name is required")
    if name not in clusters:
        raise UnknownCluster(field, name, list(clusters))
    return clusters[name]


def _not_valid(error: Exception) -> str:
    detail = _first_line(str(error))
    if len(detail) > 300:
        detail = detail[:300] + "..."
    return f"not a valid JobGroup JSON: {detail}"


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else text


# --- bounds of a bounded source read (replication, dispatch) --------------------------------

_SOURCE_RANGES = "kafka_consumer_task_group.partition_offset_ranges.partition_offset_range"


@dataclass(frozen=True)
class OffsetRange:
    """Offsets [start, end) of one source partition that a bounded run reads."""

    partition: int
    start: int
    end: int


def source_timestamp_ms(group: JobGroup, name: str) -> int | None:
    """kafka_consumer_task_group.<name> (a Timestamp) in epoch ms, None when unset."""
    source = group.kafka_consumer_task_group
    if not source.HasField(name):
        return None
    ms = int(getattr(source, name).ToMilliseconds())
    if ms < 0:
        raise InvalidJobGroup(f"kafka_consumer_task_group.{name}", ms, "must not be before 1970")
    return ms


def source_offset_ranges(group: JobGroup) -> tuple[OffsetRange, ...]:
    """kafka_consumer_task_group.partition_offset_ranges, checked: each range ends at or after
    its start, no partition twice, not set-but-empty. () when unset."""
    source = group.kafka_consumer_task_group
    if not source.HasField("partition_offset_ranges"):
        return ()
    ranges: list[OffsetRange] = []
    for i, r in enumerate(source.partition_offset_ranges.partition_offset_range):
        if r.end_offset < r.start_offset:
            raise InvalidJobGroup(
                f"{_SOURCE_RANGES}[{i}].end_offset",
                r.end_offset,
                f"ends before its start_offset {r.start_offset}",
            )
        if any(prev.partition == r.partition for prev in ranges):
            raise InvalidJobGroup(f"{_SOURCE_RANGES}[{i}].partition", r.partition, "listed twice")
        ranges.append(OffsetRange(r.partition, r.start_offset, r.end_offset))
    if not ranges:
        raise InvalidJobGroup(_SOURCE_RANGES, [], "set but empty")
    return tuple(ranges)
