"""The replication job's settings, derived once from a validated JobGroup (no broker, no Spark).

`replication_spec(group, settings, now_ms)` checks every replication field and returns an
immutable `ReplicationSpec`. Checks that need a broker (topic existence, partition counts,
timestamps resolved to offsets) are in `jobs/replication/preflight.py`.

Fields used, and defaults:

======================================  ====================================================
kafka_consumer_task_group               source cluster, topic, consumer_group (offsets are
                                        committed there after every batch, for lag tools),
                                        auto_offset_reset_policy (EARLIEST unless LATEST),
                                        isolation_level, start/end_timestamp,
                                        partition_offset_ranges (only those partitions)
kafka_dispatcher_task_group             destination cluster and topic; is_acks_one false
                                        (default) = acks=all + idempotent producer;
                                        encoded_format_info -> record headers
replication_task_group.is_continuous    true: stream until stopped; false: copy up to the
                                        end offsets and exit 0. When the group is absent:
                                        continuous, unless an end is given
flow_control                            messages_per_sec and bytes_per_sec (key + value
                                        bytes); 0 = unlimited
extension.replication                   create_destination_topic (false),
                                        partition_mapping (identity), audit_interval (60 s),
                                        low_latency (false; continuous copies only),
                                        epoch_seconds (10; with low_latency only),
                                        topic_naming (identity) and source_alias (the
                                        source cluster's name; extension.topics only)
extension.topics                        many source topics instead of one (names, or a
                                        pattern); see `many_topics_checks` for the rules
extension.trigger.interval_seconds      2
extension.output                        replication_stats_path, replication_audit_path
                                        (<warehouse>/replication_stats, ..._audit),
                                        checkpoint_path (<checkpoints>/<job_group_id>)
======================================  ====================================================
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from functools import cached_property

from uatu.v1 import job_options_pb2
from uber.data.kafka.datatransfer import job_pb2

from core.config import ClusterConfig, Settings
from core.errors import InvalidJobGroup
from core.jobgroup import JobGroup, check_topic, job_options, require_cluster
from core.spec import (
    BOUNDED_READS,
    SOURCE_READS,
    TOPIC_SELECTION_READS,
    OutputSpec,
    SourceSpec,
    SourceTopic,
    output_spec,
    source_spec,
    trigger_seconds,
)
from jobs.replication.topics import SEPARATOR, TopicNaming, copied_from, copies_pattern

TABLES = ("replication_stats", "replication_audit")  # jobs/replication/tables.py: schemas
# The JobGroup fields a replication reads (core.jobgroup.refuse_unread refuses the rest).
READS = frozenset(
    {
        *SOURCE_READS,
        *BOUNDED_READS,
        *TOPIC_SELECTION_READS,
        "kafka_dispatcher_task_group.cluster",
        "kafka_dispatcher_task_group.topic",
        "kafka_dispatcher_task_group.is_secure",
        "kafka_dispatcher_task_group.is_acks_one",
        "kafka_dispatcher_task_group.encoded_format_info",
        "replication_task_group.is_continuous",
        "flow_control.messages_per_sec",
        "flow_control.bytes_per_sec",
        "extension.replication",
    }
)
DEFAULT_TRIGGER_SECONDS = 2
DEFAULT_AUDIT_INTERVAL_SECONDS = 60
DEFAULT_EPOCH_SECONDS = 10
_MANY = "extension.topics"
IDENTITY = TopicNaming()


@dataclass(frozen=True)
class ReplicationSpec:
    job_group_id: str
    # Where a partition without a range starts: source.starting_offsets. A bounded copy
    # reads source.offset_ranges, or source.start/end_timestamp_ms resolved by the preflight.
    source: SourceSpec
    continuous: bool
    # The low-latency copy (jobs/replication/continuous.py) instead of micro-batches, with
    # epochs of epoch_seconds; a continuous copy only.
    low_latency: bool
    epoch_seconds: int
    destination_cluster: ClusterConfig
    destination_topic: str
    acks_all: bool
    encoded_format: tuple[str, int] | None  # (format name, schema version)
    create_destination_topic: bool
    modulo_partitions: bool  # False: destination partition = source partition
    max_messages_per_sec: float  # 0 = unlimited
    max_bytes_per_sec: float  # 0 = unlimited
    trigger_interval_seconds: int
    audit_interval_seconds: int
    output: OutputSpec
    # Many topics (source.selection set, source.topic and destination_topic ""): how each copy
    # is named, and the aliases whose copies are never selected (jobs/replication/topics.py).
    naming: TopicNaming = IDENTITY
    copy_aliases: tuple[str, ...] = ()
    # A replication pack (jobs/replication/packs.py): each member's (source topic, destination
    # topic, JobGroup id, consumer group); its stats rows name their member's group.
    routes: tuple[tuple[str, str, str, str], ...] = ()

    @property
    def many_topics(self) -> bool:
        return self.source.selection is not None

    def destination_of(self, source_topic: str) -> str:
        """The destination topic of `source_topic`."""
        if self.routes:
            return self._route(source_topic)[1]
        return self.naming.destination(source_topic) if self.many_topics else self.destination_topic

    def group_of(self, source_topic: str) -> str:
        """The JobGroup that copies `source_topic`: a pack's member, else this spec's."""
        return self._route(source_topic)[2] if self.routes else self.job_group_id

    def consumer_group_of(self, source_topic: str) -> str:
        """The consumer group the copied offsets of `source_topic` are committed to ("":
        none)."""
        return self._route(source_topic)[3] if self.routes else self.source.consumer_group

    def _route(self, source_topic: str) -> tuple[str, str, str, str]:
        route = self._routes_by_topic.get(source_topic)
        if route is None:
            raise KeyError(f"{source_topic!r} is no member topic of the pack {self.job_group_id}")
        return route

    @cached_property
    def _routes_by_topic(self) -> dict[str, tuple[str, str, str, str]]:
        # Asked per summary row and topic of every batch: a pack may hold many topics.
        return {route[0]: route for route in self.routes}

    @property
    def query_name(self) -> str:
        return f"replication-{self.job_group_id}"

    def required_topic(self) -> SourceTopic:
        return self.source.topic_ref()

    def producer_config(self) -> dict[str, str]:
        """Java Kafka client settings of the destination producer (the JVM sink's).

        acks=all comes with idempotence, which keeps per-partition order across retries with
        up to 5 requests in flight. acks=1 cannot be idempotent, so it sends one request at a
        time per connection to keep order instead.
        """
        config = {
            "linger.ms": "20",
            "batch.size": str(1 << 20),
            "buffer.memory": str(64 << 20),
            "delivery.timeout.ms": "120000",
            # The cluster's own client properties (security, timeouts) override the defaults.
            **self.destination_cluster.java_client_config(),
        }
        if self.acks_all:
            config.update({"acks": "all", "enable.idempotence": "true"})
        else:
            config.update(
                {
                    "acks": "1",
                    "enable.idempotence": "false",
                    "max.in.flight.requests.per.connection": "1",
                }
            )
        return config


def _is_continuous(group: JobGroup, has_end: bool) -> bool:
    if not group.HasField("replication_task_group"):
        return not has_end
    continuous = group.replication_task_group.is_continuous
    if continuous and has_end:
        raise InvalidJobGroup(
            "replication_task_group.is_continuous",
            True,
            "a continuous copy has no end; unset end_timestamp/partition_offset_ranges "
            "or set is_continuous false",
        )
    return continuous


def _low_latency(
    replication: job_options_pb2.ReplicationOptions, continuous: bool
) -> tuple[bool, int]:
    """(low_latency, epoch_seconds) of extension.replication, checked."""
    if replication.epoch_seconds < 0:
        raise InvalidJobGroup(
            "extension.replication.epoch_seconds", replication.epoch_seconds, "must be > 0"
        )
    if replication.epoch_seconds and not replication.low_latency:
        raise InvalidJobGroup(
            "extension.replication.epoch_seconds",
            replication.epoch_seconds,
            "applies to the low-latency copy only; set extension.replication.low_latency",
        )
    if replication.low_latency and not continuous:
        raise InvalidJobGroup(
            "extension.replication.low_latency",
            True,
            "applies to a continuous copy only; a bounded copy (an end, or "
            "replication_task_group.is_continuous false) runs in micro-batches",
        )
    return replication.low_latency, replication.epoch_seconds or DEFAULT_EPOCH_SECONDS


def replication_spec_now(group: JobGroup, settings: Settings) -> ReplicationSpec:
    """`replication_spec` with the current time (a bounded copy's end must have passed)."""
    return replication_spec(group, settings, now_ms=int(time.time() * 1000))


def replication_spec(group: JobGroup, settings: Settings, now_ms: int) -> ReplicationSpec:
    """Validate the replication-specific parts of `group` (common checks already passed)."""
    source = source_spec(group, settings, bounded_reads=True, many_topics=True)
    dispatcher = group.kafka_dispatcher_task_group
    destination_cluster = require_cluster(
        "kafka_dispatcher_task_group.cluster", dispatcher.cluster, settings.clusters
    )
    same_cluster = (
        source.cluster.name == destination_cluster.name
        or source.cluster.bootstrap_servers == destination_cluster.bootstrap_servers
    )
    options = job_options(group)
    replication = options.replication
    naming = IDENTITY
    aliases: tuple[str, ...] = ()
    if source.selection is not None:
        source, naming, aliases = many_topics_checks(group, settings, source, same_cluster)
        destination_topic = ""
    else:
        destination_topic = _one_destination(group, source, destination_cluster, same_cluster)
    end_ms = source.end_timestamp_ms
    if end_ms is not None and end_ms > now_ms:
        raise InvalidJobGroup(
            "kafka_consumer_task_group.end_timestamp",
            end_ms,
            f"is in the future (now {now_ms}); a bounded copy needs an end that has passed",
        )
    continuous = _is_continuous(group, has_end=source.bounded)

    audit_seconds = replication.audit_interval_seconds or DEFAULT_AUDIT_INTERVAL_SECONDS
    if audit_seconds < 0:
        raise InvalidJobGroup(
            "extension.replication.audit_interval_seconds", audit_seconds, "must be > 0"
        )
    low_latency, epoch_seconds = _low_latency(replication, continuous)
    encoded = None
    if dispatcher.encoded_format_info.encoded_format_type != job_pb2.ENCODED_FORMAT_TYPE_INVALID:
        info = dispatcher.encoded_format_info
        encoded = (job_pb2.EncodedFormatType.Name(info.encoded_format_type), info.schema_version)

    return ReplicationSpec(
        job_group_id=group.job_group_id,
        source=source,
        continuous=continuous,
        low_latency=low_latency,
        epoch_seconds=epoch_seconds,
        destination_cluster=destination_cluster,
        destination_topic=destination_topic,
        acks_all=not dispatcher.is_acks_one,
        encoded_format=encoded,
        # A copy of many topics creates each destination topic, as MirrorMaker 2 does.
        create_destination_topic=replication.create_destination_topic
        or source.selection is not None,
        modulo_partitions=replication.partition_mapping == job_options_pb2.PARTITION_MAPPING_MODULO,
        max_messages_per_sec=group.flow_control.messages_per_sec,
        max_bytes_per_sec=group.flow_control.bytes_per_sec,
        trigger_interval_seconds=trigger_seconds(options, DEFAULT_TRIGGER_SECONDS),
        audit_interval_seconds=audit_seconds,
        output=output_spec(group, settings, TABLES),
        naming=naming,
        copy_aliases=aliases,
    )


def _one_destination(
    group: JobGroup, source: SourceSpec, cluster: ClusterConfig, same_cluster: bool
) -> str:
    """The destination topic of a copy of one topic, checked."""
    replication = job_options(group).replication
    for name, value in (
        ("topic_naming", replication.topic_naming),
        ("source_alias", replication.source_alias),
    ):
        if value:
            raise InvalidJobGroup(
                f"extension.replication.{name}", value, f"applies to {_MANY} only"
            )
    # Identity naming (MirrorMaker 2's IdentityReplicationPolicy, KAFKA-9726): without a topic
    # the copy keeps the source topic's name, so consumers fail over without renaming.
    topic = group.kafka_dispatcher_task_group.topic.strip() or source.topic
    check_topic("kafka_dispatcher_task_group.topic", topic)
    if same_cluster and topic == source.topic:
        raise InvalidJobGroup(
            "kafka_dispatcher_task_group.topic",
            topic,
            f"is the source topic on the same cluster ({cluster.name}); "
            "a topic cannot be replicated onto itself",
        )
    return topic


def many_topics_checks(
    group: JobGroup, settings: Settings, source: SourceSpec, same_cluster: bool
) -> tuple[SourceSpec, TopicNaming, tuple[str, ...]]:
    """A copy of `extension.topics`, checked: (the source, its selection without the copies,
    the naming, the aliases whose copies are never selected).

    The destination topic is empty (each copy is named by the naming); the copy is continuous
    and in micro-batches (no end, no start time, no low latency), with the identity partition
    mapping; the identity naming does not copy a cluster onto itself; a listed name is no
    copy. Every copy of an alias (`<alias>.<topic>`, jobs/replication/topics.py) is taken out
    of a pattern: never copied back, so no cycle."""
    dispatcher = group.kafka_dispatcher_task_group
    replication = job_options(group).replication
    if dispatcher.topic.strip():
        raise InvalidJobGroup(
            "kafka_dispatcher_task_group.topic",
            dispatcher.topic,
            f"must be empty with {_MANY}: extension.replication.topic_naming names each copy",
        )
    _refuse_bounds(group, source)
    if replication.low_latency:
        raise InvalidJobGroup(
            "extension.replication.low_latency", True, f"not with {_MANY} (one topic only)"
        )
    if replication.partition_mapping == job_options_pb2.PARTITION_MAPPING_MODULO:
        raise InvalidJobGroup(
            "extension.replication.partition_mapping",
            "PARTITION_MAPPING_MODULO",
            f"not with {_MANY}: each copy is created with its source's partitions",
        )
    alias = replication.source_alias.strip() or source.cluster.name
    check_topic("extension.replication.source_alias", alias)
    if SEPARATOR in alias:
        raise InvalidJobGroup(
            "extension.replication.source_alias", alias, f"must not contain {SEPARATOR!r}"
        )
    prefixed = replication.topic_naming == job_options_pb2.TOPIC_NAMING_SOURCE_PREFIX
    if not prefixed and same_cluster:
        raise InvalidJobGroup(
            "extension.replication.topic_naming",
            "TOPIC_NAMING_IDENTITY",
            "would copy every topic onto itself (same cluster); use TOPIC_NAMING_SOURCE_PREFIX",
        )
    aliases = tuple(sorted({alias, *settings.clusters}))
    selection = source.selection
    assert selection is not None
    for i, name in enumerate(selection.names):
        origin = copied_from(name, aliases)
        if origin is not None:
            raise InvalidJobGroup(
                f"{_MANY}.names[{i}]",
                name,
                f"is a copy from {origin!r}: copies are never copied again (no cycles)",
            )
    if selection.pattern:
        excluded = "|".join(
            f"(?:{p})" for p in (selection.exclude_pattern, copies_pattern(aliases)) if p
        )
        selection = dataclasses.replace(selection, exclude_pattern=excluded)
    naming = TopicNaming(alias if prefixed else "")
    return dataclasses.replace(source, selection=selection), naming, aliases


def _refuse_bounds(group: JobGroup, source: SourceSpec) -> None:
    """A copy of many topics runs until stopped, as MirrorMaker 2's (`--once` still copies
    what is there and stops)."""
    bounds = (
        ("partition_offset_ranges", bool(source.offset_ranges)),
        ("end_timestamp", source.end_timestamp_ms is not None),
        ("start_timestamp", source.start_timestamp_ms is not None),
    )
    for name, given in bounds:
        if given:
            raise InvalidJobGroup(
                f"kafka_consumer_task_group.{name}", "set", f"not with {_MANY} (continuous only)"
            )
    tasks = group.replication_task_group
    if group.HasField("replication_task_group") and not tasks.is_continuous:
        raise InvalidJobGroup(
            "replication_task_group.is_continuous", False, f"{_MANY} copies are continuous"
        )
