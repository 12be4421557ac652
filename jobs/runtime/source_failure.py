"""Why a Kafka-sourced query failed, when the cause is its source: told in one line, and
recorded where users query when records were lost; and the operator's way past such a loss.

Spark's Kafka source fails the query (failOnDataLoss) when the topic disappears, and the JVM
readers of planned offset ranges (`kafka_source.range_consumer_config`:
`auto.offset.reset=none`) fail their task when the offsets they read were deleted. Their
exception is many lines of JVM internals. After such a failure the template asks the job
(`StreamingJob.explain_failure`), and a job with a Kafka source answers with `explain` (one
topic) or `explain_sources` (a job whose queries read several, the dispatcher), which ask the
broker:

* a topic is gone: `SourceTopicDeleted`;
* a partition's earliest offset is above the offset its query resumes from: the range in
  between was never read. It is recorded in `source_data_loss` (`jobs/runtime/tables.py`,
  `record_lost`: each lost offset once, however often a job stops on it) and the answer is
  `SourceDataLost`, naming the ranges and the table.

Both exit 1 with their one line (`jobs/main.py`). Nothing else is written: the failed
micro-batch's own writes are exactly-once and are redone, or not, by the next run.

A job that reads a topic pattern goes on when one of its topics is deleted
(`kafka_source.source_read_options`, own_loss_checks): `record_vanished` finds, per
micro-batch, the partitions the previous batch read and this one no longer lists (or lists
at a lower offset: deleted and created again), logs them and records each in
`source_data_loss` with until_offset DELETED_END, as how many records the topic had past
where the job read is unknown; `record_lost` records a planned range whose topic was gone
before the job read it.

`--skip-lost-records` (`jobs/main.py`) is the operator's way past a loss on the same
checkpoint: `skip_lost` finds and records the ranges lost before this start and returns them
as `SourceGaps`, and the job reads each planned range from past the gap it starts in
(`SourceGaps.skip`). Only offsets of those ranges are skipped: a range that starts anywhere
else is read as planned, so records lost later in the run still fail it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import MappingProxyType

from confluent_kafka import Consumer, KafkaException, TopicPartition
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from core import kafka_admin
from core.config import ClusterConfig
from core.errors import (
    ClusterUnreachable,
    SourceDataLost,
    SourceTopicDeleted,
    TopicNotFound,
    UatuError,
)
from jobs.runtime.checkpoint_files import batch_end_offsets, read_offset_log
from jobs.runtime.delta import ensure
from jobs.runtime.tables import SOURCE_DATA_LOSS

log = logging.getLogger("uatu.source")

_TIMEOUT_S = 10.0
# until_offset of a source_data_loss row for a partition whose topic was deleted: the end of
# what was lost is unknown.
DELETED_END = -1


@dataclass(frozen=True)
class LostRange:
    """Offsets [from_offset, until_offset) of a partition that nobody read."""

    partition: int
    from_offset: int
    until_offset: int

    def __str__(self) -> str:
        return f"{self.partition} [{self.from_offset}, {self.until_offset})"


def lost_ranges(resume_at: Mapping[int, int], earliest: Mapping[int, int]) -> list[LostRange]:
    """Per partition, the offsets between where the job resumes and the earliest one the
    broker still has (pure). Partitions the broker no longer lists are not ranges."""
    return [
        LostRange(p, start, earliest[p])
        for p, start in sorted(resume_at.items())
        if p in earliest and start < earliest[p]
    ]


def unrecorded(lost: Sequence[LostRange], recorded: Sequence[LostRange]) -> list[LostRange]:
    """The parts of `lost` that no range of `recorded` on the same partition covers (pure),
    so a loss found again, or found grown (retention went on), is recorded once."""
    parts: list[LostRange] = []
    for r in lost:
        start = r.from_offset
        covering = sorted(
            (c for c in recorded if c.partition == r.partition), key=lambda c: c.from_offset
        )
        for c in covering:
            if c.until_offset <= start or c.from_offset >= r.until_offset:
                continue
            if c.from_offset > start:
                parts.append(LostRange(r.partition, start, c.from_offset))
            start = max(start, c.until_offset)
        if start < r.until_offset:
            parts.append(LostRange(r.partition, start, r.until_offset))
    return parts


@dataclass(frozen=True)
class SourceGaps:
    """The lost ranges of one topic that this run may read past (`--skip-lost-records`), by
    partition; none by default."""

    ranges: Mapping[int, LostRange] = field(default_factory=lambda: MappingProxyType({}))

    def past(self, partition: int, offset: int) -> int:
        """Where a reader at `offset` reads on from (pure): the end of the gap `offset` is in;
        `offset` itself when it is in none."""
        gap = self.ranges.get(partition)
        if gap is None or not gap.from_offset <= offset < gap.until_offset:
            return offset
        return gap.until_offset

    def skip(self, partition: int, from_offset: int, until_offset: int) -> int:
        """Where to read a planned range [from_offset, until_offset) from (pure): `past` its
        start, capped at its end (a range inside a gap is left empty)."""
        return min(self.past(partition, from_offset), until_offset)

    def __bool__(self) -> bool:
        return bool(self.ranges)


NO_GAPS = SourceGaps()


def read_past(
    gaps: SourceGaps, ranges: Sequence[tuple[int, int, int]], label: str
) -> list[tuple[int, int, int]]:
    """The planned (partition, from, until) `ranges` read from past the gaps they start in
    (`SourceGaps.skip`), empty ones dropped; each range moved is logged with `label` (the
    query and batch)."""
    kept = []
    for partition, from_offset, until_offset in ranges:
        start = gaps.skip(partition, from_offset, until_offset)
        if start != from_offset:
            log.warning(
                "%s: partition %d reads from %d, past the lost offsets [%d, %d)",
                label,
                partition,
                start,
                from_offset,
                start,
            )
        if start < until_offset:
            kept.append((partition, start, until_offset))
    return kept


@dataclass(frozen=True)
class Source:
    """A topic one of a job's queries reads, that query's checkpoint, and where it resumes
    when the job keeps that itself (None: read from Spark's checkpoint, `OffsetLog`)."""

    topic: str
    checkpoint: str
    resumes_at: Mapping[int, int] | None = None


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
    return explain_sources(
        spark,
        job_group_id=job_group_id,
        cluster=cluster,
        sources=[Source(topic, checkpoint, resumes_at)],
        loss_table=loss_table,
    )


def explain_sources(
    spark: SparkSession,
    *,
    job_group_id: str,
    cluster: ClusterConfig,
    sources: Sequence[Source],
    loss_table: str,
) -> UatuError | None:
    """`explain` for a job whose queries read several topics of one cluster: the first
    topic that is gone, else every lost range of every topic (all recorded, one line)."""
    found: dict[str, list[LostRange]] = {}
    for source in sources:
        try:
            lost = _lost(spark, cluster, source)
        except TopicNotFound:
            return SourceTopicDeleted(source.topic, cluster.name)
        if lost:
            found[source.topic] = lost
    if not found:
        return None
    for topic, lost in found.items():
        record_lost(spark, loss_table, job_group_id, cluster.name, topic, lost)
    if len(found) == 1:
        ((topic, lost),) = found.items()
        return SourceDataLost(topic, cluster.name, _listed(lost), loss_table)
    ranges = "; ".join(f"{topic} {_listed(lost)}" for topic, lost in found.items())
    return SourceDataLost(", ".join(found), cluster.name, ranges, loss_table)


def skip_lost(
    spark: SparkSession,
    *,
    job_group_id: str,
    cluster: ClusterConfig,
    source: Source,
    loss_table: str,
) -> SourceGaps:
    """`--skip-lost-records` at the start of a run: the ranges of `source` deleted before its
    query read them, recorded in `loss_table` (those not recorded yet) and returned for the
    query to read past. A cluster that does not tell its earliest offsets gives no gaps: a
    loss then fails the run as it would without the flag."""
    lost = _lost(spark, cluster, source)
    if lost is None:
        log.warning("--skip-lost-records: %s did not tell its earliest offsets", cluster.name)
        return NO_GAPS
    if not lost:
        log.info("--skip-lost-records: no record of %s was lost; nothing to skip", source.topic)
        return NO_GAPS
    record_lost(spark, loss_table, job_group_id, cluster.name, source.topic, lost)
    log.warning(
        "--skip-lost-records: records of %s/%s were deleted before the job read them "
        "(partition [from, until) offsets: %s), recorded in %s; this run reads on from the "
        "end of each range, and fails on any other loss",
        cluster.name,
        source.topic,
        _listed(lost),
        loss_table,
    )
    return SourceGaps(MappingProxyType({r.partition: r for r in lost}))


def record_lost(
    spark: SparkSession,
    loss_table: str,
    job_group_id: str,
    cluster: str,
    topic: str,
    lost: Sequence[LostRange],
) -> list[LostRange]:
    """Append to `loss_table` the parts of `lost` it does not hold yet for this JobGroup,
    cluster and topic (`unrecorded`); -> those parts."""
    ensure(spark, SOURCE_DATA_LOSS, loss_table)
    rows = (
        spark.read.format("delta")
        .load(loss_table)
        .where(
            (F.col("job_group_id") == job_group_id)
            & (F.col("cluster") == cluster)
            & (F.col("topic") == topic)
        )
        .select("partition", "from_offset", "until_offset")
        .collect()
    )
    new = unrecorded(lost, [LostRange(*r) for r in rows])
    if new:
        now = datetime.now(UTC)
        appended = [
            (job_group_id, cluster, topic, r.partition, r.from_offset, r.until_offset, now)
            for r in new
        ]
        spark.createDataFrame(appended, SOURCE_DATA_LOSS.schema).write.format("delta").mode(
            "append"
        ).save(loss_table)
    return new


def vanished(
    before: Mapping[str, Mapping[int, int]], after: Mapping[str, Mapping[int, int]]
) -> dict[str, list[LostRange]]:
    """Per topic, the partitions that `before` (a batch's end offsets) lists and `after` (the
    next batch's) does not, or lists at a lower offset (the topic was deleted, and perhaps
    created again): LostRange(partition, where the job had read to, DELETED_END) (pure)."""
    gone: dict[str, list[LostRange]] = {}
    for topic, offsets in sorted(before.items()):
        now = after.get(topic, {})
        lost = [
            LostRange(p, o, DELETED_END)
            for p, o in sorted(offsets.items())
            if p not in now or now[p] < o
        ]
        if lost:
            gone[topic] = lost
    return gone


def record_vanished(
    spark: SparkSession,
    *,
    checkpoint: str,
    batch_id: int,
    job_group_id: str,
    cluster: str,
    loss_table: str,
) -> dict[str, list[LostRange]]:
    """`vanished` between the end offsets of batches `batch_id` - 1 and `batch_id` (Spark's
    offset log): each logged, and recorded in `loss_table` unless it is already (a replayed
    batch finds the same ones)."""
    if batch_id == 0:
        return {}
    before = batch_end_offsets(spark, checkpoint, batch_id - 1)
    after = batch_end_offsets(spark, checkpoint, batch_id)
    if before is None or after is None:
        return {}
    gone = vanished(before, after)
    for topic, lost in gone.items():
        log.warning(
            "batch %d: %s/%s is gone (deleted%s); partition offsets the job had read to: %s; "
            "what it held past them is recorded as lost in %s, the job goes on",
            batch_id,
            cluster,
            topic,
            ", then created again" if topic in after else "",
            ", ".join(f"{r.partition} {r.from_offset}" for r in lost),
            loss_table,
        )
        _record_deleted(spark, loss_table, job_group_id, cluster, topic, lost)
    return gone


def _record_deleted(
    spark: SparkSession,
    loss_table: str,
    job_group_id: str,
    cluster: str,
    topic: str,
    lost: Sequence[LostRange],
) -> None:
    """Append the DELETED_END ranges of `lost` that `loss_table` does not hold yet."""
    ensure(spark, SOURCE_DATA_LOSS, loss_table)
    held = {
        (r["partition"], r["from_offset"])
        for r in spark.read.format("delta")
        .load(loss_table)
        .where(
            (F.col("job_group_id") == job_group_id)
            & (F.col("cluster") == cluster)
            & (F.col("topic") == topic)
            & (F.col("until_offset") == DELETED_END)
        )
        .select("partition", "from_offset")
        .collect()
    }
    now = datetime.now(UTC)
    rows = [
        (job_group_id, cluster, topic, r.partition, r.from_offset, r.until_offset, now)
        for r in lost
        if (r.partition, r.from_offset) not in held
    ]
    if rows:
        spark.createDataFrame(rows, SOURCE_DATA_LOSS.schema).write.format("delta").mode(
            "append"
        ).save(loss_table)


def checkpoint_topics(spark: SparkSession, checkpoint: str) -> list[str]:
    """The topics a query's checkpoint says it reads (its last committed batch, else its
    first), sorted: the topics of a topic selection that a restart resumes."""
    offsets = read_offset_log(spark, checkpoint)
    sources = offsets.committed_sources or offsets.started_sources or ()
    return sorted({t for s in sources for t, o in s.items() if isinstance(o, dict)})


def _listed(lost: Sequence[LostRange]) -> str:
    return ", ".join(str(r) for r in lost)


def _lost(spark: SparkSession, cluster: ClusterConfig, source: Source) -> list[LostRange] | None:
    """The ranges of `source` lost before its query read them; None when the cluster does
    not answer. Raises TopicNotFound when the topic is gone."""
    try:
        partitions = kafka_admin.partition_count(cluster, source.topic, "source")
    except ClusterUnreachable:
        return None
    try:
        earliest = _earliest_offsets(cluster, source.topic, partitions)
    except KafkaException as e:
        log.warning("could not read the earliest offsets of %s: %s", source.topic, e)
        return None
    resumes_at = source.resumes_at
    if resumes_at is None:
        resumes_at = read_offset_log(spark, source.checkpoint).resume_offsets(source.topic)
    return lost_ranges(resumes_at, earliest)


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
