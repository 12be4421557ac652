"""The contract every job type's spec answers, and the two halves every spec embeds.

A JobType's `prepare(group, settings)` (jobs/registry.py) turns a JobGroup into an immutable
spec with no broker and no Spark; the control plane imports it. Every spec answers `JobSpec`
and is built from these shared parts, each written once here:

* `SourceSpec` (`source_spec`): the Kafka topic a job reads, from `kafka_consumer_task_group`:
  cluster, topic, consumer group, where a new checkpoint starts (`auto_offset_reset_policy`),
  isolation level, and the bounds of a bounded read (start/end timestamps, offset ranges).
* `OutputSpec` (`output_spec`): where a job writes, its Delta tables and its checkpoint, from
  `extension.output`. It is the only way to a table or checkpoint location, and it resolves
  every one through `core/storage.py`, so the site's path policy (under the roots, no foreign
  scheme or host, no control characters, a checkpoint only in the group's own folder) holds
  for every JobType by construction. A `*_path` field naming a table the job type does not
  write is refused, not ignored.
* `trigger_seconds`: `extension.trigger.interval_seconds` with the job type's default.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Protocol

from uatu.v1.job_options_pb2 import JobOptions
from uber.data.kafka.datatransfer import job_pb2
from uber.data.kafka.datatransfer.job_group_pb2 import JobGroup

from core.config import ClusterConfig, Settings
from core.errors import InvalidJobGroup
from core.jobgroup import job_options, require_cluster
from core.storage import checkpoint_location, table_location

SOURCE = "kafka_consumer_task_group"
# The fields `source_spec` reads: every reading job type's READS (jobs/registry.py) names them
# through these, so a field `source_spec` starts to read is read by all of them at once.
SOURCE_READS = frozenset(
    f"{SOURCE}.{name}"
    for name in (
        "cluster",
        "topic",
        "consumer_group",
        "auto_offset_reset_policy",
        "isolation_level",
    )
)
BOUNDED_READS = frozenset(
    f"{SOURCE}.{name}" for name in ("start_timestamp", "end_timestamp", "partition_offset_ranges")
)
_RANGES = f"{SOURCE}.partition_offset_ranges.partition_offset_range"
_OUTPUT = "extension.output"
_CHECKPOINT_FIELD = "checkpoint_path"


@dataclass(frozen=True)
class SourceTopic:
    """The topic a job's runs depend on: it must exist before the job starts, and the control
    plane shows one job per partition of it."""

    field: str  # the JobGroup field that names it, for error messages
    topic: str
    cluster: str


class JobSpec(Protocol):
    """What every job's spec provides (each is a frozen dataclass in jobs/<type>/spec.py)."""

    @property
    def job_group_id(self) -> str: ...
    @property
    def query_name(self) -> str: ...
    @property
    def trigger_interval_seconds(self) -> int: ...
    @property
    def output(self) -> OutputSpec: ...
    def required_topic(self) -> SourceTopic: ...


# --- the source ------------------------------------------------------------------------------


@dataclass(frozen=True)
class OffsetRange:
    """Offsets [start, end) of one source partition that a bounded run reads."""

    partition: int
    start: int
    end: int


@dataclass(frozen=True)
class SourceSpec:
    """The Kafka topic a job reads and how it reads it."""

    cluster: ClusterConfig
    topic: str
    consumer_group: str = ""
    starting_offsets: str = "earliest"  # where a new checkpoint starts: earliest | latest
    read_committed: bool = False
    start_timestamp_ms: int | None = None
    end_timestamp_ms: int | None = None
    offset_ranges: tuple[OffsetRange, ...] = ()  # empty: every partition
    field: str = f"{SOURCE}.topic"  # the field that names the topic, for error messages

    @property
    def bounded(self) -> bool:
        """True when the read has an end (offset ranges or an end timestamp)."""
        return bool(self.offset_ranges) or self.end_timestamp_ms is not None

    def topic_ref(self) -> SourceTopic:
        return SourceTopic(self.field, self.topic, self.cluster.name)


def source_spec(
    group: JobGroup, settings: Settings, *, bounded_reads: bool, topic_required: bool = True
) -> SourceSpec:
    """`kafka_consumer_task_group` as a SourceSpec.

    `bounded_reads` False: a job type that always reads from where its checkpoint left off
    refuses start/end timestamps and offset ranges (they would be ignored). True: the bounds
    are checked (an end not before the start, ranges or timestamps but not both, no
    partition listed twice, no range ending before its start).
    """
    source = group.kafka_consumer_task_group
    cluster = require_cluster(f"{SOURCE}.cluster", source.cluster, settings.clusters)
    topic = source.topic.strip()
    if topic_required and not topic:
        raise InvalidJobGroup(f"{SOURCE}.topic", source.topic, "a topic is required")
    start_ms: int | None = None
    end_ms: int | None = None
    ranges: tuple[OffsetRange, ...] = ()
    if bounded_reads:
        start_ms = _timestamp_ms(group, "start_timestamp")
        end_ms = _timestamp_ms(group, "end_timestamp")
        if start_ms is not None and end_ms is not None and end_ms < start_ms:
            raise InvalidJobGroup(
                f"{SOURCE}.end_timestamp", end_ms, f"is before start_timestamp {start_ms}"
            )
        ranges = _offset_ranges(group)
        if ranges and (start_ms is not None or end_ms is not None):
            raise InvalidJobGroup(
                f"{SOURCE}.partition_offset_ranges", "set", "give either ranges or timestamps"
            )
    else:
        for name in ("start_timestamp", "end_timestamp", "partition_offset_ranges"):
            if source.HasField(name):
                raise InvalidJobGroup(
                    f"{SOURCE}.{name}",
                    "set",
                    f"not supported by {_type_name(group)}: it reads on from its checkpoint "
                    "(use --once for a bounded run)",
                )
    return SourceSpec(
        cluster=cluster,
        topic=topic,
        consumer_group=source.consumer_group.strip(),
        starting_offsets=(
            "latest"
            if source.auto_offset_reset_policy == job_pb2.AUTO_OFFSET_RESET_POLICY_LATEST
            else "earliest"
        ),
        read_committed=source.isolation_level == job_pb2.ISOLATION_LEVEL_READ_COMMITTED,
        start_timestamp_ms=start_ms,
        end_timestamp_ms=end_ms,
        offset_ranges=ranges,
    )


def _type_name(group: JobGroup) -> str:
    value = job_pb2.JobType.DESCRIPTOR.values_by_number.get(group.type)
    return value.name if value is not None else str(group.type)


def _timestamp_ms(group: JobGroup, name: str) -> int | None:
    """kafka_consumer_task_group.<name> (a Timestamp) in epoch ms, None when unset."""
    source = group.kafka_consumer_task_group
    if not source.HasField(name):
        return None
    ms = int(getattr(source, name).ToMilliseconds())
    if ms < 0:
        raise InvalidJobGroup(f"{SOURCE}.{name}", ms, "must not be before 1970")
    return ms


def _offset_ranges(group: JobGroup) -> tuple[OffsetRange, ...]:
    """partition_offset_ranges, checked; () when unset. One pass with a set: a JobGroup may
    list one range per partition of a topic with thousands of them."""
    source = group.kafka_consumer_task_group
    if not source.HasField("partition_offset_ranges"):
        return ()
    ranges: list[OffsetRange] = []
    seen: set[int] = set()
    for i, r in enumerate(source.partition_offset_ranges.partition_offset_range):
        if r.end_offset < r.start_offset:
            raise InvalidJobGroup(
                f"{_RANGES}[{i}].end_offset",
                r.end_offset,
                f"ends before its start_offset {r.start_offset}",
            )
        if r.partition in seen:
            raise InvalidJobGroup(f"{_RANGES}[{i}].partition", r.partition, "listed twice")
        seen.add(r.partition)
        ranges.append(OffsetRange(r.partition, r.start_offset, r.end_offset))
    if not ranges:
        raise InvalidJobGroup(_RANGES, [], "set but empty")
    return tuple(ranges)


# --- the output ------------------------------------------------------------------------------


@dataclass(frozen=True)
class OutputSpec:
    """Where a job writes: its checkpoint and its Delta tables (name -> location), every one
    already checked against the site's roots. Build it with `output_spec`."""

    checkpoint: str
    tables: Mapping[str, str]

    def table(self, name: str) -> str:
        """The location of the job's table `name` (a KeyError names a table it never declared:
        a programming error, not bad input)."""
        return self.tables[name]


def output_spec(group: JobGroup, settings: Settings, tables: Sequence[str] = ()) -> OutputSpec:
    """The group's checkpoint and `tables` (the job type's table names), from
    `extension.output`: `<name>_path` places table `name` (default `<warehouse>/<name>`),
    `checkpoint_path` the checkpoint (default `<checkpoints>/<job_group_id>`). Every location
    goes through core/storage.py; a `*_path` field this job type has no table for is refused."""
    requested = job_options(group).output
    wanted = {f"{name}_path": name for name in tables}
    for descriptor, value in requested.ListFields():
        if descriptor.name != _CHECKPOINT_FIELD and descriptor.name not in wanted:
            writes = ", ".join(sorted(tables)) or "no table"
            raise InvalidJobGroup(
                f"{_OUTPUT}.{descriptor.name}",
                value,
                f"{_type_name(group)} has no such table here (it writes {writes})",
            )
    locations = {
        name: table_location(
            f"{_OUTPUT}.{field}", getattr(requested, field), settings.warehouse, name
        )
        for field, name in wanted.items()
    }
    checkpoint = checkpoint_location(
        f"{_OUTPUT}.{_CHECKPOINT_FIELD}",
        requested.checkpoint_path,
        settings.checkpoints,
        group.job_group_id,
    )
    return OutputSpec(checkpoint, MappingProxyType(locations))


def output_fields() -> tuple[str, ...]:
    """Every `extension.output` field (the table names are these without `_path`)."""
    return tuple(f.name for f in JobOptions.DESCRIPTOR.fields_by_name["output"].message_type.fields)


# --- the trigger -----------------------------------------------------------------------------


def trigger_seconds(options: JobOptions, default: int) -> int:
    """`extension.trigger.interval_seconds`, or the job type's `default` when unset."""
    seconds = options.trigger.interval_seconds or default
    if seconds <= 0:
        raise InvalidJobGroup("extension.trigger.interval_seconds", seconds, "must be > 0")
    return seconds
