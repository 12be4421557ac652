"""A real Prometheus (Debian's) scrapes the control plane and a running audit job; the series
are checked through Prometheus's own HTTP API, not by parsing /metrics ourselves."""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from pathlib import Path

import grpc
import pytest
from google.protobuf import json_format
from prometheus_client import CollectorRegistry
from uber.data.kafka.datatransfer import master_admin_service_pb2 as admin_pb2
from uber.data.kafka.datatransfer import master_admin_service_pb2_grpc as admin_grpc

from controlplane.jobgroups import JobGroups
from controlplane.metrics import GrpcMetricsInterceptor, StateCollector, serve_metrics
from controlplane.server import create_server
from controlplane.state.leadership import SoleLeader
from controlplane.state.sqlite import SqliteStore
from controlplane.workers import Workers
from core import kafka_admin
from core.config import load_settings
from core.paths import ROOT
from core.processes import free_ports, signal_group
from devservices.prometheus import DEFAULT_BINARY, install, start_prometheus
from testing.conf import write_conf_dir
from testing.demo_data import audit_dataset, produce
from testing.jobgroups import audit_group
from testing.polling import wait_for

pytestmark = pytest.mark.integration


def value_of(prom, promql: str) -> float | None:
    """The single value of an instant query, None while Prometheus has no such series."""
    result = prom.query(promql)
    return float(result[0]["value"][1]) if result else None


def test_prometheus_scrapes_the_control_plane_and_a_running_job(kafka, tmp_path: Path) -> None:
    if not DEFAULT_BINARY.exists():
        install()
    topic = f"prom-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(topic, partitions=2)
    sent = audit_dataset(400, 2, int(time.time() * 1000))
    produce(kafka.bootstrap_servers, topic, sent)
    conf = write_conf_dir(
        tmp_path / "conf", kafka.bootstrap_servers, tmp_path / "wh", tmp_path / "ck"
    )

    store = SqliteStore(tmp_path / "cp.sqlite")
    leader = SoleLeader("127.0.0.1:0")
    groups = JobGroups(store, load_settings(conf), kafka_admin.partition_count)
    registry = CollectorRegistry()
    registry.register(StateCollector(store, leader))
    server, port, _ = create_server(
        "127.0.0.1:0",
        groups,
        Workers(store, leader),
        leader,
        interceptors=[GrpcMetricsInterceptor(registry)],
    )
    server.start()
    cp_metrics = serve_metrics("127.0.0.1:0", registry)
    job_metrics = free_ports(1, exclude=[cp_metrics])[0]

    group = audit_group("prom", topic)
    jobgroup_file = tmp_path / "prom.json"
    jobgroup_file.write_text(json_format.MessageToJson(group))
    env = {
        **{k: v for k, v in os.environ.items() if k not in ("UATU_WAREHOUSE", "UATU_CHECKPOINTS")},
        "UATU_CONF_DIR": str(conf),
        "UATU_METRICS_PORT": str(job_metrics),
        "UATU_STOP_FILE": str(tmp_path / "stop"),
    }
    job = None
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            admin = admin_grpc.MasterAdminServiceStub(channel)
            admin.AddJobGroup(admin_pb2.AddJobGroupRequest(job_group=group))
            with (tmp_path / "job.log").open("wb") as out:
                job = subprocess.Popen(
                    [str(ROOT / "spark-submit.sh"), str(jobgroup_file)],
                    env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                )  # fmt: skip
            scrape = [
                {"job_name": "controlplane", "static_configs": [
                    {"targets": [f"127.0.0.1:{cp_metrics}"]}]},
                {"job_name": "uatu-job", "static_configs": [
                    {"targets": [f"127.0.0.1:{job_metrics}"]}]},
            ]  # fmt: skip
            with start_prometheus(tmp_path / "prometheus", scrape) as prom:
                added = wait_for(
                    lambda: value_of(
                        prom,
                        'grpc_server_handled_total{grpc_method="AddJobGroup",grpc_code="OK"}',
                    ),
                    60,
                    "the control plane's gRPC counters in Prometheus",
                )
                assert added == 1
                running = 'uatu_controlplane_job_groups{state="JOB_STATE_RUNNING"}'
                assert wait_for(lambda: value_of(prom, running), 30, running) == 1

                # Every record the job audited, as Prometheus sees it from the job's driver.
                def audited() -> float | None:
                    assert job is not None and job.poll() is None, (
                        tmp_path / "job.log"
                    ).read_text()
                    total = value_of(prom, "sum(uatu_audit_messages_total)")
                    return total if total == len(sent) else None

                assert wait_for(audited, 240, "the job's counters in Prometheus") == len(sent)
                assert value_of(prom, 'up{job="uatu-job"}') == 1
                by_partition = {
                    r["metric"]["partition"]: float(r["value"][1])
                    for r in prom.query("uatu_audit_messages_total")
                }
                assert by_partition == {
                    str(p): sum(1 for r in sent if r.partition == p) for p in range(2)
                }
    finally:
        if job is not None:
            (tmp_path / "stop").touch()
            try:
                job.wait(timeout=60)
            except subprocess.TimeoutExpired:
                signal_group(job.pid, 9)
                job.wait()
        server.stop(None).wait()
        store.close()
