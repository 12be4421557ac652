"""The worker's packs (jobs/worker/packer.py), their protocol alone: members join and leave a
pack whose query re-forms, a stopped member's run returns only once no query runs it, a
failed query fails every member, two members of one item go to two packs, newcomers start a
pack of their own beside a running one and packs fold into one, no group ever in two queries
at once. The query here is a
stand-in that runs until its stop file appears (what a job's `run_on` does); audit packs on
real Spark and Kafka are tests/jobs/test_worker_every_type.py's and
tests/jobs/audit/test_audit_packs.py's."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from core.errors import EXIT_FAILED, EXIT_OK
from jobs.runtime.template import Packing
from jobs.worker.packer import Member as PackMember
from jobs.worker.packer import Packer, PackFailed
from testing.polling import wait_for
from tests.jobs.audit.test_audit_pack_units import audit, spec_of

SETTLE = (0.3, 3.0)  # the packs' (SETTLE_SECONDS, MAX_SETTLE_SECONDS) here
FOLD = 1.0  # their FOLD_SECONDS, where a test lets packs fold


def packing(item: str) -> Packing:
    """Packs of one key whose query the test's stand-in runs (form and job unused here)."""
    return Packing("k", item, form=None, query_name=lambda name: f"q-{name}", job=None)  # type: ignore[arg-type]


class Queries:
    """Pack queries that run until their stop file appears; what ran, and what runs now."""

    def __init__(self, status: int = EXIT_OK) -> None:
        self.status = status
        self.lock = threading.Lock()
        self.generations: list[tuple[str, tuple[str, ...]]] = []  # (pack, members)
        self.running: dict[str, tuple[str, ...]] = {}
        self.in_two_at_once: list[str] = []  # groups a query started while another ran them

    def form(self, _packing, members, name: str):
        return (name, tuple(sorted(m.job_group_id for m in members)))

    def run(self, _packing, formed, stop_file: str) -> int:
        name, members = formed
        with self.lock:
            self.generations.append(formed)
            self.in_two_at_once += [g for g in members if self._audited_locked(g)]
            self.running[name] = members
        try:
            if self.status != EXIT_OK:
                return self.status
            wait_for(lambda: Path(stop_file).exists(), 60, "its stop file", interval_s=0.05)
            return EXIT_OK
        finally:
            with self.lock:
                del self.running[name]

    def audited(self, group_id: str) -> bool:
        with self.lock:
            return self._audited_locked(group_id)

    def _audited_locked(self, group_id: str) -> bool:
        return any(group_id in members for members in self.running.values())

    def packs_of_key(self) -> list[tuple[str, ...]]:
        """The members of each query running now, sorted."""
        with self.lock:
            return sorted(self.running.values())


class Member:
    """A group's run (what GroupRuns' thread does) in its own thread, with its stop file."""

    def __init__(self, packer: Packer, tmp_path: Path, group_id: str, topic: str) -> None:
        self.stop_file = tmp_path / f"{group_id}.stop"
        self.outcome: int | BaseException | None = None
        spec = spec_of(audit(group_id, topic))
        self.thread = threading.Thread(
            target=self._run, args=(packer, packing(topic), spec), daemon=True
        )
        self.thread.start()

    def _run(self, packer: Packer, packing: Packing, spec) -> None:
        try:
            self.outcome = packer.run(packing, spec, str(self.stop_file))
        except BaseException as e:  # the test reads it
            self.outcome = e

    def stop(self) -> None:
        stop_all([self])


def stop_all(members: list[Member]) -> None:
    """Stop the members' runs at once and wait for each to return."""
    for member in members:
        member.stop_file.touch()
    for member in members:
        member.thread.join(60)
        assert not member.thread.is_alive()


def test_members_share_one_query_that_reforms_and_a_stopped_member_is_audited_nowhere(
    tmp_path,
):
    queries = Queries()
    packer = Packer(queries.form, queries.run, tmp_path, SETTLE, FOLD)
    a = Member(packer, tmp_path, "a", "ta")
    b = Member(packer, tmp_path, "b", "tb")
    wait_for(lambda: ("a", "b") in queries.running.values(), 30, "a generation of a and b")
    (name,) = queries.running
    assert name.startswith("pack-")

    a.stop()  # returns once a's run has: no query audits a then
    assert (a.outcome, queries.audited("a")) == (EXIT_OK, False)
    wait_for(lambda: queries.running.get(name) == ("b",), 30, "a generation of b alone")
    c = Member(packer, tmp_path, "c", "tc")  # b's pack runs: c starts one of its own...
    wait_for(lambda: queries.packs_of_key() == [("b",), ("c",)], 30, "c's own pack beside b's")
    # ...and the two fold into one (a tie: into the key's first)
    wait_for(lambda: queries.running.get(name) == ("b", "c"), 30, "c folded into b's pack")
    assert queries.packs_of_key() == [("b", "c")]
    stop_all([b, c])
    assert (b.outcome, c.outcome) == (EXIT_OK, EXIT_OK)
    wait_for(lambda: not queries.running, 30, "the pack's query stopped with its last member")
    assert {g for _, members in queries.generations for g in members} == {"a", "b", "c"}
    assert queries.in_two_at_once == []


def test_members_that_join_together_start_in_one_generation_beside_the_running_one(tmp_path):
    """Joins less than the settle time apart are formed together, not one generation each
    (each costs a query start and a first batch); joins while the key's pack runs form a
    pack of their own and leave the running query alone."""
    queries = Queries()
    packer = Packer(queries.form, queries.run, tmp_path, (1.0, 10.0), fold_seconds=600)
    members = [Member(packer, tmp_path, g, f"t{g}") for g in ("a", "b", "c")]
    wait_for(lambda: queries.generations, 30, "the first generation")
    for n in range(5):  # joins 0.1 s apart, well below the settle time
        members.append(Member(packer, tmp_path, f"s{n}", f"ts{n}"))
        time.sleep(0.1)
    wait_for(lambda: len(queries.generations) >= 2, 30, "a second generation")
    assert [m for _, m in queries.generations] == [
        ("a", "b", "c"),
        ("s0", "s1", "s2", "s3", "s4"),
    ]
    assert queries.packs_of_key() == [("a", "b", "c"), ("s0", "s1", "s2", "s3", "s4")]
    stop_all(members)


def test_packs_fold_into_the_largest_and_a_group_of_a_held_item_stays_apart(tmp_path):
    """Three packs of one key: the largest takes the others' members at once (one more
    generation, not one per pack), except a member whose item it holds already."""
    queries = Queries()
    packer = Packer(queries.form, queries.run, tmp_path, (0.3, 3.0), fold_seconds=600)
    big = [Member(packer, tmp_path, g, f"t{g}") for g in ("a", "b", "c")]
    wait_for(lambda: queries.generations, 30, "the first pack's generation")
    small = [Member(packer, tmp_path, "d", "td"), Member(packer, tmp_path, "x", "ta")]
    wait_for(lambda: len(queries.running) == 2, 30, "the second pack")
    last = [Member(packer, tmp_path, "e", "te")]
    wait_for(lambda: len(queries.running) == 3, 30, "the third pack")
    assert queries.packs_of_key() == [("a", "b", "c"), ("d", "x"), ("e",)]
    packer._fold_seconds = 0.5  # now fold
    wait_for(
        lambda: queries.packs_of_key() == [("a", "b", "c", "d", "e"), ("x",)],
        30,
        "d and e folded into the largest, x (a's topic) left in its own",
    )
    assert [m for _, m in queries.generations].count(("a", "b", "c", "d", "e")) == 1
    last.append(Member(packer, tmp_path, "f", "tf"))  # another fold, x still left alone
    wait_for(lambda: ("x",) in queries.packs_of_key() and len(queries.running) == 2, 30, "f")
    wait_for(lambda: queries.packs_of_key()[0] == ("a", "b", "c", "d", "e", "f"), 30, "f folded")
    assert [m for _, m in queries.generations].count(("x",)) == 1  # never moved, never re-formed
    stop_all(big + small + last)
    assert all(m.outcome == EXIT_OK for m in big + small + last)
    assert queries.in_two_at_once == []


def test_a_stream_of_joins_is_formed_by_the_settle_bound(tmp_path):
    queries = Queries()
    packer = Packer(queries.form, queries.run, tmp_path, (1.5, 2.0))
    members = []
    for n in range(15):  # a join every 0.2 s for 3 s: never the settle time apart
        members.append(Member(packer, tmp_path, f"s{n:02d}", f"t{n}"))
        time.sleep(0.2)
    wait_for(lambda: queries.generations, 30, "a generation")
    first = queries.generations[0][1]
    assert 2 <= len(first) < 15, first  # formed by the bound, 2 s after the first join
    stop_all(members)


def test_two_groups_of_one_topic_go_to_two_packs(tmp_path):
    queries = Queries()
    packer = Packer(queries.form, queries.run, tmp_path, SETTLE)
    first, second = Member(packer, tmp_path, "x", "t"), Member(packer, tmp_path, "y", "t")
    wait_for(lambda: len(queries.running) == 2, 30, "two packs running")
    assert sorted(queries.running.values()) == [("x",), ("y",)]
    assert len({name.removesuffix("-1") for name in queries.running}) == 1
    stop_all([first, second])


def test_a_failed_query_fails_every_member_with_its_line(tmp_path):
    queries = Queries(status=EXIT_FAILED)
    packer = Packer(queries.form, queries.run, tmp_path, SETTLE)
    a, b = Member(packer, tmp_path, "a", "ta"), Member(packer, tmp_path, "b", "tb")
    for member in (a, b):
        member.thread.join(60)
    failures = [m.outcome for m in (a, b)]
    assert all(isinstance(f, PackFailed) for f in failures), failures
    assert "its query ended (exit 1)" in str(failures[0])
    assert (queries.running, packer.pack_of("a"), packer.pack_of("b")) == ({}, None, None)


def test_a_move_to_a_pack_that_took_the_item_meanwhile_goes_to_another(tmp_path):
    """A fold chose the pack, then a newcomer of the same item joined it: the moving member
    joins another pack of the key instead of being audited twice in one query."""
    queries = Queries()
    packer = Packer(queries.form, queries.run, tmp_path, SETTLE, fold_seconds=600)
    a = Member(packer, tmp_path, "a", "ta")
    wait_for(lambda: queries.running, 30, "a's pack")
    target = packer.pack_of("a")
    assert target is not None
    names: list[str] = []
    x = PackMember(spec_of(audit("x", "ta")), "ta")
    moved = packer._join(target.packing, x, names.append, into=target)
    assert moved is not target and names == [moved.query_name]
    wait_for(lambda: queries.packs_of_key() == [("a",), ("x",)], 30, "x in a pack of its own")
    moved.leave(x)
    stop_all([a])
    assert queries.in_two_at_once == []


def test_a_pack_folds_only_once_its_query_committed_a_batch(tmp_path):
    """A fold stops a query between batches: one that has not committed its first batch yet
    keeps its members until it has."""
    queries = Queries()
    asked: list[str] = []
    committed = {"q-pack-k"}  # the first pack's query has committed a batch, the second not

    def has_committed(query_name: str) -> bool:
        asked.append(query_name)
        return query_name in committed

    packer = Packer(queries.form, queries.run, tmp_path, SETTLE, 0.3, committed=has_committed)
    members = [Member(packer, tmp_path, "a", "ta")]
    wait_for(lambda: queries.running, 30, "a's pack")
    members.append(Member(packer, tmp_path, "b", "tb"))
    wait_for(lambda: asked.count("q-pack-k-1") >= 3, 30, "the folder to ask about b's pack thrice")
    assert queries.packs_of_key() == [("a",), ("b",)]
    committed.add("q-pack-k-1")
    wait_for(lambda: queries.packs_of_key() == [("a", "b")], 30, "b's pack folded")
    stop_all(members)
    assert queries.in_two_at_once == []


class QueriesWithWrites(Queries):
    """Pack queries that tell the packer their start and stop, as the worker's listener does
    (a new Spark query id per generation), and whose run then waits for `writes` (the last
    MERGE after the query stopped)."""

    def __init__(self) -> None:
        super().__init__()
        self.packer: Packer | None = None
        self.writes = threading.Event()
        self.tell_end = threading.Event()  # the listener's word of the stop may come late
        self.tell_end.set()
        self.ids: list[str] = []

    def run(self, _packing, formed, stop_file: str) -> int:
        name, members = formed
        assert self.packer is not None
        with self.lock:
            self.generations.append(formed)
            self.running[name] = members
            query_id = f"id-{len(self.ids)}"
            self.ids.append(query_id)
        self.packer.query_started(f"q-{name}", query_id)
        try:
            wait_for(lambda: Path(stop_file).exists(), 60, "its stop file", interval_s=0.05)
            with self.lock:
                del self.running[name]  # the query stopped; its writes go on
            self.tell_end.wait(60)
            self.packer.query_ended(query_id)
            self.writes.wait(60)
            return EXIT_OK
        finally:
            with self.lock:
                self.running.pop(name, None)


def test_a_stopped_member_is_told_when_its_query_ends_and_returns_when_its_writes_are_in(
    tmp_path,
):
    """A leaving member's `stopped` comes once the generation that ran it stopped its query
    (by that query's id: a late word about an earlier generation's query, of the same name,
    is not this one's), its run's return only once that generation's writes are made."""
    queries = QueriesWithWrites()
    packer = Packer(queries.form, queries.run, tmp_path, SETTLE, fold_seconds=600)
    queries.packer = packer
    told: dict[str, threading.Event] = {g: threading.Event() for g in ("a", "b")}
    outcome: dict[str, int] = {}

    def member(group_id: str) -> threading.Thread:
        spec = spec_of(audit(group_id, f"t{group_id}"))
        stop_file = str(tmp_path / f"{group_id}.stop")

        def run() -> None:
            outcome[group_id] = packer.run(
                packing(f"t{group_id}"), spec, stop_file, stopped=told[group_id].set
            )

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        return thread

    a, b = member("a"), member("b")
    wait_for(lambda: ("a", "b") in queries.running.values(), 30, "a generation of a and b")
    (tmp_path / "a.stop").touch()
    wait_for(told["a"].is_set, 30, "a told its query stopped")
    assert a.is_alive() and "a" not in outcome  # its writes are not made yet
    assert not told["b"].is_set()
    queries.writes.set()
    a.join(30)
    assert outcome["a"] == EXIT_OK
    wait_for(lambda: list(queries.running.values()) == [("b",)], 30, "a generation of b alone")
    queries.writes.clear()
    queries.tell_end.clear()
    (tmp_path / "b.stop").touch()
    wait_for(lambda: packer.pack_of("b") is None, 30, "b to leave")
    packer.query_ended("id-0")  # late: the first generation's query, not b's
    assert not told["b"].wait(0.5)
    queries.tell_end.set()  # now the second generation's (id-1)
    wait_for(told["b"].is_set, 30, "b told its query stopped")
    assert b.is_alive()
    queries.writes.set()
    b.join(30)
    assert outcome["b"] == EXIT_OK
