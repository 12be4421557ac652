"""The worker pool: many JobGroups per Spark application, as uForwarder's master assigns jobs
to a fleet of workers.

`serve --workers N` keeps N worker applications (`spark-submit.sh worker`, jobs/worker/)
running through the site's launcher, and places each RUNNING JobGroup on one of them instead
of starting an application per group. `WorkerPool` is a `Launcher` for the reconciler
(controlplane/reconciler.py), so a group's lifecycle, backoff and give-up are the same as
with an application per group:

* `launch` places the group (`place`: the live worker with the fewest groups, below
  `capacity`) and returns a record naming the worker and a new run id; nothing is
  started here. The worker gets RUN in the reply to its next heartbeat (`commands_for`).
* `alive` is False once the worker reports the run FAILED; the reconciler then relaunches it
  with backoff, or gives up and marks the group FAILED. A worker that stops heartbeating is
  the reconciler's lease check (the record's `worker_id` is the worker's).
* `update` keeps the group on its worker with a new definition and run: UPDATE restarts that
  query only, never the application.
* `cancel` answers the worker's heartbeats with CANCEL and returns at once; the worker stops
  the query between two batches and reports it.

Never in two places: `launch` places a group only when no worker may still run it
(`running_on`): none reports it running, or the one that does is silent past its lease (a
worker that cannot heartbeat stops its queries itself after `fence_seconds`, below the lease:
jobs/worker/main.py), or its application was seen dead and its slot relaunched. A leader
places nothing before every live worker has heartbeated to it: until then it does not know
what runs where.

The pool's own applications are launch records under `~worker/<slot>` keys (a JobGroup id
cannot start with `~`), so a new leader knows them; `maintain` relaunches a slot whose
application died or whose lease expired.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from uatu.v1.worker_job_pb2 import WorkerJob
from uber.data.kafka.datatransfer import job_pb2
from uber.data.kafka.datatransfer import master_worker_service_pb2 as mw_pb2
from uber.data.kafka.datatransfer.job_group_pb2 import JobGroup, StoredJobGroup
from uber.data.kafka.datatransfer.job_status_pb2 import JobStatus

from controlplane.errors import NoWorkerRoom
from controlplane.launchers.base import LaunchRecord, launch_details
from controlplane.state.base import Store
from controlplane.workers import POOL_PREFIX, is_pool_key, new_worker_id, new_worker_secret
from core import worker_jobs

log = logging.getLogger("uatu.pool")


@runtime_checkable
class WorkerLauncher(Protocol):
    """What the pool needs of the site's launcher: start a worker application, watch it."""

    def launch_worker(self, name: str, definition: str, env: Mapping[str, str]) -> LaunchRecord: ...
    def observes(self, record: LaunchRecord) -> bool: ...
    def alive(self, record: LaunchRecord) -> bool: ...
    def cancel(self, record: LaunchRecord) -> None: ...


@dataclass(frozen=True)
class Reported:
    """One group as a worker's last heartbeat reported it."""

    job_id: int
    job: WorkerJob
    state: int

    @property
    def running(self) -> bool:
        return self.state == job_pb2.JOB_STATE_RUNNING


@dataclass
class WorkerView:
    """What the leader last heard from one pool worker (memory only: a new leader learns it
    from the next heartbeat)."""

    heard_at: float
    groups: dict[str, Reported] = field(default_factory=dict)


def reported_groups(statuses: Sequence[JobStatus]) -> dict[str, Reported]:
    found = {}
    for status in statuses:
        job = worker_jobs.worker_job_of(status.job)
        if job is not None and job.job_group_id:
            found[job.job_group_id] = Reported(status.job.job_id, job, status.state)
    return found


def place(assigned: Mapping[int, int], capacity: int) -> int | None:
    """The worker for a new group: the one with the fewest groups (the lowest id on a tie),
    among those below `capacity`; None when every worker is full or none is live."""
    free = [(count, worker_id) for worker_id, count in assigned.items() if count < capacity]
    return min(free)[1] if free else None


def commands_for(
    reported: Mapping[str, Reported],
    assigned: Mapping[str, tuple[LaunchRecord, StoredJobGroup]],
    cancelling: frozenset[str],
) -> list[mw_pb2.Command]:
    """The reply to one worker's heartbeat (uForwarder's command matrix, pure).

    `assigned` maps each group placed on this worker to its launch record and stored group.
    UPDATE when it runs the group with another definition, RUN when it does not run the
    record's run (or stopped it without being asked: fenced), CANCEL for every group it
    reports that is not assigned to it, or is being cancelled."""
    commands = []
    for group_id, (record, stored) in sorted(assigned.items()):
        if group_id in cancelling or stored.state != job_pb2.JOB_STATE_RUNNING:
            continue
        run = str(record.details.get("run", ""))
        job_id = int(record.details.get("job_id", 0) or 0)
        here = reported.get(group_id)
        if here is not None and here.running and here.job.definition != record.definition:
            kind = worker_jobs.UPDATE
        elif here is None or here.job.run != run:
            kind = worker_jobs.RUN
        elif here.state == job_pb2.JOB_STATE_CANCELED:
            kind = worker_jobs.RUN  # stopped without a CANCEL (fenced): start it again
        else:
            continue
        commands.append(worker_jobs.command(kind, job_id, stored.job_group, record.definition, run))
    for group_id, here in sorted(reported.items()):
        if group_id not in assigned or group_id in cancelling:
            commands.append(worker_jobs.cancel_command(here.job_id, group_id))
    return commands


class WorkerPool:
    """The pool's applications, and the `Launcher` that places groups on them."""

    def __init__(
        self,
        store: Store,
        launcher: WorkerLauncher,
        *,
        size: int,
        capacity: int = 100,
        app_env: Mapping[str, str] | None = None,
        lease_seconds: float = 60.0,
        startup_seconds: float = 300.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.launcher = launcher
        self.size = size
        self.capacity = capacity
        self.app_env = dict(app_env or {})
        self.lease_seconds = lease_seconds
        self.startup_seconds = startup_seconds
        self.clock = clock
        self._lock = threading.Lock()
        self._views: dict[int, WorkerView] = {}
        self._cancelling: dict[str, int] = {}  # group id -> the worker asked to stop it

    # --- the pool's own applications ---------------------------------------------------

    def maintain(self) -> None:
        """Launch every slot's application that is missing, dead, or silent past its lease."""
        records = self.store.launches()
        for slot in range(self.size):
            key = f"{POOL_PREFIX}{slot}"
            record = records.get(key)
            if record is not None and self._worker_up(record):
                continue
            if record is not None:
                log.warning("worker %s (%s) is gone; relaunching it", key, record.handle)
                if self.launcher.observes(record) and self.launcher.alive(record):
                    self.launcher.cancel(record)
            self._launch_worker(key, slot)

    def _launch_worker(self, key: str, slot: int) -> None:
        worker_id = new_worker_id()
        secret, digest = new_worker_secret()
        env = {
            **self.app_env,
            "UATU_WORKER_ID": str(worker_id),
            "UATU_WORKER_SECRET": secret,
            # Below the lease: a worker that cannot heartbeat stops its queries before the
            # control plane may place them elsewhere.
            "UATU_WORKER_FENCE_SECONDS": str(max(1.0, self.lease_seconds / 2)),
        }
        record = self.launcher.launch_worker(f"worker-{slot}", "worker", env)
        self.store.put_launch(key, record.replace(worker_id=worker_id, worker_secret_sha256=digest))
        log.info("worker slot %d: launched %s as worker %d", slot, record.handle, worker_id)

    def _worker_up(self, record: LaunchRecord) -> bool:
        if self.launcher.observes(record) and not self.launcher.alive(record):
            return False
        heard = self._heard_at(record.worker_id)
        now = self.clock()
        if heard is None or heard < record.started_at:
            return now - record.started_at <= self.startup_seconds
        return now - heard <= self.lease_seconds

    def _heard_at(self, worker_id: int | None) -> float | None:
        if not worker_id:
            return None
        stored = self.store.get_worker(worker_id)
        if stored is None or not stored.last_updated.ToNanoseconds():
            return None
        return stored.last_updated.ToNanoseconds() / 1e9

    def live_workers(self) -> list[int]:
        """The ids of the pool's applications heard within the lease."""
        now = self.clock()
        live = []
        for key, record in self.store.launches().items():
            if not is_pool_key(key) or not record.worker_id:
                continue
            heard = self._heard_at(record.worker_id)
            if heard is not None and now - heard <= self.lease_seconds:
                live.append(record.worker_id)
        return sorted(live)

    def pool_worker_ids(self) -> set[int]:
        return {
            r.worker_id for k, r in self.store.launches().items() if is_pool_key(k) and r.worker_id
        }

    # --- the Launcher of groups --------------------------------------------------------

    def observes(self, record: LaunchRecord) -> bool:
        return "pool_worker" in record.details

    def launch(self, group: JobGroup, definition: str, env: Mapping[str, str]) -> LaunchRecord:
        """Place the group; NoWorkerRoom when no live worker has room."""
        del env  # the worker application has its own
        live = self.live_workers()
        unheard = [w for w in live if not self.has_heard(w)]
        if unheard:  # a new leader: what runs where is known only from heartbeats
            raise NoWorkerRoom(group.job_group_id, f"no heartbeat yet from worker {unheard[0]}")
        elsewhere = self.running_on(group.job_group_id)
        if elsewhere:  # never in two places: wait until it stopped there
            raise NoWorkerRoom(group.job_group_id, f"still stopping on worker {elsewhere[0]}")
        counts = {worker_id: 0 for worker_id in live}
        for key, record in self.store.launches().items():
            if not is_pool_key(key) and record.worker_id in counts:
                counts[record.worker_id] += 1
        worker_id = place(counts, self.capacity)
        if worker_id is None:
            raise NoWorkerRoom(
                group.job_group_id,
                f"no worker has room ({len(counts)} live of {self.size}, "
                f"{self.capacity} groups each)",
            )
        log.info("%s: placed on worker %d (%d groups there)", group.job_group_id, worker_id,
                 counts[worker_id])  # fmt: skip
        return self._record(group.job_group_id, worker_id, definition, self._job_id(group))

    def update(self, record: LaunchRecord, group: JobGroup, definition: str) -> LaunchRecord:
        """The group's new definition on the same worker (UPDATE restarts that query only)."""
        return self._record(
            group.job_group_id, int(record.detail("pool_worker")), definition, self._job_id(group)
        )

    def _job_id(self, group: JobGroup) -> int:
        stored = self.store.get(group.job_group_id)
        jobs = stored.group.jobs if stored is not None else ()
        return min((j.job.job_id for j in jobs), default=0)

    def _record(self, group_id: str, worker_id: int, definition: str, job_id: int) -> LaunchRecord:
        return LaunchRecord(
            handle=f"worker {worker_id}",
            definition=definition,
            started_at=self.clock(),
            log=f"the log of worker {worker_id}",
            details=launch_details(
                pool_worker=worker_id,
                job_group_id=group_id,
                run=secrets.token_hex(8),
                job_id=job_id,
            ),
            worker_id=worker_id,
        )

    def alive(self, record: LaunchRecord) -> bool:
        """False once the worker reports this run FAILED, or its application is gone (its
        slot runs another one: the old one was seen dead or silent past its lease); the
        reconciler's lease check covers a worker that is silent."""
        worker_id = int(record.detail("pool_worker"))
        group_id = str(record.detail("job_group_id"))
        if worker_id not in self.pool_worker_ids():
            return False
        with self._lock:
            view = self._views.get(worker_id)
            here = view.groups.get(group_id) if view is not None else None
        if here is not None and here.job.run == record.details.get("run"):
            return here.state != job_pb2.JOB_STATE_FAILED
        return True

    def failure_of(self, record: LaunchRecord) -> WorkerJob | None:
        """The worker's account of this run, when it reported it FAILED."""
        worker_id = int(record.detail("pool_worker"))
        with self._lock:
            view = self._views.get(worker_id)
            here = view.groups.get(str(record.detail("job_group_id"))) if view else None
        if here is None or here.state != job_pb2.JOB_STATE_FAILED:
            return None
        return here.job if here.job.run == record.details.get("run") else None

    def refusal(self, record: LaunchRecord) -> str | None:
        """The one line of a run its worker refused as bad input (never relaunched)."""
        failure = self.failure_of(record) if self.observes(record) else None
        return failure.last_error if failure is not None and failure.refused else None

    def cancel(self, record: LaunchRecord) -> None:
        """CANCEL through the worker's heartbeats. Returns at once (a reconcile pass must not
        wait on one worker): the worker stops the query with its next heartbeat, and the
        group is placed nowhere until it has (`running_on`)."""
        with self._lock:
            self._cancelling[str(record.detail("job_group_id"))] = int(record.detail("pool_worker"))

    def running_on(self, group_id: str) -> list[int]:
        """The workers that last reported the group's query running and may still run it:
        not silent past the lease (a silent one has fenced itself) and still the pool's (a
        slot's application seen dead was replaced)."""
        now, pool = self.clock(), self.pool_worker_ids()
        with self._lock:
            return sorted(
                worker_id
                for worker_id, view in self._views.items()
                if now - view.heard_at <= self.lease_seconds
                and worker_id in pool
                and (here := view.groups.get(group_id)) is not None
                and here.running
            )

    # --- heartbeats of the pool's workers ----------------------------------------------

    def has_heard(self, worker_id: int) -> bool:
        """Whether this process has had a heartbeat of the worker (since it started leading)."""
        with self._lock:
            return worker_id in self._views

    def heartbeat(self, worker_id: int, statuses: Sequence[JobStatus]) -> list[mw_pb2.Command]:
        """Take one worker's statuses; the commands of the reply."""
        reported = reported_groups(statuses)
        with self._lock:
            self._views[worker_id] = WorkerView(self.clock(), reported)
            for group_id, asked in list(self._cancelling.items()):
                here = reported.get(group_id)
                if asked == worker_id and (here is None or not here.running):
                    del self._cancelling[group_id]  # stopped
            cancelling = frozenset(g for g, w in self._cancelling.items() if w == worker_id)
        assigned: dict[str, tuple[LaunchRecord, StoredJobGroup]] = {}
        for key, record in self.store.launches().items():
            if is_pool_key(key) or record.worker_id != worker_id or record.intent:
                continue
            stored = self.store.get(key)
            if stored is not None:
                assigned[key] = (record, stored.group)
        return commands_for(reported, assigned, cancelling)
