"""Broker metadata of one audited topic, sampled on the driver every trigger (RETENTION and
AVAILABILITY), and what the samples add up to per window: pure bookkeeping plus one
confluent-kafka AdminClient."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, OffsetSpec

from core.config import ClusterConfig
from core.kafka_admin import ADMIN_TIMEOUT_S

NO_LEADER = -1


@dataclass(frozen=True)
class PartitionSample:
    leader: int
    replicas: int
    isr: int
    log_start: int
    end: int
    committed: int | None  # None: the group has no committed offset here


@dataclass
class TopicSample:
    sampled_ms: int
    partitions: dict[int, PartitionSample]
    min_isr: int = 1
    retention_ms: int | None = None
    retention_bytes: int | None = None
    cleanup_policy: str = ""


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


class TopicSampler:
    """Leader, replicas, ISR, log start/end offsets, the group's committed offsets and the
    retention settings of one topic."""

    def __init__(self, cluster: ClusterConfig, topic: str, group: str) -> None:
        self.topic = topic
        self.group = group
        self.admin = AdminClient(cluster.client_config())

    def sample(self, now_ms: int) -> TopicSample | None:
        metadata = self.admin.list_topics(self.topic, timeout=ADMIN_TIMEOUT_S)
        topic = metadata.topics.get(self.topic)
        if topic is None or topic.error is not None:
            return None
        parts = topic.partitions
        tps = [TopicPartition(self.topic, p) for p in parts]
        earliest = self._offsets(tps, OffsetSpec.earliest())
        latest = self._offsets(tps, OffsetSpec.latest())
        committed: dict[int, int] = {}
        if self.group:
            request = [ConsumerGroupTopicPartitions(self.group, tps)]
            future = self.admin.list_consumer_group_offsets(request)[self.group]
            for tp in future.result(timeout=ADMIN_TIMEOUT_S).topic_partitions:
                if tp.error is None and tp.offset >= 0:
                    committed[tp.partition] = tp.offset
        sample = TopicSample(
            now_ms,
            {
                p: PartitionSample(
                    leader=m.leader,
                    replicas=len(m.replicas),
                    isr=len(m.isrs),
                    log_start=earliest.get(p, 0),
                    end=latest.get(p, 0),
                    committed=committed.get(p),
                )
                for p, m in parts.items()
            },
        )
        resource = ConfigResource(ConfigResource.Type.TOPIC, self.topic)
        configs = self.admin.describe_configs([resource])[resource].result(timeout=ADMIN_TIMEOUT_S)
        sample.min_isr = _int(configs["min.insync.replicas"].value) or 1
        sample.retention_ms = _int(configs["retention.ms"].value)
        sample.retention_bytes = _int(configs["retention.bytes"].value)
        sample.cleanup_policy = str(configs["cleanup.policy"].value)
        return sample

    def _offsets(self, tps: list[TopicPartition], spec: OffsetSpec) -> dict[int, int]:
        futures = self.admin.list_offsets({tp: spec for tp in tps})
        return {tp.partition: f.result(timeout=ADMIN_TIMEOUT_S).offset for tp, f in futures.items()}


@dataclass
class RetentionState:
    """Per partition: the log start seen last and the highest offset already recorded lost."""

    log_start: dict[int, int] = field(default_factory=dict)
    lost_through: dict[int, int] = field(default_factory=dict)

    def step(self, partition: int, s: PartitionSample) -> tuple[int, int | None, int | None]:
        """(deleted since the previous sample, first lost offset, last lost offset) for one
        partition's new sample: records below the new log start that the group's committed
        offset had not reached are lost (once each)."""
        before = self.log_start.get(partition)
        deleted = max(0, s.log_start - before) if before is not None else 0
        self.log_start[partition] = s.log_start
        if s.committed is None or s.log_start <= s.committed:
            return deleted, None, None
        first = max(s.committed, self.lost_through.get(partition, -1) + 1)
        last = s.log_start - 1
        if first > last:
            return deleted, None, None
        self.lost_through[partition] = last
        return deleted, first, last
