"""The load generators' settings, derived once from a validated JobGroup (no broker, no Spark).

`produce_spec(group, settings)` and `consume_spec(group, settings)` check every field their
job uses and return immutable specs; the control plane imports this module, so it needs
neither pyspark nor a broker. Every refusal is one `InvalidJobGroup` naming the field and
the value (exit status 2).

JOB_TYPE_LOAD_GEN_PRODUCE, fields used and defaults:

======================================  ====================================================
kafka_dispatcher_task_group             cluster and topic written to (the topic must
                                        exist; every partition gets its own generator);
                                        is_acks_one false (default) = acks=all, idempotent
                                        producer; true = acks=1
flow_control                            messages_per_sec, bytes_per_sec (key + value
                                        bytes): held at the broker over every 10 s
                                        window; 0 (default) = as fast as it can
extension.loadgen                       record_size (fixed 100), key_cardinality (0: no
                                        key), duplicate_ratio (0), late_ratio (0),
                                        lateness_seconds (3600), untimed_ratio (0), json
                                        (unset: byte values, event time = Kafka
                                        timestamp), seed (0), total_records and
                                        duration_seconds (0: unbounded), producer_tasks
                                        (one per executor, at most one per partition)
extension.trigger.interval_seconds      10: each micro-batch produces this long
extension.output.checkpoint_path        <checkpoints>/<job_group_id>
======================================  ====================================================

JOB_TYPE_LOAD_GEN_CONSUME, fields used and defaults:

======================================  ====================================================
kafka_consumer_task_group               cluster, topic, consumer_group (offsets committed
                                        there after every batch, for lag tools),
                                        auto_offset_reset_policy (EARLIEST unless LATEST),
                                        isolation_level
flow_control.messages_per_sec           records per micro-batch = rate x trigger interval
                                        (0 = unlimited)
extension.loadgen.stats_window_seconds  10: loadgen_stats windows of fetch time
extension.trigger.interval_seconds      10
extension.output                        loadgen_stats_path (<warehouse>/loadgen_stats),
                                        checkpoint_path (<checkpoints>/<job_group_id>)
======================================  ====================================================
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from uatu.v1 import job_options_pb2

from core.config import ClusterConfig, Settings
from core.errors import InvalidJobGroup
from core.jobgroup import JobGroup, check_topic, job_options, require_cluster
from core.spec import (
    SOURCE_READS,
    OutputSpec,
    SourceSpec,
    SourceTopic,
    output_spec,
    source_spec,
    trigger_seconds,
)

DEFAULT_RECORD_BYTES = 100
MAX_RECORD_BYTES = 64 << 20  # far above Kafka's default max.message.bytes (1 MiB)
DEFAULT_LATENESS_SECONDS = 3600
DEFAULT_EVENT_TIME_FIELD = "ts"
DEFAULT_TRIGGER_SECONDS = 10
DEFAULT_WINDOW_SECONDS = 10
CONSUME_TABLES = ("loadgen_stats",)  # jobs/loadgen/tables.py declares its schema
# The JobGroup fields each load generator reads (core.jobgroup.refuse_unread refuses the rest).
PRODUCE_READS = frozenset(
    {
        "kafka_dispatcher_task_group.cluster",
        "kafka_dispatcher_task_group.topic",
        "kafka_dispatcher_task_group.is_secure",
        "kafka_dispatcher_task_group.is_acks_one",
        "flow_control.messages_per_sec",
        "flow_control.bytes_per_sec",
        *(
            f"extension.loadgen.{name}"
            for name in (
                "record_size",
                "key_cardinality",
                "duplicate_ratio",
                "late_ratio",
                "lateness_seconds",
                "untimed_ratio",
                "json",
                "seed",
                "total_records",
                "duration_seconds",
                "producer_tasks",
            )
        ),
    }
)
CONSUME_READS = frozenset(
    {
        *SOURCE_READS,
        "flow_control.messages_per_sec",
        "extension.loadgen.stats_window_seconds",
    }
)

_OPTIONS = "extension.loadgen"


@dataclass(frozen=True)
class SizeDistribution:
    """Value sizes: `fixed` (sizes = (n,)), `uniform` (sizes = (min, max), both included) or
    `weighted` (size i drawn with probability weights[i] / sum(weights))."""

    kind: str
    sizes: tuple[int, ...]
    weights: tuple[float, ...] = ()

    @property
    def mean(self) -> float:
        if self.kind == "fixed":
            return float(self.sizes[0])
        if self.kind == "uniform":
            return (self.sizes[0] + self.sizes[1]) / 2
        total = sum(self.weights)
        return sum(s * w for s, w in zip(self.sizes, self.weights, strict=True)) / total

    def probabilities(self) -> dict[int, float]:
        """{size: probability} of a fixed or weighted distribution (sizes listed twice add up)."""
        if self.kind == "fixed":
            return {self.sizes[0]: 1.0}
        if self.kind == "uniform":
            low, high = self.sizes
            return {s: 1 / (high - low + 1) for s in range(low, high + 1)}
        total = sum(self.weights)
        out: dict[int, float] = {}
        for size, weight in zip(self.sizes, self.weights, strict=True):
            out[size] = out.get(size, 0.0) + weight / total
        return out


@dataclass(frozen=True)
class RecordShape:
    """What each generated record looks like (`extension.loadgen` fields 1-19)."""

    size: SizeDistribution
    key_cardinality: int  # 0: no key
    duplicate_ratio: float  # share of all records that re-send the original before them
    late_ratio: float
    lateness_ms: int
    untimed_ratio: float
    json_event_time_field: str | None  # None: byte values, event time = Kafka timestamp
    seed: int


@dataclass(frozen=True)
class ProduceSpec:
    job_group_id: str
    cluster: ClusterConfig
    topic: str
    acks_all: bool
    shape: RecordShape
    max_messages_per_sec: float  # 0 = as fast as it can
    max_bytes_per_sec: float  # 0 = as fast as it can (key + value bytes)
    total_records: int  # 0 = no bound
    duration_seconds: int  # 0 = no bound
    producer_tasks: int  # 0 = one per executor, at most one per partition
    trigger_interval_seconds: int  # each micro-batch produces this long
    output: OutputSpec  # the checkpoint only: the records go to the topic

    @property
    def query_name(self) -> str:
        return f"loadgen-produce-{self.job_group_id}"

    @property
    def bounded(self) -> bool:
        return self.total_records > 0 or self.duration_seconds > 0

    def required_topic(self) -> SourceTopic:
        """The topic written to: it must exist before the generator starts."""
        return SourceTopic("kafka_dispatcher_task_group.topic", self.topic, self.cluster.name)

    def producer_config(self) -> dict[str, str]:
        """Java producer settings. acks=all comes with idempotence (no duplicate from a retry,
        order kept); acks=1 is not idempotent, as kafka-producer-perf-test runs it. The
        cluster's own client properties override the batching defaults, not the acks."""
        config = {
            "linger.ms": "10",
            "batch.size": str(256 << 10),
            "buffer.memory": str(64 << 20),
            "delivery.timeout.ms": "120000",
            **self.cluster.java_client_config(),
        }
        if self.acks_all:
            config.update({"acks": "all", "enable.idempotence": "true"})
        else:
            config.update({"acks": "1", "enable.idempotence": "false"})
        return config


@dataclass(frozen=True)
class ConsumeSpec:
    job_group_id: str
    source: SourceSpec
    max_messages_per_sec: float  # 0 = unlimited
    trigger_interval_seconds: int
    window_seconds: int
    output: OutputSpec

    @property
    def query_name(self) -> str:
        return f"loadgen-consume-{self.job_group_id}"

    def required_topic(self) -> SourceTopic:
        return self.source.topic_ref()

    def max_offsets_per_trigger(self) -> int | None:
        if self.max_messages_per_sec <= 0:
            return None
        return max(1, int(self.max_messages_per_sec * self.trigger_interval_seconds))


# --- checks ----------------------------------------------------------------------------------


def _ratio(options: job_options_pb2.LoadGenOptions, name: str, *, below_one: bool = False) -> float:
    value = getattr(options, name)
    if math.isnan(value) or not 0 <= value <= 1:
        raise InvalidJobGroup(f"{_OPTIONS}.{name}", value, "must be in [0, 1]")
    if below_one and value >= 1:
        raise InvalidJobGroup(
            f"{_OPTIONS}.{name}", value, "must be below 1 (every duplicate re-sends an original)"
        )
    return float(value)


def _size(field: str, value: int) -> int:
    if not 0 <= value <= MAX_RECORD_BYTES:
        raise InvalidJobGroup(field, value, f"must be in [0, {MAX_RECORD_BYTES}] bytes")
    return value


def _sizes(options: job_options_pb2.LoadGenOptions) -> SizeDistribution:
    record_size = options.record_size
    field = f"{_OPTIONS}.record_size"
    shape = record_size.WhichOneof("shape")
    if shape is None:
        return SizeDistribution("fixed", (DEFAULT_RECORD_BYTES,))
    if shape == "fixed_bytes":
        return SizeDistribution("fixed", (_size(f"{field}.fixed_bytes", record_size.fixed_bytes),))
    if shape == "uniform":
        low = _size(f"{field}.uniform.min_bytes", record_size.uniform.min_bytes)
        high = _size(f"{field}.uniform.max_bytes", record_size.uniform.max_bytes)
        if high < low:
            raise InvalidJobGroup(f"{field}.uniform.max_bytes", high, f"is below min_bytes {low}")
        return SizeDistribution("uniform", (low, high))
    entries = record_size.weighted.sizes
    if not entries:
        raise InvalidJobGroup(f"{field}.weighted.sizes", [], "must list at least one size")
    sizes, weights = [], []
    for i, entry in enumerate(entries):
        sizes.append(_size(f"{field}.weighted.sizes[{i}].bytes", entry.bytes))
        if not (math.isfinite(entry.weight) and entry.weight >= 0):
            raise InvalidJobGroup(
                f"{field}.weighted.sizes[{i}].weight", entry.weight, "must be >= 0 and finite"
            )
        weights.append(float(entry.weight))
    if sum(weights) <= 0:
        raise InvalidJobGroup(f"{field}.weighted.sizes", weights, "weights must not all be 0")
    return SizeDistribution("weighted", tuple(sizes), tuple(weights))


def _event_time_field(options: job_options_pb2.LoadGenOptions) -> str | None:
    if not options.HasField("json"):
        return None
    name = options.json.event_time_field
    if not name:
        return DEFAULT_EVENT_TIME_FIELD
    if name != name.strip() or '"' in name or "\\" in name or not name.isprintable():
        raise InvalidJobGroup(
            f"{_OPTIONS}.json.event_time_field",
            name,
            "must be printable, without quotes, backslashes or surrounding spaces",
        )
    return name


def record_shape(options: job_options_pb2.LoadGenOptions) -> RecordShape:
    """The record shape of `extension.loadgen`, checked (pure)."""
    if options.key_cardinality < 0:
        raise InvalidJobGroup(
            f"{_OPTIONS}.key_cardinality", options.key_cardinality, "must be >= 0 (0 = no key)"
        )
    if options.lateness_seconds < 0:
        raise InvalidJobGroup(
            f"{_OPTIONS}.lateness_seconds", options.lateness_seconds, "must be >= 0"
        )
    size = _sizes(options)
    duplicate = _ratio(options, "duplicate_ratio", below_one=True)
    late = _ratio(options, "late_ratio")
    untimed = _ratio(options, "untimed_ratio")
    if late + untimed > 1 + 1e-12:
        raise InvalidJobGroup(
            f"{_OPTIONS}.late_ratio",
            late,
            f"late_ratio + untimed_ratio ({untimed}) must not exceed 1",
        )
    return RecordShape(
        size=size,
        key_cardinality=options.key_cardinality,
        duplicate_ratio=duplicate,
        late_ratio=late,
        lateness_ms=(options.lateness_seconds or DEFAULT_LATENESS_SECONDS) * 1000,
        untimed_ratio=untimed,
        json_event_time_field=_event_time_field(options),
        seed=options.seed,
    )


def produce_spec(group: JobGroup, settings: Settings) -> ProduceSpec:
    """Validate a LOAD_GEN_PRODUCE JobGroup (common checks already passed)."""
    dispatcher = group.kafka_dispatcher_task_group
    cluster = require_cluster(
        "kafka_dispatcher_task_group.cluster", dispatcher.cluster, settings.clusters
    )
    topic = dispatcher.topic.strip()
    if not topic:
        raise InvalidJobGroup("kafka_dispatcher_task_group.topic", dispatcher.topic, "required")
    check_topic("kafka_dispatcher_task_group.topic", dispatcher.topic)
    options = job_options(group)
    loadgen = options.loadgen
    shape = record_shape(loadgen)
    for name in ("total_records", "duration_seconds", "producer_tasks"):
        value = getattr(loadgen, name)
        if value < 0:
            raise InvalidJobGroup(f"{_OPTIONS}.{name}", value, "must be >= 0 (0 = the default)")
    return ProduceSpec(
        job_group_id=group.job_group_id,
        cluster=cluster,
        topic=topic,
        acks_all=not dispatcher.is_acks_one,
        shape=shape,
        max_messages_per_sec=group.flow_control.messages_per_sec,
        max_bytes_per_sec=group.flow_control.bytes_per_sec,
        total_records=loadgen.total_records,
        duration_seconds=loadgen.duration_seconds,
        producer_tasks=loadgen.producer_tasks,
        trigger_interval_seconds=trigger_seconds(options, DEFAULT_TRIGGER_SECONDS),
        output=output_spec(group, settings),
    )


def consume_spec(group: JobGroup, settings: Settings) -> ConsumeSpec:
    """Validate a LOAD_GEN_CONSUME JobGroup (common checks already passed)."""
    source = source_spec(group, settings, bounded_reads=False)
    options = job_options(group)
    window = options.loadgen.stats_window_seconds or DEFAULT_WINDOW_SECONDS
    if window < 0:
        raise InvalidJobGroup(f"{_OPTIONS}.stats_window_seconds", window, "must be > 0")
    return ConsumeSpec(
        job_group_id=group.job_group_id,
        source=source,
        max_messages_per_sec=group.flow_control.messages_per_sec,
        trigger_interval_seconds=trigger_seconds(options, DEFAULT_TRIGGER_SECONDS),
        window_seconds=window,
        output=output_spec(group, settings, CONSUME_TABLES),
    )
