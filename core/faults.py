"""The fault hook: crash or fail a job at a named step, to prove a guarantee at the moment it
can break. Off unless the environment asks for it; for tests and drills, never production.

    UATU_FAULT=<point>[@<n>][:<action>][,<point>[@<n>][:<action>]...]

* `<point>` is one of `POINTS` below (an unknown name is a ConfigError, exit 2).
* `@<n>` fires at the n-th time the point is reached in this process (default 1), counted
  per point and per process (per JVM for the JVM points).
* `<action>`:
  * `crash` (the default): one line on stderr (`UATU_FAULT: crash at <point> (hit <n>)`),
    then SIGKILL to the whole process group, as `kill -9 -PGID` of a `spark-submit.sh` run
    would do: the driver, its JVM and, in local mode, the executors die at once, and nothing
    after the point is written.
  * `fail-first-attempt`: the n-th hit raises (`FaultInjected` in Python, a RuntimeException
    in the JVM) and every later hit passes, so a retry of the failed step (a Spark task's
    second attempt, a restarted query) goes through.
  * `pause=<ms>`: the n-th hit sleeps `<ms>` milliseconds, then the step goes on: a step
    that is slow at the worst moment (a task that outlives its epoch before it reads).

Only `jobs/main.py` runs with a process group of its own (`spark-submit.sh` started in a new
session); a crash in a test process would kill the test runner, so fault tests run the job
through `spark-submit.sh` in a subprocess (`start_new_session=True`). On a cluster the JVM
points run in executors, which see the variable only when it is passed on with
`--conf spark.executorEnv.UATU_FAULT=...`; a crash there ends the executor's process group.

The JVM side (`jvm/src/main/java/dev/uatu/faults/FaultPoints.java`) reads the same variable
with the same syntax; `POINTS` lists both sides.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass

from core.errors import ConfigError

ENV = "UATU_FAULT"

CRASH = "crash"
FAIL_FIRST_ATTEMPT = "fail-first-attempt"
PAUSE = "pause"  # written pause=<ms>
ACTIONS = (CRASH, FAIL_FIRST_ATTEMPT, f"{PAUSE}=<ms>")

# Every fault point, where it is and what a crash there proves. A new point is added here
# and placed with one line: `fault_point("<name>")` (Python) or `FaultPoints.hit("<name>")`
# (JVM).
POINTS: Mapping[str, str] = {
    "audit.keys_committed": (
        "jobs/audit/job.py, driver: the JVM fold has written a batch's new exact keys under "
        "the checkpoint and its partials are not yet saved"
    ),
    "audit.partials_saved": (
        "jobs/audit/counts_writer.py, driver: a batch's partials are saved under the "
        "checkpoint; Spark has not committed the batch, its counts are not in audit_counts"
    ),
    "audit.counts_merging": (
        "jobs/audit/counts_writer.py, the writer's thread: Spark has committed the batches "
        "about to be MERGEd (or the query has ended), their counts are not in audit_counts; "
        "@k = the k-th MERGE of the run"
    ),
    "replication.record_acked": (
        "RangeCopier (JVM copy task): a record was acknowledged by the destination; @k = the "
        "k-th acknowledged record of the JVM, before the batch's stats are committed"
    ),
    "replication.tail_read": (
        "StreamCopier (JVM task of the low-latency copy): the task has read its destination "
        "tails (first epoch or a retry) and not yet polled the source; with pause=<ms> longer "
        "than the epoch, the epoch ends before the task reads a record"
    ),
    "replication.relay_take": (
        "StreamCopier (JVM task of the low-latency copy, relay mode): the next epoch's task is "
        "about to wait for the running one's hand-over; with pause=<ms> longer than the epoch, "
        "the running task keeps copying past its deadline and hands over late"
    ),
    "replication.handed_over": (
        "StreamCopier (JVM task of the low-latency copy, relay mode): the task has handed its "
        "consumer to the next epoch's task, which copies on, and has not yet waited for its "
        "own acks; fail-first-attempt fails it there, and with it the run"
    ),
    "replication.epoch_logged": (
        "jobs/replication/continuous.py, driver: the low-latency copy has logged a stats "
        "batch's offsets (its records are all acknowledged) and not yet written its stats"
    ),
    "availability.probe_partitions_new": (
        "jobs/availability/probes/probers.py, the probe receiver (native): it is about to "
        "look up the end offsets of partitions it does not read yet (@1 = the prober's start, "
        "then each retry); with pause=<ms>, probes to those partitions must wait for it"
    ),
    "availability.probe_end_offset": (
        "jobs/availability/probes/probers.py, the probe receiver (native): one partition's "
        "end offset is about to be looked up; fail-first-attempt makes that lookup fail, as a "
        "partition the receiver's metadata does not know yet does, and it is retried later"
    ),
    "controlplane.group_limit_checked": (
        "controlplane/jobgroups.py, AddJobGroup: the group passed the --max-groups check and "
        "is not yet stored; with pause=<ms>, concurrent adds fill the store meanwhile"
    ),
    "controlplane.etcd_groups_counted": (
        "controlplane/state/etcd_store.py, create with a limit: the groups are counted below "
        "the limit and the txn that stores the new one is not yet sent"
    ),
    "dispatch.after_tier_produce": (
        "the dispatcher (JVM dispatch task, jobs/dispatch when it lands): a record written to "
        "a retry tier, the DLQ or the resq is acknowledged, and the source offsets are not yet "
        "checkpointed"
    ),
    "dispatch.before_checkpoint": (
        "the dispatcher (driver): the batch's stats are written and Spark has not yet "
        "committed the batch's offsets"
    ),
}


class FaultInjected(RuntimeError):
    """Raised by a `fail-first-attempt` fault point: a deliberate, one-time failure."""


@dataclass(frozen=True)
class Fault:
    point: str
    hit: int = 1  # fires at the hit-th time the point is reached
    action: str = CRASH
    pause_ms: int = 0  # the pause action's milliseconds


def parse(text: str) -> tuple[Fault, ...]:
    """UATU_FAULT's value -> its faults; ConfigError naming the variable and the bad entry."""
    faults = []
    for entry in (e.strip() for e in text.split(",")):
        if not entry:
            continue
        target, _, action = entry.partition(":")
        point, _, hit = target.partition("@")
        action = action or CRASH
        if point not in POINTS:
            raise ConfigError(ENV, f"{entry!r}: unknown point; the points are {sorted(POINTS)}")
        action, _, millis = action.partition("=")
        if action not in (CRASH, FAIL_FIRST_ATTEMPT, PAUSE) or (action == PAUSE) != bool(millis):
            raise ConfigError(ENV, f"{entry!r}: the action must be one of {list(ACTIONS)}")
        if action == PAUSE and not millis.isdigit():
            raise ConfigError(ENV, f"{entry!r}: pause=<ms> needs a whole number of milliseconds")
        if hit and not (hit.isdigit() and int(hit) >= 1):
            raise ConfigError(ENV, f"{entry!r}: @n must be a whole number >= 1")
        faults.append(Fault(point, int(hit) if hit else 1, action, int(millis or 0)))
    return tuple(faults)


def from_env(env: Mapping[str, str]) -> tuple[Fault, ...]:
    """The faults `env` asks for (none without UATU_FAULT); ConfigError if it is malformed."""
    return parse(env.get(ENV, ""))


_lock = threading.Lock()
_hits: dict[str, int] = {}
_parsed: tuple[str, tuple[Fault, ...]] = ("", ())


def fault_point(name: str) -> None:
    """Mark the named step: does nothing unless UATU_FAULT names it (see the module doc)."""
    global _parsed
    raw = os.environ.get(ENV, "")
    if not raw:
        return
    if name not in POINTS:
        raise ValueError(f"fault point {name!r} is not declared in core.faults.POINTS")
    with _lock:
        if _parsed[0] != raw:
            _parsed = (raw, parse(raw))
        wanted = [f for f in _parsed[1] if f.point == name]
        if not wanted:
            return
        _hits[name] = hit = _hits.get(name, 0) + 1
    for fault in wanted:
        if fault.hit != hit:
            continue
        if fault.action == CRASH:
            crash(f"{name} (hit {hit})")
        if fault.action == PAUSE:
            sys.stderr.write(f"{ENV}: pause {fault.pause_ms} ms at {name} (hit {hit})\n")
            time.sleep(fault.pause_ms / 1000)
            continue
        raise FaultInjected(f"{ENV}: {fault.action} at {name} (hit {hit})")


def crash(where: str) -> None:
    """One line on stderr, then SIGKILL to this process's whole group. Never returns."""
    line = f"{ENV}: crash at {where}\n"
    sys.stderr.write(line)
    sys.stderr.flush()
    _tell_parent(line)
    os.killpg(os.getpgrp(), signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)  # not reached: the group includes this process


def _tell_parent(line: str) -> None:
    """Write `line` to the parent's stderr too, when it is another file: a PySpark driver's
    stderr is a pipe that spark-submit's JVM copies to its own, and the SIGKILL would end
    that JVM before it copied the line."""
    parent = f"/proc/{os.getppid()}/fd/2"
    try:
        if os.stat(parent) == os.fstat(sys.stderr.fileno()):
            return
        with open(parent, "a") as out:
            out.write(line)
    except (OSError, ValueError):
        pass  # no procfs, or no stderr: the line on our own stderr is all there is


def reset() -> None:
    """Forget the hit counts (tests of the hook itself)."""
    global _parsed
    with _lock:
        _hits.clear()
        _parsed = ("", ())
