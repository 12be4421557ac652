"""A JobGroup's job keys: the (topic, partition)s of its source, as the broker has them now.

The admin API asks when a group is added or updated (JobGroups: nothing is stored unless the
group validates and its topic exists) and the housekeeping asks every RUNNING group again to
follow new partitions (`JobGroups.refresh_all_partitions`). A refresh of a thousand groups
must not send a thousand lookups: given a `ClusterCounts`, each cluster is listed once (one
metadata request for all its topics) and every later group of that refresh reads from it; a
topic the listing lacks (created since) is looked up alone, and a cluster that did not answer
fails each of its groups at once instead of once per lookup timeout.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from uber.data.kafka.datatransfer.job_group_pb2 import JobGroup

from core.config import ClusterConfig, Settings
from core.errors import InvalidJobGroup, TopicNotFound, UatuError
from jobs import registry

JobKey = tuple[str, int]  # (topic, partition): what a StoredJob stands for
PartitionCount = Callable[[ClusterConfig, str, str], int]
TopicPartitions = Callable[[ClusterConfig], Mapping[str, int]]  # every topic: its partitions
# One refresh's answers per cluster name: every topic's partitions, or why the cluster gave none.
ClusterCounts = dict[str, Mapping[str, int] | UatuError]


class SourceKeys:
    def __init__(
        self,
        settings: Settings,
        partition_count: PartitionCount,
        topic_partitions: TopicPartitions,
        ensure_offsets_topic: Callable[[ClusterConfig, str], None],
    ) -> None:
        self._settings = settings
        self._partition_count = partition_count
        self._topic_partitions = topic_partitions
        self._ensure_offsets_topic = ensure_offsets_topic

    def validate(self, group: JobGroup, counts: ClusterCounts | None = None) -> list[JobKey]:
        """Full job validation, then the (topic, partition)s of the source: every partition
        of its topic (none is refused), or of each topic its selection picks now (a listed
        topic must exist; a pattern may match none yet)."""
        _, spec = registry.validate(group, self._settings)
        source = spec.required_topic()
        cluster = self._settings.clusters[source.cluster]
        if source.selection is not None:
            counts_now = self._cluster_counts(cluster, counts)
            for i, name in enumerate(source.selection.names):
                if name not in counts_now:
                    raise TopicNotFound(f"extension.topics.names[{i}]", name, cluster.name)
            return [
                (t, p) for t in source.selection.select(counts_now) for p in range(counts_now[t])
            ]
        # A topic the listing lacks (being created, or gone) is looked up on its own.
        listed = None if counts is None else self._cluster_counts(cluster, counts).get(source.topic)
        try:
            partitions = listed or self._partition_count(cluster, source.topic, source.field)
        except TopicNotFound:
            if not source.created_on_first_use:
                raise
            # A cluster no group has used yet: the job would create __consumer_offsets at its
            # start (the same lookup), so the control plane makes it now and counts again.
            self._ensure_offsets_topic(cluster, f"uatu-controlplane-{group.job_group_id}")
            partitions = self._partition_count(cluster, source.topic, source.field)
        if partitions <= 0:
            raise InvalidJobGroup(source.field, source.topic, "topic has no partitions")
        return [(source.topic, p) for p in range(partitions)]

    def _cluster_counts(
        self, cluster: ClusterConfig, counts: ClusterCounts | None
    ) -> Mapping[str, int]:
        """Every topic of `cluster` and its partitions: listed now, or, with `counts`, once
        per `counts` (an unreachable cluster's error is kept and raised for each group)."""
        if counts is None:
            return self._topic_partitions(cluster)
        if cluster.name not in counts:
            try:
                counts[cluster.name] = self._topic_partitions(cluster)
            except UatuError as e:
                counts[cluster.name] = e
        found = counts[cluster.name]
        if isinstance(found, UatuError):
            raise found
        return found
