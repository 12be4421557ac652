"""A real Prometheus (Debian's) told only the control plane's address: it scrapes the control
plane, and finds through the control plane's `/sd` (`http_sd_configs`) the worker application
the control plane launched, and scrapes the audit that runs there. The series are checked
through Prometheus's own HTTP API, not by parsing /metrics ourselves, and so is every query
of the Grafana dashboard in conf/grafana/."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import pytest
from uber.data.kafka.datatransfer import master_admin_service_pb2 as admin_pb2
from uber.data.kafka.datatransfer import master_admin_service_pb2_grpc as admin_grpc

from controlplane.state.sqlite import SqliteStore
from core.channel import open_channel
from core.paths import ROOT
from core.processes import free_ports
from devservices.prometheus import DEFAULT_BINARY, install, start_prometheus
from testing.conf import write_conf_dir
from testing.demo_data import audit_dataset, produce
from testing.jobgroups import audit_group
from testing.polling import wait_for
from tests.controlplane.test_controlplane_e2e import control_plane_process, stop_applications

pytestmark = pytest.mark.integration


DASHBOARD = ROOT / "conf" / "grafana" / "uatu-overview.json"


def dashboard_queries(path: Path) -> list[tuple[str, str]]:
    """(panel title, PromQL) of every target of every panel of a Grafana dashboard."""
    panels = json.loads(path.read_text())["panels"]
    return [(p["title"], t["expr"]) for p in panels for t in p.get("targets", [])]


def value_of(prom, promql: str) -> float | None:
    """The single value of an instant query, None while Prometheus has no such series."""
    result = prom.query(promql)
    return float(result[0]["value"][1]) if result else None


def test_prometheus_finds_and_scrapes_the_jobs_the_control_plane_runs(
    kafka, tmp_path: Path, monkeypatch
) -> None:
    if not DEFAULT_BINARY.exists():
        install()
    topic = f"prom-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(topic, partitions=2)
    sent = audit_dataset(400, 2, int(time.time() * 1000))
    produce(kafka.bootstrap_servers, topic, sent)
    conf = write_conf_dir(
        tmp_path / "conf", kafka.bootstrap_servers, tmp_path / "wh", tmp_path / "ck"
    )
    grpc_port, metrics_port = free_ports(2)
    address = f"127.0.0.1:{grpc_port}"
    # The applications inherit it: their endpoints are named by this address, not the host's.
    monkeypatch.setenv("UATU_METRICS_HOST", "127.0.0.1")
    store = SqliteStore(tmp_path / "cp.sqlite")  # read-only view of what the control plane keeps
    scrape = [
        {"job_name": "controlplane", "static_configs": [
            {"targets": [f"127.0.0.1:{metrics_port}"]}]},
        {"job_name": "uatu-jobs", "http_sd_configs": [
            {"url": f"http://127.0.0.1:{metrics_port}/sd", "refresh_interval": "1s"}]},
    ]  # fmt: skip
    try:
        with (
            control_plane_process(
                address,
                str(tmp_path / "cp.sqlite"),
                conf,
                tmp_path / "apps",
                tmp_path / "controlplane.log",
                "--workers",
                "1",
                "--metrics-address",
                f"127.0.0.1:{metrics_port}",
            ),  # fmt: skip
            open_channel(address) as channel,
            start_prometheus(tmp_path / "prometheus", scrape) as prom,
        ):
            admin = admin_grpc.MasterAdminServiceStub(channel)
            admin.AddJobGroup(admin_pb2.AddJobGroupRequest(job_group=audit_group("prom", topic)))
            added = wait_for(
                lambda: value_of(
                    prom, 'grpc_server_handled_total{grpc_method="AddJobGroup",grpc_code="OK"}'
                ),
                60,
                "the control plane's gRPC counters in Prometheus",
            )
            assert added == 1

            # Every record the audit counted, as Prometheus scraped it from the worker it found.
            def audited() -> float | None:
                total = value_of(prom, 'sum(uatu_audit_messages_total{job="uatu-jobs"})')
                return total if total == len(sent) else None

            assert wait_for(audited, 300, "the worker's audit counters in Prometheus") == len(sent)
            # Found as the worker the control plane launched (its id, as heartbeats name it).
            worker = f'worker="{store.launches()["~worker/0"].worker_id}"'
            assert value_of(prom, f'max(up{{job="uatu-jobs", {worker}}})') == 1
            by_partition = {
                r["metric"]["partition"]: float(r["value"][1])
                for r in prom.query(f"uatu_audit_messages_total{{{worker}}}")
            }
            assert by_partition == {
                str(p): sum(1 for r in sent if r.partition == p) for p in range(2)
            }
            # Every query of the Grafana dashboard in the repo answers from these series.
            for title, expr in dashboard_queries(DASHBOARD):
                wait_for(lambda e=expr: prom.query(e), 60, f"dashboard panel {title!r}: {expr}")
    finally:
        stop_applications(store.launches())
        store.close()
