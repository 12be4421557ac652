"""The worker pool's decisions: placement, the command matrix of a worker's heartbeat, and
the reconciler's relaunch, give-up and refusal for groups that run on pool workers. A real
SQLite store; a recording stand-in for the site's launcher of worker applications (the
applications themselves are tests/controlplane/test_worker_pool.py's)."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Mapping

import pytest
from google.protobuf.timestamp_pb2 import Timestamp
from uatu.v1.worker_job_pb2 import WorkerJob
from uber.data.kafka.datatransfer import job_pb2
from uber.data.kafka.datatransfer.worker_pb2 import WORKER_STATE_WORKING, Node, StoredWorker

from controlplane.jobgroups import JobGroups
from controlplane.launchers.base import LaunchRecord, launch_details
from controlplane.placement import (
    Capacity,
    Load,
    Reported,
    commands_for,
    place,
    rebalance_moves,
    wanted_workers,
)
from controlplane.pool import WorkerPool
from controlplane.reconcile import Action, definition_of
from controlplane.reconciler import Reconciler
from controlplane.state.sqlite import SqliteStore
from core import worker_jobs
from core.config import load_settings
from testing.conf import write_conf_dir
from testing.jobgroups import audit_group
from testing.polling import wait_for

RUNNING, FAILED = job_pb2.JOB_STATE_RUNNING, job_pb2.JOB_STATE_FAILED
CANCELED = job_pb2.JOB_STATE_CANCELED


@pytest.mark.parametrize(
    ("loads", "capacity", "chosen"),
    [
        ({1: Load(3), 2: Load(1), 3: Load(2)}, Capacity(10), 2),  # the fewest groups
        ({1: Load(1), 2: Load(1)}, Capacity(10), 1),  # a tie: the lowest id
        ({1: Load(1, 900.0), 2: Load(1, 100.0)}, Capacity(10), 2),  # then the least traffic
        ({1: Load(2), 2: Load(5)}, Capacity(5), 1),  # worker 2 is full
        ({1: Load(5), 2: Load(5)}, Capacity(5), None),  # every worker is full
        ({1: Load(0, 1000.0), 2: Load(4, 10.0)}, Capacity(5, 1000.0), 2),  # 1 at its msgs/s
        ({1: Load(0, 0, 5e6), 2: Load(4, 0, 1e3)}, Capacity(5, 0, 5e6), 2),  # 1 at its bytes/s
        ({}, Capacity(5), None),  # no live worker
    ],
)
def test_place_picks_the_least_loaded_worker_with_room(loads, capacity, chosen):
    assert place(loads, capacity) == chosen


@pytest.mark.parametrize(
    ("placed", "capacity", "loads", "moves"),
    [
        # A worker joined: it gets its share, from the end of the lists, nothing moves twice.
        ({1: ["a", "b", "c", "d"], 2: []}, Capacity(10), {}, [("d", 1, 2), ("c", 1, 2)]),
        ({1: ["d", "c", "a", "b"], 2: []}, Capacity(10), {}, [("b", 1, 2), ("a", 1, 2)]),
        ({1: ["a", "b", "c"], 2: ["d"], 3: []}, Capacity(10), {}, [("c", 1, 3)]),
        ({1: ["a", "b"], 2: ["c"]}, Capacity(10), {}, []),  # one apart: a move buys nothing
        ({1: ["a", "b", "c", "d"], 2: []}, Capacity(1), {}, [("d", 1, 2)]),  # 2 is then full
        # The idle worker already carries its msgs/s bound: nothing moves to it.
        ({1: ["a", "b", "c"], 2: []}, Capacity(10, 50.0), {2: Load(0, 50.0)}, []),
        ({}, Capacity(10), {}, []),
    ],
)
def test_rebalance_evens_out_the_groups_within_capacity(placed, capacity, loads, moves):
    assert rebalance_moves(placed, capacity, loads) == moves


@pytest.mark.parametrize(
    ("groups", "traffic", "current", "wanted"),
    [
        (5, Load(), 1, 3),  # 5 groups at 2 each: grow at once
        (4, Load(), 2, 2),  # full, not over: stay
        (3, Load(), 2, 2),  # 3 would fit 2 workers only at 75 %: no shrink below 2
        (1, Load(), 3, 1),  # one group fits one worker at 50 %: shrink
        (4, Load(), 3, 3),  # 4 groups would fill 2 workers to 100 %: stay at 3
        (3, Load(), 3, 2),  # 3 groups fit 2 workers at 75 %: shrink
        (0, Load(), 2, 1),  # never below the least
        (40, Load(), 1, 4),  # never above the most
        (1, Load(0, 250.0), 1, 3),  # traffic: 250 msgs/s at 100 each needs 3 workers
    ],
)
def test_a_pool_that_follows_the_load_grows_at_once_and_shrinks_with_headroom(
    groups, traffic, current, wanted
):
    capacity = Capacity(groups=2, messages_per_sec=100.0)
    assert wanted_workers(groups, traffic, capacity, current, (1, 4)) == wanted


def _record(definition: str, run: str, worker_id: int = 7, job_id: int = 11) -> LaunchRecord:
    return LaunchRecord(
        handle=f"worker {worker_id}",
        definition=definition,
        started_at=0.0,
        log="",
        details=launch_details(pool_worker=worker_id, job_group_id="g", run=run, job_id=job_id),
        worker_id=worker_id,
    )


def _stored(state=RUNNING):
    from uber.data.kafka.datatransfer.job_group_pb2 import StoredJobGroup

    return StoredJobGroup(job_group=audit_group("g", "orders"), state=state)


def _reported(run: str, definition: str, state=RUNNING) -> Reported:
    return Reported(11, WorkerJob(job_group_id="g", run=run, definition=definition), state)


def _kinds(commands) -> list[tuple[str, str]]:
    return [
        (worker_jobs.worker_job_of(c.job).job_group_id, c.type)  # type: ignore[union-attr]
        for c in commands
    ]


@pytest.mark.parametrize(
    ("reported", "stored_state", "cancelling", "expected"),
    [
        ({}, RUNNING, False, [("g", worker_jobs.RUN)]),  # not running here yet
        ({"g": _reported("r1", "d1")}, RUNNING, False, []),  # runs what it should
        ({"g": _reported("r0", "d1", FAILED)}, RUNNING, False, [("g", worker_jobs.RUN)]),
        ({"g": _reported("r1", "d1", FAILED)}, RUNNING, False, []),  # the reconciler's call
        ({"g": _reported("r1", "d1", CANCELED)}, RUNNING, False, [("g", worker_jobs.RUN)]),
        ({"g": _reported("r1", "d0")}, RUNNING, False, [("g", worker_jobs.UPDATE)]),
        ({"g": _reported("r1", "d1")}, RUNNING, True, [("g", worker_jobs.CANCEL)]),
        ({"g": _reported("r1", "d1")}, CANCELED, False, []),  # the reconciler cancels it
    ],
)
def test_a_workers_heartbeat_gets_the_command_matrix(reported, stored_state, cancelling, expected):
    assigned = {"g": (_record("d1", "r1"), _stored(stored_state))}
    commands = commands_for(reported, assigned, frozenset({"g"} if cancelling else ()))
    assert _kinds(commands) == expected


def test_a_group_reported_by_a_worker_it_is_not_placed_on_is_cancelled_there():
    commands = commands_for({"other": _reported("r", "d")}, {}, frozenset())
    assert len(commands) == 1 and commands[0].type == worker_jobs.CANCEL
    assert worker_jobs.worker_job_of(commands[0].job).job_group_id == "other"  # type: ignore[union-attr]


def test_run_commands_carry_the_whole_group_and_its_run():
    (command,) = commands_for({}, {"g": (_record("d1", "r1"), _stored())}, frozenset())
    carried = worker_jobs.worker_job_of(command.job)
    assert carried is not None
    assert (carried.run, carried.definition, command.job.job_id) == ("r1", "d1", 11)
    assert carried.job_group == audit_group("g", "orders")


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


class WorkerApps:
    """Records the worker applications the pool starts; each "runs" until cancelled."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.started: list[str] = []
        self.cancelled: list[str] = []

    def launch_worker(self, name: str, definition: str, env: Mapping[str, str]) -> LaunchRecord:
        self.started.append(env["UATU_WORKER_ID"])
        return LaunchRecord(
            handle=f"{name}#{len(self.started)}",
            definition=definition,
            started_at=self.clock(),
            log="",
            details=launch_details(name=name),
        )

    def observes(self, record: LaunchRecord) -> bool:
        return True

    def alive(self, record: LaunchRecord) -> bool:
        return record.handle not in self.cancelled

    def cancel(self, record: LaunchRecord) -> None:
        self.cancelled.append(record.handle)


def _heard(store: SqliteStore, pool: WorkerPool, worker_id: int, at: float) -> None:
    """A heartbeat of the worker, as the worker service records it; the pool hears what it
    runs (nothing, at first contact) from `_report`."""
    stamp = Timestamp()
    stamp.FromNanoseconds(int(at * 1e9))
    store.put_worker(
        StoredWorker(last_updated=stamp, node=Node(id=worker_id), state=WORKER_STATE_WORKING)
    )
    if not pool.heard.has(worker_id):
        pool.heartbeat(worker_id, [])


@pytest.fixture
def pooled(tmp_path, request):
    """A pool of one worker application (`indirect` parametrization gives other
    WorkerPool arguments)."""
    store = SqliteStore(tmp_path / "cp.sqlite")
    clock = Clock()
    apps = WorkerApps(clock)
    arguments = {"size": 1, **getattr(request, "param", {})}
    pool = WorkerPool(store, apps, **arguments, lease_seconds=20, clock=clock)
    reconciler = Reconciler(
        store,
        pool,
        pool=pool,
        backoff_seconds=1,
        max_failures=2,
        lease_seconds=20,
        clock=clock,
        max_running=None,
    )
    conf = write_conf_dir(tmp_path / "conf", "127.0.0.1:1", tmp_path / "wh", tmp_path / "ck")
    groups = JobGroups(store, load_settings(conf), lambda *_: 2)
    yield store, clock, apps, pool, reconciler, groups
    store.close()


def _report(
    pool: WorkerPool, worker_id: int, record: LaunchRecord, state, pending=False, **fields
) -> list:
    job = WorkerJob(
        job_group_id=str(record.detail("job_group_id")),
        run=str(record.detail("run")),
        definition=record.definition,
        **fields,
    )
    return pool.heartbeat(worker_id, [worker_jobs.status(11, job, state, writes_pending=pending)])


def _placed(pooled, group=None):
    """The pool's worker up and heard, and one group placed on it: (worker id, its record)."""
    store, clock, _apps, pool, reconciler, groups = pooled
    reconciler.reconcile_once()  # the pool's worker application starts
    worker_id = store.launches()["~worker/0"].worker_id
    _heard(store, pool, worker_id, clock.now)
    groups.add(group or audit_group("g", "orders"), RUNNING, None)
    assert reconciler.reconcile_once()["g"] is Action.RUN
    return worker_id, store.launches()["g"]


def test_a_failed_run_is_relaunched_with_backoff_then_the_group_is_failed(pooled):
    store, clock, _apps, pool, reconciler, groups = pooled
    worker_id, first = _placed(pooled)
    assert first.worker_id == worker_id and first.definition == definition_of(
        groups.get("g").job_group
    )

    _report(pool, worker_id, first, FAILED, last_error="boom")
    assert reconciler.reconcile_once()["g"] is Action.NONE  # backing off (1 s)
    clock.now += 1.5
    _heard(store, pool, worker_id, clock.now)
    assert reconciler.reconcile_once()["g"] is Action.RUN
    second = store.launches()["g"]
    assert second.failures == 1 and second.details["run"] != first.details["run"]

    _report(pool, worker_id, second, FAILED, last_error="boom")
    clock.now += 2.5
    _heard(store, pool, worker_id, clock.now)
    assert reconciler.reconcile_once()["g"] is Action.RUN
    third = store.launches()["g"]
    _report(pool, worker_id, third, FAILED, last_error="boom")
    clock.now += 4.5
    _heard(store, pool, worker_id, clock.now)
    assert reconciler.reconcile_once()["g"] is Action.NONE  # third failure > max_failures=2
    assert groups.get("g").state == FAILED
    assert all(j.state == FAILED for j in groups.get("g").jobs)
    assert reconciler.reconcile_once()["g"] is Action.NONE  # and never relaunched


def test_a_run_refused_as_bad_input_fails_the_group_at_once(pooled):
    store, clock, _apps, pool, reconciler, groups = pooled
    worker_id, record = _placed(pooled)
    _report(pool, worker_id, record, FAILED, last_error="bad", refused=True)
    clock.now += 100  # past any backoff: the refusal, not the clock, decides
    _heard(store, pool, worker_id, clock.now)
    assert reconciler.reconcile_once()["g"] is Action.NONE
    assert groups.get("g").state == FAILED
    assert store.launches()["g"].failures == 0


def test_an_update_keeps_the_group_on_its_worker_with_a_new_run(pooled):
    store, _clock, apps, pool, reconciler, groups = pooled
    worker_id, first = _placed(pooled)
    _report(pool, worker_id, first, RUNNING)
    groups.update(audit_group("g", "orders", rate=50))
    assert reconciler.reconcile_once()["g"] is Action.UPDATE
    second = store.launches()["g"]
    assert second.worker_id == worker_id and second.definition != first.definition
    commands = _report(pool, worker_id, first, RUNNING)
    assert [c.type for c in commands] == [worker_jobs.UPDATE]
    assert apps.started == [str(worker_id)]  # the application was never restarted


def test_a_silent_worker_is_relaunched_and_its_groups_placed_anew_after_the_lease(pooled):
    store, clock, apps, pool, reconciler, groups = pooled
    reconciler.reconcile_once()
    first_worker = store.launches()["~worker/0"].worker_id
    _heard(store, pool, first_worker, clock.now)
    groups.add(audit_group("g", "orders"), RUNNING, None)
    reconciler.reconcile_once()
    assert store.launches()["g"].worker_id == first_worker
    clock.now += 15  # within the lease (20 s): nothing moves
    reconciler.reconcile_once()
    assert store.launches()["g"].worker_id == first_worker
    clock.now += 10  # past it: the slot is relaunched, the group placed on the new worker
    reconciler.reconcile_once()
    second_worker = store.launches()["~worker/0"].worker_id
    assert second_worker != first_worker and apps.cancelled == ["worker-0#1"]
    _heard(store, pool, second_worker, clock.now)
    reconciler.reconcile_once()
    reconciler.reconcile_once()
    assert store.launches()["g"].worker_id == second_worker


def test_a_group_is_placed_again_only_once_its_worker_reported_it_stopped(pooled):
    """Never in two places, at the step where it could break: CANCELED and at once RUNNING
    again, the group is placed nowhere while its worker still reports it running, or its
    query stopped with its last writes pending; once that worker reports it stopped, it is
    placed."""
    store, _clock, _apps, pool, reconciler, groups = pooled
    worker_id, first = _placed(pooled)
    _report(pool, worker_id, first, RUNNING)

    groups.set_state("g", CANCELED)
    assert reconciler.reconcile_once()["g"] is Action.CANCEL
    assert "g" not in store.launches()
    groups.set_state("g", RUNNING)
    assert reconciler.reconcile_once()["g"] is Action.NONE  # still running on the worker
    assert "g" not in store.launches()
    commands = _report(pool, worker_id, first, RUNNING)  # its heartbeat gets CANCEL
    assert [c.type for c in commands] == [worker_jobs.CANCEL]

    _report(pool, worker_id, first, CANCELED, pending=True)  # its last MERGE goes on
    assert reconciler.reconcile_once()["g"] is Action.NONE
    assert "g" not in store.launches()
    _report(pool, worker_id, first, CANCELED)  # stopped
    assert reconciler.reconcile_once()["g"] is Action.RUN
    assert store.launches()["g"].details["run"] != first.details["run"]


def test_a_new_leader_places_nothing_before_every_live_worker_heartbeated_to_it(pooled):
    store, clock, _apps, pool, reconciler, groups = pooled
    reconciler.reconcile_once()
    worker_id = store.launches()["~worker/0"].worker_id
    stamp = Timestamp()
    stamp.FromNanoseconds(int(clock.now * 1e9))  # heard by the previous leader
    store.put_worker(
        StoredWorker(last_updated=stamp, node=Node(id=worker_id), state=WORKER_STATE_WORKING)
    )
    groups.add(audit_group("g", "orders"), RUNNING, None)
    assert reconciler.reconcile_once()["g"] is Action.NONE
    assert "g" not in store.launches()
    pool.heartbeat(worker_id, [])
    assert reconciler.reconcile_once()["g"] is Action.RUN


def _report_all(
    pool: WorkerPool, worker_id: int, records: dict[str, LaunchRecord], stopped=()
) -> list:
    """One heartbeat of `worker_id` reporting each record's run RUNNING (CANCELED for the
    groups in `stopped`); the kinds of its reply's commands."""
    statuses = [
        worker_jobs.status(
            11,
            WorkerJob(job_group_id=g, run=str(r.detail("run")), definition=r.definition),
            CANCELED if g in stopped else RUNNING,
        )
        for g, r in sorted(records.items())
    ]
    return _kinds(pool.heartbeat(worker_id, statuses))


def _four_groups_on_the_first_of_two(pooled) -> tuple[int, int, dict[str, LaunchRecord]]:
    """A pool of two workers, only the first heard, and groups g1 to g4 placed on it: (the
    first worker, the second, the groups' launch records)."""
    store, clock, _apps, pool, reconciler, groups = pooled
    reconciler.reconcile_once()
    first, second = (store.launches()[f"~worker/{slot}"].worker_id for slot in (0, 1))
    _heard(store, pool, first, clock.now)
    for name in ("g1", "g2", "g3", "g4"):
        groups.add(audit_group(name, "orders"), RUNNING, None)
    reconciler.reconcile_once()
    return first, second, {g: store.launches()[g] for g in ("g1", "g2", "g3", "g4")}


@pytest.mark.parametrize("pooled", [{"size": 2}], indirect=True)
def test_a_worker_that_joins_gets_its_share_once_the_old_worker_stopped_it(pooled):
    """Rebalancing, and never in two places while a group moves: the new worker gets RUN for
    a moved group only once its old worker reports it stopped (the mutant without that gate
    sends RUN at once)."""
    store, clock, _apps, pool, reconciler, groups = pooled
    reconciler.reconcile_once()  # both slots launched; only the first one heard yet
    first, second = (store.launches()[f"~worker/{slot}"].worker_id for slot in (0, 1))
    _heard(store, pool, first, clock.now)
    for name in ("g1", "g2", "g3", "g4"):
        groups.add(audit_group(name, "orders"), RUNNING, None)
    reconciler.reconcile_once()
    before = {g: r for g, r in store.launches().items() if g.startswith("g")}
    assert {r.worker_id for r in before.values()} == {first}
    _report_all(pool, first, before)

    _heard(store, pool, second, clock.now)  # the second worker joins
    reconciler.reconcile_once()
    after = {g: store.launches()[g] for g in before}
    moved = sorted(g for g, r in after.items() if r.worker_id == second)
    assert moved == ["g3", "g4"]
    assert all(after[g].details["run"] != before[g].details["run"] for g in moved)
    assert all(after[g].failures == before[g].failures for g in moved)
    reconciler.reconcile_once()  # settled: nothing moves back
    assert {g: store.launches()[g] for g in before} == after

    assert _report_all(pool, second, {}) == []  # still running on the first worker
    assert _report_all(pool, first, before) == [(g, worker_jobs.CANCEL) for g in moved]
    assert _report_all(pool, second, {}) == []
    _report_all(pool, first, before, stopped=moved)  # it stopped them
    assert _report_all(pool, second, {}) == [(g, worker_jobs.RUN) for g in moved]


@pytest.mark.parametrize(
    "pooled", [{"size": 1, "max_size": 3, "capacity": Capacity(groups=2)}], indirect=True
)
def test_the_pool_grows_with_its_groups_and_drains_a_worker_before_stopping_it(pooled):
    store, clock, apps, pool, reconciler, groups = pooled

    def serve_heartbeats() -> None:
        """Every slot's worker heartbeats, reporting what it was told to run as running."""
        launches = store.launches()
        for key, slot in sorted(launches.items()):
            if key.startswith("~worker/"):
                _heard(store, pool, slot.worker_id, clock.now)
                mine = {
                    g: r
                    for g, r in launches.items()
                    if r.worker_id == slot.worker_id and not g.startswith("~")
                }
                _report_all(pool, slot.worker_id, mine)

    names = [f"g{n}" for n in range(5)]
    for name in names:
        groups.add(audit_group(name, "orders"), RUNNING, None)
    for _ in range(4):
        reconciler.reconcile_once()
        serve_heartbeats()
    slots = {k: r for k, r in store.launches().items() if k.startswith("~worker/")}
    assert sorted(slots) == ["~worker/0", "~worker/1", "~worker/2"]  # 5 groups, 2 each
    placed = Counter(store.launches()[n].worker_id for n in names)
    assert sorted(placed.values()) == [1, 2, 2]

    # Keep one group of the last worker: it must move before its worker is stopped.
    kept = next(n for n in names if store.launches()[n].worker_id == slots["~worker/2"].worker_id)
    for name in names:
        if name != kept:
            groups.set_state(name, CANCELED)
    reconciler.reconcile_once()  # the others cancelled: room on the first worker
    reconciler.reconcile_once()
    assert store.launches()[kept].worker_id == slots["~worker/0"].worker_id  # moved
    assert apps.cancelled == []  # its old worker still reports it running: not stopped yet
    for _ in range(3):
        serve_heartbeats()
        reconciler.reconcile_once()
    assert [k for k in store.launches() if k.startswith("~worker/")] == ["~worker/0"]
    assert sorted(apps.cancelled) == ["worker-1#2", "worker-2#3"]  # stopped once drained


@pytest.mark.parametrize("pooled", [{"size": 2}], indirect=True)
def test_a_rebalance_moves_groups_that_are_not_running_yet_first(pooled):
    store, clock, _apps, pool, reconciler, _groups = pooled
    first, second, before = _four_groups_on_the_first_of_two(pooled)
    _report_all(pool, first, {g: before[g] for g in ("g3", "g4")})  # g1, g2 not started yet
    _heard(store, pool, second, clock.now)
    reconciler.reconcile_once()
    moved = sorted(g for g in before if store.launches()[g].worker_id == second)
    assert moved == ["g1", "g2"]  # moving them restarts no query


@pytest.mark.parametrize("pooled", [{"size": 2}], indirect=True)
def test_a_rebalance_moves_the_groups_placed_recently_last(pooled):
    """A dead worker's groups were just placed on the survivor (g3, g4: placed now), which
    had run g1 and g2 for long; when the relaunched worker joins, g1 and g2 move, so g3 and
    g4 are not stopped a second time before their first batch there (by name alone, g3 and
    g4 would move)."""
    store, clock, _apps, pool, reconciler, _groups = pooled
    first, second, before = _four_groups_on_the_first_of_two(pooled)
    for name in ("g1", "g2"):  # placed a few minutes earlier
        before[name] = before[name].replace(started_at=clock.now - 300)
        store.put_launch(name, before[name])
    _report_all(pool, first, before)  # all four running
    _heard(store, pool, second, clock.now)
    reconciler.reconcile_once()
    moved = sorted(g for g in before if store.launches()[g].worker_id == second)
    assert moved == ["g1", "g2"]


@pytest.mark.parametrize("pooled", [{"size": 2}], indirect=True)
def test_a_new_leader_starts_nothing_before_every_live_worker_heartbeated_to_it(pooled):
    """A group moved to worker B just before a takeover may still run on A: the new leader
    (a pool that has heard nobody) sends B no RUN until A has told what it runs, and then
    only once A stopped it (each step fails against its mutant: no wait for A, no gate)."""
    store, clock, apps, pool, reconciler, groups = pooled
    reconciler.reconcile_once()
    a, b = (store.launches()[f"~worker/{slot}"].worker_id for slot in (0, 1))
    for worker_id in (a, b):
        _heard(store, pool, worker_id, clock.now)
    groups.add(audit_group("g", "orders"), RUNNING, None)
    reconciler.reconcile_once()
    placed = store.launches()["g"]
    old_worker = placed.worker_id
    new_worker = b if old_worker == a else a
    moved = placed.replace(
        worker_id=new_worker, details={**placed.details, "pool_worker": new_worker}
    )
    store.put_launch("g", moved)  # the old leader's move, just before it lost the lead

    leader = WorkerPool(store, apps, size=2, lease_seconds=20, clock=clock)  # heard nobody
    assert _report_all(leader, new_worker, {}) == []  # the old worker not heard yet
    assert _report_all(leader, old_worker, {"g": placed}) == [("g", worker_jobs.CANCEL)]
    assert _report_all(leader, new_worker, {}) == []  # still running there
    _report_all(leader, old_worker, {"g": placed}, stopped=["g"])
    assert _report_all(leader, new_worker, {}) == [("g", worker_jobs.RUN)]


@pytest.mark.parametrize("pooled", [{"size": 2}], indirect=True)
def test_a_group_told_to_run_but_not_reported_yet_starts_elsewhere_only_once_stopped(pooled):
    """Never in two places, at the step where it broke under load: worker A took a reply
    carrying RUN (its query may be starting) but its next heartbeat, which would report the
    group running, has not come yet; a rebalance moves the group to B. B gets RUN only once
    A reported it stopped (the mutant that counts only reported runs sends RUN to B at once,
    while A starts the same group)."""
    store, clock, _apps, pool, reconciler, _groups = pooled
    first, second, before = _four_groups_on_the_first_of_two(pooled)
    assert _report_all(pool, first, {}) == [(g, worker_jobs.RUN) for g in sorted(before)]

    # The crash point: the first worker's next heartbeat is late; meanwhile the second
    # joins and the rebalance moves two groups the first was just told to run.
    _heard(store, pool, second, clock.now)
    reconciler.reconcile_once()
    moved = sorted(g for g in before if store.launches()[g].worker_id == second)
    assert len(moved) == 2
    assert _report_all(pool, second, {}) == []  # the first worker may be running them

    assert _report_all(pool, first, before) == [(g, worker_jobs.CANCEL) for g in moved]
    assert _report_all(pool, second, {}) == []  # still running on the first
    _report_all(pool, first, before, stopped=moved)
    assert _report_all(pool, second, {}) == [(g, worker_jobs.RUN) for g in moved]


def test_a_cancel_is_passed_on_while_the_partition_refresh_waits_on_brokers(pooled):
    """The housekeeping (a partition refresh that waits on slow brokers, for a thousand
    groups) runs beside the reconcile passes: a CANCEL written meanwhile reaches the worker's
    next heartbeat at once, not after the refresh."""
    _store, _clock, _apps, pool, reconciler, groups = pooled
    worker_id, record = _placed(pooled)
    _report(pool, worker_id, record, RUNNING)
    refreshing, release, refreshed = threading.Event(), threading.Event(), threading.Event()

    def slow_refresh() -> list[str]:
        refreshing.set()
        release.wait(60)
        refreshed.set()
        return []

    reconciler.housekeeping.refresh_partitions = slow_refresh
    reconciler.interval = 0.05
    groups.subscribe(reconciler.wake)
    stop = threading.Event()
    loop = threading.Thread(target=reconciler.run, args=(stop,), daemon=True)
    loop.start()
    try:
        assert refreshing.wait(30)
        groups.set_state("g", CANCELED)
        wait_for(lambda: "g" in pool.heard.stopping(), 10, "the CANCEL during the refresh")
        commands = _report(pool, worker_id, record, RUNNING)
        assert _kinds(commands) == [("g", worker_jobs.CANCEL)]
        assert not refreshed.is_set()  # the refresh was still waiting on its brokers
    finally:
        release.set()
        stop.set()
        reconciler.wake()
        loop.join(30)
    assert not loop.is_alive()


def test_a_pass_reads_the_launch_records_a_fixed_number_of_times_however_many_groups(pooled):
    """A pass over a thousand groups must not parse every launch record once per group (it
    was 160 reads of 160 records each for 170 groups): the reads per pass do not grow with
    the groups."""
    store, _clock, _apps, _pool, reconciler, groups = pooled
    _placed(pooled)
    reads = []
    launches = store.launches

    def counted():
        reads.append(1)
        return launches()

    store.launches = counted  # type: ignore[method-assign]
    per_pass = []
    for count in (1, 40):
        for i in range(count):
            groups.add(audit_group(f"g{count}-{i}", "orders"), RUNNING, None)
        reconciler.reconcile_once()  # places them
        reads.clear()
        reconciler.reconcile_once()
        per_pass.append(len(reads))
    assert per_pass[0] == per_pass[1], per_pass
