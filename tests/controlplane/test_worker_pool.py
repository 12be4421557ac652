"""The worker pool as operators run it: `serve --workers 1` keeps one worker application
(`spark-submit.sh worker`) that runs every JobGroup added through gRPC, each as its own
streaming query, with RUN, UPDATE and CANCEL travelling in its heartbeat replies.

One control plane and one worker application serve the whole test, so it pays for one
Spark start-up: an audit and a replication run side by side and are checked against the
records produced; bad input is FAILED at once, never relaunched, while its neighbours keep
committing; a flow-control update applies in place, one that removes the cap restarts that
query only; CANCELED stops one query; a
SIGKILLed worker is relaunched by the pool and its groups go on, with nothing lost or copied
twice. Durations are printed, never asserted (`make bench-fleet` measures them).
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from pathlib import Path

import grpc
import pytest
from google.protobuf import json_format
from uatu.v1.worker_job_pb2 import WorkerJob
from uber.data.kafka.datatransfer import job_pb2
from uber.data.kafka.datatransfer import master_admin_service_pb2 as admin_pb2
from uber.data.kafka.datatransfer import master_admin_service_pb2_grpc as admin_grpc
from uber.data.kafka.datatransfer.job_group_pb2 import JobGroup

from controlplane.state.sqlite import SqliteStore
from core.channel import open_channel
from core.processes import free_ports, pid_alive, signal_group
from testing.conf import write_conf_dir
from testing.demo_data import audit_dataset, produce
from testing.jobgroups import audit_group, replication_group
from testing.polling import wait_for
from testing.topic_data import read_partitions
from tests.controlplane.test_controlplane_e2e import control_plane_process, stop_applications


def audited_messages(warehouse: Path, group_id: str) -> int:
    """The audit's message count over every window, read with delta-rs (no Spark here)."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        table = DeltaTable(str(warehouse / "audit_counts"))
    except TableNotFoundError:  # not yet, or its first commit not yet written
        return 0
    rows = table.to_pyarrow_table(columns=["job_group_id", "message_count"]).to_pylist()
    return sum(r["message_count"] for r in rows if r["job_group_id"] == group_id)


def copied_exactly(bootstrap: str, source: str, destination: str, partitions: int) -> bool:
    """Each destination partition holds its source partition's records, once, in order."""
    want = read_partitions(bootstrap, source, partitions, timeout_s=10)
    got = read_partitions(bootstrap, destination, partitions, timeout_s=10)
    return all(
        [(r.key, r.value) for r in got[p]] == [(r.key, r.value) for r in want[p]]
        for p in range(partitions)
    )


def worker_run(group) -> WorkerJob | None:
    """The worker's account of the group's run, as GetJobGroup shows it."""
    for stored_job in group.jobs:
        carried = WorkerJob()
        if stored_job.job.HasField("extension") and stored_job.job.extension.Unpack(carried):
            return carried
    return None


@pytest.mark.integration
def test_one_worker_application_runs_many_groups_over_the_command_matrix(kafka, tmp_path):
    suffix = uuid.uuid4().hex[:8]
    source, copy, audited = f"pool-src-{suffix}", f"pool-dst-{suffix}", f"pool-aud-{suffix}"
    kafka.create_topic(source, partitions=2)
    kafka.create_topic(copy, partitions=2)
    kafka.create_topic(audited, partitions=2)
    now_ms = int(time.time() * 1000)
    sent = audit_dataset(200, 2, now_ms)
    produce(kafka.bootstrap_servers, audited, sent)
    produce(kafka.bootstrap_servers, source, audit_dataset(150, 2, now_ms, seed=3))
    warehouse = tmp_path / "wh"
    conf = write_conf_dir(tmp_path / "conf", kafka.bootstrap_servers, warehouse, tmp_path / "ck")
    address = f"127.0.0.1:{free_ports(1)[0]}"
    store = SqliteStore(tmp_path / "cp.sqlite")  # read-only view of what the control plane keeps
    options = ("--workers", "1", "--lease-seconds", "20")
    try:
        with (
            control_plane_process(
                address,
                str(tmp_path / "cp.sqlite"),
                conf,
                tmp_path / "apps",
                tmp_path / "controlplane.log",
                *options,
            ),  # fmt: skip
            open_channel(address) as channel,
        ):
            admin = admin_grpc.MasterAdminServiceStub(channel)

            def get(group_id: str):
                return admin.GetJobGroup(admin_pb2.GetJobGroupRequest(id=group_id)).group

            def add(group: JobGroup) -> None:
                admin.AddJobGroup(admin_pb2.AddJobGroupRequest(job_group=group))

            worker = wait_for(
                lambda: store.launches().get("~worker/0"), 30, "the pool's worker application"
            )
            started = time.monotonic()  # groups wait for the worker's first heartbeat
            add(audit_group("pool-audit", audited, audit_types=("AUDIT_TYPE_EXACT_UNIQ",),
                            from_earliest=True))  # fmt: skip
            add(replication_group("pool-copy", source, copy, rate=1000))
            # Bad input the control plane cannot see: the destination has fewer partitions.
            kafka.create_topic(f"pool-narrow-{suffix}", partitions=1)
            add(replication_group("pool-bad", source, f"pool-narrow-{suffix}"))

            # Bad input is FAILED at once, with its one line, and never relaunched.
            failed = wait_for(
                lambda: (g := get("pool-bad")).state == job_pb2.JOB_STATE_FAILED and g,
                240,
                "the group with a narrower destination to be FAILED",
            )
            run = worker_run(failed)
            assert run is not None and run.refused, failed
            assert f"pool-narrow-{suffix}" in run.last_error and "fewer" in run.last_error
            assert store.launches()["pool-bad"].failures == 0

            wait_for(
                lambda: audited_messages(warehouse, "pool-audit") == len(sent),
                240,
                "the audit to count every record",
            )
            print(f"AddJobGroup -> audit counted: {time.monotonic() - started:.1f} s")
            # The worker's heartbeats carry the group's committed offsets (summed over its
            # partitions, on its first job) from its query's progress.
            wait_for(
                lambda: get("pool-audit").jobs[0].job.kafka_consumer_task.start_offset == len(sent),
                60,
                "the audit's committed offsets in GetJobGroup",
            )
            wait_for(
                lambda: copied_exactly(kafka.bootstrap_servers, source, copy, 2),
                240,
                "the replication to copy every record",
            )
            # Every group ran in the one worker application.
            assert {store.launches()[g].worker_id for g in ("pool-audit", "pool-copy")} == {
                worker.worker_id
            }
            # It warmed its Delta writes and the dispatcher's clients before it registered
            # (jobs/runtime/warm_up.py).
            told = Path(worker.log).read_text().splitlines()
            warmed = [i for i, line in enumerate(told) if "uatu.warm_up: warmed up in" in line]
            clients = [
                i
                for i, line in enumerate(told)
                if "uatu.warm_up: warmed the job types' clients: DispatchJob " in line
            ]
            registered = [i for i, line in enumerate(told) if "uatu.heartbeat: registered" in line]
            assert warmed and clients and registered, told[:40]
            assert warmed[0] < clients[0] < registered[0], told[:40]

            # The neighbours of the failed group keep committing.
            more = audit_dataset(50, 2, int(time.time() * 1000), seed=11)
            produce(kafka.bootstrap_servers, audited, more)
            wait_for(
                lambda: audited_messages(warehouse, "pool-audit") == len(sent) + len(more),
                120,
                "the audit to count the new records",
            )

            # A flow-control update within the batches the copy plans applies in place: the
            # same Spark run of its query. Removing the cap restarts that query only, on the
            # same application.
            for rate, in_place in ((500, True), (0, False)):
                before = worker_run(get("pool-copy"))
                assert before is not None and before.query_run
                admin.UpdateJobGroup(
                    admin_pb2.UpdateJobGroupRequest(
                        job_group=replication_group("pool-copy", source, copy, rate=rate)
                    )
                )
                # The new definition, not the old one read before the reconciler recorded it.
                after = wait_for(
                    lambda old=before.definition: (
                        (r := worker_run(get("pool-copy"))) is not None
                        and r.definition != old
                        and r.definition == store.launches()["pool-copy"].definition
                        and r.query_run
                        and r
                    ),
                    120,
                    f"the worker to run the definition at {rate} msgs/s",
                )
                assert (after.query_run == before.query_run) is in_place, (before, after)
                assert after.run != before.run
            assert pid_alive(int(worker.detail("pid")))
            produce(kafka.bootstrap_servers, source, audit_dataset(40, 2, now_ms, seed=5))
            wait_for(
                lambda: copied_exactly(kafka.bootstrap_servers, source, copy, 2),
                120,
                "the updated replication to copy the new records",
            )

            # CANCELED stops one query; the application and its other query stay.
            admin.UpdateJobGroupState(
                admin_pb2.UpdateJobGroupStateRequest(
                    id="pool-audit", state=job_pb2.JOB_STATE_CANCELED
                )
            )
            canceled_at = time.monotonic()
            wait_for(
                lambda: {j.state for j in get("pool-audit").jobs} == {job_pb2.JOB_STATE_CANCELED},
                60,
                "the worker to report the audit query stopped",
            )
            print(f"CANCELED -> query stopped: {time.monotonic() - canceled_at:.1f} s")
            assert pid_alive(int(worker.detail("pid")))

            # SIGKILL the worker: the pool relaunches it and the copy goes on, exactly once.
            signal_group(int(worker.detail("pid")), signal.SIGKILL)
            produce(kafka.bootstrap_servers, source, audit_dataset(60, 2, now_ms, seed=9))
            relaunched = wait_for(
                lambda: (
                    (r := store.launches().get("~worker/0")) is not None
                    and r.detail("pid") != worker.detail("pid")
                    and r
                ),
                120,
                "the pool to relaunch its worker",
            )
            wait_for(
                lambda: copied_exactly(kafka.bootstrap_servers, source, copy, 2),
                240,
                "the copy to go on after the worker was killed",
            )
            assert store.launches()["pool-copy"].worker_id == relaunched.worker_id
            assert get("pool-bad").state == job_pb2.JOB_STATE_FAILED  # still not relaunched
            assert json_format.MessageToDict(get("pool-copy"))["state"] == "JOB_STATE_RUNNING"
    finally:
        stop_applications(store.launches())
        store.close()


@pytest.mark.integration
def test_workers_keep_running_their_groups_across_a_leader_failover(kafka, etcd, tmp_path):
    """Two control-plane replicas on one etcd with a pool of one worker: SIGKILL the leader;
    the other takes over, the worker application and its query keep running (the same
    process, the same run: nothing restarted), and the new leader places a new group on it."""
    from controlplane.state.etcd_store import EtcdStore

    topic = f"pool-ha-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(topic, partitions=2)
    sent = audit_dataset(120, 2, int(time.time() * 1000))
    produce(kafka.bootstrap_servers, topic, sent)
    warehouse = tmp_path / "wh"
    conf = write_conf_dir(tmp_path / "conf", kafka.bootstrap_servers, warehouse, tmp_path / "ck")
    first, second = (f"127.0.0.1:{port}" for port in free_ports(2))
    prefix = f"/pool-{uuid.uuid4().hex[:8]}"
    store = EtcdStore(etcd.endpoint, prefix)  # read-only view for the test
    common = (
        "--etcd-prefix", prefix, "--leader-ttl", "3", "--lease-seconds", "20",
        "--app-control-plane", f"{first},{second}", "--workers", "1",
    )  # fmt: skip

    def replica(address: str, name: str):
        return control_plane_process(
            address, etcd.endpoint, conf, tmp_path / "apps", tmp_path / f"{name}.log", *common
        )

    def leads(address: str) -> bool:
        with open_channel(address) as channel:
            stub = admin_grpc.MasterAdminServiceStub(channel)
            try:
                list(stub.GetAllJobGroups(admin_pb2.GetAllJobGroupsRequest(), timeout=2))
            except grpc.RpcError:
                return False
        return True

    try:
        with replica(first, "first") as leader_proc:
            wait_for(lambda: leads(first), 30, "the first replica to lead")
            with replica(second, "second"), open_channel(second) as to_second:
                with open_channel(first) as to_first:
                    admin_grpc.MasterAdminServiceStub(to_first).AddJobGroup(
                        admin_pb2.AddJobGroupRequest(
                            job_group=audit_group("ha-a", topic, from_earliest=True)
                        )
                    )
                wait_for(
                    lambda: audited_messages(warehouse, "ha-a") == len(sent),
                    240,
                    "the audit on the worker to count every record",
                )
                worker = store.launches()["~worker/0"]
                placed = store.launches()["ha-a"]

                os.killpg(leader_proc.pid, signal.SIGKILL)  # the worker runs in its own group
                wait_for(lambda: leads(second), 30, "the takeover")
                heard_at = time.time()
                wait_for(
                    lambda: (
                        (w := store.get_worker(worker.worker_id)) is not None
                        and w.last_updated.ToNanoseconds() / 1e9 > heard_at + 1
                    ),
                    60,
                    "the worker's heartbeats to reach the new leader",
                )
                admin = admin_grpc.MasterAdminServiceStub(to_second)
                admin.AddJobGroup(
                    admin_pb2.AddJobGroupRequest(
                        job_group=audit_group("ha-b", topic, from_earliest=True)
                    )
                )
                wait_for(
                    lambda: audited_messages(warehouse, "ha-b") == len(sent),
                    240,
                    "the new leader's group to run on the same worker",
                )
                more = audit_dataset(40, 2, int(time.time() * 1000), seed=21)
                produce(kafka.bootstrap_servers, topic, more)
                wait_for(
                    lambda: audited_messages(warehouse, "ha-a") == len(sent) + len(more),
                    120,
                    "the first group to keep counting",
                )
                # Nothing restarted: the same worker process, the same run of the first group.
                assert store.launches()["~worker/0"] == worker
                assert pid_alive(int(worker.detail("pid")))
                assert store.launches()["ha-a"] == placed
                run = worker_run(admin.GetJobGroup(admin_pb2.GetJobGroupRequest(id="ha-a")).group)
                assert run is not None and run.run == placed.details["run"]
                assert store.launches()["ha-b"].worker_id == worker.worker_id
    finally:
        stop_applications(store.launches())
        store.close()
