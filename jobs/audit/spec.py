"""The audit job's settings, derived once from a validated JobGroup.

`audit_spec(group, settings)` checks every audit-specific field and returns an immutable
`AuditSpec`; the rest of the job reads only the spec, never the proto.

Defaults (all overridable through `uatu.v1.JobOptions` in the JobGroup's `extension`):

=========================  ======================================================
source                     kafka_consumer_task_group.topic, or many topics
                           (extension.topics: names, or a pattern), each record
                           labelled with its own topic
event time                 the Kafka record timestamp
dedupe key                 64-bit xxhash of key bytes and value bytes
allowed lateness           the audit interval (records later than that are still
                           counted in their window, and also in `late_count`)
max future skew            86400 s (later event times are "not usable")
HLL lgConfigK              12 (about 1.6 % standard error)
exact key retention        21600 s behind the partition's watermark, never less than
                           a window's allowed lateness (later records of the window:
                           uniqueness from its HLL, `unique_estimated_count`)
trigger interval           10 s for streaming runs
starting offsets           earliest (auto_offset_reset_policy LATEST -> latest)
output                     <warehouse>/audit_counts (exact keys: <checkpoint>/audit-keys)
checkpoint                 <checkpoints>/<job_group_id>
=========================  ======================================================
"""

from __future__ import annotations

from dataclasses import dataclass

from uatu.v1 import job_options_pb2
from uber.data.kafka.datatransfer import job_pb2

from core.config import Settings
from core.errors import InvalidJobGroup
from core.jobgroup import MAX_AUDIT_CONFIGS, JobGroup, check_topic, job_options, require_cluster
from core.spec import (
    SOURCE_READS,
    TOPIC_SELECTION_READS,
    OutputSpec,
    SourceSpec,
    SourceTopic,
    output_spec,
    source_spec,
    trigger_seconds,
)

TABLES = ("audit_counts",)  # jobs/audit/tables.py declares their schemas
# The JobGroup fields a counting audit reads (core.jobgroup.refuse_unread refuses the rest).
READS = frozenset(
    {
        *SOURCE_READS,
        *TOPIC_SELECTION_READS,
        "kafka_consumer_task_group.audit_metadata.audit_configs.audit_type",
        "kafka_consumer_task_group.audit_metadata.audit_configs.audit_interval_in_seconds",
        "audit_task_group",
        "flow_control.messages_per_sec",
        "flow_control.bytes_per_sec",
        "extension.audit.event_time",
        "extension.audit.dedupe_key",
        "extension.audit.allowed_lateness_seconds",
        "extension.audit.max_future_skew_seconds",
        "extension.audit.hll_lg_config_k",
        "extension.audit.key_retention_seconds",
    }
)
DEFAULT_TRIGGER_SECONDS = 10
# Chaperone's Redis TTL for a window's keys.
DEFAULT_KEY_RETENTION_SECONDS = 21600

EXACT = "AUDIT_TYPE_EXACT_UNIQ"
APPROX = "AUDIT_TYPE_APPROX_UNIQ"
SUPPORTED_AUDIT_TYPES = (EXACT, APPROX)

EVENT_TIME_SOURCES = ("kafka_timestamp", "header", "json_field")
DEDUPE_KEY_SOURCES = ("key_and_value", "header", "json_field")

_SOURCE_NAMES = {
    job_options_pb2.FIELD_SOURCE_KAFKA_TIMESTAMP: "kafka_timestamp",
    job_options_pb2.FIELD_SOURCE_KEY_AND_VALUE: "key_and_value",
    job_options_pb2.FIELD_SOURCE_HEADER: "header",
    job_options_pb2.FIELD_SOURCE_JSON_FIELD: "json_field",
}


@dataclass(frozen=True)
class FieldRef:
    """Where a value comes from: `source` is one of the *_SOURCES names; `name` the field."""

    source: str
    name: str = ""


@dataclass(frozen=True)
class AuditWindow:
    """One AuditConfig: an audit type and its tumbling event-time window length."""

    audit_type: str
    interval_seconds: int


@dataclass(frozen=True)
class AuditSpec:
    job_group_id: str
    source: SourceSpec
    # Labels written to the table; the audit_task_group's when given, else the source's. With
    # a topic selection (source.selection) audited_topic is "": each record's own topic.
    audited_cluster: str
    audited_topic: str
    windows: tuple[AuditWindow, ...]
    event_time: FieldRef
    dedupe_key: FieldRef
    allowed_lateness_seconds: int | None  # None: the window's own interval
    max_future_skew_seconds: int
    hll_lg_config_k: int
    max_messages_per_sec: float  # 0 = unlimited
    trigger_interval_seconds: int
    output: OutputSpec  # audit_counts; exact keys live under the checkpoint
    max_bytes_per_sec: float = 0.0  # key + value bytes; 0 = unlimited
    # Exact audits keep a window's keys until its end is this far behind the partition's
    # watermark (the fold never keeps them less than the window's allowed lateness).
    key_retention_seconds: int = DEFAULT_KEY_RETENTION_SECONDS
    # An audit pack (jobs/audit/packs.py): (topic, JobGroup id) of each member, whose rows of
    # audit_counts that topic's are; job_group_id then names the pack. Empty: one group.
    routes: tuple[tuple[str, str], ...] = ()

    def group_of(self, topic: str) -> str:
        """The JobGroup that audits `topic` (a pack's member; else the job's own group)."""
        return dict(self.routes).get(topic, self.job_group_id)

    @property
    def query_name(self) -> str:
        return query_name(self.job_group_id)

    def required_topic(self) -> SourceTopic:
        return self.source.topic_ref()

    @property
    def many_topics(self) -> bool:
        """Whether the job audits a selection of topics (extension.topics), each labelled
        with its own name, rather than the one topic."""
        return self.source.selection is not None

    @property
    def needs_headers(self) -> bool:
        return "header" in (self.event_time.source, self.dedupe_key.source)

    @property
    def has_exact_audit(self) -> bool:
        return any(w.audit_type == EXACT for w in self.windows)

    def max_offsets_per_trigger(self, mean_record_bytes: float | None = None) -> int | None:
        """Records per micro-batch that keep the rates at or under messages_per_sec and
        bytes_per_sec: each cap times the trigger interval, the byte cap divided by the mean
        key + value size of the topic's records (`mean_record_bytes`, observed; 1 KiB when
        unknown). None: no cap."""
        budgets = []
        if self.max_messages_per_sec > 0:
            budgets.append(self.max_messages_per_sec * self.trigger_interval_seconds)
        if self.max_bytes_per_sec > 0:
            size = mean_record_bytes if mean_record_bytes and mean_record_bytes > 0 else 1024.0
            budgets.append(self.max_bytes_per_sec * self.trigger_interval_seconds / size)
        if not budgets:
            return None
        return max(1, int(min(budgets)))


def query_name(job_group_id: str) -> str:
    """The name of the audit query of `job_group_id` (a group's, or an audit pack's)."""
    return f"audit-{job_group_id}"


def _field_ref(
    spec: job_options_pb2.FieldSpec, field: str, allowed: tuple[str, ...], default: str
) -> FieldRef:
    if spec.source == job_options_pb2.FIELD_SOURCE_DEFAULT:
        return FieldRef(default)
    name = _SOURCE_NAMES.get(spec.source)
    if name not in allowed:
        source_name = job_options_pb2.FieldSource.Name(spec.source)
        raise InvalidJobGroup(f"{field}.source", source_name, f"must be one of {allowed}")
    if name in ("header", "json_field") and not spec.field.strip():
        raise InvalidJobGroup(f"{field}.field", spec.field, f"required when source is {name}")
    return FieldRef(name, spec.field.strip())


def _audit_windows(group: JobGroup) -> tuple[AuditWindow, ...]:
    configs = group.kafka_consumer_task_group.audit_metadata.audit_configs
    if not configs:
        raise InvalidJobGroup(
            "kafka_consumer_task_group.audit_metadata.audit_configs",
            [],
            "at least one AuditConfig is required",
        )
    if len(configs) > MAX_AUDIT_CONFIGS:
        raise InvalidJobGroup(
            "kafka_consumer_task_group.audit_metadata.audit_configs",
            f"{len(configs)} items",
            f"at most {MAX_AUDIT_CONFIGS}",
        )
    windows: list[AuditWindow] = []
    seen: set[AuditWindow] = set()
    for i, config in enumerate(configs):
        field = f"kafka_consumer_task_group.audit_metadata.audit_configs[{i}]"
        type_name = job_pb2.AuditType.Name(config.audit_type)
        if config.audit_type == job_pb2.AUDIT_TYPE_INVALID:
            raise InvalidJobGroup(f"{field}.audit_type", type_name, "an audit type is required")
        if type_name not in SUPPORTED_AUDIT_TYPES:
            raise InvalidJobGroup(
                f"{field}.audit_type", type_name, f"this job supports {SUPPORTED_AUDIT_TYPES}"
            )
        if config.audit_interval_in_seconds <= 0:
            raise InvalidJobGroup(
                f"{field}.audit_interval_in_seconds",
                config.audit_interval_in_seconds,
                "must be > 0",
            )
        window = AuditWindow(type_name, config.audit_interval_in_seconds)
        if window in seen:
            raise InvalidJobGroup(field, f"{type_name}/{window.interval_seconds}s", "duplicate")
        seen.add(window)
        windows.append(window)
    return tuple(windows)


def audit_spec(group: JobGroup, settings: Settings) -> AuditSpec:
    """Validate the audit-specific parts of `group` (common checks already passed)."""
    source = source_spec(group, settings, bounded_reads=False, many_topics=True)
    audited_cluster, audited_topic = source.cluster.name, source.topic
    if group.HasField("audit_task_group"):
        if group.audit_task_group.cluster:
            require_cluster(
                "audit_task_group.cluster", group.audit_task_group.cluster, settings.clusters
            )
            audited_cluster = group.audit_task_group.cluster
        if group.audit_task_group.topic and source.selection is not None:
            raise InvalidJobGroup(
                "audit_task_group.topic",
                group.audit_task_group.topic,
                f"not with extension.topics: each record is labelled with its own topic "
                f"({source.selection})",
            )
        audited_topic = group.audit_task_group.topic or audited_topic
        check_topic("audit_task_group.topic", group.audit_task_group.topic)

    options = job_options(group)
    audit = options.audit
    if audit.allowed_lateness_seconds < 0:
        raise InvalidJobGroup(
            "extension.audit.allowed_lateness_seconds",
            audit.allowed_lateness_seconds,
            "must be >= 0",
        )
    if audit.max_future_skew_seconds < 0:
        raise InvalidJobGroup(
            "extension.audit.max_future_skew_seconds", audit.max_future_skew_seconds, "must be >= 0"
        )
    lg_k = audit.hll_lg_config_k or 12
    windows = _audit_windows(group)
    _check_key_retention(audit, windows)
    if not 4 <= lg_k <= 21:
        raise InvalidJobGroup("extension.audit.hll_lg_config_k", lg_k, "must be in 4..21")
    return AuditSpec(
        job_group_id=group.job_group_id,
        source=source,
        audited_cluster=audited_cluster,
        audited_topic=audited_topic,
        windows=windows,
        event_time=_field_ref(
            audit.event_time, "extension.audit.event_time", EVENT_TIME_SOURCES, "kafka_timestamp"
        ),
        dedupe_key=_field_ref(
            audit.dedupe_key, "extension.audit.dedupe_key", DEDUPE_KEY_SOURCES, "key_and_value"
        ),
        allowed_lateness_seconds=audit.allowed_lateness_seconds or None,
        max_future_skew_seconds=audit.max_future_skew_seconds or 86400,
        hll_lg_config_k=lg_k,
        max_messages_per_sec=group.flow_control.messages_per_sec,
        max_bytes_per_sec=group.flow_control.bytes_per_sec,
        trigger_interval_seconds=trigger_seconds(options, DEFAULT_TRIGGER_SECONDS),
        output=output_spec(group, settings, TABLES),
        key_retention_seconds=audit.key_retention_seconds or DEFAULT_KEY_RETENTION_SECONDS,
    )


def _check_key_retention(
    audit: job_options_pb2.AuditOptions, windows: tuple[AuditWindow, ...]
) -> None:
    """A set key_retention_seconds is >= 0 and keeps an exact window's keys at least as long
    as its records may arrive on time (the allowed lateness, else the window's length); 0 is
    the default, which the fold raises to a window's lateness where that is longer."""
    field, retention = "extension.audit.key_retention_seconds", audit.key_retention_seconds
    if retention < 0:
        raise InvalidJobGroup(field, retention, "must be >= 0")
    if retention == 0:
        return
    exact = [w.interval_seconds for w in windows if w.audit_type == EXACT]
    lateness = audit.allowed_lateness_seconds or max(exact, default=0)
    if exact and retention < lateness:
        raise InvalidJobGroup(
            field, retention, f"must be >= the allowed lateness of the exact audits ({lateness} s)"
        )
