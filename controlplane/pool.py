"""The worker pool: many JobGroups per Spark application, as uForwarder's master assigns jobs
to a fleet of workers.

`serve --workers N` keeps N worker applications (`spark-submit.sh worker`, jobs/worker/;
with `--max-workers`, as many as the load needs) running through the site's launcher, and
places each RUNNING JobGroup on one of them instead
of starting an application per group. `WorkerPool` is a `Launcher` for the reconciler
(controlplane/reconciler.py), so a group's lifecycle, backoff and give-up are the same as
with an application per group:

* `launch` places the group (`place`: among the live workers with room in `capacity`, the
  one with the fewest groups, then the least traffic its heartbeats report) and returns a
  record naming the worker and a new run id; nothing is started here. The worker gets RUN
  in the reply to its next heartbeat (`commands_for`).
* `alive` is False once the worker reports the run FAILED; the reconciler then relaunches it
  with backoff, or gives up and marks the group FAILED. A worker that stops heartbeating is
  the reconciler's lease check (the record's `worker_id` is the worker's).
* `update` keeps the group on its worker with a new definition and run: UPDATE restarts that
  query only, never the application.
* `cancel` answers the worker's heartbeats with CANCEL and returns at once; the worker stops
  the query between two batches and reports it.

Never in two places: `launch` places a group only when no worker may still run it
(`_running`): none reports it running or its last writes pending, or the one that does is
silent past its lease (a worker that cannot heartbeat stops its queries itself after
`fence_seconds`, below the lease: jobs/worker/main.py), or its application was seen dead
and its slot relaunched. A leader places nothing, and starts nothing, before every live
worker has heartbeated to it: until then it does not know what runs where.

Rebalancing: `maintain` moves the groups of a draining worker (the pool shrinks) to the
others, and, when a worker joins (a slot relaunched, the first heartbeats of a new pool),
groups from the most loaded live workers to it until no two differ by more than one group
(`rebalance_moves`); a worker gives up first the groups it has not started yet, then those
placed on it longest ago: the groups a dead worker's lease just handed over (still replaying
their first batch there) move last, so one event does not stop the same group twice. A
move rewrites the group's record to the new worker with a new run; the old worker gets CANCEL
(the group is no longer assigned to it) and the new one gets RUN only once no other worker
reports it running: the same gate as a launch.

The decisions themselves (placement, rebalancing, the command matrix) are pure functions
of controlplane/placement.py; the pool gathers what they need and acts on them.

The pool's own applications (their slots, relaunch and draining) are
controlplane/pool_slots.py's.
"""

from __future__ import annotations

import dataclasses
import logging
import secrets
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from uatu.v1.worker_job_pb2 import WorkerJob
from uber.data.kafka.datatransfer import job_pb2
from uber.data.kafka.datatransfer import master_worker_service_pb2 as mw_pb2
from uber.data.kafka.datatransfer.job_group_pb2 import JobGroup, StoredJobGroup
from uber.data.kafka.datatransfer.job_status_pb2 import JobStatus

from controlplane.errors import NoWorkerRoom
from controlplane.launchers.base import LaunchRecord, launch_details
from controlplane.placement import (
    Capacity,
    Load,
    Reported,
    commands_for,
    place,
    rebalance_moves,
    reported_groups,
    wanted_workers,
)
from controlplane.pool_slots import WorkerLauncher, WorkerSlots
from controlplane.state.base import Store
from controlplane.workers import is_pool_key
from core import worker_jobs

log = logging.getLogger("uatu.pool")


@dataclass
class WorkerView:
    """What the leader last heard from one pool worker (memory only: a new leader learns it
    from the next heartbeat)."""

    heard_at: float
    groups: dict[str, Reported] = field(default_factory=dict)


class Heard:
    """What this leader heard from the pool's workers, and which groups it asked which
    worker to stop; memory only (a new leader learns it from the next heartbeats).
    Thread-safe: heartbeats arrive on the server's threads, the reconciler reads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._views: dict[int, WorkerView] = {}
        self._stopping: dict[str, int] = {}  # group id -> the worker asked to stop it
        # (group id, worker) -> when a reply told that worker to RUN it: it may run the group
        # before any heartbeat says so, until its next heartbeat (sent after it took the
        # reply) reports what it runs.
        self._told_to_run: dict[tuple[str, int], float] = {}

    def take(self, worker_id: int, at: float, reported: dict[str, Reported]) -> frozenset[str]:
        """Record one heartbeat; -> the groups this worker is still asked to stop (a
        request ends once the worker reports the group stopped or gone)."""
        with self._lock:
            self._views[worker_id] = WorkerView(at, reported)
            for told in [t for t in self._told_to_run if t[1] == worker_id]:
                del self._told_to_run[told]
            for group_id, asked in list(self._stopping.items()):
                here = reported.get(group_id)
                if asked == worker_id and (here is None or not here.running):
                    del self._stopping[group_id]
            return frozenset(g for g, w in self._stopping.items() if w == worker_id)

    def has(self, worker_id: int) -> bool:
        with self._lock:
            return worker_id in self._views

    def group(self, worker_id: int, group_id: str) -> Reported | None:
        """The group as the worker's last heartbeat reported it."""
        with self._lock:
            view = self._views.get(worker_id)
            return view.groups.get(group_id) if view is not None else None

    def ask_to_stop(self, group_id: str, worker_id: int) -> None:
        with self._lock:
            self._stopping[group_id] = worker_id

    def told_to_run(self, worker_id: int, group_ids: Iterable[str], at: float) -> None:
        """A reply to this worker carries RUN for `group_ids`."""
        with self._lock:
            for group_id in group_ids:
                self._told_to_run[(group_id, worker_id)] = at

    def stopping(self) -> set[str]:
        with self._lock:
            return set(self._stopping)

    def running(self, since: float, workers: set[int]) -> dict[str, list[int]]:
        """Every group that one of `workers` heard at `since` or later reported running (or
        stopped with its last writes pending: `Reported.holds`), or was told to RUN since its
        last heartbeat -> those workers, sorted."""
        found: dict[str, set[int]] = {}
        with self._lock:
            for worker_id, view in self._views.items():
                if view.heard_at < since or worker_id not in workers:
                    continue
                for group_id, here in view.groups.items():
                    if here.holds:
                        found.setdefault(group_id, set()).add(worker_id)
            for (group_id, worker_id), at in self._told_to_run.items():
                if at >= since and worker_id in workers:
                    found.setdefault(group_id, set()).add(worker_id)
        return {g: sorted(ws) for g, ws in found.items()}

    def runs_any(self, worker_id: int) -> bool:
        """Whether the worker's last heartbeat reported a query running, or a group's last
        writes pending."""
        with self._lock:
            view = self._views.get(worker_id)
            return view is not None and any(r.holds for r in view.groups.values())

    def traffic(self, worker_id: int) -> tuple[float, float]:
        """The msgs/s and bytes/s of the groups the worker reported running."""
        with self._lock:
            view = self._views.get(worker_id)
            running = [r for r in view.groups.values() if r.running] if view else []
        return sum(r.messages_per_sec for r in running), sum(r.bytes_per_sec for r in running)


class WorkerPool:
    """The pool's applications, and the `Launcher` that places groups on them."""

    def __init__(
        self,
        store: Store,
        launcher: WorkerLauncher,
        *,
        size: int,
        max_size: int | None = None,
        capacity: Capacity | None = None,
        app_env: Mapping[str, str] | None = None,
        lease_seconds: float = 60.0,
        startup_seconds: float = 300.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """`size` workers, or, with `max_size` above it, as many as the load needs within
        `size .. max_size` (`wanted_workers`)."""
        self.store = store
        self.launcher = launcher
        self.size = size
        self.max_size = max(max_size or size, size)
        self.capacity = capacity or Capacity()
        self.lease_seconds = lease_seconds
        self.clock = clock
        self.heard = Heard()
        # The slots' worker ids as of this pass's `maintain` (the only place slots change):
        # `alive`, asked once per group, must not read every launch record each time.
        self._pass_worker_ids: set[int] | None = None
        self.slots = WorkerSlots(
            store, launcher, app_env=app_env or {}, lease_seconds=lease_seconds,
            startup_seconds=startup_seconds, clock=clock,
        )  # fmt: skip

    # --- the pool's own applications ---------------------------------------------------

    def maintain(self) -> None:
        """Keep the wanted number of worker applications (pool_slots.py), then move groups
        off draining workers and even out the others (`rebalance`)."""
        wanted = self.wanted(self.store.launches())
        self.slots.maintain(wanted, idle=lambda worker_id: not self.heard.runs_any(worker_id))
        records = self.store.launches()
        self._pass_worker_ids = self.pool_worker_ids(records)
        self.rebalance(records)

    def wanted(self, records: Mapping[str, LaunchRecord]) -> int:
        """`size`, or what the RUNNING groups and the reported traffic need."""
        if self.max_size == self.size:
            return self.size
        groups = sum(1 for v in self.store.all() if v.group.state == job_pb2.JOB_STATE_RUNNING)
        rates = [self.heard.traffic(w) for w in self.slots.live_workers(records)]
        traffic = Load(0, sum(m for m, _ in rates), sum(b for _, b in rates))
        current = max(self.slots.wanted, self.size)
        return wanted_workers(groups, traffic, self.capacity, current, (self.size, self.max_size))

    def live_workers(self, records: Mapping[str, LaunchRecord] | None = None) -> list[int]:
        """The workers that take groups: heard within the lease, not draining."""
        return self.slots.live_workers(records, serving=True)

    def pool_worker_ids(self, records: Mapping[str, LaunchRecord] | None = None) -> set[int]:
        return self.slots.worker_ids(records)

    def unheard(self, records: Mapping[str, LaunchRecord]) -> list[int]:
        """The live workers (draining ones too) that have not heartbeated to this leader."""
        return [w for w in self.slots.live_workers(records) if not self.heard.has(w)]

    def loads(self, records: Mapping[str, LaunchRecord]) -> dict[int, Load]:
        """Each live worker's load: the groups placed on it, the traffic of the ones its
        last heartbeat reported running."""
        live = self.live_workers(records)
        placed = Counter(
            r.worker_id for k, r in records.items() if not is_pool_key(k) and r.worker_id in live
        )
        return {w: Load(placed[w], *self.heard.traffic(w)) for w in live}

    def rebalance(self, records: Mapping[str, LaunchRecord]) -> None:
        """Move the groups of draining workers to serving ones (`place`), then groups to
        serving workers that run fewer (`rebalance_moves`): a worker that joined gets its
        share. Only when every live worker has heartbeated to this leader."""
        serving = self.live_workers(records)
        if not serving or self.unheard(records):
            return
        cancelling = self.heard.stopping()
        placed: dict[int, list[str]] = {w: [] for w in serving}
        leaving = []
        draining = self.slots.draining(records)
        for key, record in sorted(records.items()):
            if is_pool_key(key) or record.intent or key in cancelling:
                continue
            if record.worker_id in placed:
                placed[record.worker_id].append(key)
            elif record.worker_id in draining:
                leaving.append((key, record.worker_id))
        for worker_id, names in placed.items():  # the last ones move first
            running = {g for g in names if self._runs(worker_id, g)}
            # Those not running yet last (moving one restarts nothing); before them the
            # running ones, the latest placed first. A dead worker's groups are placed on the
            # survivors at once and its relaunch joins a minute or two later: they stay, as
            # moving them on would stop each a second time before its first batch there.
            names.sort(key=lambda g: (g not in running, -records[g].started_at, g))
        loads = self.loads(records)
        moves = []
        for group_id, source in leaving:
            target = place(loads, self.capacity)
            if target is None:
                break
            moves.append((group_id, source, target))
            placed[target].append(group_id)
            loads[target] = dataclasses.replace(loads[target], groups=loads[target].groups + 1)
        for move in moves + rebalance_moves(placed, self.capacity, loads):
            self._move(records, *move)

    def _runs(self, worker_id: int, group_id: str) -> bool:
        here = self.heard.group(worker_id, group_id)
        return here is not None and here.running

    def _move(self, records: Mapping[str, LaunchRecord], group_id: str, source: int, target: int):
        """The group's record on `target` with a new run; its old worker gets CANCEL."""
        stored = self.store.get(group_id)
        if stored is None or stored.group.state != job_pb2.JOB_STATE_RUNNING:
            return
        record = records[group_id]
        job_id = int(record.details.get("job_id", 0) or 0)
        moved = self._record(group_id, target, record.definition, job_id)
        self.store.put_launch(group_id, moved.replace(failures=record.failures))
        log.info("%s: moved from worker %d to worker %d", group_id, source, target)

    # --- the Launcher of groups --------------------------------------------------------

    def observes(self, record: LaunchRecord) -> bool:
        return "pool_worker" in record.details

    def launch(self, group: JobGroup, definition: str, env: Mapping[str, str]) -> LaunchRecord:
        """Place the group; NoWorkerRoom when no live worker has room."""
        del env  # the worker application has its own
        records = self.store.launches()
        unheard = self.unheard(records)
        if unheard:  # a new leader: what runs where is known only from heartbeats
            raise NoWorkerRoom(group.job_group_id, f"no heartbeat yet from worker {unheard[0]}")
        elsewhere = self._running(records).get(group.job_group_id)
        if elsewhere:  # never in two places: wait until it stopped there
            raise NoWorkerRoom(group.job_group_id, f"still stopping on worker {elsewhere[0]}")
        loads = self.loads(records)
        worker_id = place(loads, self.capacity)
        if worker_id is None:
            raise NoWorkerRoom(
                group.job_group_id,
                f"no worker has room ({len(loads)} live of {self.size}, "
                f"{self.capacity.describe()} each)",
            )
        log.info("%s: placed on worker %d (%d groups there)", group.job_group_id, worker_id,
                 loads[worker_id].groups)  # fmt: skip
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
        slot_workers = self._pass_worker_ids
        if worker_id not in (self.pool_worker_ids() if slot_workers is None else slot_workers):
            return False
        here = self.heard.group(worker_id, group_id)
        if here is not None and here.job.run == record.details.get("run"):
            return here.state != job_pb2.JOB_STATE_FAILED
        return True

    def failure_of(self, record: LaunchRecord) -> WorkerJob | None:
        """The worker's account of this run, when it reported it FAILED."""
        here = self.heard.group(
            int(record.detail("pool_worker")), str(record.detail("job_group_id"))
        )
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
        group is placed nowhere until it has (`_running`)."""
        self.heard.ask_to_stop(
            str(record.detail("job_group_id")), int(record.detail("pool_worker"))
        )

    def _running(self, records: Mapping[str, LaunchRecord] | None = None) -> dict[str, list[int]]:
        """Every group some worker may still run -> those workers, sorted: the ones that last
        reported its query running, not silent past the lease (a silent one has fenced
        itself) and still the pool's (a slot's application seen dead was replaced)."""
        return self.heard.running(self.clock() - self.lease_seconds, self.pool_worker_ids(records))

    # --- heartbeats of the pool's workers ----------------------------------------------

    def heartbeat(self, worker_id: int, statuses: Sequence[JobStatus]) -> list[mw_pb2.Command]:
        """Take one worker's statuses; the commands of the reply."""
        reported = reported_groups(statuses)
        cancelling = self.heard.take(worker_id, self.clock(), reported)
        records = self.store.launches()
        # Never in two places: a group moved here starts once its old worker stopped it.
        elsewhere = {g for g, ws in self._running(records).items() if set(ws) - {worker_id}}
        assigned: dict[str, tuple[LaunchRecord, StoredJobGroup]] = {}
        for key, record in records.items():
            if is_pool_key(key) or record.worker_id != worker_id or record.intent:
                continue
            if key in elsewhere and not (key in reported and reported[key].running):
                continue  # the other worker gets CANCEL; RUN here once it reports it stopped
            stored = self.store.get(key)
            if stored is not None:
                assigned[key] = (record, stored.group)
        commands = commands_for(reported, assigned, cancelling)
        if self.unheard(records):
            # A new leader knows what runs where only from heartbeats: a group moved before
            # the takeover may still run on a worker not heard yet, so nothing starts.
            return [c for c in commands if c.type == worker_jobs.CANCEL]
        runs = [worker_jobs.worker_job_of(c.job) for c in commands if c.type == worker_jobs.RUN]
        self.heard.told_to_run(worker_id, [r.job_group_id for r in runs if r], self.clock())
        return commands
