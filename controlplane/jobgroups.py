"""The admin operations on JobGroups, as plain Python (the gRPC servicer only translates).

Semantics follow uForwarder's master (its MasterAdminService and
`KafkaPartitionExpansionWatcher`):

* a JobGroup is validated exactly as `spark-submit.sh` would validate it, and its source
  topic must exist; nothing is stored when either fails;
* the stored group holds one StoredJob per partition of the source topic: the job key is the
  partition, its flow control is the group's divided by the number of jobs, and
  start_offset = -1 / end_offset = 0 (resume from the checkpoint, unbounded); a group that
  reads a topic selection (extension.topics) has one per partition of each selected topic,
  keyed by (topic, partition), and the partition refresh follows the topics that match now
  (new ones added, deleted ones dropped);
* UpdateJobGroup replaces the definition and keeps state and job ids; cluster, topic and type
  are immutable (a new group is needed to change them);
* optimistic concurrency for clients: a write may name the version the client read
  (`expected_version`); if the group changed since, it fails with StaleWrite (ABORTED) and
  nothing is written. A write without one is applied to the current version (re-read and
  retried a few times if a concurrent write lands in between, so a refresh of partitions by
  the reconciler never makes an operator's call fail);
* `max_groups` caps the groups stored: an add beyond it fails with LimitReached
  (RESOURCE_EXHAUSTED), however many adds run at once (the store counts and inserts in one
  atomic step);
* the expected state is RUNNING or CANCELED (FAILED is reported by workers, not requested);
* reads show the actual state next to the expected one: each StoredJob gets the worker and
  the committed offset (as start_offset, where it would resume) of its latest heartbeat, and
  the group's scale_status totals are the rates of heartbeats younger than `fresh_seconds`,
  and its `scale` (and each job's share of it) the workers' worth of traffic they make
  (`scale_of`).
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from google.protobuf.timestamp_pb2 import Timestamp
from uber.data.kafka.datatransfer import job_pb2
from uber.data.kafka.datatransfer.job_group_pb2 import JobGroup, ScaleStatus, StoredJobGroup
from uber.data.kafka.datatransfer.job_pb2 import JobState
from uber.data.kafka.datatransfer.job_status_pb2 import StoredJobStatus
from uber.data.kafka.datatransfer.worker_pb2 import WORKER_STATE_WORKING

from controlplane.errors import JobGroupNotFound, LimitReached, StaleWrite
from controlplane.source_keys import (
    ClusterCounts,
    JobKey,
    PartitionCount,
    SourceKeys,
    TopicPartitions,
)
from controlplane.state.base import Store, Versioned
from core import kafka_admin
from core.config import ClusterConfig, Settings
from core.errors import InvalidJobGroup
from core.faults import fault_point

log = logging.getLogger("uatu.jobgroups")
REQUESTABLE_STATES = (job_pb2.JOB_STATE_RUNNING, job_pb2.JOB_STATE_CANCELED)
UNVERSIONED_ATTEMPTS = 3
IMMUTABLE_FIELDS = (
    ("type", lambda g: g.type),
    ("kafka_consumer_task_group.cluster", lambda g: g.kafka_consumer_task_group.cluster),
    ("kafka_consumer_task_group.topic", lambda g: g.kafka_consumer_task_group.topic),
)


@dataclass(frozen=True)
class ClusterScale:
    running_groups: int
    working_workers: int
    used_messages_per_sec: float
    used_bytes_per_sec: float
    # What the RUNNING groups' flow control allows (0 where a group sets no limit).
    allowed_messages_per_sec: float = 0.0
    allowed_bytes_per_sec: float = 0.0


@dataclass(frozen=True)
class WorkerQuota:
    """One worker's worth of traffic: the unit of a group's `scale`. The defaults are
    uForwarder's autoscaler's per-worker capacity; `serve --worker-messages-per-sec` and
    `--worker-bytes-per-sec` replace them."""

    messages_per_sec: float = 4000.0
    bytes_per_sec: float = 16 * 1024 * 1024


def scale_of(messages_per_sec: float, bytes_per_sec: float, quota: WorkerQuota) -> float:
    """How many workers' worth of traffic the rates are (uForwarder's ScaleStatus.scale:
    the larger of the two ratios; 0 for a group that moves nothing)."""
    return max(messages_per_sec / quota.messages_per_sec, bytes_per_sec / quota.bytes_per_sec)


def with_actuals(
    group: StoredJobGroup,
    statuses: Mapping[int, StoredJobStatus],
    fresh_after: float,
    quota: WorkerQuota = WorkerQuota(),
) -> StoredJobGroup:
    """The stored group with its heartbeats folded in (pure; `group` is not modified). A
    worker application's status also gives its job the state it reports and, in
    `job.extension`, its run: the run and definition it runs, its query's Spark run id and
    the one line of its last failure.

    `fresh_after` is a POSIX time: older heartbeats still give offsets, not rates. With fresh
    rates, `scale_status.scale` is their `scale_of` in `quota`, and each job's `scale` an even
    share of it (as uForwarder splits a group's scale over its jobs); without, the stored
    scale (AddJobGroup's hint) stays.
    """
    shown = StoredJobGroup()
    shown.CopyFrom(group)
    messages = bytes_ = 0.0
    heard = False
    for stored_job in shown.jobs:
        status = statuses.get(stored_job.job.job_id)
        if status is None:
            continue
        task = status.job_status.kafka_consumer_task_status
        stored_job.worker_id = status.worker_id
        stored_job.last_updated.CopyFrom(status.last_updated)
        stored_job.job.kafka_consumer_task.start_offset = task.commit_offset
        reported = status.job_status.job
        if reported.HasField("extension"):  # a worker application's account of the group's
            stored_job.job.extension.CopyFrom(reported.extension)  # run (uatu.v1.WorkerJob)
            stored_job.state = status.job_status.state
        if status.last_updated.ToNanoseconds() / 1e9 >= fresh_after:
            heard = True
            messages += task.messages_per_sec
            bytes_ += task.bytes_per_sec
    if heard:
        shown.scale_status.total_messages_per_sec = messages
        shown.scale_status.total_bytes_per_sec = bytes_
        shown.scale_status.scale = scale_of(messages, bytes_, quota)
        for stored_job in shown.jobs:
            stored_job.scale = shown.scale_status.scale / len(shown.jobs)
    return shown


def per_partition_jobs(
    group: JobGroup,
    state: JobState,
    partitions: int | Sequence[JobKey],
    job_ids: Sequence[int],
) -> list[job_pb2.StoredJob]:
    """One StoredJob per partition of the group's topic (`partitions` a count), or per
    (topic, partition) of a topic selection (`partitions` the keys), the group's flow control
    split evenly (pure)."""
    source = group.kafka_consumer_task_group
    keys = (
        [(source.topic, p) for p in range(partitions)]
        if isinstance(partitions, int)
        else list(partitions)
    )
    n = max(1, len(keys))
    share = job_pb2.FlowControl(
        messages_per_sec=group.flow_control.messages_per_sec / n,
        bytes_per_sec=group.flow_control.bytes_per_sec / n,
        max_inflight_messages=group.flow_control.max_inflight_messages / n,
    )
    jobs = []
    for (topic, partition), job_id in zip(keys, job_ids, strict=True):
        job = job_pb2.Job(
            job_id=job_id,
            type=group.type,
            flow_control=share,
            kafka_consumer_task=job_pb2.KafkaConsumerTask(
                cluster=source.cluster,
                topic=topic,
                partition=partition,
                consumer_group=source.consumer_group,
                auto_offset_reset_policy=source.auto_offset_reset_policy,
                start_offset=-1,
                end_offset=0,
                processing_delay_ms=source.processing_delay_ms,
                isolation_level=source.isolation_level,
                audit_metadata=source.audit_metadata,
            ),
            misc_config=group.misc_config,
            extension=group.extension,
        )
        if group.HasField("audit_task_group"):
            job.audit_task.CopyFrom(
                job_pb2.AuditTask(
                    cluster=group.audit_task_group.cluster,
                    topic=group.audit_task_group.topic,
                    partition=partition,
                    audit_metadata=source.audit_metadata,
                )
            )
        jobs.append(job_pb2.StoredJob(job=job, state=state))
    return jobs


class JobGroups:
    def __init__(
        self,
        store: Store,
        settings: Settings,
        partition_count: PartitionCount,
        now: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
        fresh_seconds: float = 30.0,
        max_groups: int | None = None,
        topic_partitions: TopicPartitions = kafka_admin.topic_partitions,
        quota: WorkerQuota = WorkerQuota(),
        ensure_offsets_topic: Callable[[ClusterConfig, str], None] = (
            kafka_admin.ensure_offsets_topic
        ),
    ) -> None:
        self._store = store
        self._max_groups = max_groups
        self._keys = SourceKeys(settings, partition_count, topic_partitions, ensure_offsets_topic)
        self._now = now
        self._fresh_seconds = fresh_seconds
        self._quota = quota
        self._listeners: list[Callable[[], None]] = []

    def subscribe(self, listener: Callable[[], None]) -> None:
        """Call `listener` after every successful write (the reconciler acts at once)."""
        self._listeners.append(listener)

    def _changed(self) -> None:
        for listener in self._listeners:
            listener()

    def add(self, group: JobGroup, state: JobState, scale: ScaleStatus | None) -> StoredJobGroup:
        return self.add_versioned(group, state, scale).group

    def add_versioned(
        self, group: JobGroup, state: JobState, scale: ScaleStatus | None
    ) -> Versioned:
        if state == job_pb2.JOB_STATE_INVALID:  # unset means "run it", as in uForwarder
            state = job_pb2.JOB_STATE_RUNNING
        _check_state("job_group_state", state)
        keys = self._keys.validate(group)
        # A cheap early refusal; the store's create enforces the cap atomically, since
        # concurrent adds all pass this check before any of them is stored.
        if self._max_groups is not None and self._store.count() >= self._max_groups:
            raise LimitReached("stored JobGroups", self._max_groups)
        fault_point("controlplane.group_limit_checked")
        ids = self._store.next_ids("job", len(keys))
        stored = StoredJobGroup(
            last_updated=self._timestamp(),
            job_group=group,
            state=state,
            jobs=per_partition_jobs(group, state, keys, ids),
            scale_status=scale or ScaleStatus(),
        )
        version = self._store.create(stored, self._max_groups)
        self._changed()
        return Versioned(stored, version)

    def update(self, group: JobGroup, expected_version: int | None = None) -> StoredJobGroup:
        return self.update_versioned(group, expected_version).group

    def update_versioned(self, group: JobGroup, expected_version: int | None = None) -> Versioned:
        partitions: list[list[JobKey]] = []  # validated once, on the first attempt to get there

        def change(current: StoredJobGroup) -> StoredJobGroup:
            for field, read in IMMUTABLE_FIELDS:
                if read(group) != read(current.job_group):
                    raise InvalidJobGroup(
                        field, read(group), f"immutable (was {read(current.job_group)!r})"
                    )
            if not partitions:
                partitions.append(self._keys.validate(group))
            updated = StoredJobGroup()
            updated.CopyFrom(current)
            updated.job_group.CopyFrom(group)
            return self._with_jobs(updated, partitions[0])

        return self._write(group.job_group_id, change, expected_version)

    def _write(
        self,
        job_group_id: str,
        change: Callable[[StoredJobGroup], StoredJobGroup],
        expected_version: int | None,
    ) -> Versioned:
        """Read, change, compare-and-swap: on the client's version, or retried on the current
        one when the client named none."""
        attempts = 1 if expected_version is not None else UNVERSIONED_ATTEMPTS
        for attempt in range(1, attempts + 1):
            current, version = self._get(job_group_id)
            if expected_version is not None and version != expected_version:
                raise StaleWrite(job_group_id, expected_version, version)
            updated = change(current)
            try:
                new_version = self._store.replace(updated, version)
            except StaleWrite:
                if attempt == attempts:
                    raise
                continue
            self._changed()
            return Versioned(updated, new_version)
        raise AssertionError("unreachable")

    def _with_jobs(self, current: StoredJobGroup, keys: Sequence[JobKey]) -> StoredJobGroup:
        """`current` with one job per (topic, partition) of `keys`: a key keeps its job id,
        new ones get fresh ids."""
        by_key = _job_ids(current)
        missing = [k for k in keys if k not in by_key]
        by_key.update(zip(missing, self._store.next_ids("job", len(missing)), strict=True))
        ids = [by_key[k] for k in keys]
        updated = StoredJobGroup()
        updated.CopyFrom(current)
        updated.last_updated.CopyFrom(self._timestamp())
        del updated.jobs[:]
        updated.jobs.extend(per_partition_jobs(current.job_group, current.state, keys, ids))
        return updated

    def set_state(
        self, job_group_id: str, state: JobState, expected_version: int | None = None
    ) -> StoredJobGroup:
        return self.set_state_versioned(job_group_id, state, expected_version).group

    def set_state_versioned(
        self, job_group_id: str, state: JobState, expected_version: int | None = None
    ) -> Versioned:
        _check_state("state", state)

        def change(current: StoredJobGroup) -> StoredJobGroup:
            current.state = state
            for job in current.jobs:
                job.state = state
            current.last_updated.CopyFrom(self._timestamp())
            return current

        return self._write(job_group_id, change, expected_version)

    def delete(self, job_group_id: str, expected_version: int | None = None) -> None:
        if expected_version is not None:
            version = self._get(job_group_id)[1]
            if version != expected_version:
                raise StaleWrite(job_group_id, expected_version, version)
        self._store.delete(job_group_id)
        self._changed()

    def get(self, job_group_id: str) -> StoredJobGroup:
        return self.get_versioned(job_group_id).group

    def get_versioned(self, job_group_id: str) -> Versioned:
        group, version = self._get(job_group_id)
        statuses = self._store.job_statuses(j.job.job_id for j in group.jobs)
        return Versioned(with_actuals(group, statuses, self._fresh(), self._quota), version)

    def all(self) -> Iterator[StoredJobGroup]:
        statuses, fresh = self._store.job_statuses(), self._fresh()
        for versioned in self._store.all():
            yield with_actuals(versioned.group, statuses, fresh, self._quota)

    def cluster_scale(self) -> ClusterScale:
        """RUNNING groups, WORKING workers heard from recently, their summed rates and the
        rates their flow control allows."""
        running = [g for g in self.all() if g.state == job_pb2.JOB_STATE_RUNNING]
        fresh = self._fresh()
        workers = [
            w
            for w in self._store.workers()
            if w.state == WORKER_STATE_WORKING and w.last_updated.ToNanoseconds() / 1e9 >= fresh
        ]
        return ClusterScale(
            running_groups=len(running),
            working_workers=len(workers),
            used_messages_per_sec=sum(g.scale_status.total_messages_per_sec for g in running),
            used_bytes_per_sec=sum(g.scale_status.total_bytes_per_sec for g in running),
            allowed_messages_per_sec=sum(
                g.job_group.flow_control.messages_per_sec for g in running
            ),
            allowed_bytes_per_sec=sum(g.job_group.flow_control.bytes_per_sec for g in running),
        )

    def refresh_all_partitions(self) -> list[str]:
        """`refresh_partitions` for every RUNNING group, with one metadata request per
        cluster they read (`topic_partitions`) instead of one lookup per group: a thousand
        groups on one cluster cost one request. The ids of the groups whose jobs changed; a
        group whose refresh fails (its cluster does not answer, a write raced it) is logged
        and keeps what is stored until the next refresh."""
        counts: ClusterCounts = {}
        changed = []
        for versioned in self._store.all():
            if versioned.group.state != job_pb2.JOB_STATE_RUNNING:
                continue
            job_group_id = versioned.group.job_group.job_group_id
            try:
                if self._refresh(versioned.group, versioned.version, counts):
                    changed.append(job_group_id)
            except Exception as e:  # one group's cluster or write must not stop the others
                log.warning("%s: partition refresh failed: %s", job_group_id, e)
        return changed

    def refresh_partitions(self, job_group_id: str, counts: ClusterCounts | None = None) -> bool:
        """Re-read the topic's partition count; add StoredJobs for new partitions. For a
        topic selection, re-read which topics match: jobs for their new partitions are added,
        those of topics no longer there dropped. With `counts`, a cluster's topics are listed
        once into it and later calls with the same `counts` read from there.

        True when the jobs changed. Like uForwarder's partition-expansion watcher, a topic's
        jobs only grow: Kafka cannot shrink a topic, and a failed lookup keeps what is stored.
        """
        current, version = self._get(job_group_id)
        return self._refresh(current, version, counts)

    def _refresh(self, current: StoredJobGroup, version: int, counts: ClusterCounts | None) -> bool:
        """`refresh_partitions` of the group as read at `version`."""
        if current.state != job_pb2.JOB_STATE_RUNNING:
            return False
        keys = self._keys.validate(current.job_group, counts)
        stored = set(_job_ids(current))
        if set(keys) == stored or (set(keys) < stored and not _selects(current.job_group)):
            return False
        self._store.replace(self._with_jobs(current, keys), version)
        return True

    def _get(self, job_group_id: str) -> tuple[StoredJobGroup, int]:
        found = self._store.get(job_group_id)
        if found is None:
            raise JobGroupNotFound(job_group_id)
        return found.group, found.version

    def _fresh(self) -> float:
        return self._now().timestamp() - self._fresh_seconds

    def _timestamp(self) -> Timestamp:
        stamp = Timestamp()
        stamp.FromDatetime(self._now())
        return stamp


def _job_ids(group: StoredJobGroup) -> dict[JobKey, int]:
    """{(topic, partition): job id} of the stored jobs."""
    return {
        (j.job.kafka_consumer_task.topic, j.job.kafka_consumer_task.partition): j.job.job_id
        for j in group.jobs
    }


def _selects(group: JobGroup) -> bool:
    """Whether the group reads a topic selection (its job keys may shrink)."""
    return not group.kafka_consumer_task_group.topic


def _check_state(field: str, state: JobState) -> None:
    if state not in REQUESTABLE_STATES:
        name = job_pb2.JobState.Name(state) if state in job_pb2.JobState.values() else state
        raise InvalidJobGroup(field, name, "must be JOB_STATE_RUNNING or JOB_STATE_CANCELED")
