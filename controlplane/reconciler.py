"""The loop that turns stored JobGroup state into running Spark applications.

Every `interval` seconds, for every stored group and every recorded launch, `decide` picks
RUN, CANCEL, UPDATE or NONE and the launcher carries it out:

* RUN launches `spark-submit.sh` for the group; UPDATE is a graceful cancel and a relaunch
  on the same checkpoint (same job_group_id, so the same default checkpoint path);
* an application that died while expected RUNNING is relaunched with exponential backoff
  (`backoff_seconds` x 2^(failures-1)); after `max_failures` in a row it is reported and
  left alone instead of being relaunched in a tight loop. Running for `healthy_seconds`
  resets the count.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from uber.data.kafka.datatransfer import job_pb2
from uber.data.kafka.datatransfer.job_group_pb2 import StoredJobGroup

from controlplane.launchers import Launcher
from controlplane.reconcile import Action, decide, definition_of
from controlplane.store import Store

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
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.launcher = launcher
        self.interval = interval
        self.backoff_seconds = backoff_seconds
        self.max_failures = max_failures
        self.healthy_seconds = healthy_seconds
        self.clock = clock

    def reconcile_once(self) -> dict[str, Action]:
        """One pass over every group and launch; returns the action taken per group id."""
        groups = {v.group.job_group.job_group_id: v.group for v in self.store.all()}
        launches = self.store.launches()
        taken = {}
        for job_group_id in sorted(groups.keys() | launches.keys()):
            stored = groups.get(job_group_id)
            record = launches.get(job_group_id)
            alive = record is not None and self.launcher.alive(record)
            action = decide(
                stored.state if stored else None,
                definition_of(stored.job_group) if stored else None,
                record["definition"] if record else None,
                alive,
            )
            wanted = stored is not None and stored.state == job_pb2.JOB_STATE_RUNNING
            if action is Action.NONE and record is not None and not alive and not wanted:
                # Dead and no longer wanted: forget it, so a later RUNNING starts afresh.
                self.store.delete_launch(job_group_id)
                record = None
            taken[job_group_id] = self._apply(job_group_id, action, stored, record)
        return taken

    def run(self, stop: threading.Event) -> None:
        log.info("reconciler running every %.1f s", self.interval)
        while not stop.is_set():
            try:
                self.reconcile_once()
            except Exception:  # keep reconciling; one bad pass must not stop the loop
                log.exception("reconcile pass failed")
            stop.wait(self.interval)

    def _apply(
        self,
        job_group_id: str,
        action: Action,
        stored: StoredJobGroup | None,
        record: dict | None,
    ) -> Action:
        now = self.clock()
        if action is Action.CANCEL or action is Action.UPDATE:
            assert record is not None  # decide() cancels or updates only what runs
            log.info("%s %s (%s)", action.value, job_group_id, record["handle"])
            self.launcher.cancel(record)
            self.store.delete_launch(job_group_id)
            record = None
        if action is Action.CANCEL:
            return action
        if action is Action.NONE:
            if (
                record
                and record.get("failures")
                and now - record["started_at"] > self.healthy_seconds
            ):
                self.store.put_launch(job_group_id, {**record, "failures": 0})
            return action
        assert stored is not None  # decide() runs only what is stored as RUNNING
        failures = 0
        if record is not None:  # RUN with a record means the application died
            failures = int(record.get("failures", 0)) + 1
            if failures > self.max_failures:
                if not record.get("gave_up"):
                    log.error(
                        "%s failed %d times in a row; not relaunching (see %s)",
                        job_group_id, failures - 1, record.get("log"),
                    )  # fmt: skip
                    self.store.put_launch(job_group_id, {**record, "gave_up": True})
                return Action.NONE
            retry_at = record["started_at"] + self.backoff_seconds * 2 ** (failures - 1)
            if now < retry_at:
                return Action.NONE
            log.warning("%s died (%s); relaunch #%d", job_group_id, record["handle"], failures)
        launched = self.launcher.launch(stored.job_group, definition_of(stored.job_group), {})
        self.store.put_launch(job_group_id, {**launched, "failures": failures})
        return action
