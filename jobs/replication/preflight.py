"""Broker checks and offset resolution before any record moves (no Spark).

`preflight(spec)` asks both clusters what the JobGroup refers to and returns a
`ReplicationPlan`: which source partitions to copy, where each one goes, from which offset,
up to which offset (bounded copies), and the per-batch record budget. Every failure is an
`InvalidJobGroup`/`TopicNotFound`/`ClusterUnreachable` naming the field and value, raised
before the SparkSession exists. `build_plan` is the pure part and is unit-tested.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from core.config import ClusterConfig
from core.errors import ClusterUnreachable, InvalidJobGroup, TopicNotFound
from core.kafka_admin import cluster_id, create_partitions, create_topic, partition_count
from jobs.replication.spec import ReplicationSpec

log = logging.getLogger("uatu.replication")

# Spark's startingOffsets JSON spells "earliest" as -2 and "latest" as -1.
EARLIEST, LATEST = -2, -1
_SAMPLE_RECORDS = 200
_TIMEOUT_S = 15.0


@dataclass(frozen=True)
class ReplicationPlan:
    """What the job will do, resolved against the live clusters."""

    source_partitions: tuple[int, ...]
    destination_partitions: int
    modulo: bool
    starting_offsets: Mapping[int, int] = field(default_factory=lambda: MappingProxyType({}))
    # None: continuous. Otherwise the exclusive end offset of each copied partition.
    end_offsets: Mapping[int, int] | None = None
    max_offsets_per_trigger: int | None = None
    mean_record_bytes: float | None = None  # key + value, sampled from the source

    def destination_partition(self, source_partition: int) -> int:
        if self.modulo:
            return source_partition % self.destination_partitions
        return source_partition

    def spark_starting_offsets(self, topic: str) -> str:
        return json.dumps({topic: {str(p): o for p, o in sorted(self.starting_offsets.items())}})

    def spark_assign(self, topic: str) -> str:
        return json.dumps({topic: list(self.source_partitions)})

    def is_done(self, reached: Mapping[int, int]) -> bool:
        """True when a bounded copy has read every partition up to its end offset."""
        if self.end_offsets is None:
            return False
        return all(reached.get(p, -1) >= end for p, end in self.end_offsets.items())


# Flow control plans a batch for at least this long: a micro-batch here costs a few seconds
# of fixed work (stats, Delta commits), so a budget of rate x a 2 s trigger would never reach
# the cap. The copy itself paces each record (FlowLimiter.java).
FLOW_WINDOW_SECONDS = 10


def records_per_trigger(spec: ReplicationSpec, mean_record_bytes: float | None) -> int | None:
    """Records per micro-batch that keep both flow-control caps, or None for no limit.

    The budget is the caps times max(trigger interval, FLOW_WINDOW_SECONDS). Spark's Kafka
    source limits batches by records only, so the byte cap becomes a record budget through
    the sampled mean record size; the copy paces both caps record by record (FlowLimiter.java).
    """
    window = max(spec.trigger_interval_seconds, FLOW_WINDOW_SECONDS)
    return _record_budget(
        spec.max_messages_per_sec, spec.max_bytes_per_sec, window, mean_record_bytes
    )


def caps_apply_in_place(
    plan: ReplicationPlan,
    trigger_interval_seconds: int,
    max_messages_per_sec: float,
    max_bytes_per_sec: float,
) -> bool:
    """Whether new flow-control caps can take effect in the running query (from its next
    micro-batch) without restarting it.

    Spark's Kafka source keeps the record budget the query started with (maxOffsetsPerTrigger:
    `plan.max_offsets_per_trigger`), while the copy paces every record at the caps of its
    batch. The new caps therefore hold at the destination as long as one batch of the planned
    budget lasts at least a trigger interval at them: any lower caps, and higher ones up to
    the budget per interval. A query started without caps has no budget, and one whose caps
    are removed would keep the old budget: both need a restart."""
    if plan.max_offsets_per_trigger is None:
        return False
    wanted = _record_budget(
        max_messages_per_sec,
        max_bytes_per_sec,
        max(1, trigger_interval_seconds),
        plan.mean_record_bytes,
    )
    return wanted is not None and wanted <= plan.max_offsets_per_trigger


def _record_budget(
    messages_per_sec: float, bytes_per_sec: float, seconds: int, mean_record_bytes: float | None
) -> int | None:
    """Records that keep both caps over `seconds`, or None when neither cap is set."""
    budgets = []
    if messages_per_sec > 0:
        budgets.append(messages_per_sec * seconds)
    if bytes_per_sec > 0:
        size = mean_record_bytes or 1024.0
        budgets.append(bytes_per_sec * seconds / size)
    if not budgets:
        return None
    return max(1, int(min(budgets)))


def build_plan(
    spec: ReplicationSpec,
    *,
    source_count: int,
    destination_count: int,
    starts_by_time: Mapping[int, int] | None = None,
    ends_by_time: Mapping[int, int] | None = None,
    high_watermarks: Mapping[int, int] | None = None,
    mean_record_bytes: float | None = None,
) -> ReplicationPlan:
    """Decide partitions and offsets from broker answers (pure)."""
    if destination_count < source_count and not spec.modulo_partitions:
        raise InvalidJobGroup(
            "kafka_dispatcher_task_group.topic",
            spec.destination_topic,
            f"has {destination_count} partitions, fewer than the source's {source_count}; "
            "add partitions, or set extension.replication.partition_mapping to "
            "PARTITION_MAPPING_MODULO (partition N goes to N % "
            f"{destination_count})",
        )
    ranges = {r.partition: r for r in spec.source.offset_ranges}
    for i, r in enumerate(spec.source.offset_ranges):
        if r.partition >= source_count:
            raise InvalidJobGroup(
                "kafka_consumer_task_group.partition_offset_ranges."
                f"partition_offset_range[{i}].partition",
                r.partition,
                f"topic {spec.source.topic!r} has {source_count} partitions",
            )
    partitions = tuple(sorted(ranges)) if ranges else tuple(range(source_count))

    if ranges:
        starts = {p: r.start for p, r in ranges.items()}
    elif starts_by_time is not None:
        # No record at or after the start time yet: start at the end, copy what comes.
        starts = {p: (o if o >= 0 else LATEST) for p, o in starts_by_time.items()}
    else:
        starts = policy_starts(spec.source.starting_offsets, spec.source.topic, partitions)

    ends: dict[int, int] | None = None
    if ranges:
        ends = {p: r.end for p, r in ranges.items()}
    elif not spec.continuous:
        if high_watermarks is None:
            raise ValueError("a bounded copy needs the high watermarks")
        ends = dict(high_watermarks)
        if ends_by_time is not None:
            # The first offset at or after the end time ends the copy (exclusive); a partition
            # with no such record is copied to its current end.
            ends = {p: (o if o >= 0 else ends[p]) for p, o in ends_by_time.items()}

    return ReplicationPlan(
        source_partitions=partitions,
        destination_partitions=destination_count,
        modulo=spec.modulo_partitions,
        starting_offsets=MappingProxyType(starts),
        end_offsets=None if ends is None else MappingProxyType(ends),
        max_offsets_per_trigger=records_per_trigger(spec, mean_record_bytes),
        mean_record_bytes=mean_record_bytes,
    )


def policy_starts(starting_offsets: str, topic: str, partitions: Sequence[int]) -> dict[int, int]:
    """Where each of `partitions` of `topic` starts by the source's startingOffsets:
    "earliest", "latest", or Spark's JSON of offsets per partition (a group going on alone
    where its copy in a pack ended: jobs/replication/packs.py), where a partition it does not
    name (added since) starts at the earliest."""
    if starting_offsets.startswith("{"):
        named = json.loads(starting_offsets).get(topic, {})
        return {p: int(named.get(str(p), EARLIEST)) for p in partitions}
    return dict.fromkeys(partitions, LATEST if starting_offsets == "latest" else EARLIEST)


def warn_if_copies_queue(master: str, slots: int, partitions: int, low_latency: bool) -> None:
    """Warn when the session's task `slots` (its defaultParallelism, on `master`) cannot copy
    every one of `partitions` source partitions at once."""
    # Only in local mode is defaultParallelism the slot count from the start: on a cluster it
    # counts the executors registered so far.
    if not master.startswith("local"):
        return
    if low_latency and slots <= partitions:
        # One slot stays free for the stats; each copy task takes several partitions.
        log.warning(
            "%d task slots for %d source partitions: the low-latency copy runs %d task(s), one "
            "slot is kept for the stats; give the job one slot per partition plus one "
            "(SPARK_MASTER=local[%d], or executors x cores)",
            slots,
            partitions,
            max(1, slots - 1),
            partitions + 1,
        )
    elif not low_latency and slots < partitions:
        # Each copy task waits for its acks before its slot takes the next partition.
        log.warning(
            "%d task slots for %d source partitions: a batch copies them in waves; give the job "
            "one slot per partition (SPARK_MASTER=local[%d], or executors x cores)",
            slots,
            partitions,
            partitions,
        )


def refuse_copy_onto_itself(spec: ReplicationSpec) -> None:
    """Two cluster names (or addresses) may reach the same brokers: the spec's check compares
    names and addresses, this one asks the brokers for their cluster id."""
    if spec.destination_topic != spec.source.topic:
        return
    if cluster_id(spec.source.cluster) == cluster_id(spec.destination_cluster):
        raise InvalidJobGroup(
            "kafka_dispatcher_task_group.cluster",
            spec.destination_cluster.name,
            f"reaches the same Kafka cluster as {spec.source.cluster.name!r} and the topic is "
            "the source topic: a topic cannot be replicated onto itself",
        )


def preflight(spec: ReplicationSpec) -> ReplicationPlan:
    """Check both clusters and resolve the plan; creates the destination topic if allowed."""
    source_count = partition_count(spec.source.cluster, spec.source.topic, spec.source.field)
    refuse_copy_onto_itself(spec)
    destination_count = _destination_partitions(spec, source_count)
    partitions = list(range(source_count))
    consumer = _consumer(spec.source.cluster, spec.source.read_committed)
    try:
        starts = ends = None
        if spec.source.start_timestamp_ms is not None:
            starts = _offsets_for_time(consumer, spec, partitions, spec.source.start_timestamp_ms)
        if spec.source.end_timestamp_ms is not None:
            ends = _offsets_for_time(consumer, spec, partitions, spec.source.end_timestamp_ms)
        watermarks = _high_watermarks(consumer, spec, partitions)
        mean_bytes = None
        if spec.max_bytes_per_sec > 0:
            mean_bytes = _mean_record_bytes(consumer, spec.source.topic, watermarks)
    finally:
        consumer.close()
    plan = build_plan(
        spec,
        source_count=source_count,
        destination_count=destination_count,
        starts_by_time=starts,
        ends_by_time=ends,
        high_watermarks=watermarks,
        mean_record_bytes=mean_bytes,
    )
    log.info(
        "plan: partitions %s -> %s/%s (%d partitions%s), %s, record budget per batch %s",
        list(plan.source_partitions),
        spec.destination_cluster.name,
        spec.destination_topic,
        destination_count,
        ", modulo" if plan.modulo else "",
        "continuous" if plan.end_offsets is None else f"ends at {dict(plan.end_offsets)}",
        plan.max_offsets_per_trigger or "unlimited",
    )
    return plan


def with_partitions(
    plan: ReplicationPlan, partitions: Collection[int], destination_count: int
) -> ReplicationPlan:
    """`plan` covering `partitions` too, sent to a destination of `destination_count`
    partitions (pure). A modulo plan keeps its count: its mapping must not move."""
    return dataclasses.replace(
        plan,
        source_partitions=tuple(sorted({*plan.source_partitions, *partitions})),
        destination_partitions=plan.destination_partitions if plan.modulo else destination_count,
    )


def cover_new_partitions(
    spec: ReplicationSpec, plan: ReplicationPlan, partitions: Collection[int]
) -> ReplicationPlan:
    """The plan for source partitions added while the job runs, as MirrorMaker 2 keeps a
    target topic's partitions in step: with the identity mapping the destination grows to
    the source's count when it has fewer (partition N still goes to N); a modulo plan sends
    them to N % its count. ClusterUnreachable if the destination cannot be grown."""
    needed = max(partitions) + 1
    field_name = "kafka_dispatcher_task_group.topic"
    count = partition_count(spec.destination_cluster, spec.destination_topic, field_name)
    if not plan.modulo and count < needed:
        log.info(
            "source %s grew to %d partitions: growing %s/%s from %d",
            spec.source.topic,
            needed,
            spec.destination_cluster.name,
            spec.destination_topic,
            count,
        )
        admin = AdminClient(spec.destination_cluster.check_client_config())
        try:
            create_partitions(admin, NewPartitions(spec.destination_topic, needed), _TIMEOUT_S)
        except KafkaException as e:
            raise ClusterUnreachable(
                spec.destination_cluster.name, spec.destination_cluster.bootstrap_servers, str(e)
            ) from None
        count = needed
    grown = with_partitions(plan, partitions, count)
    log.info(
        "new source partitions %s of %s: copied to %s",
        sorted(partitions),
        spec.source.topic,
        {p: grown.destination_partition(p) for p in sorted(partitions)},
    )
    return grown


def _destination_partitions(spec: ReplicationSpec, source_count: int) -> int:
    field_name = "kafka_dispatcher_task_group.topic"
    try:
        return partition_count(spec.destination_cluster, spec.destination_topic, field_name)
    except TopicNotFound:
        if not spec.create_destination_topic:
            raise TopicNotFound(
                field_name, spec.destination_topic, spec.destination_cluster.name
            ) from None
    log.info(
        "creating %s/%s with %d partitions (extension.replication.create_destination_topic)",
        spec.destination_cluster.name,
        spec.destination_topic,
        source_count,
    )
    admin = AdminClient(spec.destination_cluster.check_client_config())
    topic = NewTopic(spec.destination_topic, num_partitions=source_count, replication_factor=-1)
    try:
        create_topic(admin, topic, timeout_s=_TIMEOUT_S)
    except KafkaException as e:
        raise ClusterUnreachable(
            spec.destination_cluster.name, spec.destination_cluster.bootstrap_servers, str(e)
        ) from None
    return source_count


def source_watermarks(
    spec: ReplicationSpec, partitions: Sequence[int]
) -> dict[int, tuple[int, int]]:
    """(low, high) watermark of each source partition; ClusterUnreachable if the source does
    not answer."""
    consumer = _consumer(spec.source.cluster, spec.source.read_committed)
    try:
        tps = [TopicPartition(spec.source.topic, p) for p in partitions]
        return {tp.partition: consumer.get_watermark_offsets(tp, timeout=_TIMEOUT_S) for tp in tps}
    except KafkaException as e:
        cluster = spec.source.cluster
        raise ClusterUnreachable(cluster.name, cluster.bootstrap_servers, str(e)) from None
    finally:
        consumer.close()


def _consumer(cluster: ClusterConfig, read_committed: bool) -> Consumer:
    return Consumer(
        {
            **cluster.check_client_config(),
            "group.id": "uatu-replication-preflight",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed" if read_committed else "read_uncommitted",
        }
    )


def _offsets_for_time(
    consumer: Consumer, spec: ReplicationSpec, partitions: Sequence[int], ts_ms: int
) -> dict[int, int]:
    query = [TopicPartition(spec.source.topic, p, ts_ms) for p in partitions]
    try:
        found = consumer.offsets_for_times(query, timeout=_TIMEOUT_S)
    except KafkaException as e:
        cluster = spec.source.cluster
        raise ClusterUnreachable(cluster.name, cluster.bootstrap_servers, str(e)) from None
    return {tp.partition: tp.offset for tp in found}


def _high_watermarks(
    consumer: Consumer, spec: ReplicationSpec, partitions: Sequence[int]
) -> dict[int, int]:
    marks = {}
    for p in partitions:
        try:
            _low, high = consumer.get_watermark_offsets(
                TopicPartition(spec.source.topic, p), timeout=_TIMEOUT_S
            )
        except KafkaException as e:
            cluster = spec.source.cluster
            raise ClusterUnreachable(cluster.name, cluster.bootstrap_servers, str(e)) from None
        marks[p] = high
    return marks


def _mean_record_bytes(
    consumer: Consumer, topic: str, high_watermarks: Mapping[int, int]
) -> float | None:
    """Mean key + value size of up to _SAMPLE_RECORDS recent records per partition."""
    assignment = [
        TopicPartition(topic, p, max(0, high - _SAMPLE_RECORDS))
        for p, high in high_watermarks.items()
        if high > 0
    ]
    if not assignment:
        return None
    consumer.assign(assignment)
    total = count = 0
    wanted = sum(min(_SAMPLE_RECORDS, high_watermarks[tp.partition]) for tp in assignment)
    for _ in range(20):
        for message in consumer.consume(num_messages=1000, timeout=0.5):
            if message.error():
                continue
            total += len(message.key() or b"") + len(message.value() or b"")
            count += 1
        if count >= wanted:
            break
    return total / count if count else None
