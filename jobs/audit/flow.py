"""The audit job's byte cap (flow_control.bytes_per_sec), which Spark's Kafka source lacks.

Spark's Kafka source bounds a micro-batch by records only (maxOffsetsPerTrigger), so the byte
cap becomes a record budget through the topic's observed record size: before the query starts,
`sample_mean_record_bytes` reads the newest records of every partition and takes their mean key
+ value size (`AuditSpec.max_offsets_per_trigger`). Records larger than the sample would still
overshoot, so `BytePacer` corrects with the exact bytes each batch read (the fold counts them):
a batch occupies at least bytes / bytes_per_sec, counted from when the previous one did, and the
job waits out the rest before it returns the batch to Spark. Over every batch and its wait the
byte rate is therefore at or under the cap, in a streaming run and with --once alike; within a
batch the records are read as fast as the consumer goes.

A topic selection is one query, and Spark's maxOffsetsPerTrigger caps the records of a batch
over all its topics together (Spark shares it out in proportion to each partition's backlog):
the caps are the job's, not each topic's. Its record size is sampled from a few of the
selected topics (`SAMPLED_TOPICS`, the first by name); the pacer corrects any difference.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaException, TopicPartition

from core import kafka_admin
from core.config import ClusterConfig
from core.errors import ClusterUnreachable
from jobs.audit.spec import AuditSpec

log = logging.getLogger("uatu.audit")

SAMPLE_RECORDS = 200  # per partition
SAMPLED_TOPICS = 5  # of a topic selection
_TIMEOUT_S = 15.0


def sample_mean_record_bytes(
    cluster: ClusterConfig, topic: str, partitions: int, *, read_committed: bool = False
) -> float | None:
    """Mean key + value size of up to SAMPLE_RECORDS of the newest records of each partition;
    None for an empty topic."""
    consumer = Consumer(
        {
            **cluster.check_client_config(),
            "group.id": "uatu-audit-flow-control",
            "enable.auto.commit": False,
            "isolation.level": "read_committed" if read_committed else "read_uncommitted",
        }
    )
    try:
        assignment, wanted = [], 0
        for p in range(partitions):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=_TIMEOUT_S)
            start = max(low, high - SAMPLE_RECORDS)
            if high > start:
                assignment.append(TopicPartition(topic, p, start))
                wanted += high - start
        if not assignment:
            return None
        consumer.assign(assignment)
        total = count = 0
        for _ in range(20):
            for message in consumer.consume(num_messages=1000, timeout=0.5):
                if message.error():
                    continue
                total += len(message.key() or b"") + len(message.value() or b"")
                count += 1
            if count >= wanted:
                break
        return total / count if count else None
    except KafkaException as e:
        raise ClusterUnreachable(cluster.name, cluster.bootstrap_servers, str(e)) from None
    finally:
        consumer.close()


def sample_selection_record_bytes(spec: AuditSpec) -> float | None:
    """`sample_mean_record_bytes` of the job's topic; for a topic selection, the mean of the
    means of its first SAMPLED_TOPICS topics that have records. None: nothing to sample."""
    source = spec.source
    if source.selection is None:
        partitions = kafka_admin.partition_count(source.cluster, source.topic, source.field)
        return sample_mean_record_bytes(
            source.cluster, source.topic, partitions, read_committed=source.read_committed
        )
    counts = kafka_admin.topic_partitions(source.cluster)
    selected = source.selection.select(counts)
    sampled = selected[:SAMPLED_TOPICS]
    log.info(
        "flow control: sampling the record size of %d of the %d topics of %s",
        len(sampled),
        len(selected),
        source.selection,
    )
    means = [
        m
        for t in sampled
        if (
            m := sample_mean_record_bytes(
                source.cluster, t, counts[t], read_committed=source.read_committed
            )
        )
        is not None
    ]
    return sum(means) / len(means) if means else None


@dataclass
class BytePacer:
    """How long to wait after a batch so the bytes read stay at or under `max_bytes_per_sec`."""

    max_bytes_per_sec: float  # > 0
    _free_at: float | None = None

    def delay(self, started: float, nbytes: int, now: float) -> float:
        """Seconds to wait after a batch that started at `started` and read `nbytes`; `now`
        is when it finished. A batch is allowed nbytes / cap seconds from the later of its
        start and the previous batch's allowance; idle time builds up no credit."""
        begin = started if self._free_at is None else max(started, self._free_at)
        self._free_at = begin + nbytes / self.max_bytes_per_sec
        return max(0.0, self._free_at - now)
