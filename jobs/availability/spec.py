"""The availability job's settings, derived once from a validated JobGroup (no broker, no Spark).

Fields used, and defaults:

==========================================  ================================================
kafka_consumer_task_group.cluster           the cluster watched
kafka_consumer_task_group.topic             the probe topic (probes: not implemented yet)
availability_task_group                     availability_job_type (required), zone_isolated
extension.availability                      skip_topic_availability (false),
                                            skip_consumer_lag (false), lag_window_commits
                                            (10), lag_min_distance_seconds (0),
                                            lag_allowed_messages (0),
                                            lag_expire_group_seconds (604800),
                                            lag_burrow_strict (false)
extension.trigger.interval_seconds          10: metadata, head offsets and every group's
                                            status are sampled this often
extension.output                            topic_availability_path,
                                            consumer_offset_commits_path,
                                            consumer_group_status_path (<warehouse>/<name>),
                                            checkpoint_path (<checkpoints>/<job_group_id>)
==========================================  ================================================
"""

from __future__ import annotations

from dataclasses import dataclass

from uber.data.kafka.datatransfer import job_pb2

from jobs.availability.lag_rules import DEFAULT_INTERVALS, EXPIRE_GROUP_MS
from jobs.availability.lag_tracker import LagSettings
from jobs.common.errors import InvalidJobGroup
from jobs.common.jobgroup import JobGroup, job_options, require_cluster
from jobs.common.settings import ClusterConfig, Settings

DEFAULT_TRIGGER_SECONDS = 10
MAX_WINDOW_COMMITS = 1000


@dataclass(frozen=True)
class AvailabilitySpec:
    job_group_id: str
    cluster: ClusterConfig
    probe_type: str  # AvailabilityJobType name
    zone_isolated: bool
    probe_topic: str
    topic_availability: bool
    consumer_lag: bool
    lag: LagSettings
    trigger_interval_seconds: int
    topic_availability_path: str
    commits_path: str
    status_path: str
    checkpoint_path: str

    @property
    def query_name(self) -> str:
        return f"availability-{self.job_group_id}"


def availability_spec(group: JobGroup, settings: Settings) -> AvailabilitySpec:
    """Check every availability field; InvalidJobGroup names the first bad one."""
    source = group.kafka_consumer_task_group
    cluster = require_cluster(
        "kafka_consumer_task_group.cluster", source.cluster, settings.clusters
    )
    probe = group.availability_task_group.availability_job_type
    if probe == job_pb2.AVAILABILITY_JOB_TYPE_INVALID:
        raise InvalidJobGroup(
            "availability_task_group.availability_job_type",
            job_pb2.AvailabilityJobType.Name(probe),
            "a probe type is required (NATIVE_PRODUCER, NATIVE_CONSUMER, PROXY_PRODUCER or "
            "PROXY_CONSUMER)",
        )
    options = job_options(group)
    available = options.availability
    if available.skip_topic_availability and available.skip_consumer_lag:
        raise InvalidJobGroup(
            "extension.availability",
            "skip_topic_availability and skip_consumer_lag",
            "nothing left to run: the probes are not implemented yet",
        )
    trigger_seconds = options.trigger.interval_seconds or DEFAULT_TRIGGER_SECONDS
    _at_least("extension.trigger.interval_seconds", trigger_seconds, 1)
    window = available.lag_window_commits or DEFAULT_INTERVALS
    _at_least("extension.availability.lag_window_commits", window, 1)
    if window > MAX_WINDOW_COMMITS:
        raise InvalidJobGroup(
            "extension.availability.lag_window_commits", window, f"must be <= {MAX_WINDOW_COMMITS}"
        )
    min_distance = available.lag_min_distance_seconds
    _at_least("extension.availability.lag_min_distance_seconds", min_distance, 0)
    _at_least("extension.availability.lag_allowed_messages", available.lag_allowed_messages, 0)
    expire_s = available.lag_expire_group_seconds or EXPIRE_GROUP_MS // 1000
    _at_least("extension.availability.lag_expire_group_seconds", expire_s, 1)
    output = options.output
    return AvailabilitySpec(
        job_group_id=group.job_group_id,
        cluster=cluster,
        probe_type=job_pb2.AvailabilityJobType.Name(probe),
        zone_isolated=group.availability_task_group.zone_isolated,
        probe_topic=source.topic,
        topic_availability=not available.skip_topic_availability,
        consumer_lag=not available.skip_consumer_lag,
        lag=LagSettings(
            intervals=window,
            min_distance_ms=min_distance * 1000,
            allowed_lag=available.lag_allowed_messages,
            expire_group_ms=expire_s * 1000,
            burrow_strict=available.lag_burrow_strict,
        ),
        trigger_interval_seconds=trigger_seconds,
        topic_availability_path=(
            output.topic_availability_path or f"{settings.warehouse}/topic_availability"
        ),
        commits_path=(
            output.consumer_offset_commits_path or f"{settings.warehouse}/consumer_offset_commits"
        ),
        status_path=(
            output.consumer_group_status_path or f"{settings.warehouse}/consumer_group_status"
        ),
        checkpoint_path=output.checkpoint_path or f"{settings.checkpoints}/{group.job_group_id}",
    )


def _at_least(field: str, value: int, minimum: int) -> None:
    if value < minimum:
        raise InvalidJobGroup(field, value, f"must be >= {minimum}")
