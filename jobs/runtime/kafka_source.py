"""Options for Spark's Kafka source, built from plain values (pure, unit-tested)."""

from __future__ import annotations

from core.config import ClusterConfig


def kafka_read_options(
    cluster: ClusterConfig,
    topic: str,
    *,
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
    """
    options = {
        **cluster.spark_kafka_options(),
        "subscribe": topic,
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
