""" "Never in two places", proven at its crash point: a pool worker whose heartbeats stop
while its queries still run (UATU_FAULT=worker.heartbeat/<id>:pause=<ms>, the project's one
fault hook, at the step where the worker loses the control plane).

The control plane moves that worker's groups once its lease expires, and it cannot stop the
worker's application (`observes` is False: a worker on a host the control plane cannot
reach, as in a network partition). Only the worker's fence (jobs/worker/main.py: stop every
query after `UATU_WORKER_FENCE_SECONDS` without an answered heartbeat, set by the pool to half
the lease) keeps a moved group from running in two places. Without it (the mutant: a fence
longer than the pause), the group's query on the silent worker still runs when its new
worker starts it, and the test fails.

Everything is real except the Spark query: the control plane's gRPC server, store, reconciler
and pool; each worker's heartbeat loop (`serve_commands`), ControlPlaneLink and GroupRuns, in
threads of this process. A group's "query" is a stand-in that runs until its stop file
appears, as a streaming query's runner does (jobs/runtime/runner.py), and records when it ran.
With `packed`, each worker runs its groups through its Packer (jobs/worker/packer.py), as it
runs audits that pack: the stand-in query is the pack's, and runs every member.
"""

from __future__ import annotations

import itertools
import math
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pytest
from uatu.v1.worker_job_pb2 import WorkerJob
from uber.data.kafka.datatransfer import job_pb2

from controlplane import pool_slots
from controlplane.launchers.base import LaunchRecord, launch_details
from core import faults
from jobs.runtime.reporting import ControlPlaneLink, ReporterConfig
from jobs.runtime.template import Packing
from jobs.worker.main import FENCE_ENV, serve_commands
from jobs.worker.packer import Packer
from jobs.worker.runs import GroupRuns
from testing.conf import write_conf_dir
from testing.jobgroups import audit_group
from testing.polling import wait_for
from tests.controlplane.in_process import InProcessControlPlane, in_process_control_plane

LEASE_SECONDS = 4.0
HEARTBEAT_SECONDS = 0.2
PAUSE_MS = int(LEASE_SECONDS * 2.5 * 1000)  # silent well past the lease


@dataclass
class Span:
    """One run of a group's stand-in query on one worker; `end` is inf while it runs."""

    group_id: str
    worker_id: int
    start: float
    end: float = math.inf


class InProcessWorkers:
    """The pool's worker applications as threads of this process, each with the real
    heartbeat loop. The control plane can neither see nor stop them (another host)."""

    def __init__(
        self, stop_dir: Path, fence_seconds: float | None = None, *, packed: bool = False
    ) -> None:
        self.stop_dir = stop_dir
        self.packed = packed
        stop_dir.mkdir(parents=True, exist_ok=True)
        self.fence_seconds = fence_seconds  # None: the pool's (UATU_WORKER_FENCE_SECONDS)
        self.spans: list[Span] = []
        self.worker_ids: list[int] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []

    def launch_worker(self, name: str, definition: str, env: Mapping[str, str]) -> LaunchRecord:
        config = ReporterConfig.from_env(env)
        assert config is not None
        fence = self.fence_seconds or float(env[FENCE_ENV])
        packer = Packer(
            lambda _packing, members, _name: [m.job_group_id for m in members],
            lambda _packing, groups, stop_file: self._query(config.worker_id, groups, stop_file),
            Path(tempfile.mkdtemp(dir=self.stop_dir)),
            settle=(0.05, 0.5),
            fold_seconds=0.5,  # groups placed over several heartbeats fold while they move
        )

        def runner(job: WorkerJob, stop_file: str) -> int:
            if not self.packed:
                return self._query(config.worker_id, [job.job_group_id], stop_file)
            packing = Packing("k", job.job_group_id, None, str, None)  # type: ignore[arg-type]
            return packer.run(packing, SimpleNamespace(job_group_id=job.job_group_id), stop_file)

        runs = GroupRuns(runner, stop_dir=Path(tempfile.mkdtemp(dir=self.stop_dir)))
        thread = threading.Thread(
            target=serve_commands,
            args=(ControlPlaneLink(config), runs, fence, config.interval_seconds, self._reason),
            name=f"test-{name}",
            daemon=True,
        )
        thread.start()
        self._threads.append(thread)
        self.worker_ids.append(config.worker_id)
        return LaunchRecord(
            handle=f"{name}#{len(self._threads)}",
            definition=definition,
            started_at=time.time(),
            log="",
            details=launch_details(name=name),
        )

    def _reason(self) -> str | None:
        return "the end of the test" if self._stopping.is_set() else None

    def _query(self, worker_id: int, group_ids: list[str], stop_file: str) -> int:
        """The stand-in query of `group_ids` (one group's, or a pack's)."""
        spans = [Span(g, worker_id, time.monotonic()) for g in group_ids]
        with self._lock:
            self.spans.extend(spans)
        while not Path(stop_file).exists():
            time.sleep(0.02)
        for span in spans:
            span.end = time.monotonic()
        return 0

    def running(self, group_id: str) -> list[Span]:
        with self._lock:
            return [s for s in self.spans if s.group_id == group_id and s.end == math.inf]

    def observes(self, record: LaunchRecord) -> bool:
        return False

    def alive(self, record: LaunchRecord) -> bool:
        raise AssertionError("the control plane cannot see these applications")

    def cancel(self, record: LaunchRecord) -> None:
        raise AssertionError("the control plane cannot stop these applications")

    def stop(self) -> None:
        self._stopping.set()
        for thread in self._threads:
            thread.join(PAUSE_MS / 1000 + 10)


def overlaps(spans: list[Span]) -> list[tuple[Span, Span]]:
    """Pairs of runs of one group on two workers at the same time."""
    ordered = sorted(spans, key=lambda s: s.start)
    return [(a, b) for a, b in itertools.pairwise(ordered) if b.start < a.end]


@pytest.fixture
def control_plane(tmp_path, monkeypatch) -> Iterator[InProcessControlPlane]:
    """A real control plane in this process; worker ids are numbered so the test can name a
    worker in UATU_FAULT before it exists."""
    ids = iter(range(1001, 2000))
    monkeypatch.setattr(pool_slots, "new_worker_id", lambda: next(ids))
    monkeypatch.delenv(faults.ENV, raising=False)
    faults.reset()
    conf = write_conf_dir(tmp_path / "conf", "127.0.0.1:1", tmp_path / "wh", tmp_path / "ck")
    try:
        with in_process_control_plane(tmp_path, conf, lambda *_: 2) as plane:
            yield plane
    finally:
        faults.reset()


def moved_while_silent(
    control_plane: InProcessControlPlane, monkeypatch, apps: InProcessWorkers
) -> list[Span]:
    """Two groups on two workers; the first worker goes silent for 2.5 leases; -> the runs
    of its group, once another worker runs it."""
    pool = control_plane.start(
        apps, size=2, lease_seconds=LEASE_SECONDS, heartbeat_seconds=HEARTBEAT_SECONDS,
        interval=0.2,
    )  # fmt: skip
    # Both heard first: a group goes to the least loaded live worker, and a silent one is not.
    wait_for(lambda: len(pool.live_workers()) == 2, 30, "both workers heartbeating")
    for group_id in ("g-a", "g-b"):
        control_plane.groups.add(audit_group(group_id, "orders"), job_pb2.JOB_STATE_RUNNING, None)
    wait_for(lambda: apps.running("g-a") and apps.running("g-b"), 30, "both groups running")
    (silent,) = {s.worker_id for s in apps.running("g-a")}
    assert {s.worker_id for s in apps.running("g-b")} != {silent}  # one group per worker

    # The crash point: the worker's next heartbeat does not happen for 2.5 leases.
    monkeypatch.setenv(faults.ENV, f"worker.heartbeat/{silent}:pause={PAUSE_MS}")
    wait_for(
        lambda: any(s.worker_id != silent for s in apps.running("g-a")),
        # Usually within a lease and a pass; on a loaded machine it may come after the
        # silence ended, which changes nothing checked: the silent worker's slot is gone then.
        60,
        "the silent worker's group running on another worker",
    )
    return [s for s in apps.spans if s.group_id == "g-a"]


@pytest.mark.parametrize("packed", [False, True], ids=["own-query", "in-a-pack"])
def test_a_silent_workers_group_is_stopped_there_before_it_runs_elsewhere(
    control_plane, monkeypatch, tmp_path, packed
):
    apps = InProcessWorkers(tmp_path / "stops", packed=packed)
    try:
        spans = moved_while_silent(control_plane, monkeypatch, apps)
    finally:
        apps.stop()
    # Moved at least once; on a loaded machine a rebalance may move it again, to the silent
    # worker's replacement once that joins: no two of its runs may overlap either way.
    assert len({s.worker_id for s in spans}) >= 2, spans
    assert overlaps(spans) == [], spans
    # Nor the other group (a rebalance may move it to the silent worker's replacement).
    assert overlaps([s for s in apps.spans if s.group_id == "g-b"]) == [], apps.spans


def test_without_the_fence_the_moved_group_runs_in_two_places(control_plane, monkeypatch, tmp_path):
    """The mutant: a fence longer than the silence. The same scenario then has the group
    running on both workers at once, which the test above would catch."""
    apps = InProcessWorkers(tmp_path / "stops", fence_seconds=PAUSE_MS / 1000 * 10)
    try:
        spans = moved_while_silent(control_plane, monkeypatch, apps)
        assert overlaps(spans) != [], spans
    finally:
        apps.stop()
