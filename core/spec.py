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
* `TopicSelection` (`topic_selection`): many topics for one job, from `extension.topics`: a
  list or a regular expression, instead of `kafka_consumer_task_group.topic`.
* `trigger_seconds`: `extension.trigger.interval_seconds` with the job type's default.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Protocol

from uatu.v1.job_options_pb2 import JobOptions
from uber.data.kafka.datatransfer import job_pb2
from uber.data.kafka.datatransfer.job_group_pb2 import JobGroup

from core.config import ClusterConfig, Settings
from core.errors import InvalidJobGroup
from core.jobgroup import check_topic, job_options, require_cluster
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
_TOPICS = "extension.topics"
# The field a job type that reads many topics adds to its READS.
TOPIC_SELECTION_READS = frozenset({_TOPICS})
MAX_SELECTED_TOPICS = 10_000
# Kafka's own topics (__consumer_offsets, __transaction_state, ...): never selected by a
# pattern, as MirrorMaker 2's default topics.exclude has it.
INTERNAL_TOPICS = "__.*"
_CHECKPOINT_FIELD = "checkpoint_path"


@dataclass(frozen=True)
class SourceTopic:
    """The topic a job's runs depend on: it must exist before the job starts, and the control
    plane shows one job per partition of it."""

    field: str  # the JobGroup field that names it, for error messages
    topic: str
    cluster: str
    # A job that reads a topic selection: `topic` is "", the selected topics are the source.
    selection: TopicSelection | None = None
    # `__consumer_offsets`: Kafka creates it on a cluster's first group lookup, so a check
    # makes that lookup (core.kafka_admin.ensure_offsets_topic) before asking for the topic.
    created_on_first_use: bool = False


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
class TopicSelection:
    """Many topics of one cluster: `names`, or every topic whose whole name matches `pattern`
    and neither `exclude_pattern` nor INTERNAL_TOPICS. Build it with `topic_selection`."""

    names: tuple[str, ...] = ()
    pattern: str = ""
    exclude_pattern: str = ""

    @property
    def regex(self) -> str:
        """The selection as one regular expression, matched against whole topic names, in a
        syntax Java (Spark's `subscribePattern`) and Python read the same way. Anchored at
        both ends: Spark's source finds the pattern in a name (Scala's `findFirstIn`) rather
        than matching the whole of it, and so would select an excluded `src.orders` (the
        pattern matches `rc.orders`)."""
        if self.names:
            return "^(?:" + "|".join(re.escape(name) for name in self.names) + ")$"
        excluded = "|".join(f"(?:{p})" for p in (INTERNAL_TOPICS, self.exclude_pattern) if p)
        return f"^(?!(?:{excluded})$)(?:{self.pattern})$"

    def matches(self, topic: str) -> bool:
        if self.names:
            return topic in self.names
        return re.fullmatch(self.regex, topic) is not None

    def select(self, topics: Iterable[str]) -> list[str]:
        """The selected ones of `topics` (a cluster's topic names), sorted."""
        return sorted(t for t in set(topics) if self.matches(t))

    def subscription(self) -> tuple[str, str]:
        """Spark's Kafka source option that reads the selection: (option, value)."""
        if self.names:
            return "subscribe", ",".join(self.names)
        return "subscribePattern", self.regex

    def __str__(self) -> str:
        if self.names:
            shown = ", ".join(self.names[:3])
            more = f" and {len(self.names) - 3} more" if len(self.names) > 3 else ""
            return f"topics {shown}{more}"
        excluded = f" except /{self.exclude_pattern}/" if self.exclude_pattern else ""
        return f"topics matching /{self.pattern}/{excluded}"


def topic_selection(options: JobOptions) -> TopicSelection | None:
    """`extension.topics` checked, None when it selects nothing (the group names one topic).

    Names must be Kafka topic names, each once, at most MAX_SELECTED_TOPICS; a pattern and an
    exclude pattern must be regular expressions; names and a pattern are not given together,
    nor an exclude pattern without a pattern."""
    chosen = options.topics
    names = tuple(n.strip() for n in chosen.names)
    pattern, exclude = chosen.pattern.strip(), chosen.exclude_pattern.strip()
    if not names and not pattern:
        if exclude:
            raise InvalidJobGroup(f"{_TOPICS}.exclude_pattern", exclude, "needs a pattern")
        return None
    if names and pattern:
        raise InvalidJobGroup(f"{_TOPICS}.pattern", pattern, "give names or a pattern, not both")
    if names:
        if exclude:
            raise InvalidJobGroup(f"{_TOPICS}.exclude_pattern", exclude, "needs a pattern")
        if len(names) > MAX_SELECTED_TOPICS:
            raise InvalidJobGroup(
                f"{_TOPICS}.names", f"{len(names)} names", f"at most {MAX_SELECTED_TOPICS}"
            )
        seen: set[str] = set()
        for i, name in enumerate(names):
            check_topic(f"{_TOPICS}.names[{i}]", name)
            if not name or name in seen:
                raise InvalidJobGroup(f"{_TOPICS}.names[{i}]", name, "empty or listed twice")
            seen.add(name)
        return TopicSelection(names=names)
    for field, value in (("pattern", pattern), ("exclude_pattern", exclude)):
        try:
            re.compile(value)
        except re.error as error:
            raise InvalidJobGroup(
                f"{_TOPICS}.{field}", value, f"not a regular expression: {error}"
            ) from None
    return TopicSelection(pattern=pattern, exclude_pattern=exclude)


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
    # Where a new checkpoint starts: earliest | latest, or Spark's JSON of per-partition
    # offsets (an audit pack's generation, jobs/audit/packs.py).
    starting_offsets: str = "earliest"
    read_committed: bool = False
    start_timestamp_ms: int | None = None
    end_timestamp_ms: int | None = None
    offset_ranges: tuple[OffsetRange, ...] = ()  # empty: every partition
    field: str = f"{SOURCE}.topic"  # the field that names the topic, for error messages
    selection: TopicSelection | None = None  # many topics (`topic` is then "")

    def subscription(self) -> tuple[str, str]:
        """Spark's Kafka source option that reads this source: (option, value)."""
        if self.selection is not None:
            return self.selection.subscription()
        return "subscribe", self.topic

    @property
    def bounded(self) -> bool:
        """True when the read has an end (offset ranges or an end timestamp)."""
        return bool(self.offset_ranges) or self.end_timestamp_ms is not None

    def topic_ref(self) -> SourceTopic:
        return SourceTopic(self.field, self.topic, self.cluster.name, self.selection)


def source_spec(
    group: JobGroup,
    settings: Settings,
    *,
    bounded_reads: bool,
    topic_required: bool = True,
    many_topics: bool = False,
) -> SourceSpec:
    """`kafka_consumer_task_group` as a SourceSpec.

    `many_topics` True: the job type reads `extension.topics` (its READS include
    TOPIC_SELECTION_READS) as an alternative to the one topic; exactly one of them is given.

    `bounded_reads` False: a job type that always reads from where its checkpoint left off
    refuses start/end timestamps and offset ranges (they would be ignored). True: the bounds
    are checked (an end not before the start, ranges or timestamps but not both, no
    partition listed twice, no range ending before its start).
    """
    source = group.kafka_consumer_task_group
    cluster = require_cluster(f"{SOURCE}.cluster", source.cluster, settings.clusters)
    topic = source.topic.strip()
    selection = topic_selection(job_options(group)) if many_topics else None
    if selection is not None and topic:
        raise InvalidJobGroup(
            f"{SOURCE}.topic", topic, f"give it or {_TOPICS}, not both ({selection})"
        )
    if topic_required and not topic and selection is None:
        wanted = f"a topic (or {_TOPICS}) is required" if many_topics else "a topic is required"
        raise InvalidJobGroup(f"{SOURCE}.topic", source.topic, wanted)
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
        selection=selection,
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
