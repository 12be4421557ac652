"""The worker-pool bench's phases on a running fleet (bench/fleet_pool.py): groups added one
at a time, a flow-control UPDATE (in place, or taking a group out of its pack), CANCELs; each
returns its figures.

Times come from the groups' checkpoints (Spark writes `offsets/N` when it plans batch N and
`commits/N` when N is done; bench/progress_times.py finds a packed audit's or a dispatcher's)
and from GetJobGroup, which shows what the workers' heartbeats reported.

Nothing here asserts a duration: the figures go into the bench's result.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from uatu.v1.worker_job_pb2 import WorkerJob
from uber.data.kafka.datatransfer import job_pb2
from uber.data.kafka.datatransfer import master_admin_service_pb2 as admin_pb2
from uber.data.kafka.datatransfer.job_group_pb2 import JobGroup

from bench._common import percentiles, say, wait_for
from bench.process_usage import JitCpu, tree_usage
from bench.progress_times import commits
from bench.suite_cpu import Ledger
from controlplane.state.sqlite import SqliteStore
from core.processes import machine_busy_seconds
from jobs.runtime.pack_generations import ALONE, LEDGER


def seconds(values: list[float]) -> dict[str, float | None]:
    p50, p99 = percentiles(values, (50, 99)) if values else (None, None)
    return {"n": len(values), "p50": p50, "p99": p99, "max": max(values, default=None)}


def seconds_by_kind(times: Mapping[str, float]) -> dict[str, dict[str, float | None]]:
    """`seconds` of each kind of group: its id's first letter (a: audit, r: replication,
    d: dispatcher), so a figure's tail names the kind it comes from."""
    kinds: dict[str, list[float]] = {}
    for group_id, value in times.items():
        kinds.setdefault(group_id[0], []).append(value)
    return {kind: seconds(values) for kind, values in sorted(kinds.items())}


def first_commits(checkpoints: Path, added: Mapping[str, float], first: dict[str, float]) -> bool:
    """Fill `first` (group id -> seconds from its AddJobGroup to its first batch committed
    after it) for the groups of `added` (id -> when added) that have one; whether all have.

    Only commits after the add count: an audit's ledger may name a pack that committed
    batches before the group joined it."""
    for group_id, at in added.items():
        if group_id not in first:
            after = [m for p in commits(checkpoints, group_id) if (m := p.stat().st_mtime) > at]
            if after:
                first[group_id] = min(after) - at
    return len(first) == len(added)


class BurstCpu:
    """The CPU a burst used, read at each poll: the machine's busy seconds (/proc/stat), the
    workers' trees', and with `by_kind` every process's by kind (bench/suite_cpu.py's
    `Ledger`) and the JVMs' JIT compiler threads' by kind (`JitCpu`), with the wall time of
    each reading. Says whether the cores were the limit, and who kept them busy: a burst that
    kept every core busy ends sooner only with less work."""

    def __init__(self, worker_pids: Sequence[int]) -> None:
        self.worker_pids = list(worker_pids)
        self.readings: list[tuple[float, float, float]] = []
        self.kinds: list[tuple[float, dict[str, float], dict[str, float]]] = []
        self._ledger = Ledger()
        self._jit = JitCpu()
        self._ledger.read(baseline=True)
        self.take(by_kind=True)

    def take(self, by_kind: bool = False) -> None:
        workers = sum(tree_usage(pid)[1] for pid in self.worker_pids)
        now = time.time()
        self.readings.append((now, machine_busy_seconds(), workers))
        if by_kind:
            self._ledger.read()
            spent = {kind: cpu for kind, (_, cpu) in self._ledger.by_kind().items()}
            kinds = self._ledger.kinds
            self._jit.read([int(k) for k, kind in kinds.items() if k.isdigit() and "JVM" in kind])
            jit: dict[str, float] = {}
            for pid, cpu in self._jit.by_process().items():
                kind = kinds.get(str(pid), "other")
                jit[kind] = jit.get(kind, 0.0) + cpu
            self.kinds.append((now, spent, jit))

    def until(self, at: float) -> dict[str, Any] | None:
        """From the first reading to the last one at or before `at` (epoch s): the machine's
        busy cores, and its share of all cores; the workers' CPU seconds; each kind's CPU
        seconds, and its JIT compiler threads' (the kinds read last at or before `at`), most
        first."""
        start, *_ = self.readings
        end = [r for r in self.readings if r[0] <= at][-1]
        wall = end[0] - start[0]
        if wall <= 0:
            return None
        cores = (end[1] - start[1]) / wall
        kinds, jit = [(spent, jit) for t, spent, jit in self.kinds if t <= at][-1]
        return {
            "wall_s": wall,
            "machine_busy_cores": cores,
            "machine_busy_share": cores / (os.cpu_count() or 1),
            "workers_cpu_s": end[2] - start[2],
            "cpu_s_by_kind": _most_first(kinds),
            "jit_cpu_s_by_kind": _most_first(jit),
        }


def _most_first(cpu_by_kind: Mapping[str, float]) -> dict[str, float]:
    return {k: round(v, 1) for k, v in sorted(cpu_by_kind.items(), key=lambda kv: -kv[1]) if v > 0}


def burst_cpu(cpu: BurstCpu, added: Mapping[str, float], first: Mapping[str, float]) -> dict:
    """What `cpu` read from the first AddJobGroup until half the groups had committed their
    first batch, and until all had; the workers' CPU seconds per group over the whole burst."""
    done = sorted(added[g] + s for g, s in first.items())
    if not done:
        return {}
    half, last = done[(len(done) - 1) // 2], done[-1]
    to_last = cpu.until(last)
    return {
        "to_half_committed": cpu.until(half),
        "to_all_committed": to_last,
        "workers_cpu_s_per_group": to_last["workers_cpu_s"] / len(done) if to_last else None,
    }


def add_one_at_a_time(
    stub, groups: Sequence[JobGroup], checkpoints: Path, deadline_s: float
) -> dict[str, Any]:
    """Add `groups` to the running fleet one after another, each once the one before it has
    committed its first batch: an operator's AddJobGroup on a fleet at work, not a burst.
    The time from each AddJobGroup to its first committed batch, overall and by kind."""
    first: dict[str, float] = {}
    for group in groups:
        group_id = group.job_group_id
        stub.AddJobGroup(admin_pb2.AddJobGroupRequest(job_group=group))
        added = {group_id: time.time()}
        its: dict[str, float] = {}

        def committed(added: Mapping[str, float] = added, its: dict[str, float] = its) -> bool:
            return first_commits(checkpoints, added, its)

        wait_for(f"{group_id}'s first batch", committed, deadline_s, 0.2)
        first.update(its)
        say(f"  {group_id}: " + (f"first batch {its[group_id]:.1f} s" if its else "none"))
    return {
        "add_to_first_commit_s": seconds(list(first.values())),
        "add_to_first_commit_s_by_kind": seconds_by_kind(first),
        "never_committed": sorted({g.job_group_id for g in groups} - set(first)),
    }


def update_some(
    stub, groups: Sequence[JobGroup], checkpoints: Path, store: SqliteStore
) -> dict[str, Any]:
    """Send `groups` (replications whose flow control differs from what runs, within the
    batches the copy plans, so the worker applies it in place) as UpdateJobGroup: the time
    until the worker reports the new definition, whether its query stayed the same Spark run,
    and the batches the query planned after the UPDATE up to the first one planned after the
    worker applied it (the first at the new cap), and the time until that batch committed."""
    ids = [g.job_group_id for g in groups]
    before = {g: store.launches()[g].worker_id for g in ids}
    runs_before = {g: _worker_run(stub, g) for g in ids}
    at = time.time()
    for group in groups:
        stub.UpdateJobGroup(admin_pb2.UpdateJobGroupRequest(job_group=group))
    applied: dict[str, float] = {}
    query_runs: dict[str, str] = {}

    def all_applied() -> bool:
        for group_id in ids:
            run = _worker_run(stub, group_id)
            defined = store.launches()[group_id].definition
            # The new definition, not the one before it: the store may not hold it yet.
            new = run.definition == defined != runs_before[group_id].definition
            if group_id not in applied and new and run.query_run:
                applied[group_id], query_runs[group_id] = time.time(), run.query_run
        return len(applied) == len(ids)

    wait_for("the workers to run the updated definitions", all_applied, 300, 0.5)
    effect: dict[str, tuple[int, float]] = {}

    def in_effect() -> bool:
        for group_id in ids:
            if group_id not in effect and (found := _first_batch_after(
                checkpoints, group_id, at, applied[group_id]
            )):  # fmt: skip
                effect[group_id] = found
        return len(effect) == len(ids)

    wait_for("a batch at the new cap", in_effect, 300, 1)
    same = all(store.launches()[g].worker_id == w for g, w in before.items())
    return {
        "to_applied_s": seconds([applied[g] - at for g in ids]),
        "in_place": sum(query_runs.get(g) == runs_before[g].query_run for g in ids),
        "of": len(ids),
        "batches_to_effect": sorted(n for n, _ in effect.values()),
        "to_commit_at_new_cap_s": seconds([t - at for _, t in effect.values()]),
        "same_worker": same,
    }


def unpack_some(stub, groups: Sequence[JobGroup], checkpoints: Path) -> dict[str, Any]:
    """Send `groups` (packed replications given flow control, which does not pack) as
    UpdateJobGroup: the time until each one's first batch alone committed, in its generation
    alone (`<checkpoints>/packs/alone/<id>`, which its ledger then names)."""
    ids = [g.job_group_id for g in groups]
    at = time.time()
    for group in groups:
        stub.UpdateJobGroup(admin_pb2.UpdateJobGroupRequest(job_group=group))
    alone: dict[str, float] = {}

    def all_alone() -> bool:
        for group_id in ids:
            if group_id not in alone and (first := _first_commit_alone(checkpoints, group_id)):
                alone[group_id] = first
        return len(alone) == len(ids)

    wait_for("the unpacked copies' first batches alone", all_alone, 300, 0.5)
    return {"to_first_batch_alone_s": seconds([alone[g] - at for g in ids])}


def _first_commit_alone(checkpoints: Path, group_id: str) -> float | None:
    """When the group's first batch in its generation alone committed; None before."""
    try:
        named = json.loads((checkpoints / group_id / LEDGER).read_text())["checkpoint"]
    except (OSError, ValueError, KeyError):
        return None  # no ledger yet, or one being written
    if Path(named).parent.name != ALONE:
        return None
    done = [p.stat().st_mtime for p in commits(checkpoints, group_id)]
    return min(done, default=None)


def _worker_run(stub, group_id: str) -> WorkerJob:
    """The worker's account of the group's run (GetJobGroup: its first job's extension)."""
    group = stub.GetJobGroup(admin_pb2.GetJobGroupRequest(id=group_id)).group
    carried = WorkerJob()
    for stored_job in group.jobs:
        if stored_job.job.extension.Unpack(carried):
            break
    return carried


def _first_batch_after(
    checkpoints: Path, group_id: str, updated: float, applied: float
) -> tuple[int, float] | None:
    """(batches planned since `updated` up to and including the first planned after
    `applied`, when that one committed), once it has."""
    folder = checkpoints / group_id
    planned = sorted(
        (int(p.name), p.stat().st_mtime)
        for p in (folder / "offsets").glob("[0-9]*")
        if p.stat().st_mtime > updated
    )
    for count, (batch, planned_at) in enumerate(planned, start=1):
        done = folder / "commits" / str(batch)
        if planned_at > applied:
            return (count, done.stat().st_mtime) if done.exists() else None
    return None


def cancel_some(stub, group_ids: Sequence[str]) -> dict[str, Any]:
    """CANCEL `group_ids` (UpdateJobGroupState): the time until GetJobGroup shows each one's
    jobs CANCELED, as its worker's heartbeat reported once the query stopped."""
    at = time.monotonic()
    for group_id in group_ids:
        stub.UpdateJobGroupState(
            admin_pb2.UpdateJobGroupStateRequest(id=group_id, state=job_pb2.JOB_STATE_CANCELED)
        )
    stopped: dict[str, float] = {}

    def all_stopped() -> bool:
        for group_id in group_ids:
            if group_id in stopped:
                continue
            jobs = stub.GetJobGroup(admin_pb2.GetJobGroupRequest(id=group_id)).group.jobs
            if {j.state for j in jobs} == {job_pb2.JOB_STATE_CANCELED}:
                stopped[group_id] = time.monotonic() - at
        return len(stopped) == len(group_ids)

    wait_for("the canceled queries to stop", all_stopped, 300, 0.5)
    return {"to_stopped_s": seconds(list(stopped.values()))}
