"""The probe topic: at least one partition per broker, that broker being its preferred leader.

Probes measure a broker through the partitions it leads, so a broker leading none is not
measured at all. On start and on every trigger the job reads the topic's assignment, names
the brokers that are uncovered, and adds one partition led by each of them (Xinfra Monitor
does the same). A missing topic is created with one partition per broker.

A partition is attributed to its preferred leader (the first replica), not to its current
leader: with the default replication factor 1 they are the same broker, and when that broker
dies its probes fail and are counted against it rather than against nobody.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from core.config import ClusterConfig
from core.errors import ClusterUnreachable
from core.kafka_admin import ADMIN_TIMEOUT_S, create_partitions, create_topic
from jobs.availability.probes.ledger import ProbeTarget

log = logging.getLogger("uatu.availability")


def uncovered_brokers(preferred_leaders: Iterable[int], brokers: Iterable[int]) -> list[int]:
    """Brokers that are no partition's preferred leader, sorted."""
    return sorted(set(brokers) - set(preferred_leaders))


def replica_lists(leaders: Sequence[int], brokers: Sequence[int], rf: int) -> list[list[int]]:
    """One replica list per leader: the leader first, then the next brokers in id order."""
    ring = sorted(brokers)
    size = min(rf, len(ring))
    lists = []
    for leader in leaders:
        start = ring.index(leader)
        lists.append([ring[(start + i) % len(ring)] for i in range(size)])
    return lists


def probe_targets(
    assignment: Mapping[int, Sequence[int]], zones: Mapping[int, str | None]
) -> list[ProbeTarget]:
    """A target per partition (partition -> replicas), attributed to its preferred leader."""
    return [
        ProbeTarget(partition, replicas[0], zones.get(replicas[0]))
        for partition, replicas in sorted(assignment.items())
        if replicas
    ]


def broker_zones(admin: AdminClient) -> dict[int, str | None]:
    """Each live broker's `broker.rack` (None when it has none)."""
    nodes = admin.describe_cluster(request_timeout=ADMIN_TIMEOUT_S).result().nodes
    return {node.id: node.rack or None for node in nodes}


def ensure_probe_topic(
    admin: AdminClient, cluster: ClusterConfig, topic: str, replication_factor: int
) -> dict[int, list[int]]:
    """Create the topic or add partitions until every live broker leads one; returns the
    assignment (partition -> replicas). Logs the brokers it found uncovered."""
    metadata = admin.list_topics(timeout=ADMIN_TIMEOUT_S)
    brokers = sorted(metadata.brokers)
    existing = metadata.topics.get(topic)
    if existing is None or existing.error is not None:
        lists = replica_lists(brokers, brokers, replication_factor)
        log.info("creating probe topic %s: one partition led by each of brokers %s", topic, brokers)
        _run_admin_request(
            lambda: create_topic(admin, NewTopic(topic, len(lists), replica_assignment=lists)),
            cluster,
            topic,
        )
    else:
        assignment = {p.id: list(p.replicas) for p in existing.partitions.values()}
        missing = uncovered_brokers((r[0] for r in assignment.values() if r), brokers)
        if not missing:
            return assignment
        log.warning(
            "probe topic %s: brokers %s lead no partition (uncovered); adding one partition each",
            topic,
            missing,
        )
        request = NewPartitions(
            topic,
            len(assignment) + len(missing),
            replica_assignment=replica_lists(missing, brokers, replication_factor),
        )
        _run_admin_request(lambda: create_partitions(admin, request), cluster, topic)
    return _wait_covered(admin, cluster, topic, brokers)


def _wait_covered(
    admin: AdminClient, cluster: ClusterConfig, topic: str, brokers: list[int]
) -> dict[int, list[int]]:
    """The topic's assignment once the metadata shows every broker leading a partition."""
    deadline = time.monotonic() + ADMIN_TIMEOUT_S
    while True:
        found = admin.list_topics(topic, timeout=ADMIN_TIMEOUT_S).topics[topic]
        assignment = {p.id: list(p.replicas) for p in found.partitions.values()}
        if not uncovered_brokers((r[0] for r in assignment.values() if r), brokers):
            return assignment
        if time.monotonic() > deadline:
            raise ClusterUnreachable(
                cluster.name,
                cluster.bootstrap_servers,
                f"probe topic {topic}: new partitions not in the metadata after "
                f"{ADMIN_TIMEOUT_S:.0f} s ({assignment})",
            )
        time.sleep(0.2)


def _run_admin_request(request: Callable[[], None], cluster: ClusterConfig, topic: str) -> None:
    try:
        request()
    except KafkaException as e:
        raise ClusterUnreachable(
            cluster.name, cluster.bootstrap_servers, f"probe topic {topic}: {e}"
        ) from e
