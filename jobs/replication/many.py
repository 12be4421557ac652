"""The replication of many topics (`extension.topics`): MirrorMaker 2's way of keeping a whole
set of topics in step, in the micro-batch copy.

* **Read.** One Spark Kafka source subscribes to the selection (`subscribe`, or
  `subscribePattern` for a pattern; Spark's source lists the topics again at every trigger,
  so a topic created later is read from its start). The selection has the copies taken out
  (`spec.many_topics_checks`), so a copy is never copied back.
* **Destinations.** `preflight_topics` creates the destination of every selected topic that
  exists at the start; `cover_topics` does the same for a topic first seen in a batch, and grows
  a destination whose source gained partitions, before any of its records is copied. A new
  destination gets the source's partition count and its synced configs
  (`topics.synced_configs`); an existing one is used as it is (partitions grown if fewer).
* **Copy.** `ManyTopicsWriter` copies every planned range of every topic in one Spark job,
  packed into about one task per slot, each range to its topic's destination
  (`writer.copy_topic_ranges`, `RangeCopier.java`), with the same tail check, stamps, flow
  control and stats as one topic.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from pyspark.sql import DataFrame, SparkSession

from core.errors import ClusterUnreachable, InvalidJobGroup, TopicNotFound
from core.kafka_admin import (
    cluster_id,
    create_partitions,
    create_topic,
    topic_configs,
    topic_partitions,
)
from jobs.replication.preflight import ReplicationPlan, records_per_trigger
from jobs.replication.ranges import SourceRange, batch_ranges
from jobs.replication.spec import ReplicationSpec
from jobs.replication.stats import StatsWriter
from jobs.replication.topics import copied_from, synced_configs
from jobs.replication.writer import (
    DestinationConfig,
    copy_topic_ranges,
    java_config,
    planned_topic_ranges,
    summary_rows,
)
from jobs.runtime.kafka_source import source_read_options

log = logging.getLogger("uatu.replication")

_TIMEOUT_S = 15.0
_SHOWN = 10  # topic names a log line lists before "and N more"

Plans = dict[str, ReplicationPlan]  # source topic -> its copy's plan
# The DestinationConfig of a source topic's copy, from its plan (job.destination_config).
Configure = Callable[[ReplicationPlan, str], DestinationConfig]


def preflight_topics(spec: ReplicationSpec) -> Plans:
    """The selected source topics that exist now, each with its destination created (or
    grown) on the destination cluster; InvalidJobGroup when the identity naming would copy
    the cluster onto itself (two names for one cluster)."""
    selection = spec.source.selection
    assert selection is not None
    # A pack's members name their destinations, each checked by its own preflight.
    if (
        not spec.routes
        and not spec.naming.prefix
        and cluster_id(spec.source.cluster) == cluster_id(spec.destination_cluster)
    ):
        raise InvalidJobGroup(
            "extension.replication.topic_naming",
            "TOPIC_NAMING_IDENTITY",
            f"{spec.destination_cluster.name!r} reaches the same Kafka cluster as "
            f"{spec.source.cluster.name!r}: every topic would be copied onto itself",
        )
    counts = topic_partitions(spec.source.cluster, _TIMEOUT_S)
    selected = selection.select(counts)
    copies = sorted(t for t in counts if copied_from(t, spec.copy_aliases))
    log.info(
        "%s on %s: %d now (%s); copies never copied again: %s",
        selection,
        spec.source.cluster.name,
        len(selected),
        _listed(selected),
        _listed(copies),
    )
    return cover_topics(spec, {}, {t: counts[t] for t in selected})


def cover_topics(spec: ReplicationSpec, plans: Plans, needed: Mapping[str, int]) -> Plans:
    """`plans` covering `needed` (source topic -> partitions to copy) too: a topic new to
    them gets its destination created with the source's partition count (at least the
    needed one) and synced configs; a destination with fewer partitions is grown first, as
    MirrorMaker 2 keeps a target's partitions in step. ClusterUnreachable when a cluster does
    not answer or refuses."""
    new = sorted(t for t in needed if t not in plans)
    grown = [t for t, n in needed.items() if t in plans and n > len(plans[t].source_partitions)]
    if not new and not grown:
        return plans
    counts = dict(needed)
    if new:
        sources = topic_partitions(spec.source.cluster, _TIMEOUT_S)
        counts.update({t: max(sources.get(t, 0), needed[t]) for t in new})
    configs = topic_configs(spec.source.cluster, new, _TIMEOUT_S)
    destinations = topic_partitions(spec.destination_cluster, _TIMEOUT_S)
    admin = AdminClient(spec.destination_cluster.check_client_config())
    covered = dict(plans)
    for topic in sorted({*new, *grown}):
        target, count = spec.destination_of(topic), counts[topic]
        have = destinations.get(target)
        if have is None and not spec.create_destination_topic:  # a pack's member
            raise TopicNotFound(
                "kafka_dispatcher_task_group.topic", target, spec.destination_cluster.name
            )
        try:
            if have is None:
                synced = synced_configs(configs.get(topic, {}))
                log.info("creating %s (%d partitions, configs %s)", target, count, synced)
                create_topic(
                    admin,
                    NewTopic(target, num_partitions=count, replication_factor=-1, config=synced),
                    _TIMEOUT_S,
                )
                have = count
            elif have < count:
                log.info("growing %s from %d to %d partitions", target, have, count)
                create_partitions(admin, NewPartitions(target, count), _TIMEOUT_S)
                have = count
        except KafkaException as e:
            cluster = spec.destination_cluster
            raise ClusterUnreachable(
                cluster.name, cluster.bootstrap_servers, f"{target}: {e}"
            ) from None
        covered[topic] = ReplicationPlan(
            source_partitions=tuple(range(count)), destination_partitions=have, modulo=False
        )
    return covered


def many_topics_stream(spark: SparkSession, spec: ReplicationSpec) -> DataFrame:
    """Spark's Kafka source over the selection; only its planned ranges are used."""
    options = source_read_options(
        spec.source,
        max_offsets_per_trigger=records_per_trigger(spec, None),
        include_headers=True,
    )
    return spark.readStream.format("kafka").options(**options).load()


@dataclass
class ManyTopicsWriter:
    """foreachBatch function of a copy of many topics: cover the batch's new topics and
    partitions, copy every planned range to its topic's destination, record the stats."""

    spec: ReplicationSpec
    plans: Plans
    configure: Configure
    stats: StatsWriter
    # source topic -> its copy's config in the JVM, built when the topic is first copied
    # or its plan changes (py4j calls per topic and batch would add up with many topics)
    routes: dict[str, object] = field(default_factory=dict)

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        started = time.time()
        spark = batch.sparkSession
        ranges: dict[str, list[SourceRange]] = {}
        for topic, planned in planned_topic_ranges(batch).items():
            kept = batch_ranges(planned, None)
            if kept:
                ranges[topic] = kept
        self._cover(spark, ranges)
        if not ranges:
            log.info("batch %d: no records", batch_id)
            return
        summaries = summary_rows(copy_topic_ranges(spark, ranges, self.routes))
        copied = time.time()
        if not summaries:
            log.info("batch %d: no records", batch_id)
            return
        ends = {t: {r.partition: r.until_offset for r in rs} for t, rs in ranges.items()}
        # Saved here, appended after Spark's commit of the batch (stats.py).
        totals = self.stats.submit(spark, summaries, batch_id, ends)
        log.info(
            "batch %d: %d records of %d topics replicated (%d bytes) in %.1f s, "
            "stats saved in %.1f s",
            batch_id,
            totals.records,
            len(ranges),
            totals.bytes,
            copied - started,
            time.time() - copied,
        )

    def _cover(self, spark: SparkSession, ranges: Mapping[str, list[SourceRange]]) -> None:
        """Destinations for the batch's topics first seen and partitions first read (Spark's
        source reads both from their start), before any of their records is copied."""
        needed = {
            topic: max(r.partition for r in rs) + 1
            for topic, rs in ranges.items()
            if topic not in self.plans
            or not {r.partition for r in rs} <= set(self.plans[topic].source_partitions)
        }
        if needed:  # in place: the job reads the same plans (explain_failure)
            self.plans.update(cover_topics(self.spec, self.plans, needed))
        for topic in ranges:
            if topic not in self.routes or topic in needed:
                self.routes[topic] = java_config(spark, self.configure(self.plans[topic], topic))


def _listed(topics: list[str]) -> str:
    if not topics:
        return "none"
    more = f" and {len(topics) - _SHOWN} more" if len(topics) > _SHOWN else ""
    return ", ".join(topics[:_SHOWN]) + more
