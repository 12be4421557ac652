"""No double launch across a leader change: the fault lands between the steps of a launch.

The reconciler places a point of the fault hook (core/faults.py) after each step of a
launch: `controlplane.launch_intent_recorded`, `.app_launched`, `.launch_recorded`. Two
replicas share one store; the first fails at a step (`fail-first-attempt`: a replica that
dies there, as far as the store and the application are concerned), or pauses there while
the test deposes it. Whatever happens, exactly one application runs per JobGroup, exactly
one worker heartbeats for it, and nothing is left behind. Real Spark applications, a real
broker, real SQLite files and a real etcd.
"""

from __future__ import annotations

import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from uber.data.kafka.datatransfer import job_pb2

from controlplane.errors import NotLeader
from controlplane.jobgroups import JobGroups
from controlplane.launchers.base import LaunchRecord
from controlplane.launchers.local import LocalLauncher
from controlplane.reconcile import Action
from controlplane.reconciler import Reconciler
from controlplane.server import create_server
from controlplane.state.base import Store
from controlplane.state.sqlite import SqliteStore
from controlplane.workers import Workers
from core import faults, kafka_admin
from core.config import load_settings
from core.processes import group_pids, signal_group
from testing.apps import spark_submit_groups
from testing.conf import write_conf_dir
from testing.demo_data import audit_dataset, produce
from testing.jobgroups import audit_group
from testing.polling import wait_for

pytestmark = pytest.mark.integration

RUNNING = job_pb2.JOB_STATE_RUNNING
# Long enough for the test to depose the paused replica (a flag flip; an etcd election, which
# waits out a 2 s lease); the replica then resumes and finds itself deposed.
PAUSE = f"{faults.PAUSE}=2000"
ETCD_PAUSE = f"{faults.PAUSE}=20000"


class Seat:
    """Who leads, for replicas that share a store in one test process."""

    def __init__(self, holder: str) -> None:
        self.holder = holder

    def view(self, name: str) -> Leadership:
        return Leadership(self, name)


class Leadership:
    def __init__(self, seat: Seat, name: str) -> None:
        self.seat, self.name = seat, name

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def is_leader(self) -> bool:
        return self.seat.holder == self.name

    def leader(self) -> str | None:
        return self.seat.holder


@contextmanager
def fault(point: str, action: str = faults.FAIL_FIRST_ATTEMPT) -> Iterator[None]:
    """UATU_FAULT set to `point:action` in this process (the local launcher does not pass it
    on to the applications it starts)."""
    faults.reset()
    with pytest.MonkeyPatch.context() as env:
        env.setenv(faults.ENV, f"{point}:{action}")
        try:
            yield
        finally:
            faults.reset()


def while_paused(reconcile: Callable[[], dict], reached: Callable[[], bool], then) -> dict:
    """Run `reconcile` in a thread that pauses at its fault point; once `reached()` says the
    step before the point is done, run `then()` during the pause; return its result."""
    result: dict = {}
    thread = threading.Thread(target=lambda: result.update(reconcile()), daemon=True)
    thread.start()
    wait_for(reached, 60, "the replica to reach its fault point")
    then()
    thread.join(timeout=120)
    assert not thread.is_alive()
    return result


@contextmanager
def worker_service(store: Store, leadership: Leadership) -> Iterator[str]:
    """The MasterWorkerService the applications heartbeat to (the given replica's)."""
    groups = JobGroups(store, load_settings(None), lambda *_: 1)
    server, port, _ = create_server("127.0.0.1:0", groups, Workers(store, leadership), leadership)
    server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        server.stop(grace=None)


def setup_group(kafka, tmp_path: Path) -> tuple[Path, str]:
    topic = f"fo-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(topic, partitions=2)
    produce(kafka.bootstrap_servers, topic, audit_dataset(100, 2, int(time.time() * 1000)))
    conf = write_conf_dir(
        tmp_path / "conf", kafka.bootstrap_servers, tmp_path / "wh", tmp_path / "ck"
    )
    return conf, topic


def reconciler(store: Store, apps: Path, conf: Path, address: str, **kwargs) -> Reconciler:
    launcher = LocalLauncher(apps, conf_dir=conf, grace_seconds=5, host=kwargs.pop("host", None))
    env = {"UATU_CONTROL_PLANE": address, "UATU_HEARTBEAT_SECONDS": "1"}
    return Reconciler(store, launcher, backoff_seconds=0, app_env=env, **kwargs)


def heard_workers(store: Store, since: float) -> set[int]:
    return {
        w.node.id
        for w in store.workers()
        if w.state and w.last_updated.ToNanoseconds() / 1e9 > since
    }


def one_application(store: Store, group_id: str, marker: str, since: float) -> LaunchRecord:
    """Wait until one resolved launch runs and heartbeats; check nothing else does."""

    def settled() -> LaunchRecord | None:
        record = store.launches().get(group_id)
        if record is None or record.intent:
            return None
        return record if heard_workers(store, since) == {record.worker_id} else None

    record = wait_for(settled, 240, "one application heartbeating")
    assert spark_submit_groups(marker) == {int(record.detail("pid"))}
    assert heard_workers(store, time.time() - 3) <= {record.worker_id}
    return record


def quiet_for(store: Store, intent: LaunchRecord, seconds: float) -> bool:
    """No heartbeat and no launch for `seconds`: a deposed replica's application may have
    registered and heartbeated before it was cancelled (it starts in a few seconds); the next
    leader then waits out the lease after that heartbeat instead of the startup window."""
    beats = [w.last_updated.ToNanoseconds() / 1e9 for w in store.workers()]
    return time.time() - max([intent.started_at, *beats]) > seconds


def stop_all(marker: str) -> None:
    for pgid in spark_submit_groups(marker):
        signal_group(pgid, signal.SIGKILL)


def sqlite_replicas(tmp_path: Path) -> tuple[Seat, SqliteStore, SqliteStore]:
    """Replicas a and b over one SQLite file; a holds the leader seat."""
    seat = Seat("a")
    db = tmp_path / "cp.sqlite"
    return seat, SqliteStore(db, seat.view("a")), SqliteStore(db, seat.view("b"))


def test_deposed_between_launch_and_record_cancels_its_launch_sqlite(kafka, tmp_path, monkeypatch):
    conf, topic = setup_group(kafka, tmp_path)
    monkeypatch.delenv("UATU_WAREHOUSE", raising=False)
    seat, store_a, store_b = sqlite_replicas(tmp_path)
    marker = str(tmp_path)
    try:
        with worker_service(store_b, seat.view("b")) as address:
            JobGroups(store_a, load_settings(conf), kafka_admin.partition_count).add(
                audit_group("fo", topic), RUNNING, None
            )
            replica_a = reconciler(store_a, tmp_path / "apps-a", conf, address)
            # Deposed during the pause after its launch: the fenced record write fails; the
            # per-group error is logged, not raised.
            with fault("controlplane.app_launched", PAUSE):
                result = while_paused(
                    replica_a.reconcile_once,
                    lambda: bool(spark_submit_groups(str(tmp_path / "apps-a"))),
                    lambda: setattr(seat, "holder", "b"),
                )
            assert result == {"fo": Action.NONE}
            intent = store_b.get_launch("fo")
            assert intent is not None and intent.intent and intent.handle == ""
            # A cancelled the application it started: no process of it is left.
            wait_for(lambda: not spark_submit_groups(str(tmp_path / "apps-a")), 30, "A's app")

            replica_b = reconciler(
                store_b, tmp_path / "apps-b", conf, address, startup_seconds=5, lease_seconds=5
            )
            wait_for(lambda: quiet_for(store_b, intent, 5), 20, "the startup window and lease")
            relaunched = time.time()
            assert replica_b.reconcile_once() == {"fo": Action.RUN}
            record = one_application(store_b, "fo", marker, relaunched)
            assert record.worker_id != intent.worker_id
            assert replica_b.reconcile_once() == {"fo": Action.NONE}
    finally:
        stop_all(marker)
        store_a.close()
        store_b.close()


def test_crash_after_launch_is_adopted_by_heartbeats_and_stopped_through_them(
    kafka, tmp_path, monkeypatch
):
    """A dies between launch and record; B, on another host (its launcher cannot see A's
    pid), adopts the application through its heartbeats. An update must restart it: B asks it
    to stop with CANCEL replies (the driver stops itself; nobody signals it), and relaunches
    it once its heartbeats have lapsed."""
    conf, topic = setup_group(kafka, tmp_path)
    monkeypatch.delenv("UATU_WAREHOUSE", raising=False)
    seat, store_a, store_b = sqlite_replicas(tmp_path)
    groups = JobGroups(store_b, load_settings(conf), kafka_admin.partition_count)
    marker = str(tmp_path)
    try:
        with worker_service(store_b, seat.view("b")) as address:
            groups.add(audit_group("fo", topic), RUNNING, None)

            replica_a = reconciler(store_a, tmp_path / "apps-a", conf, address)
            started = time.time()
            with fault("controlplane.app_launched"):
                replica_a.reconcile_once()  # A dies there: it is never asked again
            seat.holder = "b"
            replica_b = reconciler(
                store_b, tmp_path / "apps-b", conf, address, host="another-host",
                lease_seconds=6, startup_seconds=240,
            )  # fmt: skip
            intent = store_b.get_launch("fo")
            assert intent is not None and intent.intent

            def adopted() -> bool:
                assert replica_b.reconcile_once() == {"fo": Action.NONE}  # never a 2nd launch
                return heard_workers(store_b, started) == {intent.worker_id}

            wait_for(adopted, 240, "the orphaned application's heartbeats")
            (pgid,) = spark_submit_groups(str(tmp_path / "apps-a"))
            assert spark_submit_groups(marker) == {pgid}

            # The group is still RUNNING, so only the record's cancel_requested makes the
            # worker service answer CANCEL; B cannot signal a process on another host.
            groups.update(audit_group("fo", topic, rate=50))
            assert replica_b.reconcile_once() == {"fo": Action.UPDATE}
            assert store_b.get_launch("fo").cancel_requested  # type: ignore[union-attr]
            wait_for(lambda: not group_pids(pgid), 120, "the application to stop by itself")
            log = (tmp_path / "apps-a" / "fo" / "app.log").read_text()
            assert "control plane sent CANCEL" in log
            # Once its heartbeats have lapsed, B relaunches it with the new definition.
            stopped = time.time()
            wait_for(lambda: replica_b.reconcile_once() == {"fo": Action.RUN}, 60, "the relaunch")
            record = one_application(store_b, "fo", marker, stopped)
            assert record.failures == 0  # a requested stop is not a failure
            assert spark_submit_groups(str(tmp_path / "apps-b")) == {int(record.detail("pid"))}
    finally:
        stop_all(marker)
        store_a.close()
        store_b.close()


def test_deposed_between_launch_and_record_cancels_its_launch_etcd(
    kafka, etcd, tmp_path, monkeypatch
):
    """The same fault on etcd: A is deposed for real (its leader key deleted, B elected), so
    its fenced txn fails on the key's create_revision, not on a flag."""
    from controlplane.state.etcd_client import EtcdClient, b64
    from controlplane.state.etcd_leader import EtcdLeadership
    from controlplane.state.etcd_store import EtcdStore

    conf, topic = setup_group(kafka, tmp_path)
    monkeypatch.delenv("UATU_WAREHOUSE", raising=False)
    prefix = f"/fo-{uuid.uuid4().hex[:8]}"
    key = f"{prefix}/leader"
    a = EtcdLeadership(etcd.endpoint, "a:1", key, ttl_seconds=2)
    b = EtcdLeadership(etcd.endpoint, "b:1", key, ttl_seconds=2)
    store_a = EtcdStore(etcd.endpoint, prefix, a.fence, leader_key=key)
    store_b = EtcdStore(etcd.endpoint, prefix, b.fence, leader_key=key)
    marker = str(tmp_path)
    operator = EtcdClient(etcd.endpoint)

    def a_holds_the_key() -> bool:
        held = operator.get(key.encode())
        return held is not None and held.value == b"a:1"

    def b_took_over() -> bool:
        # A campaigns again as soon as it notices the delete and can win that round: depose
        # it again until B holds the key.
        if not b.is_leader() and a_holds_the_key():
            operator.call("kv/deleterange", {"key": b64(key.encode())})
        return b.is_leader()

    def depose_a() -> None:
        b.start()
        operator.call("kv/deleterange", {"key": b64(key.encode())})
        wait_for(b_took_over, 15, "B to win a round")

    try:
        a.start()
        wait_for(a.is_leader, 15, "A to lead")
        with worker_service(store_b, b) as address:  # type: ignore[arg-type]
            JobGroups(store_a, load_settings(conf), kafka_admin.partition_count).add(
                audit_group("fo", topic), RUNNING, None
            )
            replica_a = reconciler(store_a, tmp_path / "apps-a", conf, address)
            with fault("controlplane.app_launched", ETCD_PAUSE):
                result = while_paused(
                    replica_a.reconcile_once,
                    lambda: bool(spark_submit_groups(str(tmp_path / "apps-a"))),
                    depose_a,
                )
            assert result == {"fo": Action.NONE}
            wait_for(lambda: not spark_submit_groups(str(tmp_path / "apps-a")), 30, "A's app")
            with pytest.raises(NotLeader):
                store_a.put_launch("fo", LaunchRecord("x", "d", 0.0, "l"))
            intent = store_b.get_launch("fo")
            assert intent is not None and intent.intent

            replica_b = reconciler(
                store_b, tmp_path / "apps-b", conf, address, startup_seconds=5,
                lease_seconds=5, leadership=b,
            )  # fmt: skip

            wait_for(lambda: quiet_for(store_b, intent, 5), 20, "the startup window and lease")
            # Heard from after this moment: A's app, if it registered before A cancelled it,
            # stays in the store with its last heartbeat before the quiet 5 s, and must not
            # count as a second application.
            relaunched = time.time()
            assert replica_b.reconcile_once() == {"fo": Action.RUN}
            one_application(store_b, "fo", marker, relaunched)
    finally:
        stop_all(marker)
        operator.close()
        for replica in (a, b):
            replica.stop()
        store_a.close()
        store_b.close()


def test_a_crash_after_the_intent_launches_once_after_the_startup_window(
    kafka, tmp_path, monkeypatch
):
    """Step 1: A records its intent and dies before it starts anything. B sees the intent of
    an application that may be starting: it waits out the startup window, then launches the
    one application."""
    conf, topic = setup_group(kafka, tmp_path)
    monkeypatch.delenv("UATU_WAREHOUSE", raising=False)
    seat, store_a, store_b = sqlite_replicas(tmp_path)
    marker = str(tmp_path)
    try:
        with worker_service(store_b, seat.view("b")) as address:
            JobGroups(store_b, load_settings(conf), kafka_admin.partition_count).add(
                audit_group("fo", topic), RUNNING, None
            )
            replica_a = reconciler(store_a, tmp_path / "apps-a", conf, address)
            with fault("controlplane.launch_intent_recorded"):
                replica_a.reconcile_once()
            assert not spark_submit_groups(marker)  # nothing was started
            seat.holder = "b"
            intent = store_b.get_launch("fo")
            assert intent is not None and intent.intent
            replica_b = reconciler(store_b, tmp_path / "apps-b", conf, address, startup_seconds=5)
            assert replica_b.reconcile_once() == {"fo": Action.NONE}  # it may still start
            wait_for(lambda: time.time() - intent.started_at > 5, 10, "the startup window")
            launched = time.time()
            assert replica_b.reconcile_once() == {"fo": Action.RUN}
            record = one_application(store_b, "fo", marker, launched)
            assert replica_b.reconcile_once() == {"fo": Action.NONE}
            assert spark_submit_groups(str(tmp_path / "apps-b")) == {int(record.detail("pid"))}
    finally:
        stop_all(marker)
        store_a.close()
        store_b.close()


def test_a_crash_after_the_launch_record_leaves_the_one_application_running(
    kafka, tmp_path, monkeypatch
):
    """Step 3: A launched and recorded the application, then died. B, on the same host, sees
    the record's process alive and heartbeating: it launches nothing."""
    conf, topic = setup_group(kafka, tmp_path)
    monkeypatch.delenv("UATU_WAREHOUSE", raising=False)
    seat, store_a, store_b = sqlite_replicas(tmp_path)
    marker = str(tmp_path)
    try:
        with worker_service(store_b, seat.view("b")) as address:
            JobGroups(store_b, load_settings(conf), kafka_admin.partition_count).add(
                audit_group("fo", topic), RUNNING, None
            )
            replica_a = reconciler(store_a, tmp_path / "apps-a", conf, address)
            started = time.time()
            with fault("controlplane.launch_recorded"):
                replica_a.reconcile_once()
            seat.holder = "b"
            record = store_b.get_launch("fo")
            assert record is not None and not record.intent and record.handle
            replica_b = reconciler(store_b, tmp_path / "apps-b", conf, address)
            wait_for(
                lambda: heard_workers(store_b, started) == {record.worker_id},
                240,
                "the application's heartbeats",
            )
            assert replica_b.reconcile_once() == {"fo": Action.NONE}
            assert one_application(store_b, "fo", marker, started) == record
            assert not spark_submit_groups(str(tmp_path / "apps-b"))
    finally:
        stop_all(marker)
        store_a.close()
        store_b.close()
