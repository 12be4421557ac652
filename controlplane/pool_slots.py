"""The worker pool's own applications (controlplane/pool.py): one per slot, each a launch
record under a `~worker/<slot>` key (a JobGroup id cannot start with `~`), so a new leader
knows them.

`WorkerSlots.maintain(wanted, idle)` keeps slots `0 .. wanted-1` running: a slot whose
application is missing, dead, or silent past its lease gets a new one (a new worker id). A
slot at or above `wanted` drains: its worker gets no new group and the pool moves its
groups away; once nothing is placed on it and its heartbeats report nothing running
(`idle`), its application is stopped and the slot forgotten. `wanted` is the pool's call
(fixed, or following the load: controlplane/placement.py `wanted_workers`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Protocol, runtime_checkable

from controlplane.launchers.base import LaunchRecord
from controlplane.state.base import Store
from controlplane.workers import POOL_PREFIX, is_pool_key, new_worker_id, new_worker_secret

log = logging.getLogger("uatu.pool")


@runtime_checkable
class WorkerLauncher(Protocol):
    """What the pool needs of the site's launcher: start a worker application, watch it."""

    def launch_worker(self, name: str, definition: str, env: Mapping[str, str]) -> LaunchRecord: ...
    def observes(self, record: LaunchRecord) -> bool: ...
    def alive(self, record: LaunchRecord) -> bool: ...
    def cancel(self, record: LaunchRecord) -> None: ...


def slot_of(key: str) -> int:
    return int(key[len(POOL_PREFIX) :])


class WorkerSlots:
    def __init__(
        self,
        store: Store,
        launcher: WorkerLauncher,
        *,
        app_env: Mapping[str, str],
        lease_seconds: float,
        startup_seconds: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.launcher = launcher
        self.app_env = dict(app_env)
        self.lease_seconds = lease_seconds
        self.startup_seconds = startup_seconds
        self.clock = clock
        self.wanted = 0  # slots below it serve; the others drain

    def maintain(self, wanted: int, idle: Callable[[int], bool]) -> None:
        """Run slots `0 .. wanted-1`; stop each slot above them whose worker is `idle`."""
        self.wanted = wanted
        records = self.store.launches()
        for slot in range(wanted):
            key = f"{POOL_PREFIX}{slot}"
            record = records.get(key)
            if record is not None and self._worker_up(record):
                continue
            if record is not None:
                log.warning("worker %s (%s) is gone; relaunching it", key, record.handle)
                if self.launcher.observes(record) and self.launcher.alive(record):
                    self.launcher.cancel(record)
            self._launch_worker(key, slot)
        placed = {r.worker_id for k, r in records.items() if not is_pool_key(k)}
        for key, record in sorted(records.items()):
            if not is_pool_key(key) or slot_of(key) < wanted:
                continue
            if record.worker_id in placed or not idle(record.worker_id or 0):
                continue  # still draining
            log.info("worker %s (%s) drained; stopping it", key, record.handle)
            if self.launcher.observes(record) and self.launcher.alive(record):
                self.launcher.cancel(record)
            self.store.delete_launch(key)

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

    def live_workers(
        self, records: Mapping[str, LaunchRecord] | None = None, *, serving: bool = False
    ) -> list[int]:
        """The ids of the pool's applications heard within the lease; with `serving`, only
        those of slots that take groups (not draining)."""
        now = self.clock()
        live = []
        for key, record in (self.store.launches() if records is None else records).items():
            if not is_pool_key(key) or not record.worker_id:
                continue
            if serving and slot_of(key) >= self.wanted:
                continue
            heard = self._heard_at(record.worker_id)
            if heard is not None and now - heard <= self.lease_seconds:
                live.append(record.worker_id)
        return sorted(live)

    def draining(self, records: Mapping[str, LaunchRecord]) -> set[int]:
        """The worker ids of the slots at or above `wanted`: no new groups, theirs move."""
        return {
            r.worker_id
            for k, r in records.items()
            if is_pool_key(k) and r.worker_id and slot_of(k) >= self.wanted
        }

    def worker_ids(self, records: Mapping[str, LaunchRecord] | None = None) -> set[int]:
        """Every slot's worker id (draining ones too)."""
        found = self.store.launches() if records is None else records
        return {r.worker_id for k, r in found.items() if is_pool_key(k) and r.worker_id}

    def count(self, records: Mapping[str, LaunchRecord]) -> int:
        """The slots recorded (running, starting or draining)."""
        return sum(1 for key in records if is_pool_key(key))
