"""RegisterWorker and Heartbeat as plain Python (MasterWorkerService's servicer translates).

In this product a worker is one running Spark application (see jobs/runtime/reporting.py).

* RegisterWorker keeps the id the worker proposes when a launch record reserved it (the
  control plane reserves one per launch and passes it as UATU_WORKER_ID), so heartbeats map to
  their JobGroup through the launch record; any other worker (a job started by a scheduler
  with UATU_CONTROL_PLANE set) gets a fresh id and is only recorded.
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

import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

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

from controlplane.errors import NotLeader, WorkerNotFound
from controlplane.state.base import Store
from controlplane.state.leadership import Leadership


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


class Workers:
    def __init__(
        self,
        store: Store,
        leadership: Leadership,
        *,
        index_seconds: float = 5.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._store = store
        self._leadership = leadership
        self._index_seconds = index_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._group_of_worker: dict[int, str] = {}
        self._indexed_at = float("-inf")

    def register(self, proposed: Node) -> Reply:
        master = self._master()
        if not self._leadership.is_leader():
            return Reply(master, proposed)
        worker_id = proposed.id
        if worker_id == 0 or self._job_group_of(worker_id) is None:
            worker_id = self._store.next_ids("worker", 1)[0]
        node = Node(id=worker_id, host=proposed.host, port=proposed.port, zone=proposed.zone)
        self._store.put_worker(
            StoredWorker(last_updated=self._now(), node=node, state=WORKER_STATE_REGISTERING)
        )
        return Reply(master, node)

    def heartbeat(self, worker: Node, statuses: Sequence[JobStatus]) -> Reply:
        master = self._master()
        if not self._leadership.is_leader():
            return Reply(master, worker)
        stored = self._store.get_worker(worker.id) if worker.id else None
        if stored is None:
            raise WorkerNotFound(worker.id)
        now = self._now()
        job_group_id = self._job_group_of(worker.id)
        group = self._store.get(job_group_id) if job_group_id else None
        if group is not None:
            job_ids = {j.job.kafka_consumer_task.partition: j.job.job_id for j in group.group.jobs}
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

    def _cancel_requested(self, job_group_id: str) -> bool:
        record = self._store.get_launch(job_group_id)
        return record is not None and record.cancel_requested

    def _master(self) -> Node:
        leader = self._leadership.leader()
        if leader is None:
            raise NotLeader(None)
        return node_of(leader)

    def _job_group_of(self, worker_id: int) -> str | None:
        """The JobGroup whose launch reserved this worker id (index refreshed on a miss)."""
        with self._lock:
            found = self._group_of_worker.get(worker_id)
            if found is None and self._clock() - self._indexed_at > self._index_seconds:
                self._group_of_worker = {
                    record.worker_id: job_group_id
                    for job_group_id, record in self._store.launches().items()
                    if record.worker_id
                }
                self._indexed_at = self._clock()
                found = self._group_of_worker.get(worker_id)
            return found

    def _now(self) -> Timestamp:
        stamp = Timestamp()
        stamp.FromNanoseconds(int(self._clock() * 1e9))
        return stamp


def _stored_statuses(
    statuses: Iterable[JobStatus], job_ids: dict[int, int], worker_id: int, now: Timestamp
) -> list[StoredJobStatus]:
    """Statuses under the job id of their partition; partitions without a job are skipped."""
    stored = []
    for status in statuses:
        job_id = job_ids.get(status.job.kafka_consumer_task.partition)
        if job_id is None:
            continue
        record = StoredJobStatus(last_updated=now, job_status=status, worker_id=worker_id)
        record.job_status.job.job_id = job_id
        stored.append(record)
    return stored
