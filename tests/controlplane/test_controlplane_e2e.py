"""The control plane as operators run it: `python -m controlplane serve` in its own process,
driven only through gRPC, launching real Spark applications against the real broker.

add -> the application starts and heartbeats -> GetJobGroup shows RUNNING with committed
offsets -> a flow-control update restarts it -> a frozen (SIGSTOP) application loses its
heartbeat lease and is relaunched -> CANCELED stops it -> delete. Durations (cancel, leader
takeover) are printed, not asserted; `make bench-controlplane` measures them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from uber.data.kafka.datatransfer import job_pb2
from uber.data.kafka.datatransfer import master_admin_service_pb2 as admin_pb2
from uber.data.kafka.datatransfer import master_admin_service_pb2_grpc as admin_grpc
from uber.data.kafka.datatransfer.job_group_pb2 import StoredJobGroup

from controlplane.launchers.base import LaunchRecord
from controlplane.state.base import Store
from controlplane.state.sqlite import SqliteStore
from core.channel import ClientSecurity, open_channel
from core.paths import ROOT
from core.processes import free_ports, pid_alive, signal_group, terminate
from testing.apps import spark_submit_groups
from testing.conf import write_conf_dir
from testing.demo_data import audit_dataset, produce
from testing.jobgroups import audit_group
from testing.polling import wait_for
from testing.tls import TestCA


@contextmanager
def control_plane_process(
    address: str,
    store: str,
    conf: Path,
    apps: Path,
    log: Path,
    *extra: str,
    security: ClientSecurity | None = None,
) -> Iterator[subprocess.Popen]:
    """`python -m controlplane serve`, healthy, in its own process group; SIGTERM at the end.

    `security` is how to reach it when `extra` turns on TLS (health needs no token)."""
    argv = [
        sys.executable, "-m", "controlplane", "serve", "--address", address,
        "--store", store, "--conf-dir", str(conf), "--apps-dir", str(apps),
        "--reconcile-seconds", "1", "--heartbeat-seconds", "1", *extra,
    ]  # fmt: skip
    with log.open("ab") as out:
        proc = subprocess.Popen(
            argv, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        with open_channel(address, security) as channel:
            health = health_pb2_grpc.HealthStub(channel)

            def serving() -> bool:
                assert proc.poll() is None, log.read_text()
                try:
                    reply = health.Check(health_pb2.HealthCheckRequest(), timeout=1)
                except grpc.RpcError:
                    return False
                return reply.status == health_pb2.HealthCheckResponse.SERVING

            wait_for(serving, 60, f"the control plane on {address}")
        yield proc
    finally:
        terminate(proc)


def resolved_launch(store: Store, job_group_id: str) -> LaunchRecord | None:
    """The group's launch record once the launcher has started it (not while an intent)."""
    record = store.launches().get(job_group_id)
    return None if record is None or record.intent else record


def stop_applications(launches: dict[str, LaunchRecord]) -> None:
    """The control plane leaves applications running on purpose; a test must not."""
    for record in launches.values():
        if "pid" in record.details:
            signal_group(int(record.detail("pid")), signal.SIGKILL)


@pytest.mark.integration
def test_operator_flow_over_grpc_with_heartbeats_and_lease(kafka, tmp_path):
    """Secured as an operator would run it: TLS, an admin token, applications that verify
    the control plane's certificate and prove themselves with their per-launch secret."""
    topic = f"e2e-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(topic, partitions=2)
    sent = audit_dataset(300, 2, int(time.time() * 1000))
    produce(kafka.bootstrap_servers, topic, sent)
    conf = write_conf_dir(
        tmp_path / "conf", kafka.bootstrap_servers, tmp_path / "wh", tmp_path / "ck"
    )
    address = f"127.0.0.1:{free_ports(1)[0]}"
    store_path = tmp_path / "cp.sqlite"
    store = SqliteStore(store_path)  # read-only view of what the control plane records
    cp_log = tmp_path / "controlplane.log"
    ca = TestCA.create(tmp_path / "pki")
    server = ca.issue("control-plane", hosts=("127.0.0.1",))
    token = "e2e-admin-" + uuid.uuid4().hex * 2
    auth = tmp_path / "auth.txt"
    auth.write_text(f"admin e2e token:{token}\n")
    auth.chmod(0o600)
    secured = (
        "--tls-cert", str(server.chain_pem), "--tls-key", str(server.key_pem),
        "--auth-token-file", str(auth), "--app-ca", str(ca.cert_pem),
    )  # fmt: skip
    try:
        with (
            control_plane_process(
                address,
                str(store_path),
                conf,
                tmp_path / "apps",
                cp_log,
                "--lease-seconds",
                "15",
                *secured,
                security=ClientSecurity(ca=ca.cert_pem),
            ),  # fmt: skip
            open_channel(address, ClientSecurity(ca=ca.cert_pem, token=token)) as channel,
        ):
            with open_channel(address, ClientSecurity(ca=ca.cert_pem)) as anonymous:
                stub = admin_grpc.MasterAdminServiceStub(anonymous)
                with pytest.raises(grpc.RpcError) as refused:
                    stub.AddJobGroup(
                        admin_pb2.AddJobGroupRequest(job_group=audit_group("x", topic))
                    )
                assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
            admin = admin_grpc.MasterAdminServiceStub(channel)
            admin.AddJobGroup(
                admin_pb2.AddJobGroupRequest(job_group=audit_group("e2e", topic, 100))
            )

            def get() -> StoredJobGroup:
                return admin.GetJobGroup(admin_pb2.GetJobGroupRequest(id="e2e")).group

            # Heartbeats carry per-partition committed offsets: all 300 records, by partition.
            def caught_up():
                group = get()
                offsets = [j.job.kafka_consumer_task.start_offset for j in group.jobs]
                return group if sum(offsets) == len(sent) else None

            group = wait_for(caught_up, 240, "heartbeats with the committed offsets")
            assert group.state == job_pb2.JOB_STATE_RUNNING
            per_partition = [sum(1 for r in sent if r.partition == p) for p in range(2)]
            assert [j.job.kafka_consumer_task.start_offset for j in group.jobs] == per_partition
            first = store.launches()["e2e"]
            assert {j.worker_id for j in group.jobs} == {first.worker_id}
            scale = admin.GetClusterScaleStatus(admin_pb2.GetClusterScaleStatusRequest())
            assert (scale.total_jobgroup_count, scale.total_worker_count) == (1, 1)

            # A flow-control change restarts the application on the same checkpoint.
            admin.UpdateJobGroup(
                admin_pb2.UpdateJobGroupRequest(job_group=audit_group("e2e", topic, 500))
            )
            second = wait_for(
                lambda: (
                    (r := resolved_launch(store, "e2e"))
                    and r.detail("pid") != first.detail("pid")
                    and r
                ),
                60,
                "the relaunch after the update",
            )
            assert not pid_alive(first.detail("pid"))
            wait_for(
                lambda: {j.worker_id for j in get().jobs} == {second.worker_id},
                240,
                "the first heartbeat of the updated application",
            )

            # Frozen: alive as a process but silent. The lease (15 s) expires -> relaunch.
            os.killpg(second.detail("pid"), signal.SIGSTOP)
            third = wait_for(
                lambda: (
                    (r := resolved_launch(store, "e2e"))
                    and r.detail("pid") != second.detail("pid")
                    and r
                ),
                120,
                "the relaunch after the lease expired",
            )
            assert third.failures == 1
            wait_for(
                lambda: not pid_alive(second.detail("pid")), 30, "the frozen application to go"
            )
            assert "no heartbeat within the lease" in cp_log.read_text()

            # CANCELED stops it within 15 seconds.
            admin.UpdateJobGroupState(
                admin_pb2.UpdateJobGroupStateRequest(id="e2e", state=job_pb2.JOB_STATE_CANCELED)
            )
            canceled_at = time.monotonic()
            wait_for(
                lambda: not pid_alive(third.detail("pid")), 60, "the canceled application to stop"
            )
            # A target of the control-plane bench, printed here and never asserted (noisy
            # machines).
            print(f"CANCELED -> stopped: {time.monotonic() - canceled_at:.1f} s")

            admin.DeleteJobGroup(admin_pb2.DeleteJobGroupRequest(id="e2e"))
            with pytest.raises(grpc.RpcError) as raised:
                get()
            assert raised.value.code() == grpc.StatusCode.NOT_FOUND
            wait_for(lambda: store.launches() == {}, 30, "the launch record to be dropped")
    finally:
        stop_applications(store.launches())
        store.close()


@pytest.mark.integration
def test_etcd_replicas_fail_over_without_launching_twice(kafka, etcd, tmp_path):
    """Two replicas on one etcd: one leads and launches; SIGKILL it and the other takes over
    within the leader lease, adopts the running application (no second launch), receives its
    heartbeats, restarts it on an update and stops it when told."""
    from controlplane.state.etcd_store import EtcdStore

    topic = f"ha-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(topic, partitions=2)
    produce(kafka.bootstrap_servers, topic, audit_dataset(100, 2, int(time.time() * 1000)))
    conf = write_conf_dir(
        tmp_path / "conf", kafka.bootstrap_servers, tmp_path / "wh", tmp_path / "ck"
    )
    first, second = (f"127.0.0.1:{port}" for port in free_ports(2))
    prefix = f"/e2e-{uuid.uuid4().hex[:8]}"
    store = EtcdStore(etcd.endpoint, prefix)  # read-only view for the test
    common = (
        "--etcd-prefix", prefix, "--leader-ttl", "3", "--lease-seconds", "30",
        "--app-control-plane", f"{first},{second}",
    )  # fmt: skip

    def replica(address: str, name: str):
        return control_plane_process(
            address, etcd.endpoint, conf, tmp_path / "apps", tmp_path / f"{name}.log", *common
        )

    def answers_as_leader(channel: grpc.Channel) -> bool:
        stub = admin_grpc.MasterAdminServiceStub(channel)
        try:
            list(stub.GetAllJobGroups(admin_pb2.GetAllJobGroupsRequest(), timeout=2))
        except grpc.RpcError as e:
            assert e.code() == grpc.StatusCode.FAILED_PRECONDITION, e.details()
            return False
        return True

    try:
        with (
            replica(first, "first") as leader_proc,
            grpc.insecure_channel(first) as to_first,
        ):
            wait_for(lambda: answers_as_leader(to_first), 30, "the first replica to lead")
            with (
                replica(second, "second"),
                grpc.insecure_channel(second) as to_second,
            ):
                follower = admin_grpc.MasterAdminServiceStub(to_second)
                with pytest.raises(grpc.RpcError) as raised:
                    follower.GetJobGroup(admin_pb2.GetJobGroupRequest(id="ha"))
                assert raised.value.code() == grpc.StatusCode.FAILED_PRECONDITION
                assert f"the leader is {first}" in raised.value.details()

                leader = admin_grpc.MasterAdminServiceStub(to_first)
                group = audit_group("ha", topic, rate=100)
                leader.AddJobGroup(admin_pb2.AddJobGroupRequest(job_group=group))
                launched = wait_for(lambda: resolved_launch(store, "ha"), 30, "the launch")
                wait_for(
                    lambda: store.get_worker(launched.worker_id) is not None,
                    240,
                    "the application's first heartbeat",
                )

                os.killpg(leader_proc.pid, signal.SIGKILL)  # apps run in their own groups
                killed_at = time.monotonic()
                wait_for(lambda: answers_as_leader(to_second), 30, "the takeover")
                # Measured, not asserted (noisy machines): typically lease + one poll.
                print(f"takeover after SIGKILL: {time.monotonic() - killed_at:.1f} s (lease 3 s)")

                # The new leader adopts the application: same launch, heartbeats reach it.
                heard_at = time.time()

                def heartbeats_reach_the_new_leader():
                    worker = store.get_worker(launched.worker_id)
                    return worker and worker.last_updated.ToNanoseconds() / 1e9 > heard_at + 2

                wait_for(heartbeats_reach_the_new_leader, 60, "heartbeats to the new leader")
                assert store.launches()["ha"] == launched  # never launched twice
                assert pid_alive(launched.detail("pid"))
                # What really runs: one spark-submit process group, one worker heartbeating.
                jobgroup_file = str(tmp_path / "apps" / "ha" / "jobgroup.json")
                assert spark_submit_groups(jobgroup_file) == {launched.detail("pid")}
                assert {
                    w.node.id
                    for w in store.workers()
                    if w.last_updated.ToNanoseconds() / 1e9 > heard_at
                } == {launched.worker_id}

                def statuses_from_the_adopted_worker():
                    shown = follower.GetJobGroup(admin_pb2.GetJobGroupRequest(id="ha")).group
                    return {j.worker_id for j in shown.jobs} == {launched.worker_id}

                wait_for(statuses_from_the_adopted_worker, 240, "per-partition statuses")
                assert store.launches()["ha"] == launched

                # The new leader updates (a compare-and-swap on etcd) and relaunches.
                follower.UpdateJobGroup(
                    admin_pb2.UpdateJobGroupRequest(job_group=audit_group("ha", topic, rate=300))
                )
                updated = wait_for(
                    lambda: (
                        (r := resolved_launch(store, "ha"))
                        and r.detail("pid") != launched.detail("pid")
                        and r
                    ),
                    60,
                    "the relaunch after the update",
                )
                assert not pid_alive(launched.detail("pid"))

                follower.UpdateJobGroupState(
                    admin_pb2.UpdateJobGroupStateRequest(id="ha", state=job_pb2.JOB_STATE_CANCELED)
                )
                wait_for(
                    lambda: not pid_alive(updated.detail("pid")), 30, "the application to stop"
                )
                follower.DeleteJobGroup(admin_pb2.DeleteJobGroupRequest(id="ha"))
    finally:
        stop_applications(store.launches())
        store.close()
