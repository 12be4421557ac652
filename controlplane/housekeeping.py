"""The leader's housekeeping, beside its reconcile passes (controlplane/reconciler.py).

Every `refresh_seconds` (`--partition-refresh-seconds`):

* each RUNNING group's topic is looked up again and StoredJobs are added for new partitions
  (JobGroups.refresh_all_partitions: one metadata request per cluster, however many groups
  read it);
* workers and job statuses not heard from for `record_ttl_seconds` (1 h, as uForwarder's
  job-status TTL) are deleted, so deleted groups leave nothing behind.

It has a thread of its own: brokers that answer slowly, or a thousand groups, must not hold
back a reconcile pass, where a CANCEL, a placement or a lease expiry is acted on. Only the
leader keeps house; a follower's loop idles until it leads.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from controlplane.state.base import Store
from controlplane.state.leadership import Leadership

log = logging.getLogger("uatu.reconciler")

# The groups whose jobs a refresh changed.
RefreshPartitions = Callable[[], list[str]]


class Housekeeping:
    def __init__(
        self,
        store: Store,
        leadership: Leadership,
        *,
        refresh_partitions: RefreshPartitions | None,
        refresh_seconds: float,
        record_ttl_seconds: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.leadership = leadership
        self.refresh_partitions = refresh_partitions
        self.refresh_seconds = refresh_seconds
        self.record_ttl_seconds = record_ttl_seconds
        self.clock = clock
        self._done_at = float("-inf")

    def run(self, stop: threading.Event, poll_seconds: float) -> None:
        """Look every `poll_seconds` whether it is due (`once`), until `stop`."""
        while not stop.is_set():
            try:
                if self.leadership.is_leader():
                    self.once()
            except Exception:  # a store or broker error now must not end the housekeeping
                log.exception("housekeeping failed")
            stop.wait(poll_seconds)

    def once(self) -> None:
        """Expire old records and refresh partitions, if `refresh_seconds` have passed since
        the last time."""
        now = self.clock()
        if now - self._done_at < self.refresh_seconds:
            return
        self._done_at = now
        self.expire_records(now)
        if self.refresh_partitions is not None:
            for job_group_id in self.refresh_partitions():
                log.info("%s: the topic gained partitions; jobs added", job_group_id)

    def expire_records(self, now: float) -> tuple[int, int]:
        """Delete workers and job statuses older than the TTL; returns how many of each."""
        return expire_records(self.store, now - self.record_ttl_seconds)


def expire_records(store: Store, oldest: float) -> tuple[int, int]:
    """Delete workers and job statuses last heard before `oldest` (POSIX seconds); returns
    how many of each."""
    workers = [w.node.id for w in store.workers() if w.last_updated.ToNanoseconds() / 1e9 < oldest]
    for worker_id in workers:
        store.delete_worker(worker_id)
    statuses = [
        job_id
        for job_id, s in store.job_statuses().items()
        if s.last_updated.ToNanoseconds() / 1e9 < oldest
    ]
    store.delete_job_statuses(statuses)
    if workers or statuses:
        log.info("expired %d worker(s) and %d job status(es)", len(workers), len(statuses))
    return len(workers), len(statuses)
