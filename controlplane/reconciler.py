"""The loop that turns stored JobGroup state into running Spark applications.

Every `interval` seconds, for every stored group and every recorded launch, `decide` picks
RUN, CANCEL, UPDATE or NONE and the launcher carries it out:

* RUN launches `spark-submit.sh` for the group; UPDATE is a graceful cancel and a relaunch
  on the same checkpoint (same job_group_id, so the same default checkpoint path);
* an application that died while expected RUNNING is relaunched with exponential backoff
  (`backoff_seconds` x 2^(failures-1)); after `max_failures` in a row it is reported and
  left alone instead of being relaunched in a tight loop. Running for `healthy_seconds`
  resets the count.
* heartbeat lease: every launch reserves a random worker id and secret (workers.py) and
  tells the application where the control plane is (`app_env`); an application that is
  alive but has not heartbeated for `lease_seconds` (or not at all within `startup_seconds`
  of its launch) is FAILED: it is cancelled and relaunched like one that died.
  `lease_seconds=None` turns the lease off.
* beside the passes, in a thread of its own, the housekeeping (controlplane/housekeeping.py)
  refreshes partitions and expires old records every `partition_refresh_seconds`.
* only the leader reconciles; a follower's loop idles until it leads.

No double launch across a failover: a launch is three steps, each followed by a point of the
fault hook (core/faults.py; tests fail, crash or pause a replica there, and flip the fence
during a pause):

1. `controlplane.launch_intent_recorded`: a fenced write of an intent record (the reserved
   worker id, no handle); a replica that no longer leads gets NotLeader here and launches
   nothing;
2. `controlplane.app_launched`: the launcher started the application;
3. `controlplane.launch_recorded`: the launcher's record replaced the intent, fenced; if the
   fence is lost between 2 and 3, the replica cancels the application it just started.

A leader that finds an intent it did not resolve (its predecessor crashed between 1 and 3),
or a record its launcher cannot observe (a local process started on another host), judges
the application by its heartbeats instead: alive while its reserved worker id heartbeats
within the lease (or, never heard yet, within `startup_seconds` of the intent), stopped by
marking the record `cancel_requested`, which the worker service answers with CANCEL.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping

from uber.data.kafka.datatransfer import job_pb2
from uber.data.kafka.datatransfer.job_group_pb2 import StoredJobGroup

from controlplane.errors import NotLeader, NoWorkerRoom
from controlplane.housekeeping import Housekeeping, RefreshPartitions
from controlplane.launchers.base import Launcher, LaunchRecord
from controlplane.pool import WorkerPool
from controlplane.reconcile import Action, decide, definition_of
from controlplane.state.base import Store
from controlplane.state.leadership import Leadership, SoleLeader
from controlplane.workers import is_pool_key, new_worker_id, new_worker_secret
from core.faults import fault_point

log = logging.getLogger("uatu.reconciler")


class Reconciler:
    def __init__(
        self,
        store: Store,
        launcher: Launcher,
        *,
        interval: float = 2.0,
        backoff_seconds: float = 5.0,
        max_failures: int = 5,
        healthy_seconds: float = 120.0,
        lease_seconds: float | None = 60.0,
        startup_seconds: float = 300.0,
        app_env: Mapping[str, str] | None = None,
        leadership: Leadership | None = None,
        refresh_partitions: RefreshPartitions | None = None,
        partition_refresh_seconds: float = 60.0,
        record_ttl_seconds: float = 3600.0,
        clock: Callable[[], float] = time.time,
        max_running: int | None = None,
        pool: WorkerPool | None = None,
    ) -> None:
        self.store = store
        self.launcher = launcher
        self.interval = interval
        self.backoff_seconds = backoff_seconds
        self.max_failures = max_failures
        self.healthy_seconds = healthy_seconds
        self.lease_seconds = lease_seconds
        self.startup_seconds = startup_seconds
        self.app_env = dict(app_env or {})
        self.leadership = leadership or SoleLeader("")
        self.clock = clock
        self.max_running = max_running
        # With a worker pool, groups run on its applications (`launcher` is then the pool).
        self.pool = pool
        self._recorded: set[str] = set()  # groups with a launch record (running, or may be)
        self._wake = threading.Event()
        self.housekeeping = Housekeeping(
            store, self.leadership, refresh_partitions=refresh_partitions,
            refresh_seconds=partition_refresh_seconds, record_ttl_seconds=record_ttl_seconds,
            clock=clock,
        )  # fmt: skip

    def reconcile_once(self) -> dict[str, Action]:
        """One pass over every group and launch; returns the action taken per group id."""
        if self.pool is not None:
            self.pool.maintain()
        groups = {v.group.job_group.job_group_id: v.group for v in self.store.all()}
        launches = {k: r for k, r in self.store.launches().items() if not is_pool_key(k)}
        self._recorded = set(launches)
        heard = last_heartbeats(self.store) if self.lease_seconds is not None else {}
        taken = {}
        for job_group_id in sorted(groups.keys() | launches.keys()):
            try:
                taken[job_group_id] = self._reconcile_group(
                    job_group_id, groups.get(job_group_id), launches.get(job_group_id), heard
                )
            except NoWorkerRoom as e:
                log.warning("%s: not placed yet: %s", job_group_id, e.detail)
                taken[job_group_id] = Action.NONE
            except Exception:  # one group's launcher error must not hold up the others
                log.exception("%s: reconcile failed; retrying next pass", job_group_id)
                taken[job_group_id] = Action.NONE
        return taken

    def _reconcile_group(
        self,
        job_group_id: str,
        stored: StoredJobGroup | None,
        record: LaunchRecord | None,
        heard: dict[int, float],
    ) -> Action:
        alive = record is not None and self._alive(record, heard)
        observed = record is not None and self._observed(record)
        if alive and observed and record is not None and self._lease_expired(record, heard):
            log.warning(
                "%s (%s): no heartbeat within the lease; FAILED, cancelling",
                job_group_id, record.handle,
            )  # fmt: skip
            self.launcher.cancel(record)
            alive = False
        action = decide(
            stored.state if stored else None,
            definition_of(stored.job_group) if stored else None,
            record.definition if record else None,
            alive,
        )
        wanted = stored is not None and stored.state == job_pb2.JOB_STATE_RUNNING
        if action is Action.NONE and record is not None and not alive and not wanted:
            # Dead and no longer wanted: forget it, so a later RUNNING starts afresh.
            self.store.delete_launch(job_group_id)
            self._recorded.discard(job_group_id)
            record = None
        return self._apply(job_group_id, action, stored, record)

    def run(self, stop: threading.Event) -> None:
        """Reconcile every `interval` (at once when woken) until `stop`; the housekeeping
        runs beside it, in a thread of its own."""
        log.info("reconciler running every %.1f s", self.interval)
        housekeeping = threading.Thread(
            target=self.housekeeping.run, args=(stop, self.interval),
            name="reconciler-housekeeping", daemon=True,
        )  # fmt: skip
        housekeeping.start()
        while not stop.is_set():
            try:
                if self.leadership.is_leader():
                    self.reconcile_once()
            except Exception:  # keep reconciling; one bad pass must not stop the loop
                log.exception("reconcile pass failed")
            self._wake.wait(self.interval)
            self._wake.clear()
        housekeeping.join(timeout=self.interval)

    def wake(self) -> None:
        """Run the next pass now (an admin write happened, or the loop should stop)."""
        self._wake.set()

    def _observed(self, record: LaunchRecord) -> bool:
        """True when the launcher itself can watch and stop this record's application."""
        return not record.intent and self.launcher.observes(record)

    def _alive(self, record: LaunchRecord, heard: dict[int, float]) -> bool:
        if self._observed(record):
            return self.launcher.alive(record)
        # Only the application's own heartbeats can tell; a lease of None trusts the record.
        if self.lease_seconds is None or not record.worker_id:
            return True
        return not self._lease_expired(record, heard)

    def _stop(self, job_group_id: str, record: LaunchRecord) -> bool:
        """Stop the application; False while it is asked to stop through its heartbeats."""
        if self._observed(record):
            self.launcher.cancel(record)
            return True
        if not record.cancel_requested:
            log.info("%s: asking the application to stop (CANCEL on its heartbeats)", job_group_id)
            self.store.put_launch(job_group_id, record.replace(cancel_requested=True))
        return False

    def _lease_expired(self, record: LaunchRecord, heard: dict[int, float]) -> bool:
        if self.lease_seconds is None or not record.worker_id:
            return False
        last = heard.get(record.worker_id)
        now = self.clock()
        if last is None or last < record.started_at:
            return now - record.started_at > self.startup_seconds
        return now - last > self.lease_seconds

    def _apply(
        self,
        job_group_id: str,
        action: Action,
        stored: StoredJobGroup | None,
        record: LaunchRecord | None,
    ) -> Action:
        now = self.clock()
        if action is Action.UPDATE and self.pool is not None and record and stored:
            return update_on_worker(self.store, self.pool, job_group_id, record, stored)
        if action is Action.CANCEL or action is Action.UPDATE:
            assert record is not None  # decide() cancels or updates only what runs
            log.info("%s %s (%s)", action.value, job_group_id, record.handle or "intent")
            if not self._stop(job_group_id, record):
                return action  # stopped through its heartbeats; relaunch once it is gone
            self.store.delete_launch(job_group_id)
            self._recorded.discard(job_group_id)
            record = None
        if action is Action.CANCEL:
            return action
        if action is Action.NONE:
            if record and record.failures and now - record.started_at > self.healthy_seconds:
                self.store.put_launch(job_group_id, record.replace(failures=0))
            return action
        assert stored is not None  # decide() runs only what is stored as RUNNING
        failures = 0
        # RUN with a record means the application died, unless it was asked to stop; a record
        # that gave up, with the group RUNNING again, is an operator's new start.
        if record is not None and not record.cancel_requested and not record.gave_up:
            failures = record.failures + 1
            refused = self.pool.refusal(record) if self.pool is not None else None
            if failures > self.max_failures or refused is not None:
                why = refused or f"failed {failures - 1} times in a row (see {record.log})"
                give_up(self.store, job_group_id, record, why)
                return Action.NONE
            retry_at = record.started_at + self.backoff_seconds * 2 ** (failures - 1)
            if now < retry_at:
                return Action.NONE
            log.warning("%s died (%s); relaunch #%d", job_group_id, record.handle, failures)
        others = len(self._recorded - {job_group_id})
        if self.max_running is not None and others >= self.max_running:
            log.warning(
                "%s not launched: %d applications run, the limit (--max-running)",
                job_group_id, others,
            )  # fmt: skip
            return Action.NONE
        self._launch(job_group_id, stored, failures)
        self._recorded.add(job_group_id)
        return action

    def _launch(self, job_group_id: str, stored: StoredJobGroup, failures: int) -> None:
        """Intent, launch, record (see the module docstring); NotLeader if deposed."""
        worker_id = new_worker_id()
        secret, digest = new_worker_secret()
        definition = definition_of(stored.job_group)
        intent = LaunchRecord(
            handle="",
            definition=definition,
            started_at=self.clock(),
            log="",
            worker_id=worker_id,
            worker_secret_sha256=digest,
            failures=failures,
            intent=True,
        )
        self.store.put_launch(job_group_id, intent)
        fault_point("controlplane.launch_intent_recorded")
        env = {**self.app_env, "UATU_WORKER_ID": str(worker_id), "UATU_WORKER_SECRET": secret}
        try:
            launched = self.launcher.launch(stored.job_group, definition, env)
        except NoWorkerRoom:  # nothing started, nothing to fence: wait for the next pass
            self.store.delete_launch(job_group_id)
            raise
        if launched.worker_id is None:  # the pool's records name their worker application's
            launched = launched.replace(worker_id=worker_id, worker_secret_sha256=digest)
        launched = launched.replace(failures=failures)
        fault_point("controlplane.app_launched")
        try:
            self.store.put_launch(job_group_id, launched)
        except NotLeader:
            log.warning(
                "%s: deposed while launching %s; cancelling it", job_group_id, launched.handle
            )
            self.launcher.cancel(launched)
            raise
        fault_point("controlplane.launch_recorded")


def give_up(store: Store, job_group_id: str, record: LaunchRecord, why: str) -> None:
    """No more relaunches: the group is JOB_STATE_FAILED (GetJobGroup, the CLI, the metrics)
    until an operator sets it RUNNING again, which starts it afresh."""
    log.error("%s: FAILED, not relaunching: %s", job_group_id, why)
    versioned = store.get(job_group_id)
    if versioned is not None and versioned.group.state == job_pb2.JOB_STATE_RUNNING:
        failed = StoredJobGroup()
        failed.CopyFrom(versioned.group)
        failed.state = job_pb2.JOB_STATE_FAILED
        for job in failed.jobs:
            job.state = job_pb2.JOB_STATE_FAILED
        store.replace(failed, versioned.version)
    store.put_launch(job_group_id, record.replace(gave_up=True))


def update_on_worker(
    store: Store, pool: WorkerPool, job_group_id: str, record: LaunchRecord, stored: StoredJobGroup
) -> Action:
    """UPDATE of a group on a pool worker: the new definition on the same worker, which
    restarts that query only."""
    log.info("update %s on %s", job_group_id, record.handle)
    store.put_launch(
        job_group_id, pool.update(record, stored.job_group, definition_of(stored.job_group))
    )
    return Action.UPDATE


def last_heartbeats(store: Store) -> dict[int, float]:
    """POSIX time of each worker's latest heartbeat."""
    return {
        w.node.id: w.last_updated.ToNanoseconds() / 1e9
        for w in store.workers()
        if w.last_updated.ToNanoseconds()
    }
