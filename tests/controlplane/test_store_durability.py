"""The SQLite store never acknowledges a write it did not commit (issue 20).

Before: a "database is locked" (an operator's sqlite3 shell, a backup, a second control
plane) inside `BEGIN ... COMMIT` left the connection in an open transaction; every later write
"succeeded" in it and vanished with the process, so an acknowledged CANCEL was undone by a
crash. Here another connection holds the lock, the write fails cleanly, later writes are
acknowledged, the control plane is SIGKILLed, and the file is reopened.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from pathlib import Path

import grpc
import pytest
from uber.data.kafka.datatransfer import job_pb2
from uber.data.kafka.datatransfer import master_admin_service_pb2 as admin_pb2
from uber.data.kafka.datatransfer import master_admin_service_pb2_grpc as admin_grpc
from uber.data.kafka.datatransfer import master_worker_service_pb2 as mw_pb2
from uber.data.kafka.datatransfer import master_worker_service_pb2_grpc as mw_grpc
from uber.data.kafka.datatransfer.job_group_pb2 import StoredJobGroup
from uber.data.kafka.datatransfer.job_status_pb2 import JobStatus, StoredJobStatus
from uber.data.kafka.datatransfer.worker_pb2 import Node

from controlplane.errors import StoreUnavailable
from controlplane.state.sqlite import SqliteStore, StoreLocked
from core.paths import ROOT
from core.processes import free_ports
from testing.conf import write_conf_dir
from testing.jobgroups import audit_group
from tests.controlplane.test_controlplane_e2e import control_plane_process


def group(job_group_id: str, cluster: str = "a") -> StoredJobGroup:
    stored = StoredJobGroup()
    stored.job_group.job_group_id = job_group_id
    stored.job_group.kafka_consumer_task_group.cluster = cluster
    return stored


def committed_version(path: Path, job_group_id: str) -> int | None:
    """What a fresh connection sees: only committed data."""
    with sqlite3.connect(path) as fresh:
        row = fresh.execute("SELECT version FROM job_groups WHERE id = ?", (job_group_id,))
        found = row.fetchone()
    return None if found is None else int(found[0])


def test_a_write_that_meets_a_lock_rolls_back_and_later_writes_commit(tmp_path: Path) -> None:
    path = tmp_path / "cp.sqlite"
    store = SqliteStore(path, busy_seconds=0.3)
    store.create(group("g"))
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    status = StoredJobStatus(worker_id=1)
    status.job_status.job.job_id = 1
    for write in (
        lambda: store.put_job_statuses([status]),
        lambda: store.next_ids("job", 1),
        lambda: store.replace(group("g", "b"), 1),
    ):
        with pytest.raises(StoreUnavailable, match="database is locked"):
            write()
    holder.execute("ROLLBACK")

    assert store.replace(group("g", "c"), 1) == 2  # acknowledged ...
    assert committed_version(path, "g") == 2  # ... and committed, seen from outside
    store.put_job_statuses([status])
    store.close()
    holder.close()


def test_a_second_control_plane_on_the_same_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "cp.sqlite"
    first = SqliteStore(path, exclusive=True)
    with pytest.raises(StoreLocked, match=f"another control plane \\(pid {os.getpid()}\\)"):
        SqliteStore(path, exclusive=True)
    reader = SqliteStore(path)  # a read-only view (tests, tools) takes no lock
    reader.close()
    first.close()
    SqliteStore(path, exclusive=True).close()  # the lock goes with its holder


@pytest.mark.parametrize("link", [os.symlink, os.link], ids=["symlink", "hard-link"])
def test_the_lock_belongs_to_the_file_not_to_its_name(tmp_path: Path, link) -> None:
    """A symlink or a hard link is another name for the same file: a second control plane
    given that name is refused too (the lock used to sit beside the name, as <name>.lock)."""
    path = tmp_path / "cp.sqlite"
    first = SqliteStore(path, exclusive=True)
    (tmp_path / "elsewhere").mkdir()
    alias = tmp_path / "elsewhere" / "alias.sqlite"
    link(path, alias)
    with pytest.raises(StoreLocked, match=f"another control plane \\(pid {os.getpid()}\\)"):
        SqliteStore(alias, exclusive=True)
    first.close()
    SqliteStore(alias, exclusive=True).close()


@pytest.mark.integration
@pytest.mark.parametrize("link", [os.symlink, os.link], ids=["symlink", "hard-link"])
def test_a_second_serve_through_a_link_is_refused_in_one_line(tmp_path: Path, link) -> None:
    """Two real `serve` processes, the second given a symlink or a hard link of the first's
    database in another folder: the second exits 2 with one line naming the first's pid."""
    conf = write_conf_dir(tmp_path / "conf", "127.0.0.1:9", tmp_path / "wh", tmp_path / "ck")
    store_path = tmp_path / "db" / "cp.sqlite"
    address, second = (f"127.0.0.1:{port}" for port in free_ports(2))
    with control_plane_process(
        address, str(store_path), conf, tmp_path / "apps", tmp_path / "cp.log", "--no-reconcile"
    ) as proc:
        alias = tmp_path / "elsewhere" / "alias.sqlite"
        alias.parent.mkdir()
        link(store_path, alias)
        rival = subprocess.run(
            [sys.executable, "-m", "controlplane", "serve", "--address", second,
             "--store", str(alias), "--conf-dir", str(conf), "--no-reconcile"],
            cwd=ROOT, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert rival.returncode == 2, rival.stderr[-2000:]
        lines = rival.stderr.strip().splitlines()
        assert len(lines) == 1, rival.stderr[-2000:]
        assert f"another control plane (pid {proc.pid})" in lines[0]
        assert str(alias) in lines[0]


@pytest.mark.integration
def test_acknowledged_writes_survive_a_lock_collision_and_a_crash(kafka, tmp_path: Path) -> None:
    topic = f"durable-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(topic, partitions=2)
    conf = write_conf_dir(
        tmp_path / "conf", kafka.bootstrap_servers, tmp_path / "wh", tmp_path / "ck"
    )
    store_path = tmp_path / "cp.sqlite"
    address, second = (f"127.0.0.1:{port}" for port in free_ports(2))
    log = tmp_path / "cp.log"
    with control_plane_process(
        address, str(store_path), conf, tmp_path / "apps", log, "--no-reconcile"
    ) as proc:
        with grpc.insecure_channel(address) as channel:
            admin = admin_grpc.MasterAdminServiceStub(channel)
            workers = mw_grpc.MasterWorkerServiceStub(channel)
            admin.AddJobGroup(admin_pb2.AddJobGroupRequest(job_group=audit_group("g", topic)))
            # A launched application of g (its launch record, as the reconciler writes it).
            secret = "s" * 43
            record = {
                "handle": "1", "definition": "d", "started_at": time.time(), "log": "",
                "details": {}, "worker_id": 4242, "failures": 0, "gave_up": False,
                "intent": False, "cancel_requested": False,
                "worker_secret_sha256": hashlib.sha256(secret.encode()).hexdigest(),
            }  # fmt: skip
            with sqlite3.connect(store_path) as seed:
                seed.execute(
                    "INSERT INTO launches (id, record) VALUES (?, ?)", ("g", json.dumps(record))
                )
            metadata = (("uatu-worker-secret", secret),)
            worker = mw_pb2.Participants(worker=Node(id=4242, host="driver"))
            workers.RegisterWorker(
                mw_pb2.RegisterWorkerRequest(participants=worker), metadata=metadata
            )
            status = JobStatus(job=job_pb2.Job(type=job_pb2.JOB_TYPE_KAFKA_AUDIT))
            status.job.kafka_consumer_task.partition = 0
            status.kafka_consumer_task_status.commit_offset = 7
            heartbeat = mw_pb2.HeartbeatRequest(participants=worker, job_status=[status])
            workers.Heartbeat(heartbeat, metadata=metadata)

            # An operator's sqlite3 shell holds the write lock past the busy timeout (5 s).
            holder = sqlite3.connect(store_path, isolation_level=None)
            holder.execute("BEGIN EXCLUSIVE")
            with pytest.raises(grpc.RpcError):
                workers.Heartbeat(heartbeat, metadata=metadata, timeout=30)
            holder.execute("ROLLBACK")
            holder.close()

            # Writes after the collision; each one the control plane acknowledges must last.
            writes = {
                "cancel g": lambda: admin.UpdateJobGroupState(
                    admin_pb2.UpdateJobGroupStateRequest(id="g", state=job_pb2.JOB_STATE_CANCELED)
                ),
                "add h": lambda: admin.AddJobGroup(
                    admin_pb2.AddJobGroupRequest(job_group=audit_group("h", topic))
                ),
            }
            acknowledged = []
            for name, write in writes.items():
                try:
                    write()
                    acknowledged.append(name)
                except grpc.RpcError as e:
                    print(f"{name}: {e.code().name} {e.details()}")

        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)

    reopened = SqliteStore(store_path)
    try:
        found = reopened.get("g")
        if "cancel g" in acknowledged:
            assert found is not None and found.group.state == job_pb2.JOB_STATE_CANCELED, (
                "an acknowledged CANCEL was lost in the crash"
            )
        if "add h" in acknowledged:
            assert reopened.get("h") is not None, "an acknowledged AddJobGroup was lost"
    finally:
        reopened.close()
    assert acknowledged == list(writes)  # and the store recovered: both were acknowledged

    # A second control plane on the same file is refused at start, in one line.
    with control_plane_process(
        address, str(store_path), conf, tmp_path / "apps", log, "--no-reconcile"
    ):
        rival = subprocess.run(
            [sys.executable, "-m", "controlplane", "serve", "--address", second,
             "--store", str(store_path), "--conf-dir", str(conf), "--no-reconcile"],
            cwd=ROOT, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert rival.returncode == 2, rival.stderr[-2000:]
        assert "another control plane" in rival.stderr.strip().splitlines()[-1]
