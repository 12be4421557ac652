"""The dispatcher job's settings, derived once from a validated JobGroup (no broker, no Spark:
the control plane imports this module).

`dispatch_spec(group, settings, now_ms)` checks every dispatcher field and returns an immutable
`DispatchSpec`; a bad field raises `InvalidJobGroup` naming it, which `jobs/main.py` turns into
exit status 2. The broker checks (the retry, DLQ and resq topics exist) run in `job.check()`,
also before any Spark work.

Fields used, and defaults:

========================================  ==================================================
kafka_consumer_task_group                 cluster, topic (the source), consumer_group
                                          (required: it names the method and the
                                          ``kafka-consumergroup`` header),
                                          processing_delay_ms (0..86,400,000),
                                          auto_offset_reset_policy, isolation_level,
                                          start/end_timestamp, partition_offset_ranges
rpc_dispatcher_task_group.uri             ``dns:///host:port``, ``ipv4:addr:port``,
                                          ``ipv6:[addr]:port`` or ``unix:/path``
.procedure                                ``kafka.consumerproxy.<consumer_group>/<topic>``
.rpc_timeout_ms                           > 0 (required)
.rpc_timeout_limit_ms                     the cap of the doubling deadline; 0 = 30 min
.max_rpc_timeouts                         0 = timeouts always go to the retry tiers
.dlq_topic                                "" = none (DLQ answers go to the retry tiers)
retry_config                              tiers used when retry_enabled; each topic required,
                                          delay 0..86,400,000 ms, max_retry_count >= 0
resq_config                               resq_topic used when resq_enabled; flow_control
                                          optional (else the group's)
flow_control                              messages_per_sec, bytes_per_sec (value bytes),
                                          max_inflight_messages (0 = adaptive); 0 = no cap
extension.dispatch                        see uatu.v1.DispatchOptions
extension.trigger.interval_seconds        1 (the source's query; the tiers' and the resq's:
                                          extension.dispatch.tier_trigger_seconds, 5)
extension.output                          dispatch_stats_path (<warehouse>/dispatch_stats),
                                          checkpoint_path (<checkpoints>/<job_group_id>)
========================================  ==================================================

Retry, DLQ and resq topics live on the source cluster (uForwarder, too, produces them to one
cluster whatever ``*_cluster`` says); a ``*_cluster`` naming another cluster is refused.

A JobGroup whose source topic is its own ``dlq_topic`` is a DLQ redrive: it must be bounded
(partition_offset_ranges or end_timestamp), and it reads only its DLQ range; what it routes to
the tiers or the resq is dispatched by the main JobGroup's application, which consumes those.
"""

from __future__ import annotations

import ipaddress
import math
import re
from dataclasses import dataclass

from uatu.v1 import job_options_pb2
from uber.data.kafka.datatransfer import job_group_pb2, job_pb2

from core.config import ClusterConfig, Settings
from core.errors import InvalidJobGroup
from core.jobgroup import JobGroup, check_flow_control, check_topic, job_options, require_cluster
from core.spec import (
    BOUNDED_READS,
    SOURCE_READS,
    OutputSpec,
    SourceSpec,
    SourceTopic,
    output_spec,
    source_spec,
    trigger_seconds,
)
from jobs.dispatch.routing import Kind, Routes, Tier, sort_tiers

TABLES = ("dispatch_stats",)  # jobs/dispatch/tables.py declares its schema
# The JobGroup fields the dispatcher reads (core.jobgroup.refuse_unread refuses the rest).
READS = frozenset(
    {
        *SOURCE_READS,
        *BOUNDED_READS,
        "kafka_consumer_task_group.processing_delay_ms",
        "rpc_dispatcher_task_group.uri",
        "rpc_dispatcher_task_group.procedure",
        "rpc_dispatcher_task_group.rpc_timeout_ms",
        "rpc_dispatcher_task_group.rpc_timeout_limit_ms",
        "rpc_dispatcher_task_group.max_rpc_timeouts",
        "rpc_dispatcher_task_group.dlq_topic",
        "rpc_dispatcher_task_group.dlq_cluster",
        "rpc_dispatcher_task_group.retry_queue_topic",  # refused by the spec, with its reason
        "retry_config",
        "resq_config.resq_enabled",
        "resq_config.resq_topic",
        "resq_config.resq_cluster",
        "resq_config.flow_control",
        "flow_control",
        "extension.dispatch",
    }
)
MAX_DELAY_MS = 86_400_000  # RetryQueue.processing_delay_ms's documented range: 0 to 1 day
DEFAULT_TIMEOUT_LIMIT_MS = 30 * 60 * 1000  # uForwarder's maximum RPC timeout
DEFAULT_TRIGGER_SECONDS = 1
DEFAULT_STATS_WINDOW_SECONDS = 60
DEFAULT_ADAPTIVE_MAX_INFLIGHT = 1000
DEFAULT_CHANNELS = 4  # HTTP/2 connections; docs/benchmarks.md (dispatcher) compares 4 with 1
DEFAULT_CALLBACK_THREADS = 2
DEFAULT_TIER_TRIGGER_SECONDS = 5
MIN_HOL_GRACE_MS = 1000

_RPC = "rpc_dispatcher_task_group"
_SOURCE = "kafka_consumer_task_group"
_SERVICE_METHOD = re.compile(r"^[A-Za-z0-9_.\-@]+/[A-Za-z0-9_.\-@]+$")


@dataclass(frozen=True)
class TopicQuery:
    """One streaming query of the application: a topic and its processing delay."""

    topic: str
    kind: Kind
    delay_ms: int

    label: str  # main | retry-<n> (1-based, by delay) | resq | dlq, as dispatch_stats says


@dataclass(frozen=True)
class Flow:
    messages_per_sec: float  # 0 = unlimited
    bytes_per_sec: float  # 0 = unlimited (value bytes)
    max_inflight: int  # 0 = adaptive


@dataclass(frozen=True)
class DispatchSpec:
    job_group_id: str
    source: SourceSpec  # its consumer group names the method and the kafka-consumergroup header
    source_kind: Kind  # MAIN, or DLQ for a redrive
    processing_delay_ms: int
    uri: str
    target: str  # the gRPC target the JVM client dials
    procedure: str  # service/method
    rpc_timeout_ms: int
    rpc_timeout_limit_ms: int
    routes: Routes
    flow: Flow
    resq_flow: Flow | None  # None: the resq shares the group's quota
    stats_window_seconds: int
    hol_grace_ms: int
    adaptive_max_inflight: int
    channels: int
    callback_threads: int
    max_records_per_batch: int  # 0 = unlimited
    trigger_interval_seconds: int
    tier_trigger_seconds: int  # the retry tiers' and the resq's queries
    output: OutputSpec

    @property
    def query_name(self) -> str:
        return f"dispatch-{self.job_group_id}"

    @property
    def bounded(self) -> bool:
        return self.source.bounded

    def required_topic(self) -> SourceTopic:
        return self.source.topic_ref()

    def queries(self) -> tuple[TopicQuery, ...]:
        """The application's queries: the source, then (unless this is a DLQ redrive) every
        retry tier and the resq."""
        topic = self.source.topic
        if self.source_kind is Kind.DLQ:
            return (TopicQuery(topic, Kind.DLQ, self.processing_delay_ms, "dlq"),)
        first = TopicQuery(topic, Kind.MAIN, self.processing_delay_ms, "main")
        tiers = tuple(
            TopicQuery(t.topic, Kind.TIER, t.delay_ms, f"retry-{i}")
            for i, t in enumerate(self.routes.tiers, start=1)
        )
        resq = (
            (TopicQuery(self.routes.resq_topic, Kind.RESQ, 0, "resq"),)
            if self.routes.resq_topic
            else ()
        )
        return (first, *tiers, *resq)

    def query_name_of(self, query: TopicQuery) -> str:
        if query.topic == self.source.topic:
            return self.query_name
        return f"{self.query_name}-{query.topic}"

    def checkpoint_of(self, query: TopicQuery) -> str:
        """Each query's own checkpoint folder, named by its topic (stable when tiers are
        reordered or added)."""
        return f"{self.output.checkpoint}/topics/{query.topic}"

    def produced_topics(self) -> tuple[tuple[str, str], ...]:
        """(field, topic) of every topic the job writes to, for the broker checks."""
        found: list[tuple[str, str]] = []
        if self.routes.dlq_topic:
            found.append((f"{_RPC}.dlq_topic", self.routes.dlq_topic))
        for tier in self.routes.tiers:  # sorted by delay; named by their JobGroup position
            found.append((f"retry_config.retry_queues[{tier.index}].retry_queue_topic", tier.topic))
        if self.routes.resq_topic:
            found.append(("resq_config.resq_topic", self.routes.resq_topic))
        return tuple(found)


def parse_uri(uri: str) -> str:
    """The gRPC target grpc-java dials for a uForwarder `uri`; ValueError naming the problem."""
    if uri.startswith("dns:"):
        rest = uri[len("dns:") :]
        if rest.startswith("//"):  # dns://[authority]/host:port
            authority, sep, host_port = rest[2:].partition("/")
            if not sep:
                raise ValueError("dns:// needs a path: dns:///host:port")
            _host_and_port(host_port)
            return f"dns://{authority}/{host_port}"
        _host_and_port(rest)
        return f"dns:///{rest}"
    if uri.startswith("ipv4:") or uri.startswith("ipv6:"):
        host_port = uri[len("ipv4:") :]
        if "," in host_port:
            raise ValueError("one address only (a list needs a dns name)")
        host, _ = _host_and_port(host_port)
        version = 4 if uri.startswith("ipv4:") else 6
        try:
            if ipaddress.ip_address(host.strip("[]")).version != version:
                raise ValueError
        except ValueError:
            raise ValueError(f"{host!r} is not an IPv{version} address") from None
        return f"dns:///{host_port}"
    if uri.startswith("unix:"):
        path = uri[len("unix:") :]
        path = "/" + path.lstrip("/") if path.startswith("//") else path
        if not path.startswith("/") or len(path) < 2:
            raise ValueError("a unix socket needs an absolute path: unix:/path/to.sock")
        return f"unix://{path}"
    raise ValueError("use dns:///host:port, ipv4:addr:port, ipv6:[addr]:port or unix:/path")


def _host_and_port(host_port: str) -> tuple[str, int]:
    host, sep, port = host_port.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{host_port!r} is not host:port")
    return host, int(port)


def _flow(field: str, flow: job_pb2.FlowControl) -> Flow:
    check_flow_control(field, flow)
    return Flow(flow.messages_per_sec, flow.bytes_per_sec, math.ceil(flow.max_inflight_messages))


def _delay(field: str, value: int) -> int:
    if not 0 <= value <= MAX_DELAY_MS:
        raise InvalidJobGroup(field, value, f"must be 0..{MAX_DELAY_MS} ms")
    return value


def _same_cluster(field: str, name: str, source: ClusterConfig, settings: Settings) -> None:
    if name and name != source.name:
        cluster = require_cluster(field, name, settings.clusters)
        if cluster.bootstrap_servers != source.bootstrap_servers:
            raise InvalidJobGroup(
                field, name, f"must be the source cluster {source.name!r} (or empty)"
            )


def _tiers(group: JobGroup, source_topic: str, dlq: str) -> tuple[Tier, ...]:
    config = group.retry_config
    if not config.retry_enabled:
        return ()
    tiers: list[Tier] = []
    for i, q in enumerate(config.retry_queues):
        field = f"retry_config.retry_queues[{i}]"
        topic = q.retry_queue_topic.strip()
        if not topic:
            raise InvalidJobGroup(f"{field}.retry_queue_topic", q.retry_queue_topic, "required")
        check_topic(f"{field}.retry_queue_topic", topic)
        if topic == source_topic:
            raise InvalidJobGroup(
                f"{field}.retry_queue_topic", topic, "is the source topic; a tier needs its own"
            )
        if dlq and topic == dlq:
            raise InvalidJobGroup(f"{field}.retry_queue_topic", topic, "is the dlq_topic")
        if any(t.topic == topic for t in tiers):
            raise InvalidJobGroup(f"{field}.retry_queue_topic", topic, "is listed twice")
        if q.max_retry_count < 0:
            raise InvalidJobGroup(f"{field}.max_retry_count", q.max_retry_count, "must be >= 0")
        delay = _delay(f"{field}.processing_delay_ms", q.processing_delay_ms)
        tiers.append(Tier(topic, delay, q.max_retry_count, index=i))
    return sort_tiers(tiers)


def _rpc_target(
    rpc: job_group_pb2.RpcDispatcherTaskGroup, default_procedure: str
) -> tuple[str, str]:
    """(the gRPC target, service/method) of rpc_dispatcher_task_group, its timeouts checked."""
    try:
        target = parse_uri(rpc.uri.strip())
    except ValueError as e:
        raise InvalidJobGroup(f"{_RPC}.uri", rpc.uri, str(e)) from None
    procedure = rpc.procedure.strip().lstrip("/") or default_procedure
    if not _SERVICE_METHOD.match(procedure):
        raise InvalidJobGroup(f"{_RPC}.procedure", rpc.procedure, "must be service/method")
    if rpc.rpc_timeout_ms <= 0:
        raise InvalidJobGroup(f"{_RPC}.rpc_timeout_ms", rpc.rpc_timeout_ms, "must be > 0")
    if (rpc.rpc_timeout_limit_ms or DEFAULT_TIMEOUT_LIMIT_MS) < rpc.rpc_timeout_ms:
        raise InvalidJobGroup(
            f"{_RPC}.rpc_timeout_limit_ms",
            rpc.rpc_timeout_limit_ms,
            f"must be 0 (30 min) or >= rpc_timeout_ms {rpc.rpc_timeout_ms}",
        )
    if rpc.max_rpc_timeouts < 0:
        raise InvalidJobGroup(f"{_RPC}.max_rpc_timeouts", rpc.max_rpc_timeouts, "must be >= 0")
    if rpc.retry_queue_topic:
        raise InvalidJobGroup(
            f"{_RPC}.retry_queue_topic",
            rpc.retry_queue_topic,
            "deprecated in uForwarder's API; give retry_config.retry_queues",
        )
    return target, procedure


def _routes(group: JobGroup, source: SourceSpec, settings: Settings) -> tuple[Routes, Flow | None]:
    """Where records go that are not committed (retry tiers, DLQ, resq), all on the source
    cluster, and the resq's own flow control (None: it shares the group's)."""
    rpc, cluster, topic = group.rpc_dispatcher_task_group, source.cluster, source.topic
    dlq = rpc.dlq_topic.strip()
    check_topic(f"{_RPC}.dlq_topic", dlq)
    _same_cluster(f"{_RPC}.dlq_cluster", rpc.dlq_cluster, cluster, settings)
    for i, q in enumerate(group.retry_config.retry_queues):
        _same_cluster(
            f"retry_config.retry_queues[{i}].retry_cluster", q.retry_cluster, cluster, settings
        )
    tiers = _tiers(group, topic, dlq)
    resq_config = group.resq_config
    resq = ""
    resq_flow = None
    if resq_config.resq_enabled:
        resq = resq_config.resq_topic.strip()
        if not resq:
            raise InvalidJobGroup("resq_config.resq_topic", resq_config.resq_topic, "required")
        check_topic("resq_config.resq_topic", resq)
        if resq in (topic, dlq) or any(t.topic == resq for t in tiers):
            raise InvalidJobGroup(
                "resq_config.resq_topic", resq, "must differ from the source, DLQ and tiers"
            )
        _same_cluster("resq_config.resq_cluster", resq_config.resq_cluster, cluster, settings)
        if resq_config.HasField("flow_control"):
            resq_flow = _flow("resq_config.flow_control", resq_config.flow_control)
    return Routes(tiers, dlq, resq, rpc.max_rpc_timeouts), resq_flow


def _dispatch_options(options: job_options_pb2.JobOptions) -> job_options_pb2.DispatchOptions:
    """extension.dispatch, checked: counts >= 0, channels and callback threads <= 64."""
    dispatch = options.dispatch
    for name in (
        "stats_window_seconds",
        "head_of_line_grace_ms",
        "adaptive_max_inflight",
        "channels",
        "max_records_per_batch",
        "callback_threads",
        "tier_trigger_seconds",
    ):
        if getattr(dispatch, name) < 0:
            raise InvalidJobGroup(f"extension.dispatch.{name}", getattr(dispatch, name), ">= 0")
    for name in ("channels", "callback_threads"):
        if getattr(dispatch, name) > 64:
            raise InvalidJobGroup(f"extension.dispatch.{name}", getattr(dispatch, name), "<= 64")
    return dispatch


def dispatch_spec(group: JobGroup, settings: Settings) -> DispatchSpec:
    """Validate the dispatcher-specific parts of `group` (common checks already passed)."""
    source = source_spec(group, settings, bounded_reads=True)
    if not source.consumer_group:
        raise InvalidJobGroup(
            f"{_SOURCE}.consumer_group",
            group.kafka_consumer_task_group.consumer_group,
            "required by the dispatcher",
        )
    rpc = group.rpc_dispatcher_task_group
    target, procedure = _rpc_target(
        rpc, f"kafka.consumerproxy.{source.consumer_group}/{source.topic}"
    )
    routes, resq_flow = _routes(group, source, settings)
    source_kind = Kind.MAIN
    if routes.dlq_topic and source.topic == routes.dlq_topic:
        source_kind = Kind.DLQ
        if not source.bounded:
            raise InvalidJobGroup(
                f"{_SOURCE}.topic",
                source.topic,
                "is the dlq_topic: a DLQ redrive must be bounded by partition_offset_ranges "
                "or end_timestamp",
            )
    options = job_options(group)
    dispatch = _dispatch_options(options)
    trigger = trigger_seconds(options, DEFAULT_TRIGGER_SECONDS)
    flow = _flow("flow_control", group.flow_control)
    max_records = dispatch.max_records_per_batch or (
        int(flow.messages_per_sec * 10) if flow.messages_per_sec else 0
    )
    return DispatchSpec(
        job_group_id=group.job_group_id,
        source=source,
        source_kind=source_kind,
        processing_delay_ms=_delay(
            f"{_SOURCE}.processing_delay_ms", group.kafka_consumer_task_group.processing_delay_ms
        ),
        uri=rpc.uri.strip(),
        target=target,
        procedure=procedure,
        rpc_timeout_ms=rpc.rpc_timeout_ms,
        rpc_timeout_limit_ms=rpc.rpc_timeout_limit_ms or DEFAULT_TIMEOUT_LIMIT_MS,
        routes=routes,
        flow=flow,
        resq_flow=resq_flow,
        stats_window_seconds=dispatch.stats_window_seconds or DEFAULT_STATS_WINDOW_SECONDS,
        hol_grace_ms=dispatch.head_of_line_grace_ms or max(MIN_HOL_GRACE_MS, rpc.rpc_timeout_ms),
        adaptive_max_inflight=dispatch.adaptive_max_inflight or DEFAULT_ADAPTIVE_MAX_INFLIGHT,
        channels=dispatch.channels or DEFAULT_CHANNELS,
        callback_threads=dispatch.callback_threads or DEFAULT_CALLBACK_THREADS,
        max_records_per_batch=max_records,
        trigger_interval_seconds=trigger,
        tier_trigger_seconds=max(
            trigger, dispatch.tier_trigger_seconds or DEFAULT_TIER_TRIGGER_SECONDS
        ),
        output=output_spec(group, settings, TABLES),
    )
