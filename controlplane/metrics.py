"""Prometheus metrics of the control plane: `python -m controlplane serve --metrics-address`.

Three parts, each usable alone:

* `GrpcMetricsInterceptor`: a server interceptor with go-grpc-prometheus's names, so the
  dashboards written for Go gRPC servers work unchanged: `grpc_server_started_total`,
  `grpc_server_handled_total{grpc_code}`, `grpc_server_handling_seconds` (histogram), with
  labels `grpc_type`, `grpc_service`, `grpc_method`. It goes into `create_server`'s
  `interceptors` list, beside any authentication interceptor.
* `StateCollector`: read from the store at scrape time: `uatu_controlplane_job_groups{state}`,
  `uatu_controlplane_applications{phase}` (running, intent, gave_up, cancel_requested),
  `uatu_controlplane_application_failures{job_group_id}` (relaunches in a row),
  `uatu_controlplane_workers`, `uatu_controlplane_is_leader`.
* `MeteredLauncher`: wraps the reconciler's launcher and counts what it is asked to do:
  `uatu_controlplane_launches_total`, `uatu_controlplane_relaunches_total` (a launch after the
  application died), `uatu_controlplane_cancels_total`, `uatu_controlplane_lease_expiries_total`
  (a cancel of an application whose heartbeat lease had run out) and
  `uatu_controlplane_launch_errors_total`.

`serve_metrics(address, registry, sd_dir)` serves `/metrics` over HTTP on its own port (the
gRPC port stays gRPC only), and with `sd_dir` also `/sd`, the launched applications' endpoints
as Prometheus HTTP service discovery (controlplane/http_sd.py); ``:PORT`` binds 127.0.0.1,
``0.0.0.0:PORT`` every interface.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import grpc
from prometheus_client import CollectorRegistry, Counter, Histogram, make_wsgi_app
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from uber.data.kafka.datatransfer import job_pb2
from uber.data.kafka.datatransfer.job_group_pb2 import JobGroup

from controlplane.http_sd import with_sd
from controlplane.launchers.base import Launcher, LaunchRecord
from controlplane.launchers.submit import metrics_sd_dir
from controlplane.state.base import Store
from controlplane.state.leadership import Leadership
from core.errors import ConfigError

# go-grpc-prometheus's default histogram buckets (prometheus.DefBuckets).
HANDLING_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_LABELS = ("grpc_type", "grpc_service", "grpc_method")


class GrpcMetricsInterceptor(grpc.ServerInterceptor):
    """Counts and times every RPC the (sync) server handles, under go-grpc-prometheus's names."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.started = Counter(
            "grpc_server_started",
            "Total number of RPCs started on the server.",
            _LABELS,
            registry=registry,
        )
        self.handled = Counter(
            "grpc_server_handled",
            "Total number of RPCs completed on the server, regardless of success or failure.",
            (*_LABELS, "grpc_code"),
            registry=registry,
        )
        self.seconds = Histogram(
            "grpc_server_handling_seconds",
            "Histogram of response latency (seconds) of gRPC that had been application-level "
            "handled by the server.",
            _LABELS,
            buckets=HANDLING_BUCKETS,
            registry=registry,
        )

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        handler = continuation(handler_call_details)
        if handler is None:
            return None
        service, _, method = handler_call_details.method.lstrip("/").rpartition("/")
        if handler.unary_unary:
            return grpc.unary_unary_rpc_method_handler(
                self._unary(handler.unary_unary, "unary", service, method),
                handler.request_deserializer,
                handler.response_serializer,
            )
        if handler.unary_stream:
            return grpc.unary_stream_rpc_method_handler(
                self._streaming(handler.unary_stream, "server_stream", service, method),
                handler.request_deserializer,
                handler.response_serializer,
            )
        if handler.stream_unary:
            return grpc.stream_unary_rpc_method_handler(
                self._unary(handler.stream_unary, "client_stream", service, method),
                handler.request_deserializer,
                handler.response_serializer,
            )
        return grpc.stream_stream_rpc_method_handler(
            self._streaming(handler.stream_stream, "bidi_stream", service, method),
            handler.request_deserializer,
            handler.response_serializer,
        )

    def _unary(self, behaviour: Callable, kind: str, service: str, method: str) -> Callable:
        def wrapper(request: Any, context: grpc.ServicerContext) -> Any:
            labels = (kind, service, method)
            self.started.labels(*labels).inc()
            started = time.perf_counter()
            try:
                response = behaviour(request, context)
            except BaseException:
                self._done(labels, context, started, failed=True)
                raise
            self._done(labels, context, started)
            return response

        return wrapper

    def _streaming(self, behaviour: Callable, kind: str, service: str, method: str) -> Callable:
        def wrapper(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
            labels = (kind, service, method)
            self.started.labels(*labels).inc()
            started = time.perf_counter()
            try:
                yield from behaviour(request, context)
            except BaseException:
                self._done(labels, context, started, failed=True)
                raise
            self._done(labels, context, started)

        return wrapper

    def _done(
        self,
        labels: tuple[str, str, str],
        context: grpc.ServicerContext,
        started: float,
        failed: bool = False,
    ) -> None:
        code = context.code()  # set by abort()/set_code(); None when the handler did not
        if code is None:
            code = grpc.StatusCode.UNKNOWN if failed else grpc.StatusCode.OK
        name = code.name if isinstance(code, grpc.StatusCode) else str(code)
        # go-grpc-prometheus spells codes as Go's codes.Code.String(): "OK", "NotFound", ...
        self.handled.labels(*labels, _go_code(name)).inc()
        self.seconds.labels(*labels).observe(time.perf_counter() - started)


def _go_code(name: str) -> str:
    """grpc.StatusCode name -> the Go spelling go-grpc-prometheus uses (NOT_FOUND -> NotFound)."""
    if name == "OK":
        return "OK"
    return "".join(part.capitalize() for part in name.split("_"))


class StateCollector(Collector):
    """Gauges read from the store at scrape time (nothing to keep in step)."""

    def __init__(self, store: Store, leadership: Leadership) -> None:
        self.store = store
        self.leadership = leadership

    def collect(self) -> Iterator[GaugeMetricFamily]:
        groups = GaugeMetricFamily(
            "uatu_controlplane_job_groups", "JobGroups by expected state", labels=["state"]
        )
        counts = dict.fromkeys(job_pb2.JobState.keys(), 0)
        for versioned in self.store.all():
            counts[job_pb2.JobState.Name(versioned.group.state)] += 1
        for state, count in sorted(counts.items()):
            groups.add_metric([state], count)
        yield groups

        launches = self.store.launches()
        phases = GaugeMetricFamily(
            "uatu_controlplane_applications", "Recorded applications by phase", labels=["phase"]
        )
        tally = {"running": 0, "intent": 0, "gave_up": 0, "cancel_requested": 0}
        failures = GaugeMetricFamily(
            "uatu_controlplane_application_failures",
            "Relaunches in a row of a JobGroup's application (0 once it ran healthy)",
            labels=["job_group_id"],
        )
        for job_group_id, record in sorted(launches.items()):
            tally[_phase(record)] += 1
            failures.add_metric([job_group_id], record.failures)
        for phase, count in tally.items():
            phases.add_metric([phase], count)
        yield phases
        yield failures

        yield from self._reported()

        yield GaugeMetricFamily(
            "uatu_controlplane_workers",
            "Registered workers (Spark applications) in the store",
            value=len(self.store.workers()),
        )
        yield GaugeMetricFamily(
            "uatu_controlplane_is_leader",
            "1 while this replica leads (reconciles and answers admin calls)",
            value=1 if self.leadership.is_leader() else 0,
        )

    def _reported(self) -> Iterator[GaugeMetricFamily]:
        """What each group's latest heartbeats reported, summed over its jobs (a worker
        application reports a group on its first job)."""
        families = {
            "cpu_usage": GaugeMetricFamily(
                "uatu_controlplane_group_cpu_cores",
                "Cores its worker application spends on the group, as last reported",
                labels=["job_group_id"],
            ),
            "messages_per_sec": GaugeMetricFamily(
                "uatu_controlplane_group_messages_per_sec",
                "Messages per second the group reads, as last reported",
                labels=["job_group_id"],
            ),
            "num_records_produced": GaugeMetricFamily(
                "uatu_controlplane_group_records_produced",
                "Records the group's run has written to Kafka (a replication's copies), as last "
                "reported",
                labels=["job_group_id"],
            ),
        }
        statuses = self.store.job_statuses()
        for versioned in self.store.all():
            reported = [
                statuses[j.job.job_id].job_status
                for j in versioned.group.jobs
                if j.job.job_id in statuses
            ]
            if not reported:
                continue
            group_id = versioned.group.job_group.job_group_id
            consumer = [r.kafka_consumer_task_status for r in reported]
            families["cpu_usage"].add_metric([group_id], sum(c.cpu_usage for c in consumer))
            families["messages_per_sec"].add_metric(
                [group_id], sum(c.messages_per_sec for c in consumer)
            )
            if any(r.HasField("kafka_dispatcher_task_status") for r in reported):
                produced = sum(
                    r.kafka_dispatcher_task_status.num_records_produced for r in reported
                )
                families["num_records_produced"].add_metric([group_id], produced)
        yield from families.values()


def _phase(record: LaunchRecord) -> str:
    if record.gave_up:
        return "gave_up"
    if record.cancel_requested:
        return "cancel_requested"
    return "intent" if record.intent else "running"


class MeteredLauncher:
    """A Launcher that counts launches, relaunches, cancels and lease expiries of another."""

    def __init__(
        self,
        inner: Launcher,
        store: Store,
        registry: CollectorRegistry,
        *,
        lease_seconds: float | None,
        startup_seconds: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.inner = inner
        self.store = store
        self.lease_seconds = lease_seconds
        self.startup_seconds = startup_seconds
        self.clock = clock

        def counter(name: str, doc: str) -> Counter:
            return Counter(f"uatu_controlplane_{name}", doc, registry=registry)

        self.launches = counter("launches", "Spark applications launched")
        self.relaunches = counter("relaunches", "Launches after the application had died")
        self.cancels = counter("cancels", "Applications cancelled")
        self.lease_expiries = counter(
            "lease_expiries", "Applications cancelled because their heartbeat lease ran out"
        )
        self.launch_errors = counter("launch_errors", "Launches the launcher refused or failed")

    def observes(self, record: LaunchRecord) -> bool:
        return self.inner.observes(record)

    def alive(self, record: LaunchRecord) -> bool:
        return self.inner.alive(record)

    def launch(self, group: JobGroup, definition: str, env: Mapping[str, str]) -> LaunchRecord:
        intent = self.store.get_launch(group.job_group_id)  # written just before, with failures
        try:
            record = self.inner.launch(group, definition, env)
        except Exception:
            self.launch_errors.inc()
            raise
        self.launches.inc()
        if intent is not None and intent.failures > 0:
            self.relaunches.inc()
        return record

    def cancel(self, record: LaunchRecord) -> None:
        if self._lease_expired(record):
            self.lease_expiries.inc()
        self.cancels.inc()
        self.inner.cancel(record)

    def _lease_expired(self, record: LaunchRecord) -> bool:
        """The reconciler's lease rule (reconciler.Reconciler._lease_expired), read here."""
        if self.lease_seconds is None or not record.worker_id:
            return False
        worker = self.store.get_worker(record.worker_id)
        last = worker.last_updated.ToNanoseconds() / 1e9 if worker is not None else None
        now = self.clock()
        if not last or last < record.started_at:
            return now - record.started_at > self.startup_seconds
        return now - last > self.lease_seconds


def metrics_bind(address: str) -> tuple[str, int]:
    """The (host, port) `serve_metrics` binds for host:port (pure). An empty host is the
    loopback interface: every interface only when asked for (``0.0.0.0:PORT``, ``[::]:PORT``),
    since /metrics names every JobGroup. ConfigError naming --metrics-address for a port
    that is not a number."""
    host, colon, port = address.rpartition(":")
    if not colon or not port.isdigit():
        raise ConfigError("--metrics-address", f"{address!r} is not HOST:PORT or :PORT")
    return host.strip("[]") or "127.0.0.1", int(port)


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True  # a slow scrape never holds the control plane's exit


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass  # one line per scrape is noise in the control plane's log


def serve_metrics(address: str, registry: CollectorRegistry, sd_dir: Path | None = None) -> int:
    """Serve `/metrics` of `registry` on host:port (port 0 picks one; `metrics_bind` reads
    the address), and `/sd` of the target files in `sd_dir` when given; returns the port."""
    host, port = metrics_bind(address)
    app = make_wsgi_app(registry)
    if sd_dir is not None:
        app = with_sd(app, sd_dir)
    server = make_server(host, port, app, _ThreadingServer, handler_class=_QuietHandler)
    threading.Thread(target=server.serve_forever, name="uatu-metrics", daemon=True).start()
    return int(server.server_address[1])


def install_metrics(address: str | None, plane: Any, options: Any) -> list:
    """With --metrics-address: serve /metrics and return the gRPC interceptors to install."""
    if not address:
        return []
    registry = CollectorRegistry()
    interceptor = GrpcMetricsInterceptor(registry)
    registry.register(StateCollector(plane.store, plane.leadership))
    if plane.reconciler is not None:
        plane.reconciler.launcher = MeteredLauncher(
            plane.reconciler.launcher,
            plane.store,
            registry,
            lease_seconds=options.lease_seconds,
            startup_seconds=options.startup_seconds,
        )
    # The local and standalone launchers' applications name their endpoints where /sd reads
    # them (on Kubernetes, Prometheus finds the driver pods by their annotations).
    shared = options.launcher in ("local", "standalone")
    sd_dir = metrics_sd_dir(options.apps_dir) if shared else None
    port = serve_metrics(address, registry, sd_dir)
    logging.getLogger("uatu.controlplane").info(
        "metrics on %s (port %d)%s", address, port, "; service discovery on /sd" if sd_dir else ""
    )
    return [interceptor]
