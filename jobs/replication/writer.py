"""The replication sink: a JVM `mapPartitions` over the source records, one task per source
partition (`jvm/src/main/java/dev/uatu/replication/`, compiled into build/uatu-jvm.jar).

For the source partition its task holds, the sink

1. reads the tail of the destination partition and finds the highest source offset already
   stamped there, so records a crashed run or a failed task attempt wrote are not written again;
2. produces every newer record to the destination partition with the Java Kafka producer,
   keeping key, value, headers and the source timestamp, and appending the provenance stamps
   (`uatu.src.cluster`, `.topic`, `.partition`, the encoded-format headers, `.offset`; the
   last header of a name wins);
3. flushes, fails the task if any delivery failed (so the batch, and the query, fail rather
   than lose a record), and returns one summary row per window of source timestamps
   (`SUMMARY_SCHEMA`): counts, bytes, MirrorMaker 2's record-age-ms (min, sum, max) and the
   replication-latency-ms of every written record, which Spark turns into `replication_stats`
   and `replication_audit`.

Why the JVM: the records never cross into Python workers. The same sink in a Python worker
(librdkafka in `mapInArrow`) copied at half MirrorMaker 2's rate; most of that was moving rows
between the JVM and Python. Why not Spark's own Kafka sink: in Spark 4.2 it cannot set the
record timestamp (SPARK-50160 is not in it), it reports no per-record ack, and a retried task
re-sends records the failed attempt already wrote. Step 1 in every task makes task retries,
executor loss and driver restarts all leave exactly one copy, provided the destination
partition is written only by this job and in order (one task per partition, no speculation,
idempotent or single-in-flight producer).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from py4j.protocol import Py4JJavaError
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.classic.dataframe import DataFrame as ClassicDataFrame

from jobs.common.errors import ConfigError

STAMP_CLUSTER = "uatu.src.cluster"
STAMP_TOPIC = "uatu.src.topic"
STAMP_PARTITION = "uatu.src.partition"
STAMP_OFFSET = "uatu.src.offset"
ENCODED_FORMAT = "uatu.encoded.format"
ENCODED_SCHEMA_VERSION = "uatu.encoded.schema.version"

# The columns the sink reads, in this order (PartitionCopier.java reads them by position), and
# the rows it returns: one per source-timestamp window of the task's partition, with every
# written record's latency (MM2 replication-latency-ms).
INPUT_COLUMNS = ("key", "value", "partition", "offset", "timestamp_ms", "headers")
SUMMARY_SCHEMA = (
    "partition int, destination_partition int, window_start_ms long, records_read long, "
    "records_replicated long, records_already_present long, bytes_replicated long, "
    "record_bytes_replicated long, first_offset long, last_offset long, "
    "record_age_ms_min long, record_age_ms_sum long, record_age_ms_max long, "
    "replication_latency_ms array<long>"
)

SINK_PACKAGE = "dev.uatu.replication"


@dataclass(frozen=True)
class DestinationConfig:
    """Everything the sink's tasks need. Client settings use the Java client's names."""

    source_cluster: str
    source_topic: str
    destination_cluster: str
    topic: str
    producer_config: Mapping[str, str]
    consumer_config: Mapping[str, str]
    partition_map: Mapping[int, int]  # source partition -> destination partition
    extra_headers: tuple[tuple[str, str], ...] = ()
    audit_interval_ms: int = 60_000  # the windows of the summary rows
    scan_limit: int = 100_000  # records read back at most to find the last stamp


def copy_records(records: DataFrame, config: DestinationConfig) -> DataFrame:
    """`records` (INPUT_COLUMNS, one Spark partition per Kafka partition) -> summary rows.

    Lazy: the copy runs when the result is computed, and again on every computation, so
    compute it once (the job uses localCheckpoint).
    """
    spark = records.sparkSession
    summaries = _jvm(spark).ReplicationSink.copy(
        records.select(*INPUT_COLUMNS)._jdf, _copy_config(spark, config), SUMMARY_SCHEMA
    )
    return ClassicDataFrame(summaries, spark)


def check_clients(spark: SparkSession, config: DestinationConfig) -> None:
    """Build the sink's Kafka clients on the driver; a setting the Java client refuses raises
    ConfigError naming the cluster, before any record moves."""
    try:
        _jvm(spark).ReplicationSink.checkClients(_copy_config(spark, config))
    except Py4JJavaError as e:
        cause = e.java_exception
        while cause.getCause() is not None:
            cause = cause.getCause()
        raise ConfigError(
            f"clusters.yaml: clusters.{config.destination_cluster}.properties",
            f"the Kafka producer or consumer refuses it: {cause.getMessage()}",
        ) from None


def _copy_config(spark: SparkSession, config: DestinationConfig) -> object:
    return _jvm(spark).CopyConfig(
        config.source_cluster,
        config.source_topic,
        config.topic,
        _java_map(spark, config.producer_config),
        _java_map(spark, config.consumer_config),
        _java_map(spark, config.partition_map),
        _java_map(spark, dict(config.extra_headers)),
        config.audit_interval_ms,
        config.scan_limit,
    )


def close_clients(spark: SparkSession) -> None:
    """Close the sink's cached clients in this JVM (a test session that ran it in-process)."""
    _jvm(spark).Clients.closeAll()


def _jvm(spark: SparkSession):  # a py4j package view
    jvm = spark.sparkContext._jvm
    assert jvm is not None, "the replication sink needs a classic (JVM) Spark session"
    package = jvm
    for part in SINK_PACKAGE.split("."):
        package = getattr(package, part)
    return package


def _java_map(spark: SparkSession, items: Mapping) -> object:
    """A java.util.LinkedHashMap with `items` in their order (py4j does not convert dicts)."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    result = jvm.java.util.LinkedHashMap()
    for key, value in items.items():
        result.put(key, value)
    return result
