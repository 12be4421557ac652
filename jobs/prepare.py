"""What it takes to run one JobGroup's job, before its session: build it from the validated
group, then check its source on the broker. `jobs/main.py` (an application per group) and the
worker application (`jobs/worker/`, many groups per application) share it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from core import kafka_admin
from core.config import ClusterConfig, Settings
from core.errors import TopicNotFound
from core.jobgroup import JobGroup, job_type_name
from core.spec import SourceTopic
from jobs import registry
from jobs.runtime import metrics

if TYPE_CHECKING:
    from jobs.runtime.template import StreamingJob

log = logging.getLogger("uatu.main")


def build_job(group: JobGroup, settings: Settings) -> StreamingJob[Any]:
    """The JobGroup's job: validated (no broker, no Spark), misc_config applied; UatuError on
    bad input."""
    job_type, spec = registry.validate(group, settings)
    apply_misc_config(group, job_type.name)
    return job_type.load_runtime()(spec)


SOURCE_CLUSTER_WAIT_S = 15.0  # a run's wait for the source cluster's first answer


def check_source(
    job: StreamingJob[Any],
    group: JobGroup,
    settings: Settings,
    wait_s: float = SOURCE_CLUSTER_WAIT_S,
) -> None:
    """Wait up to `wait_s` for the source cluster to answer (ClusterUnreachable otherwise),
    make the job's source exist where the broker creates it on demand, then check it
    (TopicNotFound when it does not exist)."""
    spec = job.spec
    source = spec.required_topic()
    cluster = settings.clusters[source.cluster]
    log.info(
        "checking cluster %s at %s (waiting up to %g s for its brokers)",
        cluster.name,
        cluster.bootstrap_servers,
        wait_s,
    )
    kafka_admin.cluster_id(cluster, wait_s)
    job.ensure_source()
    shown, partitions = source_partitions(settings.clusters[source.cluster], source)
    log.info(
        "JobGroup %s is valid: %s on %s/%s (%d partitions)",
        group.job_group_id,
        job_type_name(group),
        source.cluster,
        shown,
        partitions,
    )


def source_partitions(cluster: ClusterConfig, source: SourceTopic) -> tuple[str, int]:
    """(what the job reads, its partitions): TopicNotFound when its topic, or a listed topic of
    its selection, does not exist; a pattern may match no topic yet (the job audits the ones
    that appear)."""
    if source.selection is None:
        return source.topic, kafka_admin.partition_count(cluster, source.topic, source.field)
    counts = kafka_admin.topic_partitions(cluster)
    for i, name in enumerate(source.selection.names):
        if name not in counts:
            raise TopicNotFound(f"extension.topics.names[{i}]", name, cluster.name)
    selected = source.selection.select(counts)
    shown = f"{source.selection} ({len(selected)} topics now)"
    return shown, sum(counts[t] for t in selected)


def apply_misc_config(group: JobGroup, job_type: str) -> None:
    """uForwarder's misc_config: `enable_debug` turns on the job's debug logging (its own
    loggers and librdkafka's, through Python logging); `owner_service_name` becomes the
    `owner_service` label of `uatu_job_info`, uForwarder's metric tag."""
    misc = group.misc_config
    if misc.enable_debug:
        for name in ("uatu", "uatu.librdkafka"):
            logging.getLogger(name).setLevel(logging.DEBUG)
        log.debug("misc_config.enable_debug: debug logging on")
    metrics.job_info(group.job_group_id, job_type, misc.owner_service_name)
