"""The control plane's /metrics: go-grpc-prometheus names from a real gRPC server, the state
gauges from the store, and the launcher counters (no broker: a fixed partition count)."""

from __future__ import annotations

import urllib.request
from pathlib import Path

import grpc
import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families
from uber.data.kafka.datatransfer import job_pb2
from uber.data.kafka.datatransfer import master_admin_service_pb2 as admin_pb2
from uber.data.kafka.datatransfer import master_admin_service_pb2_grpc as admin_grpc

from controlplane.jobgroups import JobGroups
from controlplane.launchers.base import LaunchRecord
from controlplane.metrics import (
    GrpcMetricsInterceptor,
    MeteredLauncher,
    StateCollector,
    serve_metrics,
)
from controlplane.server import create_server
from controlplane.state.leadership import SoleLeader
from controlplane.state.sqlite import SqliteStore
from controlplane.workers import Workers
from core.config import load_settings
from testing.conf import write_conf_dir
from testing.jobgroups import orders_audit


def scrape(port: int) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    found: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            found.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return found


@pytest.fixture
def plane(tmp_path: Path):
    conf = write_conf_dir(tmp_path / "conf", "127.0.0.1:9", tmp_path / "wh", tmp_path / "ck")
    store = SqliteStore(tmp_path / "cp.sqlite")
    leader = SoleLeader("127.0.0.1:0")
    groups = JobGroups(store, load_settings(conf), lambda _cluster, _topic, _field: 3)
    registry = CollectorRegistry()
    registry.register(StateCollector(store, leader))
    interceptor = GrpcMetricsInterceptor(registry)
    server, port, _ = create_server(
        "127.0.0.1:0", groups, Workers(store, leader), leader, interceptors=[interceptor]
    )
    server.start()
    metrics_port = serve_metrics("127.0.0.1:0", registry)
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield admin_grpc.MasterAdminServiceStub(channel), metrics_port, store, registry
    finally:
        channel.close()
        server.stop(None).wait()
        store.close()


def test_rpcs_are_counted_under_go_grpc_prometheus_names_with_their_codes(plane) -> None:
    stub, port, _, _ = plane
    group = orders_audit()
    stub.AddJobGroup(admin_pb2.AddJobGroupRequest(job_group=group))
    with pytest.raises(grpc.RpcError):
        stub.GetJobGroup(admin_pb2.GetJobGroupRequest(id="missing"))
    assert len(list(stub.GetAllJobGroups(admin_pb2.GetAllJobGroupsRequest()))) == 1

    found = scrape(port)
    service = "uber.data.kafka.datatransfer.MasterAdminService"

    def labels(method: str, kind: str = "unary", **more: str) -> tuple[tuple[str, str], ...]:
        return tuple(
            sorted(
                {"grpc_type": kind, "grpc_service": service, "grpc_method": method, **more}.items()
            )
        )

    handled = found["grpc_server_handled_total"]
    assert handled[labels("AddJobGroup", grpc_code="OK")] == 1
    assert handled[labels("GetJobGroup", grpc_code="NotFound")] == 1
    assert handled[labels("GetAllJobGroups", "server_stream", grpc_code="OK")] == 1
    assert found["grpc_server_started_total"][labels("GetJobGroup")] == 1
    assert found["grpc_server_handling_seconds_count"][labels("AddJobGroup")] == 1
    assert found["uatu_controlplane_job_groups"][(("state", "JOB_STATE_RUNNING"),)] == 1
    assert found["uatu_controlplane_is_leader"][()] == 1


class FakeLauncher:
    def __init__(self) -> None:
        self.cancelled: list[str] = []

    def observes(self, record: LaunchRecord) -> bool:
        return True

    def alive(self, record: LaunchRecord) -> bool:
        return True

    def launch(self, group, definition, env) -> LaunchRecord:
        return LaunchRecord(handle="42", definition=definition, started_at=1000.0, log="")

    def cancel(self, record: LaunchRecord) -> None:
        self.cancelled.append(record.handle)


def test_launches_relaunches_and_lease_expiries_are_counted(plane) -> None:
    _, port, store, registry = plane
    inner = FakeLauncher()
    clock = [1000.0]
    launcher = MeteredLauncher(
        inner, store, registry, lease_seconds=30, startup_seconds=60, clock=lambda: clock[0]
    )
    group = orders_audit()
    intent = LaunchRecord("", "d", 1000.0, "", worker_id=7, intent=True)
    store.put_launch("orders-audit", intent)
    first = launcher.launch(group, "d", {})
    store.put_launch("orders-audit", intent.replace(failures=1))
    launcher.launch(group, "d", {})
    launched = first.replace(worker_id=7)
    launcher.cancel(launched)  # no heartbeat yet, within the startup time: not an expiry
    clock[0] = 1000.0 + 61
    launcher.cancel(launched)  # no heartbeat within the startup time: the lease ran out
    found = scrape(port)
    assert found["uatu_controlplane_launches_total"][()] == 2
    assert found["uatu_controlplane_relaunches_total"][()] == 1
    assert found["uatu_controlplane_cancels_total"][()] == 2
    assert found["uatu_controlplane_lease_expiries_total"][()] == 1
    assert inner.cancelled == ["42", "42"]
    assert found["uatu_controlplane_applications"][(("phase", "intent"),)] == 1
    assert found["uatu_controlplane_application_failures"][(("job_group_id", "orders-audit"),)] == 1


def test_what_heartbeats_reported_is_a_gauge_per_group(plane) -> None:
    from google.protobuf.timestamp_pb2 import Timestamp
    from uber.data.kafka.datatransfer.job_status_pb2 import (
        JobStatus,
        KafkaConsumerTaskStatus,
        KafkaDispatcherTaskStatus,
        StoredJobStatus,
    )

    admin, port, store, _ = plane
    admin.AddJobGroup(admin_pb2.AddJobGroupRequest(job_group=orders_audit()))
    first, second = (j.job.job_id for j in store.get("orders-audit").group.jobs[:2])
    consumed = KafkaConsumerTaskStatus(messages_per_sec=40.0, cpu_usage=0.25)
    store.put_job_statuses(
        StoredJobStatus(
            last_updated=Timestamp(seconds=1),
            worker_id=7,
            job_status=JobStatus(
                job=job_pb2.Job(job_id=job_id),
                kafka_consumer_task_status=consumed,
                kafka_dispatcher_task_status=KafkaDispatcherTaskStatus(num_records_produced=9),
            ),
        )
        for job_id in (first, second)
    )
    found = scrape(port)
    label = (("job_group_id", "orders-audit"),)
    assert found["uatu_controlplane_group_cpu_cores"][label] == 0.5
    assert found["uatu_controlplane_group_messages_per_sec"][label] == 80.0
    assert found["uatu_controlplane_group_records_produced"][label] == 18
