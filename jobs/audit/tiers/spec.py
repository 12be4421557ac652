"""The cross-tier audit's settings, derived once from a validated KAFKA_AUDIT JobGroup.

uForwarder's AuditTypes all live in one JobType, `JOB_TYPE_KAFKA_AUDIT`, as AuditConfigs of
`kafka_consumer_task_group.audit_metadata`. EXACT_UNIQ and APPROX_UNIQ count a topic
(`jobs/audit/spec.py`); the six others compare tiers and are run by this room:

=================================  ===========================================================
AUDIT_TYPE_SERVICE_AUDIT_AGGREGATION  SERVICE (and CONSUMER) AuditReports read from the group's
                                   topic -> tier_counts; compared with audit_counts per window
AUDIT_TYPE_KRP_AUDIT_AGGREGATION   the same for KRP (REST/gRPC proxy) reports
AUDIT_TYPE_XDC                     cross_dc_audit_config: sum of the source TopicInfos'
                                   audit_counts against the destination's, per window
AUDIT_TYPE_REPLICATION             replication_audit_config: per TopicsToCompare and source
                                   window, which source offsets reached the destination (the
                                   `uatu.src` stamp); missing ranges -> replication_gaps
AUDIT_TYPE_RETENTION               retention_audit_config: records deleted by retention before
                                   the group's committed offset reached them, partition count,
                                   retention settings -> retention_audit
AUDIT_TYPE_AVAILABILITY            offline, under-replicated and under-min-ISR time per
                                   partition and window -> availability_audit
=================================  ===========================================================

A JobGroup holds counting audits or cross-tier audits, not both (`audit_kind`): they are two
Spark applications. RETENTION and AVAILABILITY audit `audit_task_group` (cluster, topic), or
the group's source topic when it is unset; SERVICE/KRP read reports from the source topic and
audit every topic they name (only `audit_task_group.topic` when it is set).

Defaults: the grace period of a window is `extension.audit.allowed_lateness_seconds`, else
the window's length; windows are re-evaluated for late data for
`extension.audit.verdict_horizon_seconds` (86400); trigger 10 s; tables under
<warehouse>/<name> (`extension.output.*_path`); audit_counts read from
`extension.output.audit_counts_path`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from uber.data.kafka.datatransfer import job_pb2

from core.config import ClusterConfig, Settings
from core.errors import InvalidJobGroup
from core.jobgroup import MAX_AUDIT_CONFIGS, JobGroup, check_topic, job_options, require_cluster
from core.spec import (
    OutputSpec,
    SourceSpec,
    SourceTopic,
    output_spec,
    source_spec,
    trigger_seconds,
)

COUNTING_TYPES = frozenset({"AUDIT_TYPE_EXACT_UNIQ", "AUDIT_TYPE_APPROX_UNIQ"})
SERVICE = "AUDIT_TYPE_SERVICE_AUDIT_AGGREGATION"
KRP = "AUDIT_TYPE_KRP_AUDIT_AGGREGATION"
XDC = "AUDIT_TYPE_XDC"
REPLICATION = "AUDIT_TYPE_REPLICATION"
RETENTION = "AUDIT_TYPE_RETENTION"
AVAILABILITY = "AUDIT_TYPE_AVAILABILITY"
TIER_TYPES = frozenset({SERVICE, KRP, XDC, REPLICATION, RETENTION, AVAILABILITY})
# Which oneof `config` each type takes ("" = none).
_CONFIG_OF = {
    SERVICE: "",
    KRP: "",
    AVAILABILITY: "",
    XDC: "cross_dc_audit_config",
    REPLICATION: "replication_audit_config",
    RETENTION: "retention_audit_config",
}
_CONFIGS = "kafka_consumer_task_group.audit_metadata.audit_configs"
DEFAULT_TRIGGER_SECONDS = 10
DEFAULT_HORIZON_SECONDS = 86400
# The JobGroup fields a cross-tier audit reads (core.jobgroup.refuse_unread refuses the rest).
READS = frozenset(
    {
        "kafka_consumer_task_group.auto_offset_reset_policy",  # EARLIEST only
        "kafka_consumer_task_group.cluster",
        "kafka_consumer_task_group.topic",
        "kafka_consumer_task_group.consumer_group",
        "kafka_consumer_task_group.audit_metadata",
        "audit_task_group",
        "flow_control.messages_per_sec",
        "extension.audit.allowed_lateness_seconds",
        "extension.audit.verdict_horizon_seconds",
    }
)


@dataclass(frozen=True)
class TopicRef:
    cluster: str
    topic: str

    @property
    def label(self) -> str:
        return f"{self.cluster}/{self.topic}"


@dataclass(frozen=True)
class Check:
    """One AuditConfig of the cross-tier kinds."""

    audit_type: str
    name: str  # check_name in audit_verdicts
    interval_seconds: int
    grace_seconds: int
    threshold: float = 0.0  # relative mismatch that fails (XDC's failure_threshold)
    tier: str = ""  # SERVICE or KRP for the aggregations
    source: tuple[TopicRef, ...] = ()  # XDC, REPLICATION: left side; RETENTION, AVAILABILITY:
    destination: tuple[TopicRef, ...] = ()  # the audited topic alone in `source`
    partition_count: int = 0  # RETENTION


@dataclass(frozen=True)
class TierAuditSpec:
    job_group_id: str
    source: SourceSpec  # the reports topic (SERVICE/KRP), else only the started-check topic
    audited: TopicRef  # audit_task_group, else the source
    audited_topic_filter: str  # SERVICE/KRP: only this topic ("" = every reported topic)
    checks: tuple[Check, ...]
    clusters: dict[str, ClusterConfig]  # every cluster a check touches
    trigger_interval_seconds: int
    horizon_seconds: int
    max_offsets_per_trigger: int | None
    output: OutputSpec  # the tables of `tables_of(checks)`, audit_counts (read) among them

    @property
    def query_name(self) -> str:
        return f"tier-audit-{self.job_group_id}"

    def required_topic(self) -> SourceTopic:
        return self.source.topic_ref()

    def of_type(self, *audit_types: str) -> list[Check]:
        return [c for c in self.checks if c.audit_type in audit_types]

    @property
    def reads_reports(self) -> bool:
        return bool(self.of_type(SERVICE, KRP))

    def replication_topics(self) -> dict[str, list[str]]:
        """{cluster: topics} the REPLICATION checks read (sources and destinations)."""
        found: dict[str, list[str]] = {}
        for check in self.of_type(REPLICATION):
            for ref in (*check.source, *check.destination):
                topics = found.setdefault(ref.cluster, [])
                if ref.topic not in topics:
                    topics.append(ref.topic)
        return found


def tables_of(checks: Sequence[Check]) -> tuple[str, ...]:
    """The tables a tiers audit with `checks` uses: audit_verdicts always, audit_counts (the
    counting audits' table, read), and each check type's own (jobs/audit/tiers/tables.py
    declares their schemas)."""
    types = {c.audit_type for c in checks}
    names = ["audit_verdicts", "audit_counts"]
    if types & {SERVICE, KRP}:
        names += ["tier_counts", "tier_report_ids"]
    if REPLICATION in types:
        names += ["replication_ledger", "replication_gaps"]
    if RETENTION in types:
        names.append("retention_audit")
    if AVAILABILITY in types:
        names.append("availability_audit")
    return tuple(names)


def audit_kind(group: JobGroup) -> str:
    """ "counts" (EXACT_UNIQ / APPROX_UNIQ) or "tiers" (the cross-tier types), from the
    group's audit configs; a group mixing both is refused."""
    kinds = set()
    for i, config in enumerate(group.kafka_consumer_task_group.audit_metadata.audit_configs):
        name = _type_name(config.audit_type)
        if name in TIER_TYPES:
            kinds.add("tiers")
            if "counts" in kinds:
                raise _mixed(i, name)
        else:
            if "tiers" in kinds and name in COUNTING_TYPES:
                raise _mixed(i, name)
            kinds.add("counts")
    return "tiers" if kinds == {"tiers"} else "counts"


def _mixed(i: int, name: str) -> InvalidJobGroup:
    return InvalidJobGroup(
        f"{_CONFIGS}[{i}].audit_type",
        name,
        "counting audits (EXACT_UNIQ, APPROX_UNIQ) and cross-tier audits run as separate "
        "Spark applications: give each kind a JobGroup of its own",
    )


def _type_name(value: int) -> str:
    found = job_pb2.AuditType.DESCRIPTOR.values_by_number.get(value)
    return found.name if found is not None else str(value)


def _topic_infos(
    field: str, infos: Any, clusters: dict[str, ClusterConfig], settings: Settings
) -> tuple[TopicRef, ...]:
    if not infos:
        raise InvalidJobGroup(field, [], "at least one TopicInfo is required")
    refs = []
    for j, info in enumerate(infos):
        where = f"{field}[{j}]"
        clusters[info.cluster] = require_cluster(
            f"{where}.cluster", info.cluster, settings.clusters
        )
        if not info.topic.strip():
            raise InvalidJobGroup(f"{where}.topic", info.topic, "a topic is required")
        check_topic(f"{where}.topic", info.topic)
        refs.append(TopicRef(info.cluster, info.topic))
    if len(set(refs)) != len(refs):
        raise InvalidJobGroup(field, [r.label for r in refs], "a topic is listed twice")
    return tuple(refs)


def _threshold(field: str, value: float) -> float:
    if not math.isfinite(value) or not 0.0 <= value <= 1.0:
        raise InvalidJobGroup(field, value, "must be in [0, 1] (a relative mismatch)")
    return float(value)


def _check_name(field: str, name: str, default: str) -> str:
    name = name.strip() or default
    if len(name) > 200 or not name.isprintable():
        raise InvalidJobGroup(field, name, "at most 200 printable characters")
    return name


def _checks(
    group: JobGroup,
    settings: Settings,
    clusters: dict[str, ClusterConfig],
    audited: TopicRef,
    lateness: int,
) -> tuple[Check, ...]:
    configs = group.kafka_consumer_task_group.audit_metadata.audit_configs
    if not configs:
        raise InvalidJobGroup(_CONFIGS, [], "at least one AuditConfig is required")
    if len(configs) > MAX_AUDIT_CONFIGS:
        raise InvalidJobGroup(_CONFIGS, f"{len(configs)} items", f"at most {MAX_AUDIT_CONFIGS}")
    checks: list[Check] = []
    names: set[tuple[str, str]] = set()
    for i, config in enumerate(configs):
        field = f"{_CONFIGS}[{i}]"
        type_name = _type_name(config.audit_type)
        if type_name not in TIER_TYPES:
            raise InvalidJobGroup(f"{field}.audit_type", type_name, f"one of {sorted(TIER_TYPES)}")
        interval = config.audit_interval_in_seconds
        if interval <= 0:
            raise InvalidJobGroup(f"{field}.audit_interval_in_seconds", interval, "must be > 0")
        wanted, given = _CONFIG_OF[type_name], config.WhichOneof("config") or ""
        if given != wanted:
            what = f"{type_name} takes {wanted}" if wanted else f"{type_name} takes no config"
            raise InvalidJobGroup(f"{field}.{given or wanted}", "set" if given else "unset", what)
        grace = lateness if lateness else interval
        common = {"audit_type": type_name, "interval_seconds": interval, "grace_seconds": grace}
        short = type_name.removeprefix("AUDIT_TYPE_").lower()
        if type_name in (SERVICE, KRP):
            tier = "SERVICE" if type_name == SERVICE else "KRP"
            checks.append(Check(**common, name=f"{tier.lower()}->kafka", tier=tier))
        elif type_name == XDC:
            xdc = config.cross_dc_audit_config
            base = f"{field}.cross_dc_audit_config"
            if xdc.send_to_udq:
                raise InvalidJobGroup(
                    f"{base}.send_to_udq", True, "there is no UDQ here: verdicts go to the "
                    "audit_verdicts table; leave it false"
                )  # fmt: skip
            source = _topic_infos(
                f"{base}.cross_dc_checks.source", xdc.cross_dc_checks.source, clusters, settings
            )
            destination = _topic_infos(
                f"{base}.cross_dc_checks.destination",
                xdc.cross_dc_checks.destination,
                clusters,
                settings,
            )
            default = f"xdc:{'+'.join(r.label for r in source)}->" + "+".join(
                r.label for r in destination
            )
            checks.append(
                Check(
                    **common,
                    name=_check_name(f"{base}.udq_test_name", xdc.udq_test_name, default),
                    threshold=_threshold(f"{base}.failure_threshold", xdc.failure_threshold),
                    source=source,
                    destination=destination,
                )
            )
        elif type_name == REPLICATION:
            base = f"{field}.replication_audit_config.replication_checks"
            pairs = config.replication_audit_config.replication_checks
            if not pairs:
                raise InvalidJobGroup(base, [], "at least one TopicsToCompare is required")
            for j, pair in enumerate(pairs):
                source = _topic_infos(f"{base}[{j}].source", pair.source, clusters, settings)
                destination = _topic_infos(
                    f"{base}[{j}].destination", pair.destination, clusters, settings
                )
                overlap = set(source) & set(destination)
                if overlap:
                    raise InvalidJobGroup(
                        f"{base}[{j}].destination",
                        sorted(r.label for r in overlap),
                        "is also a source of the same pair",
                    )
                name = "replication:" + "+".join(r.label for r in source) + "->"
                name += "+".join(r.label for r in destination)
                checks.append(Check(**common, name=name, source=source, destination=destination))
        elif type_name == RETENTION:
            count = config.retention_audit_config.partition_count
            if count <= 0:
                raise InvalidJobGroup(
                    f"{field}.retention_audit_config.partition_count", count, "must be > 0"
                )
            checks.append(
                Check(
                    **common,
                    name=f"retention:{audited.label}",
                    source=(audited,),
                    partition_count=count,
                )
            )
        else:  # AVAILABILITY
            checks.append(Check(**common, name=f"{short}:{audited.label}", source=(audited,)))
        key = (type_name, checks[-1].name)
        if key in names:
            raise InvalidJobGroup(field, f"{type_name} {checks[-1].name}", "duplicate check")
        names.add(key)
    return tuple(checks)


def tier_audit_spec(group: JobGroup, settings: Settings) -> TierAuditSpec:
    """Validate a cross-tier KAFKA_AUDIT group (common checks already passed)."""
    source = source_spec(group, settings, bounded_reads=False)
    if source.starting_offsets != "earliest":
        raise InvalidJobGroup(
            "kafka_consumer_task_group.auto_offset_reset_policy",
            "AUTO_OFFSET_RESET_POLICY_LATEST",
            "a cross-tier audit reads its topics from the earliest offset: a window is judged "
            "on every report and record of it",
        )
    cluster = source.cluster
    clusters = {cluster.name: cluster}
    audited = TopicRef(cluster.name, source.topic)
    topic_filter = ""
    if group.HasField("audit_task_group"):
        task = group.audit_task_group
        if task.cluster:
            clusters[task.cluster] = require_cluster(
                "audit_task_group.cluster", task.cluster, settings.clusters
            )
        check_topic("audit_task_group.topic", task.topic)
        audited = TopicRef(task.cluster or cluster.name, task.topic or source.topic)
        topic_filter = task.topic
    options = job_options(group)
    audit = options.audit
    if audit.allowed_lateness_seconds < 0:
        raise InvalidJobGroup(
            "extension.audit.allowed_lateness_seconds", audit.allowed_lateness_seconds, ">= 0"
        )
    horizon = audit.verdict_horizon_seconds or DEFAULT_HORIZON_SECONDS
    if horizon < 0:
        raise InvalidJobGroup("extension.audit.verdict_horizon_seconds", horizon, "must be > 0")
    trigger = trigger_seconds(options, DEFAULT_TRIGGER_SECONDS)
    checks = _checks(group, settings, clusters, audited, audit.allowed_lateness_seconds)
    if any(c.audit_type in (RETENTION, AVAILABILITY) for c in checks):
        clusters.setdefault(audited.cluster, settings.clusters[audited.cluster])
    rate = group.flow_control.messages_per_sec
    return TierAuditSpec(
        job_group_id=group.job_group_id,
        source=source,
        audited=audited,
        audited_topic_filter=topic_filter,
        checks=checks,
        clusters=clusters,
        trigger_interval_seconds=trigger,
        horizon_seconds=horizon,
        max_offsets_per_trigger=max(1, int(rate * trigger)) if rate > 0 else None,
        output=output_spec(group, settings, tables_of(checks)),
    )
