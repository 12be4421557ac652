"""The wire form of one JobGroup on a worker application: uForwarder's Command and JobStatus,
with the project's `uatu.v1.WorkerJob` in `Job.extension`.

A worker application (`jobs/worker/`) runs many JobGroups, each as its own streaming query.
The control plane (`controlplane/workers.py`) tells it what to run in the reply to its
heartbeats, with uForwarder's command matrix:

* `COMMAND_TYPE_RUN_JOB`: start the JobGroup carried in the command;
* `COMMAND_TYPE_UPDATE_JOB`: the group's definition changed: apply the new one;
* `COMMAND_TYPE_CANCEL_JOB`: stop the group's query.

Each command's `job` is the group's first StoredJob id (the id both sides use for it), its
type, flow control and source (cluster, topic, consumer group), with a `WorkerJob` in
`extension` that carries the job group id, its definition fingerprint, the launch (`run`)
it belongs to and, for RUN and UPDATE, the whole JobGroup. The worker answers with one
JobStatus per group in every heartbeat, with the same `job_id` and a `WorkerJob` naming the
group, the definition and run it runs, the one line of its last failure (`refused` when
the group was bad input), and whether its query stopped with its last writes still going on
(`writes_pending`: the group is still held there). This module is the one place that packs
and unpacks both, so the two sides cannot drift apart.
"""

from __future__ import annotations

from uatu.v1.worker_job_pb2 import WorkerJob
from uber.data.kafka.datatransfer import job_pb2
from uber.data.kafka.datatransfer import master_worker_service_pb2 as mw_pb2
from uber.data.kafka.datatransfer.job_group_pb2 import JobGroup
from uber.data.kafka.datatransfer.job_status_pb2 import JobStatus

RUN = mw_pb2.COMMAND_TYPE_RUN_JOB
CANCEL = mw_pb2.COMMAND_TYPE_CANCEL_JOB
UPDATE = mw_pb2.COMMAND_TYPE_UPDATE_JOB


def _job(job_id: int, group: JobGroup | None, worker_job: WorkerJob) -> job_pb2.Job:
    job = job_pb2.Job(job_id=job_id)
    if group is not None:
        task = group.kafka_consumer_task_group
        job.type = group.type
        job.flow_control.CopyFrom(group.flow_control)
        job.kafka_consumer_task.cluster = task.cluster
        job.kafka_consumer_task.topic = task.topic
        job.kafka_consumer_task.consumer_group = task.consumer_group
    job.extension.Pack(worker_job)
    return job


def command(
    kind: mw_pb2.CommandType, job_id: int, group: JobGroup, definition: str, run: str
) -> mw_pb2.Command:
    """RUN or UPDATE carry the whole group; CANCEL names it only."""
    carried = WorkerJob(job_group_id=group.job_group_id, definition=definition, run=run)
    if kind != CANCEL:
        carried.job_group.CopyFrom(group)
    return mw_pb2.Command(type=kind, job=_job(job_id, group, carried))


def cancel_command(job_id: int, job_group_id: str) -> mw_pb2.Command:
    """CANCEL for a group the control plane no longer has (deleted): its id is all it knows."""
    return mw_pb2.Command(type=CANCEL, job=_job(job_id, None, WorkerJob(job_group_id=job_group_id)))


def worker_job_of(job: job_pb2.Job) -> WorkerJob | None:
    """The WorkerJob a command's or a status's job carries; None when it carries none (a
    single-group application's status, or another sender's)."""
    carried = WorkerJob()
    if not job.HasField("extension") or not job.extension.Unpack(carried):
        return None
    return carried


def status(
    job_id: int,
    reported: WorkerJob,
    state: job_pb2.JobState,
    traffic: JobStatus | None = None,
    *,
    writes_pending: bool = False,
) -> JobStatus:
    """One group's status in a worker's heartbeat (`reported` without its JobGroup); its
    task statuses (offsets, rates, CPU, records produced) from `traffic`; `writes_pending`:
    its query stopped and its last writes go on (the WorkerJob field says what follows)."""
    copied = WorkerJob()
    copied.CopyFrom(reported)
    copied.ClearField("job_group")
    copied.writes_pending = writes_pending
    result = JobStatus(job=_job(job_id, None, copied), state=state)
    if traffic is not None:
        result.kafka_consumer_task_status.CopyFrom(traffic.kafka_consumer_task_status)
        if traffic.HasField("kafka_dispatcher_task_status"):
            result.kafka_dispatcher_task_status.CopyFrom(traffic.kafka_dispatcher_task_status)
    return result
