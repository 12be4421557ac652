"""What a running query has done, per Kafka partition: the statuses its heartbeats carry.

* `observe_source` attaches the `uatu_source` observed metric (records, key + value bytes) to
  a Kafka frame, so a batch's progress says how many bytes it read;
* `partition_statuses` (pure) turns two consecutive progress records into one RUNNING
  uForwarder `JobStatus` per partition: read_offset / commit_offset (the end offsets of the
  last committed micro-batch: Spark commits a batch before it reports its progress, so the
  two are equal), messages_per_sec (offset advance per partition between progress events) and
  bytes_per_sec (that rate times the batch's mean record size);
* `ProgressListener` keeps the latest statuses of one query from Spark's progress events (or
  from progress-shaped records a job without Spark's engine feeds it).

`JobIdentity` is what every per-partition Job of an application shares (type, cluster, topic,
consumer group). A job that reads a topic selection has no one topic (`topic` ""): its
statuses are one per partition of every topic the query reads, each naming its topic.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from uber.data.kafka.datatransfer import job_pb2, job_status_pb2

from jobs.runtime.query_listener import JsonEventsListener

SOURCE_METRIC = "uatu_source"


def observe_source(df: DataFrame) -> DataFrame:
    """Attach the `uatu_source` observed metric (records, key+value bytes) to a Kafka frame."""
    size: Column = F.coalesce(F.length("key"), F.lit(0)) + F.coalesce(F.length("value"), F.lit(0))
    return df.observe(SOURCE_METRIC, F.count(F.lit(1)).alias("records"), F.sum(size).alias("bytes"))


@dataclass(frozen=True)
class JobIdentity:
    """What every per-partition Job of this application shares."""

    type: int
    cluster: str
    topic: str  # "": a topic selection, every topic the query reads
    consumer_group: str = ""

    def job(self, partition: int, topic: str | None = None) -> job_pb2.Job:
        return job_pb2.Job(
            type=self.type,  # type: ignore[arg-type]
            kafka_consumer_task=job_pb2.KafkaConsumerTask(
                cluster=self.cluster,
                topic=self.topic if topic is None else topic,
                partition=partition,
                consumer_group=self.consumer_group,
            ),
        )


def end_offsets(progress: Mapping, topic: str) -> dict[int, int]:
    """{partition: end offset} of `topic` in a progress record (all Kafka sources)."""
    offsets: dict[int, int] = {}
    for source in progress.get("sources", []):
        end = source.get("endOffset")
        if isinstance(end, str):
            end = json.loads(end) if end.startswith("{") else None
        if isinstance(end, dict) and isinstance(end.get(topic), dict):
            offsets.update({int(p): int(o) for p, o in end[topic].items()})
    return offsets


def topic_end_offsets(progress: Mapping, topic: str) -> dict[tuple[str, int], int]:
    """{(topic, partition): end offset} of `topic` in a progress record; of every topic
    when `topic` is "" (a job that reads a topic selection)."""
    if topic:
        return {(topic, p): o for p, o in end_offsets(progress, topic).items()}
    offsets: dict[tuple[str, int], int] = {}
    for source in progress.get("sources", []):
        end = source.get("endOffset")
        if isinstance(end, str):
            end = json.loads(end) if end.startswith("{") else None
        if not isinstance(end, dict):
            continue
        for name, partitions in end.items():
            if isinstance(partitions, dict):
                offsets.update({(name, int(p)): int(o) for p, o in partitions.items()})
    return offsets


def partition_statuses(
    progress: Mapping,
    previous: Mapping | None,
    identity: JobIdentity,
    elapsed_seconds: float | None,
    bytes_per_record: float | None = None,
) -> list[job_status_pb2.JobStatus]:
    """One RUNNING JobStatus per partition from two consecutive progress records (pure).

    Rates are the offset advance since `previous` over `elapsed_seconds` (for the first
    record: since the batch's start offsets, over its duration). Byte rates use
    `bytes_per_record`, or else the mean record size of the batch's SOURCE_METRIC.
    """
    now = topic_end_offsets(progress, identity.topic)
    if previous is not None and elapsed_seconds:
        before, seconds = topic_end_offsets(previous, identity.topic), elapsed_seconds
    else:
        before = _start_offsets(progress, identity.topic)
        seconds = max(progress.get("batchDuration", 0) / 1000, 1e-3)
    if bytes_per_record is None:
        metric = (progress.get("observedMetrics") or {}).get(SOURCE_METRIC) or {}
        records, size = metric.get("records") or 0, metric.get("bytes") or 0
        bytes_per_record = size / records if records else 0.0
    statuses = []
    for (topic, partition), offset in sorted(now.items()):
        rate = max(offset - before.get((topic, partition), offset), 0) / seconds
        statuses.append(
            job_status_pb2.JobStatus(
                job=identity.job(partition, topic),
                state=job_pb2.JOB_STATE_RUNNING,
                kafka_consumer_task_status=job_status_pb2.KafkaConsumerTaskStatus(
                    read_offset=offset,
                    commit_offset=offset,
                    messages_per_sec=rate,
                    bytes_per_sec=rate * bytes_per_record,
                ),
            )
        )
    return statuses


def _start_offsets(progress: Mapping, topic: str) -> dict[tuple[str, int], int]:
    starts = [{**s, "endOffset": s.get("startOffset")} for s in progress.get("sources", [])]
    return topic_end_offsets({"sources": starts}, topic)


class ProgressListener(JsonEventsListener):
    """Keeps the latest per-partition statuses of one query (events arrive on Spark's thread)."""

    def __init__(
        self,
        query_name: str,
        identity: JobIdentity,
        committed: dict | None = None,
        record_bytes: Callable[[], float] | None = None,
    ):
        self.query_name = query_name
        self.identity = identity
        self.record_bytes = record_bytes
        self._lock = threading.Lock()
        self._last: dict | None = None
        self._statuses: list[job_status_pb2.JobStatus] = []
        if committed:  # a restart: offsets from the checkpoint, no rate yet
            self._statuses = partition_statuses(committed, committed, identity, 1.0)

    def onQueryStarted(self, event) -> None:
        pass

    def onQueryProgress(self, event) -> None:
        self.record(json.loads(event.progress.json))

    def record(self, progress: Mapping) -> None:
        """Take the offsets and rates of one progress record of this query (a Spark progress
        event's JSON, or one shaped like it by a job that runs without Spark's engine)."""
        if progress.get("name") != self.query_name:
            return
        if not topic_end_offsets(progress, self.identity.topic):
            return  # a trigger without offsets (nothing to read yet): keep what we know
        with self._lock:
            elapsed = _seconds_between(self._last, progress) if self._last else None
            size = self.record_bytes() if self.record_bytes is not None else None
            self._statuses = partition_statuses(progress, self._last, self.identity, elapsed, size)
            self._last = dict(progress)

    def onQueryIdle(self, event) -> None:
        with self._lock:  # nothing new to read: the offsets stand, the rates drop to zero
            for status in self._statuses:
                status.kafka_consumer_task_status.messages_per_sec = 0
                status.kafka_consumer_task_status.bytes_per_sec = 0

    def onQueryTerminated(self, event) -> None:
        pass

    def settle(self, committed: dict) -> None:
        """Report the offsets of a checkpoint's last committed batch
        (`OffsetLog.committed_progress`),
        rates zero: what a run that has stopped its query says last, whatever progress
        events Spark has not delivered yet."""
        if not topic_end_offsets(committed, self.identity.topic):
            return
        with self._lock:
            self._statuses = partition_statuses(committed, committed, self.identity, 1.0)

    def statuses(self) -> list[job_status_pb2.JobStatus]:
        with self._lock:
            return [_copy(s) for s in self._statuses]


def _seconds_between(earlier: Mapping, later: Mapping) -> float | None:
    try:
        start = datetime.fromisoformat(earlier["timestamp"].replace("Z", "+00:00"))
        end = datetime.fromisoformat(later["timestamp"].replace("Z", "+00:00"))
    except (KeyError, ValueError):
        return None
    seconds = (end - start).total_seconds()
    return seconds if seconds > 0 else None


def _copy(status: job_status_pb2.JobStatus) -> job_status_pb2.JobStatus:
    copied = job_status_pb2.JobStatus()
    copied.CopyFrom(status)
    return copied
