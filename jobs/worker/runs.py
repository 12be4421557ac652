"""The JobGroups one worker application runs: one streaming query each, in one SparkSession.

`GroupRuns.take(commands)` applies the control plane's commands (uForwarder's matrix, carried
as `core/worker_jobs.py` says):

=================  ===============================  =====================================
command            the group is not here, or over   the group runs here
=================  ===============================  =====================================
RUN                start it (a FAILED run: only     a repeat (same run id): nothing;
                   with a new run id)               a new run id: restart it
UPDATE             start it                         a repeat (same run and definition):
                                                    nothing; only its flow control
                                                    changed: retune it in place if its
                                                    job can, else restart it; otherwise
                                                    restart it with the new definition
CANCEL             forget it                        stop it; forget it once stopped
=================  ===============================  =====================================

(`decide`, pure, is that table.) A retune hands the new flow control to the running job
(`StreamingJob.retune`, attached by the runner through `attach`): the query keeps running, its
Spark run id (`query_run` in the group's status) stays, and the group reports the new
definition and run at once, so the control plane sends nothing more.

Each group runs in a thread of its own, whose Spark jobs go to a FAIR scheduler pool named
after the group, so a heavy group cannot take every task slot from the others. A run that
fails, or is refused as bad input, is reported FAILED with the one line of its cause; it is
never restarted here: relaunching with backoff, and giving up, is the control plane's
(controlplane/reconciler.py), which sends a RUN with a new run id.

A stop (CANCEL, UPDATE, `stop_all`) creates the run's stop file, which its query polls
(jobs/runtime/runner.py): the query stops between two micro-batches and its thread ends
once the writes that follow its last batches are made (the audit counts' MERGE, the stats'
appends: jobs/runtime/after_commit.py). From the query's stop to the thread's end the group
reports CANCELED with `writes_pending` (`note_stopped`): stopped, as a CANCEL asked, and
still held here, so the control plane starts it nowhere else before those writes are in
(the next place starts where the tables end).
"""

from __future__ import annotations

import enum
import logging
import tempfile
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from uatu.v1.worker_job_pb2 import WorkerJob
from uber.data.kafka.datatransfer import job_pb2
from uber.data.kafka.datatransfer import master_worker_service_pb2 as mw_pb2
from uber.data.kafka.datatransfer.job_group_pb2 import JobGroup
from uber.data.kafka.datatransfer.job_pb2 import FlowControl
from uber.data.kafka.datatransfer.job_status_pb2 import JobStatus

from core import worker_jobs
from core.errors import EXIT_BAD_INPUT, EXIT_OK, UatuError, error_line, first_line

log = logging.getLogger("uatu.worker")

# Runs one JobGroup to its end in the caller's thread; returns the exit status (0 stopped,
# 1 failed) or raises UatuError. `jobs/worker/main.py` binds it to the session and settings.
GroupRunner = Callable[[WorkerJob, str], int]


class Step(enum.Enum):
    NOTHING = "nothing"
    START = "start"
    RESTART = "restart"
    STOP = "stop"
    FORGET = "forget"
    RETUNE = "retune"


def decide(
    kind: int, running: bool, here: WorkerJob | None, wanted: WorkerJob, failed: bool = False
) -> Step:
    """What a command means for a group (the table of the module docstring). `here` is the
    group's run on this worker, if any; `running` whether its query still runs, `failed`
    whether it ended FAILED (else it was stopped: asked to, or fenced)."""
    if kind == worker_jobs.CANCEL:
        return Step.STOP if running else Step.FORGET
    if here is None:
        return Step.START
    if kind == worker_jobs.UPDATE:
        if running and (here.run, here.definition) == (wanted.run, wanted.definition):
            return Step.NOTHING  # a repeat: the reply to a heartbeat sent before it was taken
        if running and only_flow_control_differs(here.job_group, wanted.job_group):
            return Step.RETUNE
        return Step.RESTART if running else Step.START
    if here.run == wanted.run:
        return Step.START if not running and not failed else Step.NOTHING
    return Step.RESTART if running else Step.START


def only_flow_control_differs(here: JobGroup, wanted: JobGroup) -> bool:
    """Whether the two definitions differ, and only in their flow control."""
    if here.flow_control == wanted.flow_control:
        return False
    return _without_flow_control(here) == _without_flow_control(wanted)


def _without_flow_control(group: JobGroup) -> JobGroup:
    copied = JobGroup()
    copied.CopyFrom(group)
    copied.ClearField("flow_control")
    return copied


# A running job's `StreamingJob.retune`: True when it applied the new flow control in place.
Retune = Callable[[FlowControl], bool]


@dataclass
class GroupRun:
    """One JobGroup's run on this worker: its command's job id and WorkerJob, its state."""

    job_id: int
    job: WorkerJob
    stop_file: Path
    state: job_pb2.JobState = job_pb2.JOB_STATE_RUNNING
    thread: threading.Thread | None = None
    stop_requested: bool = False
    done: threading.Event = field(default_factory=threading.Event)
    told_ended: bool = False  # a heartbeat carried its final state
    retune: Retune | None = None  # attached by the runner once its job runs
    query_stopped: bool = False  # asked to stop, its query has; its last writes go on

    @property
    def running(self) -> bool:
        return not self.done.is_set()

    def stop(self) -> None:
        self.stop_requested = True
        self.stop_file.touch()

    def status(self, traffic: JobStatus | None = None) -> JobStatus:
        """Its state, CANCELED with `writes_pending` between its query's stop and its end."""
        pending = self.query_stopped and self.running
        state = job_pb2.JOB_STATE_CANCELED if pending else self.state
        return worker_jobs.status(self.job_id, self.job, state, traffic, writes_pending=pending)


class GroupRuns:
    """The worker's runs, keyed by job group id; thread-safe."""

    def __init__(
        self,
        runner: GroupRunner,
        stop_dir: Path | None = None,
        traffic: Callable[[str], JobStatus | None] = lambda _: None,
    ) -> None:
        """`traffic` gives a group's offsets, rates, CPU share and records produced for its
        status (the worker's QueryEvents: jobs/worker/events.py)."""
        self._runner = runner
        self._traffic = traffic
        self._stop_dir = stop_dir or Path(tempfile.mkdtemp(prefix="uatu-worker-"))
        self._lock = threading.Lock()
        self._runs: dict[str, GroupRun] = {}
        self._started = 0
        # Set when a run ends: the heartbeat loop wakes to tell its final state at once (a
        # CANCEL is done, for the control plane, only once a heartbeat said so).
        self.ended = threading.Event()

    def statuses(self) -> list[JobStatus]:
        """One status per group, for the next heartbeat; a run that has ended is marked as
        told, so a CANCEL may forget it from then on (not before: its final state would
        never reach the control plane)."""
        with self._lock:
            runs = list(self._runs.values())
        for run in runs:
            run.told_ended = not run.running
        return [run.status(self._traffic(run.job.job_group_id)) for run in runs]

    def running(self) -> list[str]:
        with self._lock:
            return sorted(g for g, run in self._runs.items() if run.running)

    def take(self, commands: Iterable[mw_pb2.Command]) -> None:
        for command in commands:
            wanted = worker_jobs.worker_job_of(command.job)
            if wanted is None or not wanted.job_group_id:
                log.warning(
                    "ignoring a command that names no JobGroup (job %d)", command.job.job_id
                )
                continue
            self._take(command.type, command.job.job_id, wanted)

    def _take(self, kind: int, job_id: int, wanted: WorkerJob) -> None:
        group_id = wanted.job_group_id
        with self._lock:
            here = self._runs.get(group_id)
        running = here is not None and here.running
        failed = here is not None and here.state == job_pb2.JOB_STATE_FAILED
        step = decide(kind, running, here.job if here else None, wanted, failed)
        if step is Step.NOTHING or (step is Step.STOP and here is not None and here.stop_requested):
            return
        name = mw_pb2.CommandType.Name(kind)
        log.info("%s for %s (run %s): %s", name, group_id, wanted.run, step.value)
        if step is Step.FORGET:
            if here is not None and not here.told_ended:
                return  # the next heartbeat tells its final state; the next CANCEL forgets it
            with self._lock:
                self._runs.pop(group_id, None)
            return
        if step is Step.RETUNE and here is not None and not here.stop_requested:
            if self._retuned(here, wanted):
                return
            log.info("%s cannot apply it in place: restart", group_id)
        previous = here if here is not None and running else None
        if previous is not None:
            previous.stop()
            if step is Step.STOP:
                return
        self._start(job_id, wanted, after=previous)

    @staticmethod
    def _retuned(here: GroupRun, wanted: WorkerJob) -> bool:
        """Hand the new flow control to the running job; when it applied it, the run goes on
        as the new definition and run (the same query: its `query_run` stays)."""
        retune = here.retune
        if retune is None or not retune(wanted.job_group.flow_control):
            return False
        adopted = WorkerJob()
        adopted.CopyFrom(wanted)
        adopted.query_run = here.job.query_run
        here.job = adopted
        return True

    def attach(self, group_id: str, retune: Retune) -> None:
        """The running job's retune, from the runner once the job's query is about to start."""
        with self._lock:
            run = self._runs.get(group_id)
        if run is not None and run.running:
            run.retune = retune

    def note_started(self, group_id: str, query_run: str) -> None:
        """The Spark run id of the group's query, which just started."""
        with self._lock:
            run = self._runs.get(group_id)
        if run is not None and run.running:
            run.job.query_run = query_run

    def note_stopped(self, group_id: str, query_run: str | None = None) -> None:
        """The group's query stopped as asked (its writes go on): it reports CANCELED with
        `writes_pending` from now on, told by the next heartbeat at once. Only for a run
        asked to stop, and, with `query_run`, only while that is its query's Spark run id (a
        late word about a query of the run before is not this run's)."""
        with self._lock:
            run = self._runs.get(group_id)
        if run is None or not run.running or not run.stop_requested:
            return
        if query_run is not None and run.job.query_run != query_run:
            return
        if not run.query_stopped:
            run.query_stopped = True
            log.info("%s: its query stopped; its last writes go on", group_id)
            self.ended.set()

    def _start(self, job_id: int, wanted: WorkerJob, after: GroupRun | None = None) -> None:
        """Start the group's run in its own thread; with `after`, once that run has ended (the
        same checkpoint: never two queries on it at once). Never blocks the caller: the
        worker's heartbeats go on while a query stops."""
        group_id = wanted.job_group_id
        self._started += 1  # each run its own stop file: the one before may still be stopping
        stop_file = self._stop_dir / f"{group_id}.{self._started}.stop"
        run = GroupRun(job_id=job_id, job=wanted, stop_file=stop_file)
        run.thread = threading.Thread(
            target=self._run, args=(run, after), name=f"uatu-group-{group_id}", daemon=True
        )
        with self._lock:
            self._runs[group_id] = run
        run.thread.start()

    def _run(self, run: GroupRun, after: GroupRun | None) -> None:
        group_id = run.job.job_group_id
        try:
            if after is not None:
                after.done.wait()
            if run.stop_requested:  # stopped before it started
                run.state = job_pb2.JOB_STATE_CANCELED
                return
            status = self._runner(run.job, str(run.stop_file))
        except UatuError as e:
            self._failed(run, str(e), refused=e.exit_status == EXIT_BAD_INPUT)
        except Exception as e:  # the neighbours must keep running whatever this one raised
            log.exception("%s failed", group_id)
            self._failed(run, error_line(e))
        else:
            if status == EXIT_OK and run.stop_requested:
                run.state = job_pb2.JOB_STATE_CANCELED
                log.info("%s stopped", group_id)
            else:
                self._failed(run, run.job.last_error or f"its query ended (exit {status})")
        finally:
            run.retune = None
            run.stop_file.unlink(missing_ok=True)
            run.done.set()
            self.ended.set()

    @staticmethod
    def _failed(run: GroupRun, why: str, *, refused: bool = False) -> None:
        run.job.last_error = first_line(why)
        run.job.refused = refused
        run.state = job_pb2.JOB_STATE_FAILED
        log.error("%s FAILED%s: %s", run.job.job_group_id, " (bad input)" if refused else "", why)

    def note_failure(self, group_id: str, why: str) -> None:
        """The cause of a query's failure, as Spark reported it (before its thread ends)."""
        with self._lock:
            run = self._runs.get(group_id)
        if run is not None and run.running:
            run.job.last_error = first_line(why)

    def stop_all(self, why: str) -> None:
        """Stop every running query (the worker is stopping, or fenced)."""
        with self._lock:
            runs = [r for r in self._runs.values() if r.running]
        if runs:
            log.warning("%s: stopping %d queries", why, len(runs))
        for run in runs:
            run.stop()

    def wait_stopped(self, timeout: float) -> bool:
        with self._lock:
            runs = list(self._runs.values())
        return all(run.done.wait(timeout) for run in runs)
