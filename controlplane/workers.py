"""RegisterWorker and Heartbeat as plain Python (MasterWorkerService's servicer translates).

In this product a worker is one running Spark application (see jobs/runtime/reporting.py).

* Workers prove who they are. Every launch reserves a random 63-bit worker id and a random
  secret; the application gets both (UATU_WORKER_ID, UATU_WORKER_SECRET) and the launch record
  keeps the id and the secret's SHA-256. RegisterWorker and every Heartbeat must carry the
  secret (`uatu-worker-secret` metadata) matching the record of that id; anything else is
  refused (WorkerRefused, UNAUTHENTICATED). Ids are no longer sequential, so they cannot be
  guessed either.
* A worker the control plane did not launch (a job a scheduler started with plain
  `spark-submit.sh` and UATU_CONTROL_PLANE set) is refused unless `allow_external` is set
  (`serve --allow-external-workers`). Then it gets a fresh random id on RegisterWorker and
  the secret it registered with is remembered (in memory: after a restart or a leader change
  it is refused once and registers again). Its heartbeats only mark it WORKING; they map to
  no JobGroup, so it can neither report for nor be cancelled as one.
* Heartbeat stores one StoredJobStatus per reported partition under the job id of that
  partition's StoredJob, marks the worker WORKING, and answers CANCEL for every reported job
  whose JobGroup is deleted or no longer RUNNING, or whose launch record asks it to stop
  (`cancel_requested`: the reconciler cannot stop that application itself), as uForwarder's
  command matrix does on the worker side; RUN and UPDATE are the launcher's business here,
  since a Spark application is launched for its whole JobGroup.
* Every call of a follower is answered with the leader as master and no commands: the worker
  follows the redirect, as uForwarder's workers do. While no leader is elected the call fails
  with NotLeader (FAILED_PRECONDITION) and the worker retries.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from google.protobuf.timestamp_pb2 import Timestamp
from uber.data.kafka.datatransfer import job_pb2
from uber.data.kafka.datatransfer import master_worker_service_pb2 as mw_pb2
from uber.data.kafka.datatransfer.job_status_pb2 import JobStatus, StoredJobStatus
from uber.data.kafka.datatransfer.worker_pb2 import (
    WORKER_STATE_REGISTERING,
    WORKER_STATE_WORKING,
    Node,
    StoredWorker,
)

from controlplane.errors import NotLeader, WorkerNotFound, WorkerRefused
from controlplane.state.base import Store
from controlplane.state.leadership import Leadership


class PoolHeartbeats(Protocol):
    """The worker pool's side of a pool worker's heartbeat (controlplane/pool.py)."""

    def heartbeat(
        self, worker_id: int, statuses: Sequence[JobStatus]
    ) -> Sequence[mw_pb2.Command]: ...


# The launch records of a worker pool's own applications (controlplane/pool.py) are kept
# under these keys; a JobGroup id cannot start with "~".
POOL_PREFIX = "~worker/"


def is_pool_key(key: str) -> bool:
    """True for the launch record of one of the pool's worker applications."""
    return key.startswith(POOL_PREFIX)


def node_of(address: str | None) -> Node:
    """A Node for a host:port address (an empty Node when there is no address)."""
    if not address:
        return Node()
    host, _, port = address.rpartition(":")
    return Node(host=host, port=int(port) if port.isdigit() else 0)


@dataclass(frozen=True)
class Reply:
    master: Node
    worker: Node
    commands: Sequence[mw_pb2.Command] = ()


def new_worker_id() -> int:
    """A random positive 63-bit id (Node.id is an int64): unguessable, never 0."""
    return secrets.randbits(63) or 1


def new_worker_secret() -> tuple[str, str]:
    """(secret, its SHA-256 in hex): the application gets the first, the store the second."""
    secret = secrets.token_urlsafe(32)
    return secret, secret_digest(secret)


def secret_digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


@dataclass(frozen=True)
class _Launched:
    job_group_id: str
    secret_sha256: str | None


class Workers:
    def __init__(
        self,
        store: Store,
        leadership: Leadership,
        *,
        allow_external: bool = False,
        index_seconds: float = 5.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._store = store
        self._leadership = leadership
        self._allow_external = allow_external
        self._index_seconds = index_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._launched: dict[int, _Launched] = {}
        self._external: dict[int, str] = {}  # worker id -> secret digest, this process only
        self._indexed_at = float("-inf")
        # Set by the assembly when `serve --workers` runs a pool (controlplane/pool.py).
        self.pool: PoolHeartbeats | None = None

    def register(self, proposed: Node, secret: str | None) -> Reply:
        master = self._master()
        if not self._leadership.is_leader():
            return Reply(master, proposed)
        worker_id = proposed.id
        launched = self._launch_of(worker_id) if worker_id else None
        if launched is not None:
            self._check_secret(worker_id, launched.secret_sha256, secret)
        elif not self._allow_external:
            raise WorkerRefused(
                worker_id,
                "no launch of this control plane reserved this id (serve "
                "--allow-external-workers admits applications it did not start)",
            )
        elif not secret:
            raise WorkerRefused(worker_id, "no secret (uatu-worker-secret) presented")
        else:
            worker_id = new_worker_id()
            with self._lock:
                self._external[worker_id] = secret_digest(secret)
        node = Node(id=worker_id, host=proposed.host, port=proposed.port, zone=proposed.zone)
        self._store.put_worker(
            StoredWorker(last_updated=self._now(), node=node, state=WORKER_STATE_REGISTERING)
        )
        return Reply(master, node)

    def heartbeat(self, worker: Node, statuses: Sequence[JobStatus], secret: str | None) -> Reply:
        master = self._master()
        if not self._leadership.is_leader():
            return Reply(master, worker)
        launched = self._launch_of(worker.id) if worker.id else None
        if launched is not None:
            self._check_secret(worker.id, launched.secret_sha256, secret)
        else:
            with self._lock:
                expected = self._external.get(worker.id)
            if expected is None:
                raise WorkerRefused(worker.id, "unknown worker; register first")
            self._check_secret(worker.id, expected, secret)
        stored = self._store.get_worker(worker.id) if worker.id else None
        if stored is None:
            raise WorkerNotFound(worker.id)
        now = self._now()
        if launched is not None and self.pool is not None and is_pool_key(launched.job_group_id):
            return self._pool_heartbeat(master, stored, statuses, now)
        job_group_id = launched.job_group_id if launched is not None else None
        group = self._store.get(job_group_id) if job_group_id else None
        if group is not None:
            tasks = [(j.job.kafka_consumer_task, j.job.job_id) for j in group.group.jobs]
            job_ids = {(t.topic, t.partition): job_id for t, job_id in tasks}
            if len({topic for topic, _ in job_ids}) == 1:  # a status naming no topic: its
                job_ids.update({("", p): i for (_, p), i in list(job_ids.items())})
            self._store.put_job_statuses(_stored_statuses(statuses, job_ids, worker.id, now))
        stored.state = WORKER_STATE_WORKING
        stored.last_updated.CopyFrom(now)
        self._store.put_worker(stored)
        commands: list[mw_pb2.Command] = []
        unwanted = job_group_id is not None and (
            group is None
            or group.group.state != job_pb2.JOB_STATE_RUNNING
            or self._cancel_requested(job_group_id)
        )
        if unwanted:  # CANCEL carries the actual job: the expected one may be gone
            commands = [
                mw_pb2.Command(type=mw_pb2.COMMAND_TYPE_CANCEL_JOB, job=s.job) for s in statuses
            ]
        return Reply(master, stored.node, commands)

    def _pool_heartbeat(
        self, master: Node, stored: StoredWorker, statuses: Sequence[JobStatus], now: Timestamp
    ) -> Reply:
        """A pool worker's heartbeat: one status per group it runs, under the group's job id;
        the pool answers with RUN, UPDATE and CANCEL (controlplane/pool.py)."""
        assert self.pool is not None
        self._store.put_job_statuses(
            StoredJobStatus(last_updated=now, job_status=s, worker_id=stored.node.id)
            for s in statuses
            if s.job.job_id
        )
        stored.state = WORKER_STATE_WORKING
        stored.last_updated.CopyFrom(now)
        self._store.put_worker(stored)
        return Reply(master, stored.node, self.pool.heartbeat(stored.node.id, statuses))

    @staticmethod
    def _check_secret(worker_id: int, expected: str | None, secret: str | None) -> None:
        if not expected:
            raise WorkerRefused(worker_id, "its launch recorded no secret; it must be relaunched")
        if not secret or not hmac.compare_digest(secret_digest(secret), expected):
            raise WorkerRefused(worker_id, "wrong or missing secret (uatu-worker-secret)")

    def _cancel_requested(self, job_group_id: str) -> bool:
        record = self._store.get_launch(job_group_id)
        return record is not None and record.cancel_requested

    def _master(self) -> Node:
        leader = self._leadership.leader()
        if leader is None:
            raise NotLeader(None)
        return node_of(leader)

    def _launch_of(self, worker_id: int) -> _Launched | None:
        """The launch that reserved this worker id (index refreshed on a miss, at most every
        `index_seconds`, so forged ids cannot make every call scan the store)."""
        with self._lock:
            found = self._launched.get(worker_id)
            if found is None and self._clock() - self._indexed_at > self._index_seconds:
                self._launched = {
                    record.worker_id: _Launched(job_group_id, record.worker_secret_sha256)
                    for job_group_id, record in self._store.launches().items()
                    # a group placed on a pool worker names that worker's id, not its own
                    if record.worker_id and "pool_worker" not in record.details
                }
                self._indexed_at = self._clock()
                found = self._launched.get(worker_id)
            return found

    def _now(self) -> Timestamp:
        stamp = Timestamp()
        stamp.FromNanoseconds(int(self._clock() * 1e9))
        return stamp


def _stored_statuses(
    statuses: Iterable[JobStatus],
    job_ids: dict[tuple[str, int], int],
    worker_id: int,
    now: Timestamp,
) -> list[StoredJobStatus]:
    """Statuses under the job id of their (topic, partition); those without a job are
    skipped."""
    stored = []
    for status in statuses:
        task = status.job.kafka_consumer_task
        job_id = job_ids.get((task.topic, task.partition))
        if job_id is None:
            continue
        record = StoredJobStatus(last_updated=now, job_status=status, worker_id=worker_id)
        record.job_status.job.job_id = job_id
        stored.append(record)
    return stored
