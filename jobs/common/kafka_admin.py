"""Checks against a live Kafka cluster that run before any Spark work."""

from __future__ import annotations

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from jobs.common.errors import ClusterUnreachable, ConfigError, TopicNotFound
from jobs.common.settings import ClusterConfig

# How long one admin or metadata request may take before the cluster counts as unreachable.
ADMIN_TIMEOUT_S = 10.0


def partition_count(cluster: ClusterConfig, topic: str, field: str, timeout_s: float = 15.0) -> int:
    """Number of partitions of `topic`; TopicNotFound or ClusterUnreachable otherwise."""
    try:
        admin = AdminClient(cluster.client_config())
    except (KafkaException, ValueError, TypeError) as e:
        raise ConfigError(
            "clusters.yaml",
            f"clusters.{cluster.name}: the admin client rejects its properties ({e}); "
            "give librdkafka names in admin_properties",
        ) from None
    try:
        metadata = admin.list_topics(topic=topic, timeout=timeout_s)
    except KafkaException as e:
        raise ClusterUnreachable(cluster.name, cluster.bootstrap_servers, str(e)) from None
    info = metadata.topics.get(topic)
    if info is None or (
        info.error is not None and info.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    ):
        raise TopicNotFound(field, topic, cluster.name)
    if info.error is not None:
        raise ClusterUnreachable(cluster.name, cluster.bootstrap_servers, str(info.error))
    return len(info.partitions)
