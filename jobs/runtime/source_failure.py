"""Why a Kafka-sourced query failed, when the cause is its source: told in one line, and
recorded where users query when records were lost.

Spark's Kafka source fails the query (failOnDataLoss) when the topic disappears or when the
offsets the checkpoint resumes from were deleted; the replication copy's consumer does the
same (`auto.offset.reset=none`). Its exception is many lines of Spark internals. After such a
failure the template asks the job (`StreamingJob.explain_failure`), and a job with a Kafka
source answers with `explain`, which asks the broker:

* the topic is gone: `SourceTopicDeleted`;
* a partition's earliest offset is above the offset the checkpoint resumes from: the range
  in between was never read. It is appended to `source_data_loss` (`jobs/runtime/tables.py`)
  and the answer is `SourceDataLost`, naming the ranges and the table.

Both exit 1 with their one line (`jobs/main.py`). Nothing else is written: the failed
micro-batch's own writes are exactly-once and are redone, or not, by the next run.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from confluent_kafka import Consumer, KafkaException, TopicPartition
from pyspark.sql import SparkSession

from core import kafka_admin
from core.config import ClusterConfig
from core.errors import (
    ClusterUnreachable,
    SourceDataLost,
    SourceTopicDeleted,
    TopicNotFound,
    UatuError,
)
from jobs.runtime.checkpoint_files import read_offset_log
from jobs.runtime.delta import ensure
from jobs.runtime.tables import SOURCE_DATA_LOSS

log = logging.getLogger("uatu.source")

_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class LostRange:
    """Offsets [from_offset, until_offset) of a partition that nobody read."""

    partition: int
    from_offset: int
    until_offset: int


def lost_ranges(resume_at: Mapping[int, int], earliest: Mapping[int, int]) -> list[LostRange]:
    """Per partition, the offsets between where the job resumes and the earliest one the
    broker still has (pure). Partitions the broker no longer lists are not ranges."""
    return [
        LostRange(p, start, earliest[p])
        for p, start in sorted(resume_at.items())
        if p in earliest and start < earliest[p]
    ]


def explain(
    spark: SparkSession,
    *,
    job_group_id: str,
    checkpoint: str,
    cluster: ClusterConfig,
    topic: str,
    loss_table: str,
    resumes_at: Mapping[int, int] | None = None,
) -> UatuError | None:
    """The one-line error for a query that failed because of its source, or None when the
    source is not the cause (or the cluster does not answer: nothing can be said).

    `resumes_at` is where a job that keeps its own progress (the low-latency replication
    copy) resumes; by default it is read from Spark's checkpoint (`OffsetLog.resume_offsets`)."""
    try:
        partitions = kafka_admin.partition_count(cluster, topic, "source")
    except TopicNotFound:
        return SourceTopicDeleted(topic, cluster.name)
    except ClusterUnreachable:
        return None
    try:
        earliest = _earliest_offsets(cluster, topic, partitions)
    except KafkaException as e:
        log.warning("could not read the earliest offsets of %s: %s", topic, e)
        return None
    if resumes_at is None:
        resumes_at = read_offset_log(spark, checkpoint).resume_offsets(topic)
    lost = lost_ranges(resumes_at, earliest)
    if not lost:
        return None
    now = datetime.now(UTC)
    rows = [
        (job_group_id, cluster.name, topic, r.partition, r.from_offset, r.until_offset, now)
        for r in lost
    ]
    ensure(spark, SOURCE_DATA_LOSS, loss_table)
    spark.createDataFrame(rows, SOURCE_DATA_LOSS.schema).write.format("delta").mode("append").save(
        loss_table
    )
    ranges = ", ".join(f"{r.partition} [{r.from_offset}, {r.until_offset})" for r in lost)
    return SourceDataLost(topic, cluster.name, ranges, loss_table)


def _earliest_offsets(cluster: ClusterConfig, topic: str, partitions: int) -> dict[int, int]:
    consumer = Consumer(
        {
            **cluster.check_client_config(),
            "group.id": "uatu-source-check",
            "enable.auto.commit": False,
        }
    )
    try:
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), _TIMEOUT_S)[0]
            for p in range(partitions)
        }
    finally:
        consumer.close()
