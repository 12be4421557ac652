"""Options for Spark's Kafka source and for the JVM consumers that read its planned offset
ranges themselves, built from plain values (pure, unit-tested)."""

from __future__ import annotations

from core.config import ClusterConfig
from core.spec import SourceSpec

# Bigger fetches than the Java client's defaults (500 records a poll, 1 MiB a partition): with
# them Spark's source read a backlog of 1M 200-byte records in a quarter of the time. The
# benches give their baselines (kafka-consumer-perf-test, MirrorMaker 2) the same settings;
# the cluster's own client properties win over them.
RANGE_FETCH_CONFIG = {
    "max.poll.records": "10000",
    "max.partition.fetch.bytes": str(8 << 20),
    "fetch.max.bytes": str(32 << 20),
}
# How long a JVM range reader waits for the next record of a planned range before it fails
# the task (dev.uatu.fold.RangeReader): the records exist, so a silence this long is a broker
# that stopped answering, not a quiet topic.
RANGE_TIMEOUT_MS = 120_000
# The driver consumer's metadata age for a topic selection. Spark's default offset reader
# lists the topics through an admin client at every trigger, so a new matching topic is in
# the next batch anyway; the consumer-based reader
# (spark.sql.streaming.kafka.useDeprecatedOffsetFetching) sees one only when its metadata is
# refreshed, 5 minutes by default.
SELECTION_METADATA_MAX_AGE_MS = 5_000


def kafka_read_options(
    cluster: ClusterConfig,
    topic: str,
    *,
    subscription: tuple[str, str] | None = None,
    starting_offsets: str = "earliest",
    read_committed: bool = False,
    max_offsets_per_trigger: int | None = None,
    group_id_prefix: str = "",
    include_headers: bool = False,
) -> dict[str, str]:
    """Options for `spark.readStream.format("kafka")`.

    Offsets live in the query's checkpoint, not in Kafka; `group_id_prefix` (the JobGroup's
    consumer_group) only makes the job's consumers recognisable on the broker. Data loss
    (offsets deleted by retention before they were read) fails the query instead of being
    skipped: an audit that silently skips records would report wrong totals.
    `subscription` (option, value), e.g. ("subscribePattern", regex), replaces subscribing
    to `topic`.
    """
    option, value = subscription or ("subscribe", topic)
    options = {
        **cluster.spark_kafka_options(),
        option: value,
        "startingOffsets": starting_offsets,
        "failOnDataLoss": "true",
        "includeHeaders": "true" if include_headers else "false",
    }
    if read_committed:
        options["kafka.isolation.level"] = "read_committed"
    if max_offsets_per_trigger:
        options["maxOffsetsPerTrigger"] = str(max_offsets_per_trigger)
    if group_id_prefix:
        options["groupIdPrefix"] = group_id_prefix
    return options


def source_read_options(
    source: SourceSpec,
    *,
    starting_offsets: str | None = None,
    max_offsets_per_trigger: int | None = None,
    include_headers: bool = False,
    own_loss_checks: bool = False,
) -> dict[str, str]:
    """`kafka_read_options` of a job's SourceSpec: its cluster, topic (or topic selection),
    isolation level and consumer group, starting where the spec says unless
    `starting_offsets` (Spark's JSON of per-partition offsets, for a job that plans its own
    start) is given.

    A topic selection refreshes the driver's topic metadata every
    SELECTION_METADATA_MAX_AGE_MS. `own_loss_checks`: the job reads every planned range
    itself with `range_consumer_config` (which fails on offsets deleted unread) and records
    a topic that disappears; then, for a pattern selection only, Spark's failOnDataLoss is
    off, because with it a matching topic deleted mid-run fails the whole query (Spark's
    source reports the topic's partitions as "gone") instead of the job going on with the
    other topics.
    """
    options = kafka_read_options(
        source.cluster,
        source.topic,
        subscription=source.subscription(),
        starting_offsets=starting_offsets or source.starting_offsets,
        read_committed=source.read_committed,
        max_offsets_per_trigger=max_offsets_per_trigger,
        group_id_prefix=source.consumer_group,
        include_headers=include_headers,
    )
    if source.selection is not None:
        options["kafka.metadata.max.age.ms"] = str(SELECTION_METADATA_MAX_AGE_MS)
        if own_loss_checks and source.selection.pattern:
            options["failOnDataLoss"] = "false"
    return options


def range_consumer_config(cluster: ClusterConfig, *, read_committed: bool) -> dict[str, str]:
    """The Java consumer that reads offset ranges Spark planned (the audit and load-generator
    folds, the replication copy, the dispatcher): by assignment, nothing committed, and no
    offset reset, so a range deleted by retention before it was read fails the task, as
    failOnDataLoss does, instead of skipping to what is left."""
    return {
        **RANGE_FETCH_CONFIG,
        **cluster.java_client_config(),
        "enable.auto.commit": "false",
        "isolation.level": "read_committed" if read_committed else "read_uncommitted",
        "auto.offset.reset": "none",
    }
