"""Checks against a live Kafka cluster that run before any Spark work."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Collection, Mapping
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
)

from core.config import ClusterConfig
from core.errors import ClusterUnreachable, ConfigError, TopicNotFound

log = logging.getLogger("uatu.kafka_admin")

# How long one admin or metadata request may take before the cluster counts as unreachable.
ADMIN_TIMEOUT_S = 10.0

# librdkafka decommissions a broker handle it no longer needs (the bootstrap handle, once the
# cluster's own brokers are known) and fails the admin request in flight on it: with
# _DESTROY_BROKER up to 2.15, with _TRANSPORT from 2.16, whose changelog asks callers to retry.
LOST_REQUEST_ERRORS = frozenset({KafkaError._DESTROY_BROKER, KafkaError._TRANSPORT})
_ATTEMPTS = 3


def admin_client(cluster: ClusterConfig) -> AdminClient:
    """The cluster's admin client for checks; ConfigError naming the cluster when librdkafka
    refuses its properties (a Java-only setting, say)."""
    try:
        return AdminClient(cluster.check_client_config())
    except (KafkaException, ValueError, TypeError) as e:
        raise ConfigError(
            "clusters.yaml",
            f"clusters.{cluster.name}: the admin client rejects its properties ({e}); "
            "give librdkafka names in admin_properties",
        ) from None


# A process's check clients are shared, one per cluster configuration (`shared_admin`): a
# worker checks every group it starts against its cluster, and a client per check costs the
# broker two connections and a metadata request each, and the process a librdkafka handle and
# its threads (docs/benchmarks.md, the worker pool). One left unused this long is let go at the
# next check, so a process that no longer uses a cluster (a test's broker, gone) does not
# keep reconnecting to it for the rest of its life.
SHARED_IDLE_S = 60.0
_shared: dict[tuple[int, tuple[tuple[str, str], ...]], tuple[AdminClient, float]] = {}
_shared_lock = threading.Lock()


def shared_admin(
    cluster: ClusterConfig, clock: Callable[[], float] = time.monotonic
) -> AdminClient:
    """This process's admin client for `cluster`'s checks (read-only requests; librdkafka's
    clients are thread-safe): made on first use, let go by the first check after it was
    SHARED_IDLE_S unused. Each use serves its queued log lines
    (`ClusterConfig.check_client_config`), so they do not pile up in a client that lives long.
    Keyed on the process too: a forked child makes its own."""
    pid = os.getpid()
    key = (pid, tuple(sorted((k, repr(v)) for k, v in cluster.client_config().items())))
    now = clock()
    with _shared_lock:
        # Only this process's own: destroying a client a forked child inherited would wait
        # for threads that live in the parent only.
        idle = [k for k, (_, used) in _shared.items() if k[0] == pid and now - used > SHARED_IDLE_S]
        dropped = [_shared.pop(k)[0] for k in idle]  # destroyed below, outside the lock
        found = _shared.get(key)
        client = found[0] if found is not None else admin_client(cluster)
        _shared[key] = (client, now)
    del dropped
    client.poll(0)
    return client


OFFSETS_TOPIC = "__consumer_offsets"
_COORDINATOR_STARTING = frozenset(
    {
        KafkaError.NOT_COORDINATOR,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
    }
)


def ensure_offsets_topic(cluster: ClusterConfig, group_id: str, timeout_s: float = 60.0) -> None:
    """Make the broker create `__consumer_offsets` if no group has used the cluster yet, and
    return once it serves: Kafka creates the topic on the first group-coordinator lookup,
    which an offsets request for the unknown group `group_id` makes. ClusterUnreachable when
    the coordinator does not come up within `timeout_s`."""
    consumer = Consumer({**cluster.check_client_config(), "group.id": group_id})
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            try:
                consumer.committed([TopicPartition(OFFSETS_TOPIC, 0)], timeout=ADMIN_TIMEOUT_S)
                return
            except KafkaException as e:
                # While the topic is being created the coordinator is not there yet.
                waiting = e.args[0].code() in _COORDINATOR_STARTING
                if not waiting or time.monotonic() > deadline:
                    raise ClusterUnreachable(cluster.name, cluster.bootstrap_servers, str(e)) from e
                time.sleep(0.5)
    finally:
        consumer.close()


def partition_count(cluster: ClusterConfig, topic: str, field: str, timeout_s: float = 15.0) -> int:
    """Number of partitions of `topic`; TopicNotFound or ClusterUnreachable otherwise."""
    admin = shared_admin(cluster)
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


def topic_partitions(cluster: ClusterConfig, timeout_s: float = ADMIN_TIMEOUT_S) -> dict[str, int]:
    """Every topic of the cluster and its partition count, from one metadata request;
    ClusterUnreachable when the brokers do not answer. A topic the metadata reports with an
    error (being created or deleted) is left out."""
    admin = shared_admin(cluster)
    try:
        metadata = admin.list_topics(timeout=timeout_s)
    except KafkaException as e:
        raise ClusterUnreachable(cluster.name, cluster.bootstrap_servers, str(e)) from None
    return {
        name: len(info.partitions)
        for name, info in metadata.topics.items()
        if info.error is None and info.partitions
    }


def topic_configs(
    cluster: ClusterConfig, topics: Collection[str], timeout_s: float = ADMIN_TIMEOUT_S
) -> dict[str, dict[str, tuple[str | None, bool]]]:
    """Each topic's configs: name -> (value, whether the topic itself sets it, rather than
    taking the broker's value or the default), as DescribeConfigs reports them;
    ClusterUnreachable when the cluster does not answer."""
    if not topics:
        return {}
    admin = shared_admin(cluster)
    resources = [ConfigResource(ConfigResource.Type.TOPIC, t) for t in sorted(topics)]
    try:
        futures = admin.describe_configs(resources, request_timeout=timeout_s)
        return {
            resource.name: {
                name: (entry.value, ConfigSource(entry.source) == ConfigSource.DYNAMIC_TOPIC_CONFIG)
                for name, entry in future.result(timeout=timeout_s).items()
            }
            for resource, future in futures.items()
        }
    except (KafkaException, FutureTimeout) as e:
        raise ClusterUnreachable(cluster.name, cluster.bootstrap_servers, str(e)) from None


def cluster_id(cluster: ClusterConfig, timeout_s: float = ADMIN_TIMEOUT_S) -> str:
    """The id the cluster's brokers report (the same for every name and address that reaches
    them); ClusterUnreachable when they do not answer."""
    admin = shared_admin(cluster)
    try:
        metadata = admin.list_topics(timeout=timeout_s)
    except KafkaException as e:
        raise ClusterUnreachable(cluster.name, cluster.bootstrap_servers, str(e)) from None
    return str(metadata.cluster_id)


def smallest_max_message_bytes(
    cluster: ClusterConfig, topics: Collection[str], timeout_s: float = ADMIN_TIMEOUT_S
) -> int | None:
    """The smallest `max.message.bytes` among `topics` (the largest record batch each accepts),
    or None when the cluster does not tell (no DescribeConfigs permission, an old broker): a
    caller then keeps its own batch size."""
    if not topics:
        return None
    admin = shared_admin(cluster)
    resources = [ConfigResource(ConfigResource.Type.TOPIC, t) for t in topics]
    try:
        futures = admin.describe_configs(resources, request_timeout=timeout_s)
        limits = [
            int(f.result(timeout=timeout_s)["max.message.bytes"].value) for f in futures.values()
        ]
    except (KafkaException, FutureTimeout, KeyError, ValueError) as e:
        log.warning("max.message.bytes of %s not readable (%s)", ", ".join(topics), e)
        return None
    return min(limits)


def create_topic(admin: AdminClient, topic: NewTopic, timeout_s: float = ADMIN_TIMEOUT_S) -> None:
    """Create `topic`, retrying a request lost with its broker handle.

    TOPIC_ALREADY_EXISTS counts as created when the topic has the shape asked for (its
    partitions; its replicas per partition, or its replica lists, when the request names
    them): a lost request may still have reached the controller, and librdkafka re-sends a
    CreateTopics to a new controller by itself, so even the first attempt's answer can be
    TOPIC_ALREADY_EXISTS for the topic this call created. A topic of another shape raises it.
    Raises the KafkaException of any other failure.
    """
    try:
        _retry_lost(
            lambda: admin.create_topics([topic], request_timeout=timeout_s),
            topic.topic,
            done_after_retry=(),
            timeout_s=timeout_s,
        )
    except KafkaException as e:
        if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS or not _has_shape(
            admin, topic, timeout_s
        ):
            raise
        log.info("topic %s: already there with the shape asked for", topic.topic)


def _has_shape(admin: AdminClient, asked: NewTopic, timeout_s: float) -> bool:
    """Whether the topic `asked` names exists with its partitions and, when it names them,
    its replicas per partition (replication_factor > 0) or its replica lists."""
    found = admin.list_topics(topic=asked.topic, timeout=timeout_s).topics.get(asked.topic)
    if found is None or found.error is not None or len(found.partitions) != asked.num_partitions:
        return False
    replicas = {p.id: list(p.replicas) for p in found.partitions.values()}
    if asked.replica_assignment is not None:
        return replicas == {i: list(r) for i, r in enumerate(asked.replica_assignment)}
    rf = asked.replication_factor
    return rf is None or rf <= 0 or all(len(r) == rf for r in replicas.values())


def create_partitions(
    admin: AdminClient, request: NewPartitions, timeout_s: float = ADMIN_TIMEOUT_S
) -> None:
    """Grow a topic to `request.new_total_count` partitions, retrying a lost request.

    After a retry INVALID_PARTITIONS (the topic already has that many) counts as done; the
    caller checks the resulting assignment in the metadata.
    """
    _retry_lost(
        lambda: admin.create_partitions([request], request_timeout=timeout_s),
        request.topic,
        done_after_retry={KafkaError.INVALID_PARTITIONS},
        timeout_s=timeout_s,
    )


def _retry_lost(
    submit: Callable[[], Mapping[str, Future[None]]],
    topic: str,
    done_after_retry: Collection[int],
    timeout_s: float,
    attempts: int = _ATTEMPTS,
) -> None:
    for attempt in range(1, attempts + 1):
        try:
            _result(submit()[topic], topic, timeout_s)
            return
        except KafkaException as e:
            code = e.args[0].code()
            if attempt > 1 and code in done_after_retry:
                return
            if code not in LOST_REQUEST_ERRORS or attempt == attempts:
                raise
            log.warning("topic %s: admin request lost (%s); retrying", topic, e.args[0].str())


def _result(future: Future[None], topic: str, timeout_s: float) -> None:
    """The request's outcome; a KafkaException also when no answer came in time, so callers
    map every failure to their named error in one place."""
    try:
        future.result(timeout=timeout_s)
    except FutureTimeout:
        raise KafkaException(
            KafkaError(KafkaError._TIMED_OUT, f"topic {topic}: no answer in {timeout_s:g} s")
        ) from None
