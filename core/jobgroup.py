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
from pathlib import Path
from typing import Any

from google.protobuf import json_format
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message
from uatu.v1.job_options_pb2 import JobOptions
from uber.data.kafka.datatransfer import job_pb2
from uber.data.kafka.datatransfer.job_group_pb2 import JobGroup

from core.config import ClusterConfig
from core.errors import InvalidJobGroup, UnknownCluster, first_line

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
# The JVM dispatcher reads flow_control.max_inflight_messages as a Java int.
MAX_INFLIGHT = 2**31 - 1


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
    if isinstance(data, dict):
        _check_enum_values(data, JobGroup.DESCRIPTOR, "")
    group = JobGroup()
    try:
        json_format.ParseDict(data, group, ignore_unknown_fields=False)
    except (json_format.ParseError, TypeError, AttributeError) as e:
        raise InvalidJobGroup("jobgroup", source, _not_valid(e)) from None
    return group


def _check_enum_values(data: dict, descriptor: Any, prefix: str) -> None:
    """Every enum field of `data` (JSON of message `descriptor`) names a value of its enum or
    gives its number as a JSON integer. protobuf's parser also takes `true` (as 1) and any
    float (2.5 as 2); here they are refused, naming the field. Unknown keys are left to the
    parser, which names them."""
    by_name = {**descriptor.fields_by_name, **{f.json_name: f for f in descriptor.fields}}
    for key, value in data.items():
        field = by_name.get(key)
        if field is None:
            continue  # "@type" of an Any, or a key the parser refuses by name
        name = f"{prefix}{field.name}"
        items = value if field.is_repeated and isinstance(value, list) else [value]
        for i, item in enumerate(items):
            where = f"{name}[{i}]" if field.is_repeated and isinstance(value, list) else name
            if field.type == FieldDescriptor.TYPE_ENUM:
                _check_enum_value(field.enum_type, item, where)
            elif field.type == FieldDescriptor.TYPE_MESSAGE and isinstance(item, dict):
                inner = field.message_type
                if inner.full_name == "google.protobuf.Any":
                    if item.get("@type") != JOB_OPTIONS_TYPE_URL:
                        continue  # job_options() refuses any other type, naming it
                    inner = JobOptions.DESCRIPTOR
                _check_enum_values(item, inner, f"{where}.")


def _check_enum_value(enum: Any, value: Any, field: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise InvalidJobGroup(field, value, f"not a value of {enum.name}: give its name")
    if isinstance(value, str) and value not in enum.values_by_name:
        raise InvalidJobGroup(field, value, f"not a value of {enum.name}")


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
    check_flow_control("flow_control", group.flow_control)
    # A LOAD_GEN_PRODUCE group reads nothing: its topic is kafka_dispatcher_task_group's,
    # which its own spec checks.
    if group.type != job_pb2.JOB_TYPE_LOAD_GEN_PRODUCE:
        source = group.kafka_consumer_task_group
        require_cluster("kafka_consumer_task_group.cluster", source.cluster, clusters)
        # Many topics (extension.topics) instead of one: core.spec.source_spec checks them,
        # and refuses them for the job types that read one topic.
        selected = job_options(group).topics
        if not source.topic.strip() and not (selected.names or selected.pattern.strip()):
            raise InvalidJobGroup(
                "kafka_consumer_task_group.topic", source.topic, "a topic is required"
            )
        if source.topic.strip():
            check_topic("kafka_consumer_task_group.topic", source.topic)
    check_secure(group, clusters)
    job_options(group)  # a wrong extension type is reported here, before any job-specific check


def check_flow_control(field: str, flow: job_pb2.FlowControl) -> None:
    """Rates finite, 0 (unlimited) to MAX_RATE; in-flight messages 0 (adaptive) to
    MAX_INFLIGHT."""
    limits = {"messages_per_sec": MAX_RATE, "bytes_per_sec": MAX_RATE}
    limits["max_inflight_messages"] = MAX_INFLIGHT
    for name, limit in limits.items():
        value = getattr(flow, name)
        if not math.isfinite(value) or not 0 <= value <= limit:
            raise InvalidJobGroup(f"{field}.{name}", value, f"must be 0 to {limit:g}")


# What every job type reads, whatever it is: its id and type, whether its clusters must be
# reached over TLS, uForwarder's debug flag and owner tag (jobs/main.py), its trigger and its
# output locations (core/spec.py refuses a table the type does not write).
COMMON_READS = frozenset(
    {
        "job_group_id",
        "type",
        "security_config.is_secure",
        "misc_config.enable_debug",
        "misc_config.owner_service_name",
        "extension.trigger",
        "extension.output",
    }
)
# Fields no job type here reads, and what a user should know instead.
_NEVER_READ = {
    "kafka_dispatcher_task_group.dedup_enabled": "Uber's internal dedup service is not part of "
    "this product (the replication copy writes no duplicate without it)",
    "security_config.service_identities": "no SPIFFE authorization here; the control plane's "
    "tokens and certificates say who may call it",
    "security_config.multi_tenancy_enabled": "unused in uForwarder's public code and here",
    "misc_config.scale_reset_enabled": "no autoscaler resets a scale here",
}


def set_fields(group: JobGroup) -> list[tuple[str, str, Any]]:
    """(path, shown path, value) of every field `group` sets, down to scalars, enums, lists
    and timestamps: paths name fields by their proto names, without list indices; shown
    paths have them. The project's options in `extension` count as `extension.<field>`."""
    found: list[tuple[str, str, Any]] = []
    _walk(group, "", "", found)
    return found


def _walk(message: Message, path: str, shown: str, found: list[tuple[str, str, Any]]) -> None:
    for descriptor, value in message.ListFields():
        here, seen = f"{path}{descriptor.name}", f"{shown}{descriptor.name}"
        if descriptor.enum_type is not None and not descriptor.is_repeated:
            name = descriptor.enum_type.values_by_number.get(value)
            found.append((here, seen, name.name if name is not None else value))
        elif descriptor.message_type is None:
            found.append((here, seen, value))
        elif descriptor.message_type.full_name == "google.protobuf.Timestamp":
            found.append((here, seen, value.ToJsonString()))
        elif descriptor.message_type.full_name == "google.protobuf.Any":
            options = JobOptions()
            if value.type_url == JOB_OPTIONS_TYPE_URL and value.Unpack(options):
                _walk(options, f"{here}.", f"{seen}.", found)
            else:
                found.append((here, seen, value.type_url))
        elif descriptor.is_repeated:
            for i, item in enumerate(value):
                _walk(item, f"{here}.", f"{seen}[{i}].", found)
        else:
            _walk(value, f"{here}.", f"{seen}.", found)


def refuse_unread(group: JobGroup, reads: frozenset[str]) -> None:
    """Every field `group` sets is read by its job type (`reads`, paths or their parents,
    plus COMMON_READS); the first that is not is an InvalidJobGroup naming it: a field set
    and silently ignored would make a user believe it works."""
    wanted = reads | COMMON_READS
    for path, shown, value in set_fields(group):
        parts = path.split(".")
        if any(".".join(parts[:n]) in wanted for n in range(1, len(parts) + 1)):
            continue
        why = _NEVER_READ.get(path) or f"{job_type_name(group)} does not use it"
        raise InvalidJobGroup(shown, value, f"refused rather than ignored: {why}")


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
    return f"not a valid JobGroup JSON: {first_line(str(error), mark_cut=True)}"
