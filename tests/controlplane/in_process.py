"""A real control plane in the test's process, for tests of the worker pool whose subject is
not `serve`'s entry point: the gRPC server with both services, a SQLite store, a sole leader,
and, once `start` is called with a launcher of worker applications, the pool and the
reconciler's loop in a thread."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from controlplane.jobgroups import JobGroups
from controlplane.placement import Capacity
from controlplane.pool import WorkerPool
from controlplane.pool_slots import WorkerLauncher
from controlplane.reconciler import Reconciler
from controlplane.server import create_server
from controlplane.source_keys import PartitionCount
from controlplane.state.leadership import SoleLeader
from controlplane.state.sqlite import SqliteStore
from controlplane.workers import Workers
from core.config import load_settings
from core.processes import free_ports


@dataclass
class InProcessControlPlane:
    address: str
    store: SqliteStore
    groups: JobGroups
    workers: Workers
    _stopping: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)

    def start(
        self,
        launcher: WorkerLauncher,
        *,
        size: int,
        lease_seconds: float,
        heartbeat_seconds: float,
        interval: float = 0.5,
        capacity: Capacity | None = None,
    ) -> WorkerPool:
        """A pool of `size` worker applications started by `launcher`, told to heartbeat here
        every `heartbeat_seconds`, and the reconciler's loop (every `interval` seconds)."""
        env = {"UATU_CONTROL_PLANE": self.address, "UATU_HEARTBEAT_SECONDS": str(heartbeat_seconds)}
        pool = WorkerPool(
            self.store, launcher, size=size, capacity=capacity, app_env=env,
            lease_seconds=lease_seconds,
        )  # fmt: skip
        self.workers.pool = pool
        reconciler = Reconciler(
            self.store, pool, pool=pool, interval=interval, backoff_seconds=interval,
            lease_seconds=lease_seconds, max_running=None,
        )  # fmt: skip
        thread = threading.Thread(target=reconciler.run, args=(self._stopping,), daemon=True)
        thread.start()
        self._threads.append(thread)
        return pool


@contextmanager
def in_process_control_plane(
    tmp_path: Path, conf_dir: Path, partition_count: PartitionCount | Callable[..., int]
) -> Iterator[InProcessControlPlane]:
    """The control plane on a free port of 127.0.0.1; stopped (reconciler, then server) on
    exit. Applications it started are the caller's to stop."""
    address = f"127.0.0.1:{free_ports(1)[0]}"
    store = SqliteStore(tmp_path / "cp.sqlite")
    leader = SoleLeader(address)
    groups = JobGroups(store, load_settings(conf_dir), partition_count)
    workers = Workers(store, leader)
    server, _port, _health = create_server(address, groups, workers, leader)
    server.start()
    plane = InProcessControlPlane(address, store, groups, workers)
    try:
        yield plane
    finally:
        plane._stopping.set()
        for thread in plane._threads:
            thread.join(10)
        server.stop(None).wait()
        store.close()
