"""Prometheus metrics of a job's driver: the endpoint, the registry and the series every job has.

Off unless `UATU_METRICS_PORT` is set (0 picks a free port). Then the driver serves
`http://<host>:<port>/metrics` (prometheus_client) with `uatu_query_*` from a
StreamingQueryListener (batches, input and processing rates, batch duration, end offsets per
partition, last progress time), and whatever series the running job type declares in its own
package (`jobs/<type>/metrics.py`, through `gauge`, `counter` and `histogram` here): the
audit's counts, the availability job's Burrow, kafka-lag-exporter and KMinion names,
MirrorMaker 2's for replication, uForwarder's for the dispatcher. docs/metrics.md lists them.

`UATU_METRICS_SD_DIR`, when set, gets a Prometheus file_sd target file per application
(`<job_group_id>.json`, removed on stop): one target for these metrics, one for Spark's own
(the PrometheusServlet on the Spark UI, `/metrics/prometheus`). Spark's streaming metrics
(`spark.sql.streaming.metricsEnabled`) are switched on by `SESSION_CONF`.

Everything here runs on the driver; executors never touch it. The update functions are cheap
no-ops for work the caller skips while not serving (`serving()`).
"""

from __future__ import annotations

import json
import logging
import socket
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any
from wsgiref.simple_server import WSGIServer

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    start_http_server,
)

from core.errors import ConfigError
from jobs.runtime.query_listener import JsonEventsListener

log = logging.getLogger("uatu.metrics")

ENV_PORT = "UATU_METRICS_PORT"
ENV_SD_DIR = "UATU_METRICS_SD_DIR"

# Spark settings every job session gets: streaming metrics in Spark's metrics system, and the
# PrometheusServlet sink on the UI, with a fixed namespace instead of the app id in every name.
SESSION_CONF = {
    "spark.sql.streaming.metricsEnabled": "true",
    "spark.metrics.namespace": "uatu",
    "spark.metrics.conf.*.sink.prometheusServlet.class": (
        "org.apache.spark.metrics.sink.PrometheusServlet"
    ),
    "spark.metrics.conf.*.sink.prometheusServlet.path": "/metrics/prometheus",
}

REGISTRY = CollectorRegistry()
ProcessCollector(registry=REGISTRY)

_lock = threading.Lock()
_serving = 0  # endpoints started and not stopped


def serving() -> bool:
    """True while an endpoint `start` started in this driver serves."""
    return _serving > 0


_declared: list[Gauge | Counter | Histogram] = []  # every labelled metric of the registry


def gauge(name: str, doc: str, labels: Sequence[str]) -> Gauge:
    """A gauge in the driver's registry (each job type declares its own in its package)."""
    metric = Gauge(name, doc, labels, registry=REGISTRY)
    _declared.append(metric)
    return metric


def counter(name: str, doc: str, labels: Sequence[str]) -> Counter:
    metric = Counter(name, doc, labels, registry=REGISTRY)
    _declared.append(metric)
    return metric


def histogram(name: str, doc: str, labels: Sequence[str], buckets: Sequence[float]) -> Histogram:
    metric = Histogram(name, doc, labels, buckets=buckets, registry=REGISTRY)
    _declared.append(metric)
    return metric


def clear_series() -> None:
    """Forget every labelled series: a process that ran jobs before (a test session) starts
    its next reading of the registry from none."""
    for metric in _declared:
        metric.clear()


# --- every job: the streaming query ---------------------------------------------------------

_Q = ("query",)
QUERY_BATCHES = counter("uatu_query_batches", "Micro-batches completed", _Q)
QUERY_INPUT_ROWS = counter("uatu_query_input_rows", "Rows read by completed micro-batches", _Q)
QUERY_INPUT_RATE = gauge(
    "uatu_query_input_rows_per_second", "Input rate of the last micro-batch", _Q
)
QUERY_PROCESS_RATE = gauge(
    "uatu_query_processed_rows_per_second", "Processing rate of the last micro-batch", _Q
)
QUERY_BATCH_SECONDS = gauge(
    "uatu_query_batch_duration_seconds", "Wall time of the last micro-batch", _Q
)
QUERY_LAST_PROGRESS = gauge(
    "uatu_query_last_progress_timestamp_seconds", "When the last micro-batch finished", _Q
)
QUERY_END_OFFSET = gauge(
    "uatu_query_source_end_offset",
    "End offset of the last micro-batch per Kafka partition",
    ("query", "topic", "partition"),
)

# The JobGroup the application runs, with uForwarder's owner tag (misc_config's
# owner_service_name): dashboards join other series to it on job_group_id.
JOB_INFO = gauge(
    "uatu_job_info",
    "1 for the JobGroup this application runs; its labels name the job type and owner",
    ("job_group_id", "job_type", "owner_service"),
)


def job_info(job_group_id: str, job_type: str, owner_service: str) -> None:
    JOB_INFO.labels(job_group_id, job_type, owner_service).set(1)


# --- serving --------------------------------------------------------------------------------


@dataclass
class MetricsEndpoint:
    """The driver's metrics endpoint and, with a service-discovery dir, its target file."""

    host: str
    port: int
    server: WSGIServer
    sd_file: Path | None = None

    def stop(self) -> None:
        """Stop serving and take the target file away. The registry keeps its series."""
        global _serving
        if self.sd_file is not None:
            self.sd_file.unlink(missing_ok=True)
        self.server.shutdown()
        self.server.server_close()
        with _lock:
            _serving -= 1


def start(
    env: Mapping[str, str],
    name: str,
    ui_port: int | None = None,
    labels: Mapping[str, str] | None = None,
) -> MetricsEndpoint | None:
    """Serve /metrics when `UATU_METRICS_PORT` is set; write the file_sd target if asked
    (`<UATU_METRICS_SD_DIR>/<name>.json`, its targets labelled `labels`, by default
    `job_group_id=<name>`: the application of one JobGroup)."""
    global _serving
    raw = env.get(ENV_PORT, "").strip()
    if not raw:
        return None
    if not raw.isdigit() or int(raw) > 65535:
        raise ConfigError(ENV_PORT, f"{raw!r} is not a port (0 picks a free one)")
    host = env.get("UATU_METRICS_HOST", "0.0.0.0")
    server, _thread = start_http_server(int(raw), addr=host, registry=REGISTRY)
    port = int(server.server_address[1])
    with _lock:
        _serving += 1
    advertised = socket.gethostname() if host == "0.0.0.0" else host
    endpoint = MetricsEndpoint(advertised, port, server)
    sd_dir = env.get(ENV_SD_DIR, "").strip()
    if sd_dir:
        target_labels = {"job_group_id": name} if labels is None else dict(labels)
        endpoint.sd_file = write_sd_file(
            Path(sd_dir), name, advertised, port, ui_port, target_labels
        )
    log.info("metrics on http://%s:%d/metrics", advertised, port)
    return endpoint


def sd_targets(
    labels: Mapping[str, str], host: str, port: int, ui_port: int | None
) -> list[dict[str, Any]]:
    """Prometheus file_sd target groups for one application (pure): its /metrics and, when
    there is a Spark UI, Spark's own servlet."""
    groups: list[dict[str, Any]] = [{"targets": [f"{host}:{port}"], "labels": dict(labels)}]
    if ui_port:
        groups.append(
            {
                "targets": [f"{host}:{ui_port}"],
                "labels": {**labels, "__metrics_path__": "/metrics/prometheus"},
            }
        )
    return groups


def write_sd_file(
    sd_dir: Path,
    name: str,
    host: str,
    port: int,
    ui_port: int | None,
    labels: Mapping[str, str],
) -> Path:
    sd_dir.mkdir(parents=True, exist_ok=True)
    target = sd_dir / f"{name}.json"
    partial = target.with_suffix(".json.partial")  # Prometheus reads *.json only
    partial.write_text(json.dumps(sd_targets(labels, host, port, ui_port)))
    partial.replace(target)
    return target


class QueryMetricsListener(JsonEventsListener):
    """`uatu_query_*` from each progress event of the named query."""

    def __init__(self, query_name: str) -> None:
        self.query_name = query_name

    def onQueryStarted(self, event: Any) -> None:
        pass

    def onQueryProgress(self, event: Any) -> None:
        progress = json.loads(event.progress.json)
        if progress.get("name") != self.query_name:
            return
        query_progress(self.query_name, progress)

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        pass


def query_progress(query: str, progress: Mapping[str, Any]) -> None:
    """Update `uatu_query_*` from one StreamingQueryProgress (as JSON)."""
    QUERY_BATCHES.labels(query).inc()
    QUERY_INPUT_ROWS.labels(query).inc(progress.get("numInputRows") or 0)
    QUERY_INPUT_RATE.labels(query).set(progress.get("inputRowsPerSecond") or 0.0)
    QUERY_PROCESS_RATE.labels(query).set(progress.get("processedRowsPerSecond") or 0.0)
    QUERY_BATCH_SECONDS.labels(query).set((progress.get("batchDuration") or 0) / 1000)
    stamp = progress.get("timestamp")
    if isinstance(stamp, str):
        when = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
        QUERY_LAST_PROGRESS.labels(query).set(when.timestamp())
    for source in progress.get("sources", []):
        end = source.get("endOffset")
        if isinstance(end, str) and end.startswith("{"):
            end = json.loads(end)
        if not isinstance(end, dict):
            continue
        for topic, partitions in end.items():
            if isinstance(partitions, dict):
                for partition, offset in partitions.items():
                    QUERY_END_OFFSET.labels(query, topic, str(partition)).set(offset)


def ui_port_of(url: str | None) -> int | None:
    port = (url or "").rpartition(":")[2]
    return int(port) if port.isdigit() else None


__all__ = [
    "ENV_PORT",
    "ENV_SD_DIR",
    "REGISTRY",
    "SESSION_CONF",
    "MetricsEndpoint",
    "QueryMetricsListener",
    "counter",
    "gauge",
    "histogram",
    "job_info",
    "query_progress",
    "sd_targets",
    "serving",
    "start",
    "ui_port_of",
]
