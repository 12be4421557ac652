"""The replication copy: JVM tasks that move Spark-planned source offset ranges from a Kafka
consumer to a Kafka producer (`jvm/src/main/java/dev/uatu/replication/`, compiled into
build/uatu-jvm.jar). A micro-batch's ranges are packed into about one Spark task per slot
(`ReplicationSink.packed`: each partition's range in exactly one task, a busy one alone).

For each range its task holds (`ranges.SourceRange`), the copy

1. reads the tail of the destination partition (all the task's tails in the same fetches)
   and finds the highest source offset already stamped there, so records a crashed run or a
   failed task attempt wrote are not written again;
2. reads the range with the task's byte-array consumer (one for all its ranges) and produces
   every newer record to the destination partition with the Java Kafka producer, keeping
   key, value, headers and the source timestamp, and appending the encoded-format headers, if
   any, and the provenance stamp (`core.provenance.STAMP`, one header naming source cluster,
   topic, partition and offset);
3. waits for the acks of its records, fails the task if any delivery failed (so the batch,
   and the query, fail rather than lose a record), and returns one summary row per window of
   source timestamps (`SUMMARY_SCHEMA`): counts, bytes, MirrorMaker 2's record-age-ms (min,
   sum, max) and replication-latency-ms (min, sum, max and a KLL sketch), which the driver
   turns into `replication_stats` and `replication_audit` rows (`transforms`).

Why records do not go through Spark rows: turning every record into a Spark row (and into
Python) costs more than the copy itself; consumer to producer directly, as MirrorMaker 2 does
it, keeps the copy at the Kafka clients' pace (docs/benchmarks.md has the figures). Why not
Spark's own Kafka sink: in Spark 4.2 it cannot set the record timestamp (SPARK-50160 is not in
it), it reports no per-record ack, and a retried task re-sends records the failed attempt
already wrote. Step 1 in every task makes task retries, executor loss and driver restarts all
leave exactly one copy, provided the destination partition is written only by this job and in
order (one task per partition's range, no speculation, idempotent or single-in-flight
producer).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from py4j.protocol import Py4JJavaError
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.classic.dataframe import DataFrame as ClassicDataFrame

from core.errors import ConfigError
from jobs.replication.ranges import SourceRange
from jobs.runtime.py4j import java_class, java_list, java_map, jvm_package

ENCODED_FORMAT = "uatu.encoded.format"
ENCODED_SCHEMA_VERSION = "uatu.encoded.schema.version"

# The rows a copy task returns (WindowSummaries.java): one per source-timestamp window of its
# partition; its written records' latencies (MM2 replication-latency-ms) summed and sketched.
SUMMARY_SCHEMA = (
    "partition int, destination_partition int, window_start_ms long, records_read long, "
    "records_replicated long, records_already_present long, bytes_replicated long, "
    "record_bytes_replicated long, first_offset long, last_offset long, "
    "record_age_ms_min long, record_age_ms_sum long, record_age_ms_max long, "
    "replication_latency_ms_min long, replication_latency_ms_sum long, "
    "replication_latency_ms_max long, replication_latency_kll_sketch binary, "
    "source_topic string, destination_topic string"
)

SINK_PACKAGE = "dev.uatu.replication"
SKETCH_PACKAGE = "dev.uatu.sketch"


@dataclass(frozen=True)
class DestinationConfig:
    """Everything the copy tasks need. Client settings use the Java client's names."""

    source_cluster: str
    source_topic: str
    destination_cluster: str
    topic: str
    producer_config: Mapping[str, str]
    consumer_config: Mapping[str, str]  # reads the destination's tail
    source_consumer_config: Mapping[str, str]  # reads the source ranges
    partition_map: Mapping[int, int]  # source partition -> destination partition
    extra_headers: tuple[tuple[str, str], ...] = ()
    audit_interval_ms: int = 60_000  # the windows of the summary rows
    scan_limit: int = 100_000  # records read back at most to find the last stamp
    source_timeout_ms: int = 120_000  # a source partition silent this long fails the task
    # Flow control, paced record by record in the copy (FlowLimiter.java): the tasks of one
    # flow_key (the JobGroup) in one JVM share max_records_per_sec and max_bytes_per_sec (key +
    # value bytes); 0 = unlimited.
    flow_key: str = ""
    max_records_per_sec: float = 0.0
    max_bytes_per_sec: float = 0.0


def planned_ranges(batch: DataFrame, topic: str) -> list[SourceRange]:
    """The offset ranges Spark's Kafka source planned for a foreachBatch micro-batch of `topic`.
    Reads none of its records."""
    java_ranges = _jvm(batch.sparkSession).ReplicationSink.batchRanges(batch._jdf, topic)
    return [SourceRange(r.partition(), r.fromOffset(), r.untilOffset()) for r in java_ranges]


def planned_topic_ranges(batch: DataFrame) -> dict[str, list[SourceRange]]:
    """`planned_ranges` of a micro-batch that reads many topics: source topic -> its ranges."""
    java_ranges = _jvm(batch.sparkSession).ReplicationSink.batchRanges(batch._jdf, None)
    ranges: dict[str, list[SourceRange]] = {}
    for r in java_ranges:
        planned = SourceRange(r.partition(), r.fromOffset(), r.untilOffset())
        ranges.setdefault(str(r.topic()), []).append(planned)
    return ranges


def copy_ranges(
    spark: SparkSession, ranges: Sequence[SourceRange], config: DestinationConfig
) -> DataFrame:
    """Copy each source offset range in its own Spark task, now, once -> summary rows
    (SUMMARY_SCHEMA) as a local frame: a few rows per partition."""
    jvm = _jvm(spark)
    source_range = jvm.SourceRange  # one lookup for all the ranges
    java_ranges = java_list(
        spark, (source_range(r.partition, r.from_offset, r.until_offset) for r in ranges)
    )
    summaries = jvm.ReplicationSink.copyRanges(
        spark._jsparkSession, java_ranges, _copy_config(spark, config), SUMMARY_SCHEMA
    )
    return ClassicDataFrame(summaries, spark)


def summary_rows(summaries: DataFrame) -> list[dict[str, Any]]:
    """A copy's summary rows (`copy_ranges`' frame) as dicts (`transforms.Summary`). The rows
    are few: one per partition and window."""
    return [row.asDict() for row in summaries.collect()]


def copy_topic_ranges(
    spark: SparkSession, ranges: Mapping[str, Sequence[SourceRange]], routes: Mapping[str, object]
) -> DataFrame:
    """`copy_ranges` for many topics: source topic -> its ranges, each range in its own task,
    sent where `routes` (source topic -> its copy's `java_config`) says."""
    jvm = _jvm(spark)
    java_ranges = java_list(spark, ())
    java_routes = java_class(spark, "java.util.HashMap")()
    source_range = jvm.SourceRange  # one lookup for all the ranges
    for topic, topic_ranges in sorted(ranges.items()):
        java_routes.put(topic, routes[topic])
        for r in topic_ranges:
            java_ranges.add(source_range(topic, r.partition, r.from_offset, r.until_offset))
    summaries = jvm.ReplicationSink.copyTopicRanges(
        spark._jsparkSession, java_ranges, java_routes, SUMMARY_SCHEMA
    )
    return ClassicDataFrame(summaries, spark)


class ContinuousCopy:
    """The continuous copy running in the driver's JVM (ContinuousCopy.java): epochs of
    long-running copy tasks, one Spark job each, every task copying its source partitions as
    records arrive until the epoch's deadline. Finished epochs queue up until `drain` takes
    them (java `ContinuousCopy.CopiedEpoch` objects, oldest first)."""

    def __init__(
        self,
        spark: SparkSession,
        config: DestinationConfig,
        starts: Mapping[int, int],
        *,
        epoch_ms: int,
        max_tasks: int,
        relay: bool,
    ) -> None:
        self._spark = spark
        self._java = _jvm(spark).ContinuousCopy(
            spark._jsparkSession,
            _copy_config(spark, config),
            java_map(spark, dict(sorted(starts.items()))),
            epoch_ms,
            max_tasks,
            relay,
        )

    def start(self) -> None:
        self._java.start()

    def wait(self, timeout_s: float) -> list:
        """The finished epochs, waiting up to `timeout_s` for the first; [] if none finished."""
        first = self._java.poll(int(timeout_s * 1000))
        return [] if first is None else [first, *self._java.drain()]

    def drain(self) -> list:
        return list(self._java.drain())

    def request_stop(self) -> None:
        self._java.requestStop()

    def join(self, timeout_s: float) -> bool:
        return bool(self._java.join(int(timeout_s * 1000)))

    @property
    def running(self) -> bool:
        return bool(self._java.isRunning())

    @property
    def failure(self) -> str | None:
        failure = self._java.failure()
        return None if failure is None else str(failure)

    def summaries(self, epochs: Sequence) -> DataFrame:
        """The summary rows (SUMMARY_SCHEMA) of `epochs`, one local frame."""
        java_epochs = java_list(self._spark, epochs)
        frame = _jvm(self._spark).ContinuousCopy.summaries(
            self._spark._jsparkSession, java_epochs, SUMMARY_SCHEMA
        )
        return ClassicDataFrame(frame, self._spark)


def epoch_ranges(epochs: Sequence) -> dict[int, SourceRange]:
    """Per partition, the source offsets `epochs` read: the first one's start to the last
    one's end."""
    ranges: dict[int, SourceRange] = {}
    for epoch in epochs:
        for result in epoch.results():
            partition = int(result.partition())
            before = ranges.get(partition)
            start = int(result.fromOffset()) if before is None else before.from_offset
            ranges[partition] = SourceRange(partition, start, int(result.nextOffset()))
    return ranges


class JvmSketches:
    """`transforms.LatencySketches` answered by the JVM's owner of Spark's KLL forms
    (KllSketches.java), in the driver."""

    def __init__(self, spark: SparkSession) -> None:
        self._spark = spark
        self._sketches = jvm_package(spark, SKETCH_PACKAGE, "the KLL sketches").KllSketches

    def merged(self, images: Sequence[bytes]) -> bytes:
        java_images = java_list(self._spark, (bytearray(image) for image in images))
        return bytes(self._sketches.mergeLongs(java_images))

    def quantile(self, image: bytes, rank: float) -> int:
        return int(self._sketches.quantile(bytearray(image), float(rank)))


def check_clients(spark: SparkSession, config: DestinationConfig) -> None:
    """Build the copy's Kafka clients on the driver; a setting the Java client refuses raises
    ConfigError naming the cluster, before any record moves."""
    sink = _jvm(spark).ReplicationSink
    java_config = _copy_config(spark, config)
    for check, cluster, clients in (
        (sink.checkSourceClient, config.source_cluster, "consumer"),
        (sink.checkDestinationClients, config.destination_cluster, "producer or consumer"),
    ):
        try:
            check(java_config)
        except Py4JJavaError as e:
            cause = e.java_exception
            while cause.getCause() is not None:
                cause = cause.getCause()
            raise ConfigError(
                f"clusters.yaml: clusters.{cluster}.properties",
                f"the Kafka {clients} refuses it: {cause.getMessage()}",
            ) from None


def java_config(spark: SparkSession, config: DestinationConfig) -> object:
    """`config` as the JVM copy's CopyConfig (a py4j object): build it once and keep it, a
    copy of many topics has one per topic."""
    return _copy_config(spark, config)


def _copy_config(spark: SparkSession, config: DestinationConfig) -> object:
    return _jvm(spark).CopyConfig(
        config.source_cluster,
        config.source_topic,
        config.topic,
        java_map(spark, config.producer_config),
        java_map(spark, config.consumer_config),
        java_map(spark, config.source_consumer_config),
        java_map(spark, config.partition_map),
        java_map(spark, dict(config.extra_headers)),
        config.audit_interval_ms,
        config.scan_limit,
        config.source_timeout_ms,
        config.flow_key,
        float(config.max_records_per_sec),
        float(config.max_bytes_per_sec),
    )


def close_clients(spark: SparkSession) -> None:
    """Close the sink's cached clients in this JVM (a test session that ran it in-process)."""
    _jvm(spark).Clients.closeAll()


def _jvm(spark: SparkSession):  # a py4j package view
    return jvm_package(spark, SINK_PACKAGE, "the replication sink")
