"""Control-plane costs: listing many JobGroups, a reconcile pass, and what a launch adds.

Three measurements; the first two on SQLite and on a real etcd (devservices.etcd, temp dir):

1. stream: --groups (default 10,000) audit JobGroups of 4 StoredJobs each are written straight
   into the store; a gRPC client then streams GetAllJobGroups to the end from a server built by
   `create_server` on 127.0.0.1:0. The server runs in a child process of its own (this module
   with a hidden --serve-child flag; SoleLeader on SQLite, a won EtcdLeadership on etcd, as
   `serve` wires them), so its memory is its own: before each stream its peak RSS (VmHWM) is
   reset to the current RSS through /proc/PID/clear_refs, and after it VmHWM - VmRSS(before)
   is the peak growth the stream caused. Then a heartbeat status is stored for every job (as
   in a fleet that runs: the server folds them into what it lists) and it is measured again.
   Baseline: `JobGroups.all()` over the same store in this process (no gRPC, no server).
2. reconcile: one `Reconciler.reconcile_once` over --reconcile-groups (default 1,000) RUNNING
   groups with nothing to change: each has a launch record with the group's current
   definition, pointing at one real `sleep` process (so LocalLauncher.alive() checks a real
   pid), and a worker record with a fresh heartbeat (so the lease does not fire). Every pass
   must return NONE for every group. Targets: < 1 s on SQLite, < 3 s on etcd.
3. startup: the time from AddJobGroup (gRPC, to `python -m controlplane serve` with the local
   launcher, reconcile and heartbeat every 1 s, against a real Kafka broker) to the
   application's first heartbeat (its StoredWorker turns WORKING), against the same JobGroup
   started with plain `./spark-submit.sh` (UATU_CONTROL_PLANE pointing at a control plane
   started with --no-reconcile, so it reaches the same event). Every run has its own control
   plane, store, topic, warehouse and checkpoints, so each starts cold the same way; the runs
   alternate (baseline, control plane, control plane, baseline, ...) so drift on a shared
   machine hits both sides. The time to the app's "started query" log line is shown too, and
   the part the control plane alone accounts for: AddJobGroup -> spark-submit.sh spawned
   (the launch record's started_at). Target: the control plane adds < 2 s (median - median).

Everything lives in a temp dir outside the repo, removed at the end (--keep keeps it, logs
included). The one thing written into the repo is the record of the run (commit, machine,
arguments, figures): docs/benchmarks/controlplane-<UTC time>-<commit>.json; --json PATH
writes the figures there too. Every process started here (etcd, broker, control planes, Spark
applications, the sleeper) is stopped.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

import grpc
from google.protobuf import json_format
from google.protobuf.timestamp_pb2 import Timestamp
from grpc_health.v1 import health_pb2, health_pb2_grpc
from uber.data.kafka.datatransfer import job_pb2
from uber.data.kafka.datatransfer import master_admin_service_pb2 as admin_pb2
from uber.data.kafka.datatransfer import master_admin_service_pb2_grpc as admin_grpc
from uber.data.kafka.datatransfer.job_group_pb2 import JobGroup, ScaleStatus, StoredJobGroup
from uber.data.kafka.datatransfer.job_status_pb2 import (
    JobStatus,
    KafkaConsumerTaskStatus,
    StoredJobStatus,
)
from uber.data.kafka.datatransfer.worker_pb2 import WORKER_STATE_WORKING, Node, StoredWorker

from bench._common import (
    bench_parser,
    clean_env,
    median,
    parse_args,
    say,
    warn_if_jobs_zip_stale,
    work_dir,
    write_latest,
    write_result,
)
from controlplane.jobgroups import per_partition_jobs
from controlplane.launchers.base import LaunchRecord, launch_details
from controlplane.launchers.local import LocalLauncher
from controlplane.reconcile import Action, definition_of
from controlplane.reconciler import Reconciler
from controlplane.state.base import Store
from controlplane.state.sqlite import SqliteStore
from core.paths import ROOT
from core.processes import free_ports, group_pids, signal_group, terminate, wait_gone
from testing.jobgroups import audit_group

JOBS_PER_GROUP = 4
RECONCILE_TARGETS = {"sqlite": 1.0, "etcd": 3.0}  # seconds per pass
STARTUP_TARGET_S = 2.0  # what the control plane may add to a launch
STARTUP_TIMEOUT_S = 300.0
QUICK = {"stream_runs": 2, "reconcile_passes": 3, "startup_runs": 1}  # --quick: same sizes
STARTED_QUERY_RE = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) INFO \S+: started query", re.MULTILINE
)
KIB = 1024
# The environment of a control plane or a plain spark-submit.sh run here: each has its own
# conf dir and store, so nothing may point it at another's storage or control plane.
NOT_INHERITED = ("UATU_CONTROL_PLANE", "UATU_WORKER_ID")


# --- JobGroups and stores --------------------------------------------------------------------


def audit_job_group(group_id: str, topic: str, rate: float = 1000) -> JobGroup:
    """A KAFKA_AUDIT JobGroup on cluster `local` reading from the earliest offsets: both
    unique-count audits (60 s windows), flow control (0 = unlimited), a 1 s trigger."""
    return audit_group(
        group_id,
        topic,
        rate,
        ("AUDIT_TYPE_APPROX_UNIQ", "AUDIT_TYPE_EXACT_UNIQ"),
        trigger_seconds=1,
        consumer_group=f"audit-{group_id}",
        from_earliest=True,
    )


def stored_groups(prefix: str, n: int) -> Iterator[StoredJobGroup]:
    """n RUNNING groups of JOBS_PER_GROUP jobs each (ids as JobGroups.add would hand out)."""
    now = Timestamp()
    now.GetCurrentTime()
    for i in range(n):
        group = audit_job_group(f"{prefix}-{i:05d}", f"{prefix}-topic-{i % 500:03d}")
        first = i * JOBS_PER_GROUP + 1
        jobs = per_partition_jobs(
            group, job_pb2.JOB_STATE_RUNNING, JOBS_PER_GROUP, range(first, first + JOBS_PER_GROUP)
        )
        yield StoredJobGroup(
            last_updated=now,
            job_group=group,
            state=job_pb2.JOB_STATE_RUNNING,
            jobs=jobs,
            scale_status=ScaleStatus(),
        )


def fill(items: Iterator[Any], write: Callable[[Any], object], threads: int) -> None:
    """Apply `write` to every item; etcd gets several writers (one fsync per request)."""
    if threads <= 1:
        for item in items:
            write(item)
        return
    with ThreadPoolExecutor(threads) as pool:
        for _ in pool.map(write, items):
            pass


@dataclass
class Backend:
    """One store kind: how to open it here and how the server child opens it."""

    name: str  # "sqlite" or "etcd"
    location: str  # SQLite file, or etcd endpoint
    prefix: str = ""  # etcd key prefix

    def open(self) -> Store:
        if self.name == "sqlite":
            return SqliteStore(Path(self.location))
        from controlplane.state.etcd_store import EtcdStore

        # Setup and the reconcile pass write no launch record, so no fence is needed here.
        return EtcdStore(self.location, self.prefix)

    @property
    def writers(self) -> int:
        return 8 if self.name == "etcd" else 1


# --- 1. GetAllJobGroups over gRPC: time and the server's peak memory -------------------------


def proc_status_kib(pid: int, field_name: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field_name}:"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field_name} in /proc/{pid}/status")


def reset_peak_rss(pid: int) -> bool:
    """Reset VmHWM to the current RSS (Linux >= 4.0); False if the kernel refuses."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    except OSError:
        return False
    return True


@dataclass
class StreamResult:
    backend: str
    groups: int
    statuses: int  # heartbeat statuses stored next to the groups (0, or one per job)
    write_s: float  # writing the groups (or the statuses) through the store
    local_s: list[float] = field(default_factory=list)  # JobGroups.all() in this process
    stream_s: list[float] = field(default_factory=list)
    growth_kib: list[int] = field(default_factory=list)
    rss_before_kib: int = 0
    peak_kib: int = 0


def job_statuses(groups: int) -> Iterator[list[StoredJobStatus]]:
    """A latest heartbeat for every job of `stored_groups`, in batches of 1,000."""
    now = Timestamp()
    now.GetCurrentTime()
    batch: list[StoredJobStatus] = []
    for job_id in range(1, groups * JOBS_PER_GROUP + 1):
        status = JobStatus(
            job=job_pb2.Job(
                job_id=job_id,
                type=job_pb2.JOB_TYPE_KAFKA_AUDIT,
                kafka_consumer_task=job_pb2.KafkaConsumerTask(
                    cluster="local", topic="t", partition=(job_id - 1) % JOBS_PER_GROUP
                ),
            ),
            state=job_pb2.JOB_STATE_RUNNING,
            kafka_consumer_task_status=KafkaConsumerTaskStatus(
                read_offset=123_456, commit_offset=123_456, messages_per_sec=250.0,
                bytes_per_sec=40_000.0,
            ),
        )  # fmt: skip
        worker_id = (job_id - 1) // JOBS_PER_GROUP + 1
        batch.append(StoredJobStatus(last_updated=now, job_status=status, worker_id=worker_id))
        if len(batch) == 1000:
            yield batch
            batch = []
    if batch:
        yield batch


@contextlib.contextmanager
def server_child(backend: Backend, log: IO[bytes]) -> Iterator[tuple[subprocess.Popen, int]]:
    """This module with --serve-child in a new process; yields (process, gRPC port)."""
    argv = [
        sys.executable, "-m", "bench.controlplane_bench", "--serve-child", backend.name,
        "--child-store", backend.location, "--child-prefix", backend.prefix,
    ]  # fmt: skip
    proc = subprocess.Popen(
        argv, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line.startswith("PORT "):
            raise RuntimeError(f"server child did not start (said {line!r}); see its log")
        yield proc, int(line.split()[1])
    finally:
        if proc.stdin is not None:
            proc.stdin.close()  # EOF: the child stops its server and exits
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def stream_all(port: int, expected: int) -> float:
    """Seconds to stream GetAllJobGroups to its end (a fresh channel each time)."""
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        grpc.channel_ready_future(channel).result(timeout=30)
        admin = admin_grpc.MasterAdminServiceStub(channel)
        started = time.perf_counter()
        count = sum(1 for _ in admin.GetAllJobGroups(admin_pb2.GetAllJobGroupsRequest()))
        seconds = time.perf_counter() - started
    if count != expected:
        raise RuntimeError(f"GetAllJobGroups streamed {count} groups, expected {expected}")
    return seconds


def bench_stream(backend: Backend, groups: int, runs: int, workdir: Path) -> list[StreamResult]:
    """Groups alone, then the same groups with a heartbeat status per job: the server folds
    the latest statuses into what it streams (JobGroups.all), as in a fleet that runs."""
    from controlplane.jobgroups import JobGroups
    from core import kafka_admin
    from core.config import load_settings

    tag = f"[stream/{backend.name}]"
    results = []
    with contextlib.ExitStack() as stack:
        store = backend.open()
        stack.callback(store.close)
        local = JobGroups(store, load_settings(), kafka_admin.partition_count)
        say(f"{tag} writing {groups:,} JobGroups through the store")
        started = time.perf_counter()
        fill(stored_groups("list", groups), store.create, backend.writers)
        write_s = time.perf_counter() - started
        log = stack.enter_context((workdir / f"server-{backend.name}.log").open("wb"))
        proc, port = stack.enter_context(server_child(backend, log))
        for statuses in (0, groups * JOBS_PER_GROUP):
            if statuses:
                say(f"{tag} writing {statuses:,} heartbeat statuses (one per job)")
                started = time.perf_counter()
                fill(job_statuses(groups), store.put_job_statuses, backend.writers)
                write_s = time.perf_counter() - started
            say(f"{tag}   written in {write_s:.1f} s")
            result = StreamResult(backend.name, groups, statuses, write_s)
            for _ in range(runs):
                started = time.perf_counter()
                count = sum(1 for _ in local.all())
                result.local_s.append(time.perf_counter() - started)
                if count != groups:
                    raise RuntimeError(f"JobGroups.all() gave {count} groups, expected {groups}")
            result.rss_before_kib = proc_status_kib(proc.pid, "VmRSS")
            for i in range(runs):
                if not reset_peak_rss(proc.pid):
                    raise RuntimeError("cannot reset VmHWM through /proc/PID/clear_refs")
                before = proc_status_kib(proc.pid, "VmHWM")  # = VmRSS right after the reset
                seconds = stream_all(port, groups)
                peak = proc_status_kib(proc.pid, "VmHWM")
                result.stream_s.append(seconds)
                result.growth_kib.append(peak - before)
                result.peak_kib = max(result.peak_kib, peak)
                say(
                    f"{tag}   stream {i + 1}/{runs}: {seconds:.2f} s, server RSS "
                    f"{before / KIB:.0f} MiB -> peak {peak / KIB:.0f} MiB "
                    f"(+{(peak - before) / KIB:.1f})"
                )
            results.append(result)
    return results


def serve_child(kind: str, location: str, prefix: str) -> int:
    """The server of measurement 1: create_server on 127.0.0.1:0 until stdin closes."""
    from controlplane.jobgroups import JobGroups
    from controlplane.server import create_server
    from controlplane.state.leadership import Leadership, SoleLeader
    from controlplane.workers import Workers
    from core import kafka_admin
    from core.config import load_settings

    store: Store
    leadership: Leadership
    if kind == "etcd":
        from controlplane.state.etcd_leader import EtcdLeadership
        from controlplane.state.etcd_store import EtcdStore

        # As `serve` wires it: a real election (its keepalive thread runs in this process)
        # and a store fenced by it. The port is not known before binding; only a follower's
        # NOT_LEADER reply would show the advertised address, and this replica leads.
        election = EtcdLeadership(location, "127.0.0.1:0", f"{prefix}/leader", ttl_seconds=5)
        election.start()
        deadline = time.monotonic() + 30
        while not election.is_leader():
            if time.monotonic() > deadline:
                raise RuntimeError("the server child did not win the etcd election in 30 s")
            time.sleep(0.05)
        leadership = election
        store = EtcdStore(location, prefix, election.fence, leader_key=f"{prefix}/leader")
    else:
        leadership = SoleLeader("127.0.0.1:0")
        store = SqliteStore(Path(location))
    job_groups = JobGroups(store, load_settings(), kafka_admin.partition_count)
    server, port, _ = create_server(
        "127.0.0.1:0", job_groups, Workers(store, leadership), leadership
    )
    server.start()
    print(f"PORT {port}", flush=True)
    sys.stdin.read()  # until the parent closes our stdin
    server.stop(0).wait()
    leadership.stop()
    store.close()
    return 0


# --- 2. One reconcile pass with nothing to change --------------------------------------------


@dataclass
class ReconcileResult:
    backend: str
    groups: int
    passes_s: list[float] = field(default_factory=list)


def bench_reconcile(
    backend: Backend, groups: int, passes: int, sleeper_pid: int, workdir: Path
) -> ReconcileResult:
    store = backend.open()
    try:
        say(f"[reconcile/{backend.name}] writing {groups:,} RUNNING groups, launches, workers")
        now = time.time()
        heard = Timestamp()
        heard.FromNanoseconds(int(now * 1e9))
        apps = workdir / f"apps-{backend.name}"

        def seed(item: tuple[int, StoredJobGroup]) -> None:
            worker_id, stored = item
            job_group_id = stored.job_group.job_group_id
            store.create(stored)
            # What LocalLauncher.launch returns plus what the reconciler adds to it.
            store.put_launch(
                job_group_id,
                LaunchRecord(
                    handle=str(sleeper_pid),
                    definition=definition_of(stored.job_group),
                    started_at=now - 60,
                    log=str(apps / job_group_id / "app.log"),
                    details=launch_details(
                        pid=sleeper_pid, stop_file=str(apps / job_group_id / "stop")
                    ),
                    worker_id=worker_id,
                ),
            )
            store.put_worker(
                StoredWorker(
                    last_updated=heard,
                    node=Node(id=worker_id, host="127.0.0.1", port=4040),
                    state=WORKER_STATE_WORKING,
                )
            )

        fill(enumerate(stored_groups("rec", groups), 1), seed, backend.writers)
        # LocalLauncher.alive() on a pid it did not start: os.kill(pid, 0) and /proc/pid/stat.
        reconciler = Reconciler(store, LocalLauncher(apps), lease_seconds=60.0)
        result = ReconcileResult(backend.name, groups)
        for i in range(passes):
            started = time.perf_counter()
            taken = reconciler.reconcile_once()
            result.passes_s.append(time.perf_counter() - started)
            changed = {k: a for k, a in taken.items() if a is not Action.NONE}
            if len(taken) != groups or changed:
                raise RuntimeError(
                    f"pass {i + 1}: {len(taken)} groups, actions other than NONE: "
                    f"{dict(list(changed.items())[:5])}"
                )
        launches = store.launches()
        if len(launches) != groups or any(
            r.detail("pid") != sleeper_pid for r in launches.values()
        ):
            raise RuntimeError("a reconcile pass changed the launch records")
        say(
            f"[reconcile/{backend.name}]   {passes} passes: "
            + ", ".join(f"{s:.3f}" for s in result.passes_s)
            + " s"
        )
        return result
    finally:
        store.close()


# --- 3. AddJobGroup -> first heartbeat, vs plain spark-submit.sh ----------------------------


@dataclass
class StartupRun:
    kind: str  # "controlplane" or "spark-submit"
    index: int
    to_heartbeat_s: float = 0.0
    to_started_query_s: float | None = None
    to_spawn_s: float | None = None  # control plane only: AddJobGroup -> spark-submit.sh ran
    rpc_s: float | None = None  # control plane only: the AddJobGroup call itself


@contextlib.contextmanager
def control_plane(
    address: str, store: Path, conf: Path, apps: Path, log: Path, *extra: str
) -> Iterator[subprocess.Popen]:
    """`python -m controlplane serve`, healthy; SIGTERM (SIGKILL after 30 s) at the end."""
    argv = [
        sys.executable, "-m", "controlplane", "serve", "--address", address,
        "--store", str(store), "--conf-dir", str(conf), "--apps-dir", str(apps),
        "--reconcile-seconds", "1", "--heartbeat-seconds", "1", *extra,
    ]  # fmt: skip
    with log.open("ab") as out:
        proc = subprocess.Popen(
            argv, cwd=ROOT, env=clean_env(*NOT_INHERITED), stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        with grpc.insecure_channel(address) as channel:
            health = health_pb2_grpc.HealthStub(channel)
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(f"the control plane exited; see {log}")
                with contextlib.suppress(grpc.RpcError):
                    reply = health.Check(health_pb2.HealthCheckRequest(), timeout=1)
                    if reply.status == health_pb2.HealthCheckResponse.SERVING:
                        break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the control plane on {address} not healthy in 60 s")
                time.sleep(0.2)
        yield proc
    finally:
        terminate(proc)


def kill_application(pgid: int) -> None:
    """SIGKILL a Spark application's process group (script, JVM, Python) and wait for it."""
    signal_group(pgid, signal.SIGKILL)
    left = wait_gone(group_pids(pgid), 30)
    if left:
        say(f"  WARNING: pids {left} of application group {pgid} still alive")


def _first_heartbeat(
    store: SqliteStore,
    what: str,
    exit_code: Callable[[], int | None],
    started: float | None = None,
) -> None:
    """Poll the store every 20 ms until some worker has heartbeated (is WORKING)."""
    deadline = (started or time.perf_counter()) + STARTUP_TIMEOUT_S
    while not any(w.state == WORKER_STATE_WORKING for w in store.workers()):
        code = exit_code()
        if code is not None:
            raise RuntimeError(f"{what} exited {code} before its first heartbeat")
        if time.perf_counter() > deadline:
            raise RuntimeError(f"no heartbeat from {what} within {STARTUP_TIMEOUT_S:.0f} s")
        time.sleep(0.02)


def started_query_after(log: Path, wall_start: float, timeout: float) -> float | None:
    """Seconds from `wall_start` (POSIX) to the app's first "started query" log line."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace") if log.exists() else ""
        found = STARTED_QUERY_RE.search(text)
        if found:
            stamp = dt.datetime.strptime(found[1], "%Y-%m-%d %H:%M:%S,%f")  # local time
            return stamp.timestamp() - wall_start
        time.sleep(0.2)
    return None


def startup_run(kind: str, index: int, bootstrap: str, topic: str, workdir: Path) -> StartupRun:
    """One cold start: own control plane, store, conf (warehouse, checkpoints) and topic.

    Both paths end at the same observable event: the application's first heartbeat, seen as
    its StoredWorker turning WORKING in the control plane's store (polled every 20 ms).
    """
    from testing.conf import write_conf_dir

    run_dir = workdir / f"startup-{kind}-{index}"
    conf = write_conf_dir(run_dir / "conf", bootstrap, run_dir / "wh", run_dir / "ck")
    group = audit_job_group(f"start-{kind}-{index}", topic, rate=0)
    address = f"127.0.0.1:{free_ports(1)[0]}"
    store_path = run_dir / "cp.sqlite"
    extra = ("--no-reconcile",) if kind == "spark-submit" else ()
    run = StartupRun(kind, index)
    app: subprocess.Popen | None = None
    try:
        with (
            control_plane(address, store_path, conf, run_dir / "apps", run_dir / "cp.log", *extra),
            contextlib.closing(SqliteStore(store_path)) as store,  # reads workers, launches
        ):
            if kind == "controlplane":
                app_log = run_dir / "apps" / group.job_group_id / "app.log"
                wall_start = _through_control_plane(address, group, store, run)
            else:
                app_log = run_dir / "app.log"
                wall_start, started, app = _plain_spark_submit(
                    address, group, conf, run_dir, app_log
                )
                _first_heartbeat(store, "spark-submit.sh", app.poll, started)
                run.to_heartbeat_s = time.perf_counter() - started
            run.to_started_query_s = started_query_after(app_log, wall_start, 60)
    finally:
        # The control plane is stopped by now (it leaves its application running on purpose,
        # and can no longer relaunch it): kill what it launched, and the plain one.
        pgids = [int(r.detail("pid")) for r in _launches(store_path).values() if "pid" in r.details]
        if app is not None:
            pgids.append(app.pid)
        for pgid in pgids:
            kill_application(pgid)
        if app is not None:
            app.wait()
    return run


def _through_control_plane(
    address: str, group: JobGroup, store: SqliteStore, run: StartupRun
) -> float:
    """AddJobGroup, then wait for the launched application's first heartbeat."""
    with grpc.insecure_channel(address) as channel:
        grpc.channel_ready_future(channel).result(timeout=30)
        admin = admin_grpc.MasterAdminServiceStub(channel)
        request = admin_pb2.AddJobGroupRequest(job_group=group)
        wall_start, started = time.time(), time.perf_counter()
        admin.AddJobGroup(request, timeout=30)
        run.rpc_s = time.perf_counter() - started
    _first_heartbeat(store, "the launched application", lambda: None, started)
    run.to_heartbeat_s = time.perf_counter() - started
    record = store.launches()[group.job_group_id]
    run.to_spawn_s = record.started_at - wall_start  # time.time() right after Popen
    return wall_start


def _plain_spark_submit(
    address: str, group: JobGroup, conf: Path, run_dir: Path, app_log: Path
) -> tuple[float, float, subprocess.Popen]:
    """`./spark-submit.sh JOBGROUP` heartbeating to `address`, as a scheduler would run it;
    returns its start as time.time() and time.perf_counter(), and the process."""
    jobgroup_file = run_dir / "jobgroup.json"
    jobgroup_file.write_text(json_format.MessageToJson(group, indent=2))
    env = {
        **clean_env(*NOT_INHERITED),
        "UATU_CONF_DIR": str(conf),
        "UATU_CONTROL_PLANE": address,
        "UATU_HEARTBEAT_SECONDS": "1",
        "UATU_STOP_FILE": str(run_dir / "stop"),
    }
    with app_log.open("ab") as out:
        wall_start, started = time.time(), time.perf_counter()
        app = subprocess.Popen(
            [str(ROOT / "spark-submit.sh"), str(jobgroup_file)],
            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    return wall_start, started, app


def _launches(store_path: Path) -> dict[str, LaunchRecord]:
    if not store_path.exists():
        return {}
    with contextlib.closing(SqliteStore(store_path)) as store:
        return store.launches()


def bench_startup(runs: int, workdir: Path) -> list[StartupRun]:
    from devservices.kafka import start_cluster

    warn_if_jobs_zip_stale()
    # ABBA order: baseline, control plane, control plane, baseline, ... balances drift.
    order = [
        kind
        for i in range(runs)
        for kind in (
            ("spark-submit", "controlplane") if i % 2 == 0 else ("controlplane", "spark-submit")
        )
    ]
    results: list[StartupRun] = []
    say("[startup] starting a Kafka broker")
    with start_cluster(workdir / "kafka", n_brokers=1) as cluster:
        for n, kind in enumerate(order):
            index = sum(1 for r in results if r.kind == kind) + 1
            topic = f"cp-bench-{kind}-{index}-{uuid.uuid4().hex[:6]}"
            cluster.create_topic(topic, partitions=2)
            say(f"[startup] run {n + 1}/{len(order)}: {kind} #{index} (topic {topic})")
            run = startup_run(kind, index, cluster.bootstrap_servers, topic, workdir)
            query = run.to_started_query_s
            say(
                f"[startup]   first heartbeat after {run.to_heartbeat_s:.2f} s"
                + (f", 'started query' after {query:.2f} s" if query is not None else "")
                + (
                    f" (AddJobGroup {run.rpc_s:.3f} s, spark-submit.sh spawned after "
                    f"{run.to_spawn_s:.2f} s)"
                    if run.to_spawn_s is not None and run.rpc_s is not None
                    else ""
                )
            )
            results.append(run)
    return results


# --- The table -------------------------------------------------------------------------------


@dataclass
class Row:
    measurement: str
    value: str
    target: str = ""
    met: bool | None = None
    ratio: str = ""


def table_rows(
    streams: list[StreamResult], reconciles: list[ReconcileResult], startups: list[StartupRun]
) -> list[Row]:
    rows: list[Row] = []
    for s in streams:
        local, stream = median(s.local_s), median(s.stream_s)
        what = f"{s.backend}: {s.groups:,} groups" + (
            f" + {s.statuses:,} heartbeats" if s.statuses else ""
        )
        written = f"{s.statuses:,} heartbeat statuses" if s.statuses else f"{s.groups:,} groups"
        rows += [
            Row(f"{s.backend}: write {written} through the store", f"{s.write_s:.1f} s"),
            Row(f"{what}: JobGroups.all() in process (median)", f"{local:.3f} s"),
            Row(
                f"{what}: GetAllJobGroups stream (median of {len(s.stream_s)})",
                f"{stream:.3f} s (max {max(s.stream_s):.3f})",
                ratio=f"{stream / local:.1f}x in process",
            ),
            Row(
                f"{what}: server peak RSS growth per stream",
                f"max {max(s.growth_kib) / KIB:.1f} MiB (first {s.growth_kib[0] / KIB:.1f})",
            ),
            Row(
                f"{what}: server RSS before / peak",
                f"{s.rss_before_kib / KIB:.0f} / {s.peak_kib / KIB:.0f} MiB",
            ),
        ]
    sqlite_pass = next((median(r.passes_s) for r in reconciles if r.backend == "sqlite"), None)
    for r in reconciles:
        target = RECONCILE_TARGETS[r.backend]
        typical, worst = median(r.passes_s), max(r.passes_s)
        ratio = ""
        if r.backend == "etcd" and sqlite_pass:
            ratio = f"{typical / sqlite_pass:.1f}x SQLite"
        rows.append(
            Row(
                f"{r.backend}: reconcile_once, {r.groups:,} RUNNING, nothing to change "
                f"({len(r.passes_s)} passes)",
                f"median {typical:.3f} s, max {worst:.3f} s",
                f"< {target:.0f} s",
                worst < target,
                ratio,
            )
        )
    plain = [r for r in startups if r.kind == "spark-submit"]
    managed = [r for r in startups if r.kind == "controlplane"]
    if plain and managed:
        base, cp = (median([r.to_heartbeat_s for r in runs]) for runs in (plain, managed))
        rows += [
            Row(
                f"spark-submit.sh -> first heartbeat (median of {len(plain)})",
                f"{base:.2f} s ({_spread(plain)})",
            ),
            Row(
                f"AddJobGroup -> first heartbeat (median of {len(managed)})",
                f"{cp:.2f} s ({_spread(managed)})",
                ratio=f"{cp / base:.2f}x spark-submit.sh",
            ),
            Row(
                "  control plane adds (median - median)",
                f"{cp - base:+.2f} s",
                f"< {STARTUP_TARGET_S:.0f} s",
                cp - base < STARTUP_TARGET_S,
            ),
        ]
        queried = [r.to_started_query_s for r in plain if r.to_started_query_s is not None]
        queried_cp = [r.to_started_query_s for r in managed if r.to_started_query_s is not None]
        if queried and queried_cp:
            rows.append(
                Row(
                    "  same, to the app's 'started query' log line",
                    f"{median(queried_cp) - median(queried):+.2f} s "
                    f"({median(queried):.2f} vs {median(queried_cp):.2f})",
                )
            )
        spawn = [r.to_spawn_s for r in managed if r.to_spawn_s is not None]
        rpc = [r.rpc_s for r in managed if r.rpc_s is not None]
        if spawn and rpc:
            after_spawn = [r.to_heartbeat_s - (r.to_spawn_s or 0) for r in managed]
            rows += [
                Row(
                    "  AddJobGroup -> spark-submit.sh spawned (of which the RPC)",
                    f"{median(spawn):.2f} s, max {max(spawn):.2f} ({median(rpc):.3f} s)",
                    f"< {STARTUP_TARGET_S:.0f} s",
                    max(spawn) < STARTUP_TARGET_S,
                ),
                Row(
                    "  spawned -> first heartbeat, launched by the control plane",
                    f"{median(after_spawn):.2f} s",
                    ratio=f"{median(after_spawn) / base:.2f}x spark-submit.sh",
                ),
            ]
    return rows


def _spread(runs: list[StartupRun]) -> str:
    values = sorted(r.to_heartbeat_s for r in runs)
    return ", ".join(f"{v:.1f}" for v in values)


def print_table(rows: list[Row]) -> None:
    width = max(len(r.measurement) for r in rows)
    value_width = max(len(r.value) for r in rows)
    print(f"\n{'measurement':{width}}  {'value':{value_width}}  {'target':7}  {'result':8}  vs")
    for r in rows:
        result = "" if r.met is None else "MET" if r.met else "NOT MET"
        print(
            f"{r.measurement:{width}}  {r.value:{value_width}}  {r.target:7}  {result:8}  {r.ratio}"
        )
    print(flush=True)


# --- main ------------------------------------------------------------------------------------


def run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    parts = set(args.only or ("stream", "reconcile", "startup"))
    kinds = ["sqlite"] if args.skip_etcd else ["sqlite", "etcd"]
    streams: list[StreamResult] = []
    reconciles: list[ReconcileResult] = []
    startups: list[StartupRun] = []
    with contextlib.ExitStack() as stack:
        etcd_endpoint = ""
        if "etcd" in kinds and parts & {"stream", "reconcile"}:
            from devservices.etcd import start_etcd

            etcd = stack.enter_context(start_etcd(workdir / "etcd"))
            etcd_endpoint = etcd.endpoint
            say(f"etcd up on {etcd_endpoint}")

        def backend(kind: str, part: str) -> Backend:
            if kind == "sqlite":
                return Backend(kind, str(workdir / f"{part}.sqlite"))
            return Backend(kind, etcd_endpoint, f"/bench-{part}")

        if "stream" in parts:
            for kind in kinds:
                streams += bench_stream(
                    backend(kind, "stream"), args.groups, args.stream_runs, workdir
                )
        if "reconcile" in parts:
            # One real long-running process that every launch record points at.
            sleeper = subprocess.Popen(["sleep", "600"], start_new_session=True)
            stack.callback(sleeper.wait)  # callbacks run last-in first-out
            stack.callback(sleeper.kill)
            for kind in kinds:
                reconciles.append(
                    bench_reconcile(
                        backend(kind, "reconcile"),
                        args.reconcile_groups,
                        args.reconcile_passes,
                        sleeper.pid,
                        workdir,
                    )
                )
    if "startup" in parts:
        startups = bench_startup(args.startup_runs, workdir)
    print_table(table_rows(streams, reconciles, startups))
    return {
        "stream": [asdict(s) for s in streams],
        "reconcile": [asdict(r) for r in reconciles],
        "startup": [asdict(s) for s in startups],
    }


def main(argv: list[str] | None = None) -> int:
    parser = bench_parser("bench.controlplane_bench", __doc__)
    # One group per measurement of the docstring, so --help says which option sizes which.
    stream = parser.add_argument_group("1. stream")
    stream.add_argument("--groups", type=int, default=10_000, help="JobGroups to stream")
    stream.add_argument("--stream-runs", type=int, default=5, help="streams per store")
    reconcile = parser.add_argument_group("2. reconcile")
    reconcile.add_argument(
        "--reconcile-groups", type=int, default=1_000, help="groups to reconcile"
    )
    reconcile.add_argument("--reconcile-passes", type=int, default=7, help="passes per store")
    startup = parser.add_argument_group("3. startup")
    startup.add_argument(
        "--startup-runs", type=int, default=4, help="cold starts per path (control plane, plain)"
    )
    parser.add_argument(
        "--only",
        action="append",
        choices=("stream", "reconcile", "startup"),
        help="run only this measurement (repeatable)",
    )
    parser.add_argument("--skip-etcd", action="store_true", help="SQLite only")
    parser.add_argument("--json", type=Path, help="also write the raw figures to this file")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (logs, stores)")
    parser.add_argument("--serve-child", choices=("sqlite", "etcd"), help=argparse.SUPPRESS)
    parser.add_argument("--child-store", default="", help=argparse.SUPPRESS)
    parser.add_argument("--child-prefix", default="", help=argparse.SUPPRESS)
    args = parse_args(parser, argv, QUICK)
    if args.serve_child:
        return serve_child(args.serve_child, args.child_store, args.child_prefix)
    with work_dir("uatu-cp-bench-", parent=None, keep=args.keep) as workdir:
        say(f"work dir {workdir} ({os.cpu_count()} cores)")
        result = run(args, workdir)
    if args.json:
        write_latest(args.json, result)
        say(f"figures written to {args.json}")
    say(f"run recorded in {write_result('controlplane', result, args, argv=argv)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
