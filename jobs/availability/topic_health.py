"""Per-partition availability from one metadata snapshot: pure, no Spark, no I/O.

The job takes a snapshot of the cluster's metadata every trigger (`PartitionState` per
partition, from an AdminClient metadata request) and `partition_availability` turns it into
`topic_availability` rows: whether the partition has a leader, its ISR against its
replication factor, and the two states operators alert on, offline (no leader) and
under-replicated (ISR smaller than the replica set).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

NO_LEADER = -1  # what the metadata reports for a partition without a leader


@dataclass(frozen=True)
class PartitionState:
    topic: str
    partition: int
    leader: int  # broker id, NO_LEADER when offline
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


def partition_availability(
    states: Iterable[PartitionState], live_brokers: Iterable[int]
) -> list[dict[str, Any]]:
    """One row per partition, sorted by topic and partition: the columns of
    `tables.TOPIC_AVAILABILITY` after cluster and sampled_at."""
    live = set(live_brokers)
    rows = []
    for s in sorted(states, key=lambda s: (s.topic, s.partition)):
        has_leader = s.leader != NO_LEADER
        rows.append(
            {
                "topic": s.topic,
                "partition": s.partition,
                "leader": s.leader if has_leader else None,
                "replication_factor": len(s.replicas),
                "isr_size": len(s.isr),
                "replicas": list(s.replicas),
                "isr": list(s.isr),
                "offline_replicas": sorted(set(s.replicas) - live),
                "has_leader": has_leader,
                "offline": not has_leader,
                "under_replicated": len(s.isr) < len(s.replicas),
            }
        )
    return rows
