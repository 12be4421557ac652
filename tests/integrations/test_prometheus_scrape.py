"""A real Prometheus (Debian's) told only the control plane's address: it scrapes the control
plane, and finds through the control plane's `/sd` (`http_sd_configs`) the worker application
the control plane launched, and scrapes the jobs that run there: an audit, a replication, a
tiers audit of that replication, a dispatcher (to a real gRPC service) and an availability
job, whose lag series include the dispatcher's consumer group (no lag once it committed
everything) and a reader that committed nothing (every record). The series are checked
through Prometheus's own HTTP API, not by parsing /metrics ourselves, against what was sent,
and so is every query of the Grafana dashboard in conf/grafana/."""

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
from testing.dispatch_service import ScriptedService
from testing.jobgroups import audit_group, minimal_group, parse
from testing.polling import wait_for
from testing.topic_data import commit_offsets
from tests.controlplane.test_controlplane_e2e import control_plane_process, stop_applications

pytestmark = pytest.mark.integration


DASHBOARD = ROOT / "conf" / "grafana" / "uatu-overview.json"


def dashboard_queries(path: Path) -> list[tuple[str, str]]:
    """(panel title, PromQL) of every target of every panel of a Grafana dashboard."""
    panels = json.loads(path.read_text())["panels"]
    return [(p["title"], t["expr"]) for p in panels for t in p.get("targets", [])]


TRIGGER = {"@type": "type.googleapis.com/uatu.v1.JobOptions", "trigger": {"intervalSeconds": 1}}
EARLIEST = {"autoOffsetResetPolicy": "AUTO_OFFSET_RESET_POLICY_EARLIEST"}


def more_groups(topic: str, sink: str) -> list[dict]:
    """A replication of `topic`, a tiers audit of that replication (`<topic>-tiers`), a
    dispatcher of it to `sink` (consumer group `<topic>-dispatch`), and an availability job
    probing the cluster and its groups' lag."""
    replication = minimal_group(
        "replication", f"{topic}-copy",
        kafkaConsumerTaskGroup={"topic": topic, **EARLIEST},
        kafkaDispatcherTaskGroup={"topic": f"{topic}-copy"},
    )  # fmt: skip
    check = {
        "source": [{"cluster": "local", "topic": topic}],
        "destination": [{"cluster": "local", "topic": f"{topic}-copy"}],
    }
    tiers = minimal_group(
        "tier-audit", f"{topic}-tiers",
        kafkaConsumerTaskGroup={"topic": topic, "auditMetadata": {"auditConfigs": [
            {"auditType": "AUDIT_TYPE_REPLICATION", "auditIntervalInSeconds": 60,
             "replicationAuditConfig": {"replicationChecks": [check]}}]}},
    )  # fmt: skip
    dispatch = minimal_group(
        "dispatch", f"{topic}-dispatch",
        kafkaConsumerTaskGroup={"topic": topic, "consumerGroup": f"{topic}-dispatch", **EARLIEST},
        rpcDispatcherTaskGroup={"uri": f"dns:///{sink}", "rpcTimeoutMs": 4000},
    )  # fmt: skip
    availability = minimal_group(
        "availability", f"{topic}-probe", kafkaConsumerTaskGroup={"topic": f"{topic}-probe"}
    )
    groups = [replication, tiers, dispatch, availability]
    for group in groups:
        group["extension"] = dict(TRIGGER)
    availability["extension"]["availability"] = {"probeWindowSeconds": 2}
    return groups


def value_of(prom, promql: str) -> float | None:
    """The single value of an instant query, None while Prometheus has no such series."""
    result = prom.query(promql)
    return float(result[0]["value"][1]) if result else None


def test_prometheus_finds_and_scrapes_the_jobs_the_control_plane_runs(
    kafka, tmp_path: Path
) -> None:
    if not DEFAULT_BINARY.exists():
        install()
    topic = f"prom-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(topic, partitions=2)
    kafka.create_topic(f"{topic}-copy", partitions=2)
    sent = audit_dataset(400, 2, int(time.time() * 1000))
    produce(kafka.bootstrap_servers, topic, sent)
    # A reader that committed nothing past offset 0: its lag is every record.
    commit_offsets(kafka.bootstrap_servers, f"{topic}-reader", topic, {0: 0, 1: 0})
    conf = write_conf_dir(
        tmp_path / "conf", kafka.bootstrap_servers, tmp_path / "wh", tmp_path / "ck"
    )
    grpc_port, metrics_port = free_ports(2)
    address = f"127.0.0.1:{grpc_port}"
    service = ScriptedService().start()
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
            for group in more_groups(topic, service.address):
                admin.AddJobGroup(admin_pb2.AddJobGroupRequest(job_group=parse(group)))
            added = 'grpc_server_handled_total{grpc_method="AddJobGroup",grpc_code="OK"}'
            wait_for(
                lambda: value_of(prom, added) == 5,
                60,
                "the control plane's gRPC counters in Prometheus",
            )

            # Every record the audit counted, as Prometheus scraped it from the worker it found.
            def audited() -> float | None:
                total = value_of(prom, 'sum(uatu_audit_messages_total{job="uatu-jobs"})')
                return total if total == len(sent) else None

            assert wait_for(audited, 300, "the worker's audit counters in Prometheus") == len(sent)
            # Found as the worker the control plane launched (its id, as heartbeats name it), at
            # the interface of --metrics-address.
            worker = f'worker="{store.launches()["~worker/0"].worker_id}"'
            here = 'instance=~"127\\\\.0\\\\.0\\\\.1:.+"'
            assert value_of(prom, f'max(up{{job="uatu-jobs", {worker}, {here}}})') == 1
            by_partition = {
                r["metric"]["partition"]: float(r["value"][1])
                for r in prom.query(f"uatu_audit_messages_total{{{worker}}}")
            }
            assert by_partition == {
                str(p): sum(1 for r in sent if r.partition == p) for p in range(2)
            }
            # Every record copied once and dispatched (committed) once, as scraped; the
            # dispatcher's group then has no lag in the availability job's Burrow series.
            for what, promql in (
                ("copied", "sum(uatu_replication_records_total)"),
                ("dispatched", 'sum(uatu_dispatch_messages_total{code="commit"})'),
            ):
                wait_for(lambda q=promql: value_of(prom, q) == len(sent), 300, f"all {what}")
            for group, expected in ((f"{topic}-dispatch", 0), (f"{topic}-reader", len(sent))):
                lag = f'burrow_kafka_consumer_lag_total{{consumer_group="{group}"}}'
                wait_for(lambda q=lag, n=expected: value_of(prom, q) == n, 120, f"{group} lag")
            # The tiers audit's verdicts on that exact copy: no loss and no duplicate, so the
            # newest window is OK (0) or not decided yet (INCOMPLETE, 3), never LOSS (1) or
            # DUPLICATION (2), and it lost no record.
            check = f'{{job_group_id="{topic}-tiers", check_type="AUDIT_TYPE_REPLICATION"}}'
            # Poll for the series, not its value: OK is 0, which is falsy.
            newest = wait_for(
                lambda: prom.query(f"max(uatu_audit_check_verdict{check})"),
                180,
                "the tiers audit's verdict in Prometheus",
            )
            assert float(newest[0]["value"][1]) in (0, 3)
            assert value_of(prom, f"max(uatu_audit_check_lost_records{check})") == 0
            assert value_of(prom, f"max(uatu_audit_check_duplicated_records{check})") == 0
            # Every query of the Grafana dashboard in the repo answers from these series.
            for title, expr in dashboard_queries(DASHBOARD):
                wait_for(lambda e=expr: prom.query(e), 60, f"dashboard panel {title!r}: {expr}")
    finally:
        stop_applications(store.launches())
        store.close()
        service.stop()
