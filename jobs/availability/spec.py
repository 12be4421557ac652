"""The availability job's settings, derived once from a validated JobGroup (no broker, no Spark).

Fields used, and defaults:

==========================================  ================================================
kafka_consumer_task_group.cluster           the cluster watched
kafka_consumer_task_group.topic             the probe topic (created if missing)
availability_task_group                     availability_job_type (required): which half of
                                            the probe round trip goes through kafka-pixy
                                            (`probers`); zone_isolated: roll-ups per zone
extension.availability                      skip_probes (false), probe_interval_ms (1000),
                                            probe_window_seconds (10), probe_ack_sla_ms
                                            (5000), probe_roundtrip_sla_ms (20000),
                                            probe_replication_factor (1),
                                            skip_topic_availability (false),
                                            skip_consumer_lag (false), lag_window_commits
                                            (10), lag_min_distance_seconds (0),
                                            lag_allowed_messages (0),
                                            lag_expire_group_seconds (604800),
                                            lag_burrow_strict (false),
                                            krp_audit_topic ("": none; PROXY_PRODUCER
                                            only, `probes/krp.py`),
                                            krp_audit_window_seconds (60)
extension.trigger.interval_seconds          5: metadata, head offsets and every group's
                                            status are sampled, and final probe windows
                                            written, this often (the statuses at most once
                                            per min(1 s, half the trigger))
extension.output                            availability_probes_path, topic_availability_path,
                                            consumer_offset_commits_path,
                                            consumer_group_status_path (<warehouse>/<name>),
                                            checkpoint_path (<checkpoints>/<job_group_id>)
==========================================  ================================================
"""

from __future__ import annotations

from dataclasses import dataclass

from uatu.v1 import job_options_pb2
from uber.data.kafka.datatransfer import job_pb2

from core.config import ClusterConfig, Settings
from core.errors import InvalidJobGroup
from core.jobgroup import JobGroup, check_topic, job_options, require_cluster
from core.spec import OutputSpec, SourceTopic, output_spec, trigger_seconds
from jobs.availability.lag.offsets_topic import OFFSETS_TOPIC
from jobs.availability.lag.rules import DEFAULT_INTERVALS, EXPIRE_GROUP_MS
from jobs.availability.lag.tracker import STATUS_INTERVAL_MS, LagSettings

DEFAULT_TRIGGER_SECONDS = 5
# The JobGroup fields the availability job reads (core.jobgroup.refuse_unread refuses the
# rest).
READS = frozenset(
    {
        "kafka_consumer_task_group.cluster",
        "kafka_consumer_task_group.topic",
        "availability_task_group.availability_job_type",
        "availability_task_group.zone_isolated",
        "extension.availability",
    }
)
# jobs/availability/tables.py declares their schemas; all four exist whichever samplers run.
TABLES = (
    "availability_probes",
    "topic_availability",
    "consumer_offset_commits",
    "consumer_group_status",
)
PROXY_TYPES = ("AVAILABILITY_JOB_TYPE_PROXY_PRODUCER", "AVAILABILITY_JOB_TYPE_PROXY_CONSUMER")


@dataclass(frozen=True)
class ProbeSettings:
    interval_ms: int = 1000
    window_ms: int = 10_000
    ack_sla_ms: int = 5000  # KMinion's ackSla
    roundtrip_sla_ms: int = 20_000  # KMinion's roundtripSla
    replication_factor: int = 1


MAX_WINDOW_COMMITS = 1000
DEFAULT_KRP_WINDOW_SECONDS = 60


@dataclass(frozen=True)
class KrpSettings:
    """Where PROXY_PRODUCER probes report what kafka-pixy acknowledged (`probes/krp.py`)."""

    audit_topic: str
    window_seconds: int = DEFAULT_KRP_WINDOW_SECONDS


@dataclass(frozen=True)
class AvailabilitySpec:
    job_group_id: str
    cluster: ClusterConfig
    probe_type: str  # AvailabilityJobType name
    zone_isolated: bool
    probe_topic: str
    probes: bool
    probe: ProbeSettings
    topic_availability: bool
    consumer_lag: bool
    lag: LagSettings
    trigger_interval_seconds: int
    output: OutputSpec
    krp: KrpSettings | None = None  # None: no KRP-tier audit reports

    @property
    def query_name(self) -> str:
        return f"availability-{self.job_group_id}"

    def required_topic(self) -> SourceTopic:
        """The cluster's `__consumer_offsets` (every group's commits, as Burrow reads them)."""
        return SourceTopic(
            "kafka_consumer_task_group.cluster",
            OFFSETS_TOPIC,
            self.cluster.name,
            created_on_first_use=True,
        )


def availability_spec(group: JobGroup, settings: Settings) -> AvailabilitySpec:
    """Check every availability field; InvalidJobGroup names the first bad one."""
    source = group.kafka_consumer_task_group
    cluster = require_cluster(
        "kafka_consumer_task_group.cluster", source.cluster, settings.clusters
    )
    probe_type_number = group.availability_task_group.availability_job_type
    if probe_type_number == job_pb2.AVAILABILITY_JOB_TYPE_INVALID:
        raise InvalidJobGroup(
            "availability_task_group.availability_job_type",
            job_pb2.AvailabilityJobType.Name(probe_type_number),
            "a probe type is required (NATIVE_PRODUCER, PROXY_PRODUCER or PROXY_CONSUMER)",
        )
    if probe_type_number == job_pb2.AVAILABILITY_JOB_TYPE_NATIVE_CONSUMER:
        raise InvalidJobGroup(
            "availability_task_group.availability_job_type",
            "AVAILABILITY_JOB_TYPE_NATIVE_CONSUMER",
            "refused rather than run as NATIVE_PRODUCER's probe: the native probe's round trip "
            "measures both halves (availability_probes' produce_ and consume_success_ratio); "
            "give NATIVE_PRODUCER",
        )
    options = job_options(group)
    available = options.availability
    if available.skip_probes and available.skip_topic_availability and available.skip_consumer_lag:
        raise InvalidJobGroup(
            "extension.availability",
            "skip_probes, skip_topic_availability and skip_consumer_lag",
            "nothing left to run",
        )
    probe = _probe_settings(available)
    probe_type = job_pb2.AvailabilityJobType.Name(probe_type_number)
    if not available.skip_probes:
        if not source.topic:
            raise InvalidJobGroup(
                "kafka_consumer_task_group.topic",
                source.topic,
                "the probe topic is required unless extension.availability.skip_probes is set",
            )
        if probe_type in PROXY_TYPES and not cluster.proxy_grpc_address:
            raise InvalidJobGroup(
                "availability_task_group.availability_job_type",
                probe_type,
                f"cluster {cluster.name!r} has no proxy.grpc_address in clusters.yaml",
            )
    trigger = trigger_seconds(options, DEFAULT_TRIGGER_SECONDS)
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
    return AvailabilitySpec(
        job_group_id=group.job_group_id,
        cluster=cluster,
        probe_type=probe_type,
        zone_isolated=group.availability_task_group.zone_isolated,
        probe_topic=source.topic,
        probes=not available.skip_probes,
        probe=probe,
        topic_availability=not available.skip_topic_availability,
        consumer_lag=not available.skip_consumer_lag,
        lag=LagSettings(
            intervals=window,
            min_distance_ms=min_distance * 1000,
            allowed_lag=available.lag_allowed_messages,
            expire_group_ms=expire_s * 1000,
            burrow_strict=available.lag_burrow_strict,
            # Never above half the trigger, so that no micro-batch the trigger paces is left
            # unevaluated by a start a little early.
            status_interval_ms=min(STATUS_INTERVAL_MS, trigger * 1000 // 2),
        ),
        trigger_interval_seconds=trigger,
        output=output_spec(group, settings, TABLES),
        krp=_krp_settings(available, probe_type, source.topic),
    )


def _krp_settings(
    available: job_options_pb2.AvailabilityOptions, probe_type: str, probe_topic: str
) -> KrpSettings | None:
    """krp_audit_topic and its window, refused where no KRP report would be sent."""
    topic, window = available.krp_audit_topic, available.krp_audit_window_seconds
    field = "extension.availability.krp_audit_topic"
    if not topic:
        if window:
            raise InvalidJobGroup(
                "extension.availability.krp_audit_window_seconds",
                window,
                "only with extension.availability.krp_audit_topic",
            )
        return None
    check_topic(field, topic)
    if available.skip_probes or probe_type != "AVAILABILITY_JOB_TYPE_PROXY_PRODUCER":
        raise InvalidJobGroup(
            field,
            topic,
            "KRP reports are sent by PROXY_PRODUCER probes only (availability_job_type is "
            f"{probe_type}{', skip_probes set' if available.skip_probes else ''})",
        )
    if topic == probe_topic:
        raise InvalidJobGroup(field, topic, "is the probe topic: give the reports their own")
    window = window or DEFAULT_KRP_WINDOW_SECONDS
    _at_least("extension.availability.krp_audit_window_seconds", window, 1)
    return KrpSettings(topic, window)


def _probe_settings(available: job_options_pb2.AvailabilityOptions) -> ProbeSettings:
    default = ProbeSettings()
    interval_ms = available.probe_interval_ms or default.interval_ms
    _at_least("extension.availability.probe_interval_ms", interval_ms, 10)
    window_s = available.probe_window_seconds or default.window_ms // 1000
    _at_least("extension.availability.probe_window_seconds", window_s, 1)
    ack_sla_ms = available.probe_ack_sla_ms or default.ack_sla_ms
    _at_least("extension.availability.probe_ack_sla_ms", ack_sla_ms, 100)
    roundtrip_sla_ms = available.probe_roundtrip_sla_ms or default.roundtrip_sla_ms
    _at_least("extension.availability.probe_roundtrip_sla_ms", roundtrip_sla_ms, ack_sla_ms)
    replication_factor = available.probe_replication_factor or default.replication_factor
    _at_least("extension.availability.probe_replication_factor", replication_factor, 1)
    return ProbeSettings(
        interval_ms, window_s * 1000, ack_sla_ms, roundtrip_sla_ms, replication_factor
    )


def _at_least(field: str, value: int, minimum: int) -> None:
    if value < minimum:
        raise InvalidJobGroup(field, value, f"must be >= {minimum}")
