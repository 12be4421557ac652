"""A worker application's side of the command matrix (jobs/worker/runs.py) and its fence
(jobs/worker/main.py), with a stand-in for the streaming query: a runner that runs until its
stop file appears, or fails as told. The queries themselves are
tests/controlplane/test_worker_pool.py's."""

from __future__ import annotations

import threading
import time
from concurrent import futures
from pathlib import Path
from types import SimpleNamespace

import grpc
import pytest
from uatu.v1.worker_job_pb2 import WorkerJob
from uber.data.kafka.datatransfer import job_pb2
from uber.data.kafka.datatransfer import master_worker_service_pb2 as mw_pb2
from uber.data.kafka.datatransfer import master_worker_service_pb2_grpc as mw_grpc

from core import worker_jobs
from core.errors import InvalidJobGroup
from jobs import registry
from jobs.availability.job import QUERY_CONF as AVAILABILITY
from jobs.runtime import produced
from jobs.runtime.after_commit import WRITES_POOL
from jobs.runtime.reporting import ControlPlaneLink, ReporterConfig
from jobs.worker.main import _fence, serve_commands, worker_conf, write_pools_file
from jobs.worker.runs import GroupRuns, Step, decide
from testing.jobgroups import audit_group
from testing.polling import wait_for

RUN, UPDATE, CANCEL = worker_jobs.RUN, worker_jobs.UPDATE, worker_jobs.CANCEL


def _job(run: str = "r1", definition: str = "d1", rate: float = 0, topic: str = "t") -> WorkerJob:
    job = WorkerJob(job_group_id="g", run=run, definition=definition)
    job.job_group.CopyFrom(audit_group("g", topic, rate))
    return job


@pytest.mark.parametrize(
    ("kind", "running", "failed", "here", "wanted", "step"),
    [
        (RUN, False, False, None, _job(), Step.START),
        (RUN, True, False, _job(), _job(), Step.NOTHING),  # a repeat
        (RUN, False, True, _job(), _job(), Step.NOTHING),  # failed: only a new run restarts it
        (RUN, False, False, _job(), _job(), Step.START),  # stopped unasked (fenced): again
        (RUN, True, False, _job(), _job("r2"), Step.RESTART),
        (RUN, False, True, _job(), _job("r2"), Step.START),
        (UPDATE, True, False, _job(), _job("r2", "d2", topic="u"), Step.RESTART),
        (UPDATE, False, False, None, _job("r2", "d2"), Step.START),
        (UPDATE, True, False, _job("r2", "d2"), _job("r2", "d2"), Step.NOTHING),  # a repeat
        # Only the flow control changed: the running job may apply it in place.
        (UPDATE, True, False, _job(rate=10), _job("r2", "d2", rate=5), Step.RETUNE),
        (UPDATE, False, False, _job(rate=10), _job("r2", "d2", rate=5), Step.START),
        # The flow control and something else changed, or nothing the worker can see did.
        (UPDATE, True, False, _job(rate=10), _job("r2", "d2", 5, "u"), Step.RESTART),
        (UPDATE, True, False, _job(), _job("r2", "d2"), Step.RESTART),
        (CANCEL, True, False, _job(), _job(), Step.STOP),
        (CANCEL, False, False, _job(), _job(), Step.FORGET),
        (CANCEL, False, False, None, _job(), Step.FORGET),
    ],
)
def test_the_workers_command_matrix(kind, running, failed, here, wanted, step):
    assert decide(kind, running, here, wanted, failed) is step


class Queries:
    """Runs each group "query" until its stop file appears; `fail` makes the next one raise."""

    def __init__(self) -> None:
        self.started: list[tuple[str, str]] = []
        self.fail: Exception | None = None
        self.release = threading.Event()  # a query that has seen its stop file ends on it
        self.release.set()
        self.live: set[str] = set()
        self.lock = threading.Lock()

    def __call__(self, job: WorkerJob, stop_file: str) -> int:
        with self.lock:
            self.started.append((job.job_group_id, job.run))
            if self.fail is not None:
                error, self.fail = self.fail, None
                raise error
            assert job.job_group_id not in self.live, "two queries of one group at once"
            self.live.add(job.job_group_id)
        try:
            while not Path(stop_file).exists():
                time.sleep(0.02)
            self.release.wait()  # a batch still running when the stop came
            return 0
        finally:
            with self.lock:
                self.live.discard(job.job_group_id)


def _command(kind, group_id: str, run: str, definition: str = "d1", rate: float = 0):
    return worker_jobs.command(kind, 5, audit_group(group_id, "orders", rate), definition, run)


def _states(runs: GroupRuns) -> dict[str, tuple[str, int]]:
    return {
        worker_jobs.worker_job_of(s.job).job_group_id: (  # type: ignore[union-attr]
            worker_jobs.worker_job_of(s.job).run,  # type: ignore[union-attr]
            s.state,
        )
        for s in runs.statuses()
    }


@pytest.fixture
def runs(tmp_path):
    queries = Queries()
    group_runs = GroupRuns(queries, tmp_path)
    yield group_runs, queries
    group_runs.stop_all("test over")
    assert group_runs.wait_stopped(10)


def test_run_update_and_cancel_each_touch_one_query(runs):
    group_runs, queries = runs
    group_runs.take([_command(RUN, "a", "r1"), _command(RUN, "b", "r1")])
    wait_for(lambda: queries.live == {"a", "b"}, 10, "both queries")
    group_runs.take([_command(RUN, "a", "r1")])  # a repeat starts nothing
    group_runs.take([_command(UPDATE, "a", "r2", "d2")])
    wait_for(lambda: ("a", "r2") in queries.started and "a" in queries.live, 10, "the update")
    assert queries.started.count(("b", "r1")) == 1  # b was never touched
    group_runs.take([_command(CANCEL, "b", "r1")])
    wait_for(lambda: "b" not in group_runs.running(), 10, "b stopped")
    assert queries.live == {"a"}
    group_runs.take([_command(CANCEL, "b", "r1")])  # its stop not yet told: kept
    assert _states(group_runs)["b"][1] == job_pb2.JOB_STATE_CANCELED  # told now
    group_runs.take([_command(CANCEL, "b", "r1")])  # stopped, told and cancelled: forgotten
    assert set(_states(group_runs)) == {"a"}


def test_a_failure_is_reported_with_its_line_and_a_refusal_as_such(runs):
    group_runs, queries = runs
    queries.fail = RuntimeError("broker went away\n  at some.Java.frame")
    group_runs.take([_command(RUN, "a", "r1")])
    wait_for(lambda: _states(group_runs)["a"][1] == job_pb2.JOB_STATE_FAILED, 10, "a FAILED")
    (status,) = group_runs.statuses()
    reported = worker_jobs.worker_job_of(status.job)
    assert reported is not None
    assert (reported.last_error, reported.refused) == ("RuntimeError: broker went away", False)
    group_runs.take([_command(RUN, "a", "r1")])  # the same run: not restarted here
    assert queries.started == [("a", "r1")]

    queries.fail = InvalidJobGroup("kafka_consumer_task_group.topic", "t", "bad")
    group_runs.take([_command(RUN, "a", "r2")])  # a new run from the control plane
    wait_for(lambda: _states(group_runs)["a"] == ("r2", job_pb2.JOB_STATE_FAILED), 10, "r2")
    reported = worker_jobs.worker_job_of(group_runs.statuses()[0].job)
    assert reported is not None and reported.refused
    assert "kafka_consumer_task_group.topic" in reported.last_error


class Link:
    def __init__(self) -> None:
        self.last_success = time.monotonic()


def test_a_worker_that_cannot_heartbeat_stops_every_query_before_its_lease_ends(runs):
    """The fence of "never in two places": silent for longer than its fence, the worker has
    stopped every query; the control plane places them elsewhere only after the lease."""
    group_runs, queries = runs
    group_runs.take([_command(RUN, "a", "r1"), _command(RUN, "b", "r1")])
    wait_for(lambda: queries.live == {"a", "b"}, 10, "both queries")
    link, stopped = Link(), threading.Event()
    fence = threading.Thread(target=_fence, args=(link, group_runs, 1.5, stopped), daemon=True)
    fence.start()
    try:
        time.sleep(1.2)  # answered recently enough: nothing stops
        link.last_success = time.monotonic()
        time.sleep(1.2)
        assert queries.live == {"a", "b"}
        wait_for(lambda: queries.live == set(), 10, "the fence to stop every query")
        assert {state for _, state in _states(group_runs).values()} == {job_pb2.JOB_STATE_CANCELED}
        # Heartbeats answered again, the groups still placed here: RUN starts them again.
        group_runs.take([_command(RUN, "a", "r1"), _command(RUN, "b", "r1")])
        wait_for(lambda: queries.live == {"a", "b"}, 10, "both queries again")
    finally:
        stopped.set()
        fence.join(5)


class RecordingLink(Link):
    """Answers the first heartbeat with `first_commands`; keeps every heartbeat's states."""

    def __init__(self, first_commands) -> None:
        super().__init__()
        self.config = SimpleNamespace(worker_id=7)
        self.first_commands = first_commands
        self.beats: list[dict[str, int]] = []

    def beat(self, statuses):
        self.last_success = time.monotonic()
        self.beats.append(
            {worker_jobs.worker_job_of(s.job).job_group_id: s.state for s in statuses}  # type: ignore[union-attr]
        )
        return self.first_commands if len(self.beats) == 1 else []


def _pending(runs: GroupRuns) -> dict[str, tuple[int, bool]]:
    found = {}
    for status in runs.statuses():
        job = worker_jobs.worker_job_of(status.job)
        assert job is not None
        found[job.job_group_id] = (status.state, job.writes_pending)
    return found


def test_a_query_stopped_with_its_writes_pending_is_canceled_and_still_held(runs):
    """From its query's stop to its run's end (the last MERGE), a canceled group reports
    CANCELED with writes_pending: stopped as asked, still held here. A word about the query
    of a run not asked to stop, or of another Spark run, changes nothing."""
    group_runs, queries = runs
    group_runs.take([_command(RUN, "a", "r1"), _command(RUN, "b", "r1")])
    wait_for(lambda: queries.live == {"a", "b"}, 10, "both queries")
    group_runs.note_started("a", "spark-run-1")
    group_runs.note_stopped("b")  # not asked to stop: its query ended for another reason
    assert _pending(group_runs)["b"] == (job_pb2.JOB_STATE_RUNNING, False)
    queries.release.clear()  # a's run goes on after its stop file: its last writes
    group_runs.take([_command(CANCEL, "a", "r1")])
    group_runs.note_stopped("a", "spark-run-0")  # a query of an earlier Spark run
    assert _pending(group_runs)["a"] == (job_pb2.JOB_STATE_RUNNING, False)
    group_runs.ended.clear()
    group_runs.note_stopped("a", "spark-run-1")
    assert group_runs.ended.is_set()  # the next heartbeat tells it at once
    assert _pending(group_runs)["a"] == (job_pb2.JOB_STATE_CANCELED, True)
    assert "a" in group_runs.running()  # its thread still writes
    queries.release.set()
    wait_for(lambda: "a" not in group_runs.running(), 10, "a's run to end")
    assert _pending(group_runs)["a"] == (job_pb2.JOB_STATE_CANCELED, False)


def test_a_stopped_group_is_told_at_once_not_at_the_next_interval(runs):
    """A CANCEL is done for the control plane only once a heartbeat carries the stop: the
    worker beats as soon as a run ends, not an interval (an hour here) later."""
    group_runs, queries = runs
    group_runs.take([_command(RUN, "a", "r1")])
    wait_for(lambda: queries.live == {"a"}, 10, "a's query")
    link = RecordingLink([_command(CANCEL, "a", "r1")])
    over = threading.Event()
    serving = threading.Thread(
        target=serve_commands,
        args=(link, group_runs, 60.0, 3600.0, lambda: "test over" if over.is_set() else None),
        daemon=True,
    )
    serving.start()
    try:
        wait_for(
            lambda: any(b.get("a") == job_pb2.JOB_STATE_CANCELED for b in link.beats),
            20,
            "a heartbeat telling a's stop",
        )
    finally:
        over.set()
        group_runs.ended.set()  # the loop's wait ends; it sees the stop reason
        serving.join(10)
    assert [b["a"] for b in link.beats[:2]] == [
        job_pb2.JOB_STATE_RUNNING,
        job_pb2.JOB_STATE_CANCELED,
    ]


class SlowAnswers(mw_grpc.MasterWorkerServiceServicer):
    """A control plane that renews the lease on receipt and answers `delay_s` later."""

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s

    def RegisterWorker(self, request, context):
        return mw_pb2.RegisterWorkerResponse(participants=request.participants)

    def Heartbeat(self, request, context):
        time.sleep(self.delay_s)
        return mw_pb2.HeartbeatResponse(participants=request.participants)


def test_the_fence_counts_from_when_the_answered_heartbeat_was_sent():
    """The control plane renewed the lease when the heartbeat arrived, not when its answer
    came back: a slow answer must not move the worker's fence later than the lease."""
    server = grpc.server(futures.ThreadPoolExecutor(2))
    mw_grpc.add_MasterWorkerServiceServicer_to_server(SlowAnswers(delay_s=1.5), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        link = ControlPlaneLink(ReporterConfig((f"127.0.0.1:{port}",), timeout_seconds=10))
        link.beat(())  # registers; its heartbeat sets the time as the first one
        before = time.monotonic()
        link.beat(())
        answered = time.monotonic()
    finally:
        server.stop(0)
    assert answered - before >= 1.5
    assert before <= link.last_success < before + 1.0


def test_a_restart_waits_for_the_old_query_in_the_background_never_in_the_caller(runs):
    """The worker's heartbeats go on while a query stops: UPDATE returns at once, the new run
    starts once the old one ended (never two queries on one checkpoint: `Queries` asserts
    it), and a repeat of the UPDATE meanwhile does nothing."""
    group_runs, queries = runs
    group_runs.take([_command(RUN, "a", "r1")])
    wait_for(lambda: queries.live == {"a"}, 10, "the first query")
    queries.release.clear()  # the old query takes its time to stop: until released
    taken = threading.Event()

    def heartbeat_replies() -> None:
        group_runs.take([_command(UPDATE, "a", "r2", "d2")])
        group_runs.take([_command(UPDATE, "a", "r2", "d2")])  # the next heartbeat's reply
        taken.set()

    threading.Thread(target=heartbeat_replies, daemon=True).start()
    wait_for(taken.is_set, 10, "the heartbeat loop to go on while the old query stops")
    assert queries.started == [("a", "r1")] and queries.live == {"a"}
    assert _states(group_runs) == {"a": ("r2", job_pb2.JOB_STATE_RUNNING)}
    queries.release.set()
    wait_for(lambda: ("a", "r2") in queries.started, 10, "the new run")
    assert queries.started == [("a", "r1"), ("a", "r2")]


class Retunes:
    """A job's `retune`: records each flow control handed to it, applies it when `can`."""

    def __init__(self, can: bool) -> None:
        self.can = can
        self.seen: list[float] = []

    def __call__(self, flow: job_pb2.FlowControl) -> bool:
        self.seen.append(flow.messages_per_sec)
        return self.can


def test_a_flow_control_update_goes_to_the_running_job_and_restarts_only_when_refused(runs):
    """UPDATE of the flow control alone: the job's retune gets the new flow control; applied,
    the query goes on (no new start) and the group reports the new definition and run with
    its query's Spark run id; refused, the query restarts with the new definition."""
    group_runs, queries = runs
    group_runs.take([_command(RUN, "a", "r1", rate=100)])
    wait_for(lambda: queries.live == {"a"}, 10, "the query")
    group_runs.note_started("a", "spark-run-1")
    in_place = Retunes(can=True)
    group_runs.attach("a", in_place)
    group_runs.take([_command(UPDATE, "a", "r2", "d2", rate=50)])
    assert in_place.seen == [50.0]
    assert queries.started == [("a", "r1")] and "a" in group_runs.running()
    (status,) = group_runs.statuses()
    reported = worker_jobs.worker_job_of(status.job)
    assert reported is not None
    assert (reported.definition, reported.run, reported.query_run) == ("d2", "r2", "spark-run-1")
    group_runs.take([_command(UPDATE, "a", "r2", "d2", rate=50)])  # the next reply: nothing
    assert in_place.seen == [50.0]

    refused = Retunes(can=False)
    group_runs.attach("a", refused)
    group_runs.take([_command(UPDATE, "a", "r3", "d3", rate=5000)])
    assert refused.seen == [5000.0]
    wait_for(lambda: ("a", "r3") in queries.started, 10, "the restart")
    assert queries.started == [("a", "r1"), ("a", "r3")]


def test_a_groups_status_carries_its_querys_offsets_and_rates_summed(tmp_path):
    """The worker's one listener routes each query's progress to its group: the group's
    status sums its partitions' committed offsets and rates; another query's progress and a
    failure's line go to their own group."""
    import json
    from types import SimpleNamespace

    from jobs.runtime.progress import JobIdentity
    from jobs.worker.events import QueryEvents

    queries = Queries()
    group_runs = GroupRuns(queries, tmp_path, traffic=lambda g: events.traffic(g))
    now = [1000.0]
    # As jobs/worker/main.py wires them, with an application that uses 1.5 cores.
    events = QueryEvents(group_runs, lambda: 1.5, window=60.0, clock=lambda: now[0])
    identity = JobIdentity(job_pb2.JOB_TYPE_KAFKA_AUDIT, "local", "orders")
    events.watch("audit-a", "a", identity)
    events.watch("audit-b", "b", identity, produces=True)
    group_runs.take([_command(RUN, "a", "r1"), _command(RUN, "b", "r1")])
    wait_for(lambda: queries.live == {"a", "b"}, 10, "both queries")

    def progress(name: str, start: dict, end: dict, busy_ms: int = 1000) -> SimpleNamespace:
        record = {
            "name": name,
            "timestamp": "2026-12-02T10:00:00.000Z",
            "batchDuration": 2000,
            "durationMs": {"triggerExecution": busy_ms},
            "numInputRows": sum(end.values()) - sum(start.values()),
            "sources": [
                {
                    "startOffset": json.dumps({"orders": start}),
                    "endOffset": json.dumps({"orders": end}),
                }
            ],
        }
        return SimpleNamespace(progress=SimpleNamespace(json=json.dumps(record)))

    events.onQueryProgress(progress("audit-b", {"0": 0}, {"0": 3}, busy_ms=4000))
    produced.add("b", 3)  # as b's job counts its batch's records written (a replication's)
    now[0] += 61  # past the window: that batch no longer counts for the CPU share
    events.onQueryProgress(progress("audit-a", {"0": 0, "1": 0}, {"0": 100, "1": 300}, 3000))
    events.onQueryProgress(progress("audit-b", {"0": 3}, {"0": 7}, busy_ms=1000))
    produced.add("b", 4)
    by_group = {
        worker_jobs.worker_job_of(s.job).job_group_id: s  # type: ignore[union-attr]
        for s in group_runs.statuses()
    }
    a, b = by_group["a"].kafka_consumer_task_status, by_group["b"].kafka_consumer_task_status
    assert (a.commit_offset, a.messages_per_sec) == (400, 200.0)
    assert b.commit_offset == 7
    # The CPU shared out by batch time within the window: 3 s of a's against 1 s of b's.
    assert (a.cpu_usage, b.cpu_usage) == (1.125, 0.375)
    # Records produced: b's batches copied 3 + 4; a produces nothing, and says nothing.
    assert by_group["b"].kafka_dispatcher_task_status.num_records_produced == 7
    assert not by_group["a"].HasField("kafka_dispatcher_task_status")

    events.onQueryStarted(SimpleNamespace(id="q-b", runId="run-b", name="audit-b"))
    events.onQueryTerminated(SimpleNamespace(id="q-b", exception="java.lang.X: boom\n\tat y"))
    errors = {
        worker_jobs.worker_job_of(s.job).job_group_id: worker_jobs.worker_job_of(s.job).last_error  # type: ignore[union-attr]
        for s in group_runs.statuses()
    }
    assert errors == {"a": "", "b": "java.lang.X: boom"}
    group_runs.stop_all("test over")
    assert group_runs.wait_stopped(10)


def test_the_groups_of_an_audit_pack_each_report_their_own_topic_and_share_its_cpu(tmp_path):
    """One query audits two groups' topics (jobs/worker/packer.py): each group's status has
    its own topic's offsets and rates, its CPU an equal share of the query's batch time
    (against a group of its own query), and the query's start and failure reach both."""
    import json
    from types import SimpleNamespace

    from jobs.runtime.progress import JobIdentity
    from jobs.worker.events import QueryEvents

    queries = Queries()
    group_runs = GroupRuns(queries, tmp_path, traffic=lambda g: events.traffic(g))
    events = QueryEvents(group_runs, lambda: 2.0, window=60.0, clock=lambda: 1000.0)
    audit = job_pb2.JOB_TYPE_KAFKA_AUDIT
    events.watch("audit-pack-k", "a", JobIdentity(audit, "local", "ta"))
    events.watch("audit-pack-k", "b", JobIdentity(audit, "local", "tb"))
    events.watch("audit-c", "c", JobIdentity(audit, "local", "tc"))
    group_runs.take([_command(RUN, g, "r1") for g in ("a", "b", "c")])
    wait_for(lambda: queries.live == {"a", "b", "c"}, 10, "the runs")

    def progress(name: str, end: dict, busy_ms: int) -> SimpleNamespace:
        record = {
            "name": name,
            "timestamp": "2026-12-02T10:00:00.000Z",
            "durationMs": {"triggerExecution": busy_ms},
            "sources": [{"startOffset": json.dumps({t: {"0": 0} for t in end}),
                         "endOffset": json.dumps({t: {"0": n} for t, n in end.items()})}],
        }  # fmt: skip
        return SimpleNamespace(progress=SimpleNamespace(json=json.dumps(record)))

    events.onQueryProgress(progress("audit-pack-k", {"ta": 10, "tb": 30}, busy_ms=2000))
    events.onQueryProgress(progress("audit-c", {"tc": 5}, busy_ms=2000))
    by_group = {
        worker_jobs.worker_job_of(s.job).job_group_id: s.kafka_consumer_task_status  # type: ignore[union-attr]
        for s in group_runs.statuses()
    }
    assert {g: s.commit_offset for g, s in by_group.items()} == {"a": 10, "b": 30, "c": 5}
    # 2 s of the pack's shared by a and b, against c's 2 s alone, of 2 cores
    assert {g: s.cpu_usage for g, s in by_group.items()} == {"a": 0.5, "b": 0.5, "c": 1.0}
    events.onQueryStarted(SimpleNamespace(id="q-p", runId="run-p", name="audit-pack-k"))
    events.onQueryTerminated(SimpleNamespace(id="q-p", exception="java.lang.X: boom\n\tat y"))
    told = {
        job.job_group_id: (job.query_run, job.last_error)
        for s in group_runs.statuses()
        if (job := worker_jobs.worker_job_of(s.job)) is not None
    }
    assert told == {
        "a": ("run-p", "java.lang.X: boom"),
        "b": ("run-p", "java.lang.X: boom"),
        "c": ("", ""),
    }
    group_runs.stop_all("test over")
    assert group_runs.wait_stopped(10)


def test_the_worker_session_has_every_job_types_session_conf(monkeypatch) -> None:
    """A worker may run any JobType in its one session: no speculation, the FAIR pools, every
    job type's session conf; a key two job types set differently is left to the session's
    default; a job type's `query_conf` (the availability job's consumer-based offset reader)
    is its query's alone, so every other query keeps Spark's AdminClient-based reader."""
    conf = worker_conf("pools.xml")
    assert conf["spark.scheduler.allocation.file"] == "pools.xml"
    assert (conf["spark.scheduler.mode"], conf["spark.speculation"]) == ("FAIR", "false")
    assert "spark.sql.shuffle.partitions" not in conf  # replication 1, dispatcher 2
    assert AVAILABILITY and not AVAILABILITY.keys() & conf.keys()

    class One:
        session_conf = {"spark.uatu.test.shared": "1", "spark.uatu.test.differs": "1"}

    class Other:
        session_conf = {"spark.uatu.test.shared": "1", "spark.uatu.test.differs": "2"}

    every = registry.every_runtime
    monkeypatch.setattr(registry, "every_runtime", lambda: [*every(), One, Other])
    conf = worker_conf("p.xml")
    assert conf["spark.uatu.test.shared"] == "1" and "spark.uatu.test.differs" not in conf


def test_spark_reads_the_workers_pools_file_as_a_writes_pool_served_first(spark, tmp_path):
    """Spark's own FAIR builder reads the worker's allocation file: the after-commit writes'
    pool with a minimum share of both task slots (Spark offers a free slot to a pool below its
    minimum share before any other) and weight 4; a pool no file names (a group's) would have
    neither."""
    jvm = spark.sparkContext._jvm
    scheduler = jvm.org.apache.spark.scheduler
    context = spark.sparkContext._jsc.sc()
    root = scheduler.Pool("", scheduler.SchedulingMode.FIFO(), 0, 0)
    key = "spark.scheduler.allocation.file"
    context.conf().set(key, write_pools_file(str(tmp_path)))
    try:
        scheduler.FairSchedulableBuilder(root, context).buildPools()
    finally:
        context.conf().remove(key)
    pool = root.getSchedulableByName(WRITES_POOL)
    assert (pool.minShare(), pool.weight(), pool.schedulingMode().toString()) == (2, 4, "FIFO")


def test_the_listener_tells_a_group_its_queries_stopped_and_a_pack_its_query(tmp_path):
    """A group asked to stop hears from the worker's listener that its query stopped once the
    last of its queries (its own, its tiers') ended without failing, CANCELED with its writes
    pending from then on; a group in a pack hears it from its pack instead (the listener
    tells the packer every query's start and stop, by Spark's query id)."""
    from types import SimpleNamespace

    from jobs.runtime.progress import JobIdentity
    from jobs.worker.events import QueryEvents

    queries = Queries()
    queries.release.clear()  # the runs go on after their queries stop: their last writes
    group_runs = GroupRuns(queries, tmp_path)
    told: list[tuple[str, str]] = []
    packer = SimpleNamespace(
        query_started=lambda name, query_id: told.append(("started", f"{name} {query_id}")),
        query_ended=lambda query_id: told.append(("ended", query_id)),
    )
    events = QueryEvents(group_runs, packer=packer)  # type: ignore[arg-type]
    identity = JobIdentity(job_pb2.JOB_TYPE_KAFKA_AUDIT, "local", "orders")
    events.watch("dispatch-d", "d", identity)
    events.watch("audit-pack-k", "p", identity, packed=True)
    group_runs.take([_command(RUN, "d", "r1"), _command(RUN, "p", "r1")])
    wait_for(lambda: queries.live == {"d", "p"}, 10, "both runs")
    for query_id, name in [("1", "dispatch-d"), ("2", "dispatch-d-retry"), ("3", "audit-pack-k")]:
        events.onQueryStarted(SimpleNamespace(id=query_id, runId=f"run-{query_id}", name=name))
    group_runs.take([_command(CANCEL, "d", "r1"), _command(CANCEL, "p", "r1")])

    events.onQueryTerminated(SimpleNamespace(id="1", runId="run-1", exception=None))
    assert _pending(group_runs)["d"] == (job_pb2.JOB_STATE_RUNNING, False)  # its tier runs
    events.onQueryTerminated(SimpleNamespace(id="2", runId="run-2", exception=None))
    events.onQueryTerminated(SimpleNamespace(id="3", runId="run-3", exception=None))
    assert _pending(group_runs) == {
        "d": (job_pb2.JOB_STATE_CANCELED, True),
        "p": (job_pb2.JOB_STATE_RUNNING, False),  # the packer tells it, not the listener
    }
    assert told == [
        ("started", "dispatch-d 1"),
        ("started", "dispatch-d-retry 2"),
        ("started", "audit-pack-k 3"),
        ("ended", "1"),
        ("ended", "2"),
        ("ended", "3"),
    ]
    queries.release.set()
    group_runs.stop_all("test over")
    assert group_runs.wait_stopped(10)
