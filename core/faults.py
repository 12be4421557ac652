"""The fault hook: crash or fail a job at a named step, to prove a guarantee at the moment it
can break. Off unless the environment asks for it; for tests and drills, never production.
The one hook of the project: one variable, one syntax, one Python module and one Java class.

    UATU_FAULT=<point>[/<scope>][@<n>][:<action>][,<point>[/<scope>][@<n>][:<action>]...]

* `<point>` is one of `POINTS` below. An unknown point is a ConfigError (exit 2), and so, at
  job start (`for_job`), is a point that the JobType being run never reaches: a drill that
  would silently do nothing is refused. Reach is known per JobType name, not per mode: the
  audit's counting and cross-tier runs share one name, and only the low-latency copy of a
  replication reaches the StreamCopier points.
* Spaces and tabs around an entry are ignored; an empty entry is skipped.
* `/<scope>` limits the fault to the hits of one instance of the point, for the points whose
  `Point.scope` says what that is (the dispatch points: the topic of the query, as one
  application runs a query per topic); a Kafka topic's characters, `[A-Za-z0-9._-]+`. A scope
  on a point that has none is a ConfigError.
* `@<n>` fires at the n-th time the point is reached (in that scope, when one is given) in
  this process (default 1), counted per point and scope and per process (per JVM for the JVM
  points); n is a whole number from 1 to 2^63-1.
* `<action>`:
  * `crash` (the default): one line on stderr (`UATU_FAULT: crash at <point> (hit <n>)`,
    `<point>/<scope>` when scoped), then SIGKILL to the whole process group, as
    `kill -9 -PGID` of a `spark-submit.sh` run would do: the driver, its JVM and, in local
    mode, the executors die at once, and nothing after the point is written.
  * `fail-first-attempt`: the n-th hit raises (`FaultInjected` in Python, a RuntimeException
    in the JVM) and every later hit passes, so a retry of the failed step (a Spark task's
    second attempt, a restarted query) goes through.
  * `pause=<ms>`: the n-th hit sleeps `<ms>` milliseconds (0 to 2^63-1), then the step goes
    on: a step that is slow at the worst moment (a task that outlives its epoch before it
    reads).

Only `jobs/main.py` runs with a process group of its own (`spark-submit.sh` started in a new
session); a crash in a test process would kill the test runner, so fault tests run the job
through `spark-submit.sh` in a subprocess (`testing/jobrun.py`, `start_new_session=True`). On
a cluster the JVM points run in executors, which see the variable only when it is passed on
with `--conf spark.executorEnv.UATU_FAULT=...`; a crash there ends the executor's process group.

The JVM side (`jvm/src/main/java/dev/uatu/faults/FaultPoints.java`) reads the same variable
with the same grammar (tests/core/test_faults.py runs both parsers on one table of values);
it does not know `POINTS`, which lists both sides' points: a job refuses a bad value before
any JVM starts. Every point is declared here and placed with one line, `fault_point("<name>")`
(Python) or `FaultPoints.hit("<name>")` (JVM), with the scope as second argument for a scoped
point; tests/core/test_faults.py fails on a declared point that is not placed, or a
placed one that is not declared.
"""

from __future__ import annotations

import os
import re
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

# Both parsers (here and FaultPoints.java) accept exactly these; a count or a pause is a Java
# long there, so the same values are refused on both sides.
_NAME = re.compile(r"[A-Za-z0-9._-]+")
_COUNT = re.compile(r"[0-9]+")
_BLANKS = " \t"  # stripped around each entry
MAX_COUNT = 2**63 - 1

# The JobTypes whose runs reach the points (names of jobs/registry.py's JOB_TYPES; core does
# not import jobs, tests/core/test_faults.py checks that each is a JobType).
AUDIT = ("JOB_TYPE_KAFKA_AUDIT",)
REPLICATION = ("JOB_TYPE_KAFKA_REPLICATION",)
AVAILABILITY = ("JOB_TYPE_KAFKA_AVAILABILITY",)
DISPATCH = ("JOB_TYPE_KAFKA_CONSUMER_TO_RPC_DISPATCHER",)
LOAD_GEN_PRODUCE = ("JOB_TYPE_LOAD_GEN_PRODUCE",)
# Reached by the control plane's own process (`python -m controlplane serve`), never by a job.
CONTROL_PLANE = ("controlplane",)
# Reached by a worker application's own loop (`spark-submit.sh worker`), whatever it runs.
WORKER = ("worker",)


@dataclass(frozen=True)
class Point:
    """A fault point: where it is placed and what a fault there proves (`where`), the JobTypes
    whose runs reach it, and what its `/<scope>` names ("" = it takes none)."""

    where: str
    job_types: tuple[str, ...]
    scope: str = ""


# Every fault point, where it is and what a crash there proves.
POINTS: Mapping[str, Point] = {
    "audit.ranges_planned": Point(
        "jobs/audit/fold.py, driver: a batch's offset ranges are planned and none is read "
        "yet; with pause=<ms>, a pattern's topic deleted meanwhile is left out of the batch "
        "and its planned ranges recorded as lost",
        AUDIT,
    ),
    "audit.keys_committed": Point(
        "jobs/audit/job.py, driver: the JVM fold has written a batch's new exact keys under "
        "the checkpoint and its partials are not yet saved",
        AUDIT,
    ),
    "audit.partials_saved": Point(
        "jobs/audit/counts_writer.py, driver: a batch's partials are saved under the "
        "checkpoint; Spark has not committed the batch, its counts are not in audit_counts",
        AUDIT,
    ),
    "audit.counts_merging": Point(
        "jobs/audit/counts_writer.py, the writer's thread: Spark has committed the batches "
        "about to be MERGEd (or the query has ended), their counts are not in audit_counts; "
        "@k = the k-th MERGE of the run",
        AUDIT,
    ),
    "audit.counts_merged": Point(
        "jobs/audit/counts_writer.py, the writer's thread: a write of batches into "
        "audit_counts has committed, their saved partials are not deleted yet; @k = the k-th "
        "write of the run",
        AUDIT,
    ),
    "audit.pack_ledgers": Point(
        "jobs/audit/packs.py, driver: a new pack generation's file is written, its members' "
        "ledgers still name the checkpoints they ran on, its query has not started",
        AUDIT,
    ),
    "tiers.report_ids_appended": Point(
        "jobs/audit/tiers/reports.py, driver: a batch's new report ids are in tier_report_ids "
        "and its counts not yet merged into tier_counts",
        AUDIT,
    ),
    "tiers.ledger_appended": Point(
        "jobs/audit/tiers/checks/replication.py, driver: a batch's source and destination "
        "offset ranges are in replication_ledger; nothing of the batch is decided yet",
        AUDIT,
    ),
    "tiers.samples_appended": Point(
        "jobs/audit/tiers/job.py, driver: a batch's topic samples are in retention_audit and "
        "availability_audit; its verdicts are not decided yet",
        AUDIT,
    ),
    "tiers.decision_saved": Point(
        "jobs/audit/tiers/verdict_writer.py, driver: a batch's new verdict revisions and gaps "
        "are saved under the checkpoint and not yet appended",
        AUDIT,
    ),
    "tiers.verdicts_appended": Point(
        "jobs/audit/tiers/verdict_writer.py, driver: a batch's verdict revisions are in "
        "audit_verdicts and their replication gaps not yet in replication_gaps",
        AUDIT,
    ),
    "source.lost_recorded": Point(
        "jobs/audit/job.py, driver, a --skip-lost-records run: the source ranges lost before "
        "its start are recorded in source_data_loss (jobs/runtime/source_failure.py) and the "
        "query has not started; with pause=<ms>, records deleted meanwhile are a loss the run "
        "did not know",
        AUDIT,
    ),
    "replication.record_acked": Point(
        "RangeCopier (JVM copy task): a record was acknowledged by the destination; @k = the "
        "k-th acknowledged record of the JVM, before the batch's stats are committed",
        REPLICATION,
    ),
    "replication.tail_read": Point(
        "StreamCopier (JVM task of the low-latency copy): the task has read its destination "
        "tails (first epoch or a retry) and not yet polled the source; with pause=<ms> longer "
        "than the epoch, the epoch ends before the task reads a record",
        REPLICATION,
    ),
    "replication.relay_take": Point(
        "StreamCopier (JVM task of the low-latency copy, relay mode): the next epoch's task is "
        "about to wait for the running one's hand-over; with pause=<ms> longer than the epoch, "
        "the running task keeps copying past its deadline and hands over late",
        REPLICATION,
    ),
    "replication.handed_over": Point(
        "StreamCopier (JVM task of the low-latency copy, relay mode): the task has handed its "
        "consumer to the next epoch's task, which copies on, and has not yet waited for the "
        "acks of the records it sent (a task that sent none does not reach it); "
        "fail-first-attempt fails it there, and with it the run",
        REPLICATION,
    ),
    "replication.pack_ledgers": Point(
        "jobs/replication/packs.py, driver: a new pack generation's file is written, its "
        "members' ledgers still name the checkpoints they ran on, its query has not started",
        REPLICATION,
    ),
    "replication.inherited_stats": Point(
        "jobs/replication/packs.py, a thread beside a pack generation's query: the "
        "generation is about to append the stats saved under a checkpoint it inherited (its "
        "first batches may run meanwhile); that checkpoint is kept until they are appended",
        REPLICATION,
    ),
    "replication.stats_saved": Point(
        "jobs/replication/stats.py, driver: a micro-batch's stats and audit rows are saved "
        "under the checkpoint; Spark has not committed the batch, its rows are in no table",
        REPLICATION,
    ),
    "replication.stats_writing": Point(
        "jobs/replication/stats.py, the writer's thread: Spark has committed the batches "
        "about to be appended (or the query has ended), their rows are in no table; @k = the "
        "k-th write of the run",
        REPLICATION,
    ),
    "replication.epoch_logged": Point(
        "jobs/replication/continuous.py, driver: the low-latency copy has logged a stats "
        "batch's offsets (its records are all acknowledged) and not yet written its stats",
        REPLICATION,
    ),
    "availability.probe_partitions_new": Point(
        "jobs/availability/probes/probers.py, the probe receiver (native): it is about to "
        "look up the end offsets of partitions it does not read yet (@1 = the prober's start, "
        "then each retry); with pause=<ms>, probes to those partitions must wait for it",
        AVAILABILITY,
    ),
    "availability.probe_end_offset": Point(
        "jobs/availability/probes/probers.py, the probe receiver (native): one partition's "
        "end offset is about to be looked up; fail-first-attempt makes that lookup fail, as a "
        "partition the receiver's metadata does not know yet does, and it is retried later",
        AVAILABILITY,
    ),
    "availability.probes_appended": Point(
        "jobs/availability/job.py, driver: a batch's final probe windows are in "
        "availability_probes (or none was final); its topic_availability rows are not written",
        AVAILABILITY,
    ),
    "availability.topic_availability_appended": Point(
        "jobs/availability/job.py, driver: a batch's metadata sample is in topic_availability; "
        "the commits it read are not yet in consumer_offset_commits",
        AVAILABILITY,
    ),
    "availability.commits_appended": Point(
        "jobs/availability/job.py, driver: the commits a batch read are in "
        "consumer_offset_commits (and in the lag windows); its group statuses are not written",
        AVAILABILITY,
    ),
    "availability.status_appended": Point(
        "jobs/availability/job.py, driver: a batch's group statuses are in "
        "consumer_group_status; Spark has not committed the batch",
        AVAILABILITY,
    ),
    "loadgen.batch_acked": Point(
        "ProduceTask (JVM producer task of LOAD_GEN_PRODUCE): every record of the task's cut "
        "of a batch is acknowledged and the batch's state is not saved under the checkpoint; "
        "@k = the k-th cut collected in the JVM (one a batch with one producer task)",
        LOAD_GEN_PRODUCE,
    ),
    "loadgen.state_saved": Point(
        "jobs/loadgen/generator.py, driver: a batch's state (where each generator stopped) is "
        "saved under the checkpoint and Spark has not committed the batch; @k = the k-th "
        "batch produced in this run",
        LOAD_GEN_PRODUCE,
    ),
    "controlplane.group_limit_checked": Point(
        "controlplane/jobgroups.py, AddJobGroup: the group passed the --max-groups check and "
        "is not yet stored; with pause=<ms>, concurrent adds fill the store meanwhile",
        CONTROL_PLANE,
    ),
    "controlplane.etcd_groups_counted": Point(
        "controlplane/state/etcd_store.py, create with a limit: the groups are counted below "
        "the limit and the txn that stores the new one is not yet sent",
        CONTROL_PLANE,
    ),
    "controlplane.launch_intent_recorded": Point(
        "controlplane/reconciler.py, a launch's step 1: the intent (reserved worker id, no "
        "handle) is recorded, fenced; the application is not started",
        CONTROL_PLANE,
    ),
    "controlplane.app_launched": Point(
        "controlplane/reconciler.py, a launch's step 2: the launcher started the application "
        "and its record has not replaced the intent yet",
        CONTROL_PLANE,
    ),
    "controlplane.launch_recorded": Point(
        "controlplane/reconciler.py, a launch's step 3: the launcher's record replaced the "
        "intent, fenced; the launch is complete",
        CONTROL_PLANE,
    ),
    "worker.heartbeat": Point(
        "jobs/worker/main.py, before each heartbeat of a worker application: a pause there is "
        "a worker that cannot reach the control plane while its queries still run",
        WORKER,
        "the worker's id (UATU_WORKER_ID; 0 for a worker the control plane did not launch)",
    ),
    "controlplane.etcd_answered": Point(
        "controlplane/state/etcd_client.py: etcd has applied a request and answered; "
        "fail-first-attempt loses the answer, as a connection cut before it was read would",
        CONTROL_PLANE,
    ),
    "dispatch.after_tier_produce": Point(
        "PartitionRun (JVM dispatch task): a record the task wrote to a retry tier, the DLQ or "
        "the resq is acknowledged, and the batch's source offsets are not yet checkpointed",
        DISPATCH,
        "the topic of the task's query (the topic the record was read from)",
    ),
    "dispatch.after_dispatch": Point(
        "PartitionRun (JVM dispatch task): the task has resolved every record of its range "
        "and not yet returned its stats rows; the batch is not over, its offsets unchanged",
        DISPATCH,
        "the topic of the task's query",
    ),
    "dispatch.before_checkpoint": Point(
        "jobs/dispatch/stats.py, driver: a batch's records are done, its consumer-group "
        "offsets committed and its dispatch_stats rows saved under the checkpoint; Spark has "
        "not yet committed the batch's offsets",
        DISPATCH,
        "the topic of the batch's query",
    ),
    "dispatch.stats_writing": Point(
        "jobs/dispatch/stats.py, the writer's thread: Spark has committed the batches about "
        "to be appended to dispatch_stats (or the queries have ended), their rows are in no "
        "table",
        DISPATCH,
        "the topic of the batches' query",
    ),
}


class FaultInjected(RuntimeError):
    """Raised by a `fail-first-attempt` fault point: a deliberate, one-time failure."""


@dataclass(frozen=True)
class Fault:
    point: str
    hit: int = 1  # fires at the hit-th time the point is reached (in scope)
    action: str = CRASH
    pause_ms: int = 0  # the pause action's milliseconds
    scope: str = ""  # "" = every hit of the point counts

    @property
    def target(self) -> str:
        """What the fault counts hits of, and names in its lines: `<point>[/<scope>]`."""
        return f"{self.point}/{self.scope}" if self.scope else self.point


def parse(text: str) -> tuple[Fault, ...]:
    """UATU_FAULT's value -> its faults; ConfigError naming the variable and the bad entry.
    The grammar is FaultPoints.java's too; only this side knows the points."""
    faults = []
    for entry in (e.strip(_BLANKS) for e in text.split(",")):
        if not entry:
            continue
        target, colon, action = entry.partition(":")
        head, at, hit = target.partition("@")
        point, slash, scope = head.partition("/")
        if not _NAME.fullmatch(point) or point not in POINTS:
            raise ConfigError(ENV, f"{entry!r}: unknown point; the points are {sorted(POINTS)}")
        if slash and not _NAME.fullmatch(scope):
            raise ConfigError(ENV, f"{entry!r}: /<scope> must be of [A-Za-z0-9._-]+ (a topic)")
        if slash and not POINTS[point].scope:
            raise ConfigError(ENV, f"{entry!r}: {point} takes no /<scope>")
        if at and not _count(hit, least=1):
            raise ConfigError(ENV, f"{entry!r}: @n must be a whole number from 1 to 2^63-1")
        name, equals, millis = (action if colon else CRASH).partition("=")
        if name not in (CRASH, FAIL_FIRST_ATTEMPT, PAUSE) or (name == PAUSE) != bool(equals):
            raise ConfigError(ENV, f"{entry!r}: the action must be one of {list(ACTIONS)}")
        if name == PAUSE and not _count(millis, least=0):
            raise ConfigError(ENV, f"{entry!r}: pause=<ms> needs a whole number of milliseconds")
        faults.append(Fault(point, int(hit) if at else 1, name, int(millis or 0), scope))
    return tuple(faults)


def _count(text: str, least: int) -> bool:
    """Is `text` a whole number from `least` to MAX_COUNT, in ASCII digits?"""
    return bool(_COUNT.fullmatch(text)) and least <= int(text) <= MAX_COUNT


def from_env(env: Mapping[str, str]) -> tuple[Fault, ...]:
    """The faults `env` asks for (none without UATU_FAULT); ConfigError if it is malformed."""
    return parse(env.get(ENV, ""))


def for_job(env: Mapping[str, str], job_type_name: str) -> tuple[Fault, ...]:
    """The faults `env` asks for in a run of the JobType named `job_type_name`
    (jobs/registry.py); ConfigError naming UATU_FAULT and the point when the value is
    malformed or names a point such a run never reaches (a drill that would do nothing)."""
    faults = from_env(env)
    for fault in faults:
        if job_type_name not in POINTS[fault.point].job_types:
            reached = sorted(n for n, p in POINTS.items() if job_type_name in p.job_types)
            raise ConfigError(
                ENV,
                f"{fault.point!r}: a {job_type_name} run never reaches this point; "
                f"it reaches {reached}",
            )
    return faults


_lock = threading.Lock()
_hits: dict[str, int] = {}  # per Fault.target
_parsed: tuple[str, tuple[Fault, ...]] = ("", ())


def fault_point(name: str, scope: str = "") -> None:
    """Mark the named step, in `scope` for a point that has one (`Point.scope`, given at every
    hit): does nothing unless UATU_FAULT names it (see the module doc)."""
    global _parsed
    raw = os.environ.get(ENV, "")
    if not raw:
        return
    point = POINTS.get(name)
    if point is None:
        raise ValueError(f"fault point {name!r} is not declared in core.faults.POINTS")
    if bool(point.scope) != bool(scope):
        raise ValueError(f"fault point {name!r} has scope {point.scope!r}, placed with {scope!r}")
    with _lock:
        if _parsed[0] != raw:
            _parsed = (raw, parse(raw))
        due = _count_hit(_parsed[1], name, scope)
    for fault, hit in due:
        where = f"{fault.target} (hit {hit})"
        if fault.action == CRASH:
            crash(where)
        elif fault.action == PAUSE:
            sys.stderr.write(f"{ENV}: pause {fault.pause_ms} ms at {where}\n")
            time.sleep(fault.pause_ms / 1000)
        else:
            raise FaultInjected(f"{ENV}: {fault.action} at {where}")


def _count_hit(faults: tuple[Fault, ...], name: str, scope: str) -> list[tuple[Fault, int]]:
    """Count one hit of `name` in `scope` for each target of `faults` it is a hit of (the
    point's, the point's in that scope); -> the faults due at this hit, with their count."""
    counted: dict[str, int] = {}
    due = []
    for fault in faults:
        if fault.point != name or fault.scope not in ("", scope):
            continue
        if fault.target not in counted:
            counted[fault.target] = _hits[fault.target] = _hits.get(fault.target, 0) + 1
        if fault.hit == counted[fault.target]:
            due.append((fault, counted[fault.target]))
    return due


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


def hits() -> dict[str, int]:
    """The hit counts so far, per `Fault.target` (tests of the hook itself)."""
    with _lock:
        return dict(_hits)


def reset() -> None:
    """Forget the hit counts (tests of the hook itself)."""
    global _parsed
    with _lock:
        _hits.clear()
        _parsed = ("", ())
