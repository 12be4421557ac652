"""The worker pool's decisions, pure: what a worker's heartbeat reported, where a new group
goes (`place`), which groups move to even out the workers (`rebalance_moves`), and the
commands of a heartbeat's reply (`commands_for`, uForwarder's matrix). The pool that acts
on them is controlplane/pool.py.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from uatu.v1.worker_job_pb2 import WorkerJob
from uber.data.kafka.datatransfer import job_pb2
from uber.data.kafka.datatransfer import master_worker_service_pb2 as mw_pb2
from uber.data.kafka.datatransfer.job_group_pb2 import StoredJobGroup
from uber.data.kafka.datatransfer.job_status_pb2 import JobStatus

from controlplane.launchers.base import LaunchRecord
from core import worker_jobs


@dataclass(frozen=True)
class Reported:
    """One group as a worker's last heartbeat reported it."""

    job_id: int
    job: WorkerJob
    state: int
    messages_per_sec: float = 0.0
    bytes_per_sec: float = 0.0

    @property
    def running(self) -> bool:
        return self.state == job_pb2.JOB_STATE_RUNNING

    @property
    def holds(self) -> bool:
        """The worker may still write for the group: its query runs, or it stopped and its
        last writes go on (`writes_pending`). The group starts nowhere else meanwhile."""
        return self.running or self.job.writes_pending


def reported_groups(statuses: Sequence[JobStatus]) -> dict[str, Reported]:
    found = {}
    for status in statuses:
        job = worker_jobs.worker_job_of(status.job)
        if job is not None and job.job_group_id:
            rates = status.kafka_consumer_task_status
            found[job.job_group_id] = Reported(
                status.job.job_id, job, status.state, rates.messages_per_sec, rates.bytes_per_sec
            )
    return found


@dataclass(frozen=True)
class Load:
    """What one worker carries: the groups placed on it, the traffic its heartbeat reports."""

    groups: int = 0
    messages_per_sec: float = 0.0
    bytes_per_sec: float = 0.0


@dataclass(frozen=True)
class Capacity:
    """What each worker application may carry (`serve --worker-capacity`,
    `--worker-messages-per-sec`, `--worker-bytes-per-sec`); a rate of 0 is unbounded."""

    groups: int = 50
    messages_per_sec: float = 0.0
    bytes_per_sec: float = 0.0

    def has_room(self, load: Load) -> bool:
        """Room for one more group: below each bound."""
        return (
            load.groups < self.groups
            and not (self.messages_per_sec and load.messages_per_sec >= self.messages_per_sec)
            and not (self.bytes_per_sec and load.bytes_per_sec >= self.bytes_per_sec)
        )

    def describe(self) -> str:
        rates = [
            f"{value:g} {unit}/s"
            for value, unit in ((self.messages_per_sec, "msgs"), (self.bytes_per_sec, "bytes"))
            if value
        ]
        return ", ".join([f"{self.groups} groups", *rates])


def place(loads: Mapping[int, Load], capacity: Capacity) -> int | None:
    """The worker for a new group: among those with room, the one with the fewest groups,
    then the fewest msgs/s, then the lowest id; None when every worker is full or none is
    live."""
    free = [
        (load.groups, load.messages_per_sec, worker_id)
        for worker_id, load in loads.items()
        if capacity.has_room(load)
    ]
    return min(free)[2] if free else None


SHRINK_FILL = 0.8  # a pool shrinks only when the rest would be at most this full


def wanted_workers(
    groups: int, traffic: Load, capacity: Capacity, current: int, bounds: tuple[int, int]
) -> int:
    """Worker applications a pool that follows the load wants, within `bounds` (least,
    most): enough for `groups` RUNNING groups and the `traffic` its workers report at
    `capacity`; it grows as soon as they need more than `current`, and shrinks only once
    they would fit the smaller pool at `SHRINK_FILL` of its capacity (each shrink moves
    groups, so it waits for headroom rather than flapping at the boundary)."""

    def needed(fill: float) -> int:
        counts = [math.ceil(groups / (capacity.groups * fill))]
        if capacity.messages_per_sec:
            counts.append(math.ceil(traffic.messages_per_sec / (capacity.messages_per_sec * fill)))
        if capacity.bytes_per_sec:
            counts.append(math.ceil(traffic.bytes_per_sec / (capacity.bytes_per_sec * fill)))
        return max(counts)

    least, most = bounds
    target = current
    if needed(1.0) > current:
        target = needed(1.0)
    elif needed(SHRINK_FILL) < current:
        target = needed(SHRINK_FILL)
    return min(most, max(least, target))


def rebalance_moves(
    placed: Mapping[int, Sequence[str]], capacity: Capacity, loads: Mapping[int, Load]
) -> list[tuple[str, int, int]]:
    """Moves `(group, from, to)` that even out the groups of the live workers in `placed`:
    from the one with the most groups to the one with the fewest, while they differ by more
    than one and the receiving worker has room (`loads`: its traffic). Each move restarts a
    query, so nothing moves between workers that differ by one, and each worker gives up
    the groups at the end of its list first (the pool lists those not running yet last:
    moving one of them restarts nothing)."""
    groups = {worker_id: list(names) for worker_id, names in placed.items()}
    moves: list[tuple[str, int, int]] = []
    while groups:
        busiest = max(groups, key=lambda w: (len(groups[w]), -w))
        idlest = min(groups, key=lambda w: (len(groups[w]), w))
        base = loads.get(idlest, Load())
        room = capacity.has_room(
            Load(len(groups[idlest]), base.messages_per_sec, base.bytes_per_sec)
        )
        if len(groups[busiest]) - len(groups[idlest]) <= 1 or not room:
            return moves
        group_id = groups[busiest].pop()
        groups[idlest].append(group_id)
        moves.append((group_id, busiest, idlest))
    return moves


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
