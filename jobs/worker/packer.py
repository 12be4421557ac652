"""Packs on a worker: the groups of one pack key share one query.

A worker that ran every group as a query of its own would pay a query's fixed cost per
trigger for each. A job type whose groups can share a query says how
(`StreamingJob.packing`: the audit and the replication, jobs/audit/packs.py and
jobs/replication/packs.py say why and which groups). Here the
run of such a group (`GroupRuns`' thread for it, jobs/worker/runs.py) joins its pack and
waits; the pack's own thread forms a generation of the current members (`Packing.form`) and
runs its query. A change of the members stops that query between two micro-batches (its stop
file) and the thread forms the next generation once the members have not changed for
SETTLE_SECONDS (at most MAX_SETTLE_SECONDS after the first change): the control plane places a
burst of groups over several heartbeats, and each generation costs a query start and a first
batch, so joins and leaves that arrive together are taken together.

A group joins a pack of its key that is not running a generation yet (one settling); when
every pack of the key runs, it starts a new one rather than stopping a running query: a
newcomer's first batch then waits for no other pack's running batch and MERGE, and the groups
already running miss no batch for it (the groups a dead worker's lease hands over arrive in a
burst onto a worker whose pack is mid-batch). Packs of one key that have each run their
generation for FOLD_SECONDS, and committed a batch in it, fold into the largest of them, all
at once: its members move (a leave, then a join, so each resumes where its results end),
so a worker keeps about one query per key however its groups arrived. (A fold stops a query
between batches, so one that had not started its first batch would lose it.)

Stopping a group (CANCEL, UPDATE, the fence) returns only once the query that ran it has
stopped, its last batch in its tables: only then does the worker report the run ended, so
the control plane starts it elsewhere after it stopped here (never in two places), and the
new place starts where its results end. The query's stop comes first, its last writes after:
the group's run is told (`stopped`) once the member has left and the query of the generation
that ran it has ended (the worker's query listener names it: `query_started`, `query_ended`,
by Spark's query id, as a new generation's query has the same name), and the worker reports
it CANCELED with its writes pending meanwhile (jobs/worker/runs.py). When a pack's query
fails, every member's run fails with the one line of its cause; the control plane relaunches
them (each joins again), and the other packs and groups of the worker keep running.

One query per pack, named after the pack (`pack-<key>`; for the audit `audit-pack-<key>`, for
the replication `replication-pack-<key>`) whatever its generation; its Spark jobs go to a FAIR
pool named after the pack. Two groups of one item (its topic) and key go to two packs of the
key (`pack-<key>-1`, ...).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.errors import EXIT_OK, UatuError
from jobs.runtime.template import Packing

log = logging.getLogger("uatu.worker")

# Forms a generation of the members' specs under the pack's name (`Packing.form` on the
# worker's session and checkpoints): the pack's spec.
FormPack = Callable[[Packing, list[Any], str], Any]
# Runs a pack's spec (`Packing.job`'s) until its stop file appears: the exit status (0
# stopped, 1 failed).
RunPack = Callable[[Packing, Any, str], int]
# Whether the query of that name running now has committed a batch.
Committed = Callable[[str], bool]
# How often a member's run looks for its stop file.
STOP_POLL_SECONDS = 0.2
# A generation is formed once the members have not changed for this long...
SETTLE_SECONDS = 2.0
# ...or this long after the first change it takes, whichever comes first. Short: a burst of
# placements (a fleet's groups added at once, a dead worker's moved) forms a few smaller
# generations, each started soon, rather than one large one late; the packs fold later.
MAX_SETTLE_SECONDS = 4.0
# Packs of one key that have each run their generation this long (and committed a batch in
# it) fold into one: the members of a pack that keeps changing do not move every time.
FOLD_SECONDS = 30.0
# How often the packer looks for packs to fold.
FOLD_POLL_SECONDS = 1.0


class PackFailed(UatuError):
    """The query of a group's pack failed; the group's run fails with its line."""

    def __init__(self, name: str, why: str) -> None:
        super().__init__(f"its pack {name} failed: {why}")


@dataclass
class Member:
    """One group in a pack, as its own run waits on it."""

    spec: Any  # the group's JobSpec
    item: str  # Packing.item
    failure: str | None = None  # the pack's query failed while the group was in it
    move_to: Pack | None = None  # a fold moves the group to this pack of its key
    wake: threading.Event = field(default_factory=threading.Event)  # a generation ended

    @property
    def group_id(self) -> str:
        return str(self.spec.job_group_id)


class Pack:
    """The members of one pack on this worker and the thread that runs their query."""

    def __init__(
        self,
        packing: Packing,
        name: str,
        form: FormPack,
        run: RunPack,
        stop_dir: Path,
        settle: tuple[float, float] = (SETTLE_SECONDS, MAX_SETTLE_SECONDS),
    ) -> None:
        self.packing = packing  # the first member's (every member's has the same key)
        self._settle, self._max_settle = settle
        self.name = name  # the pack spec's job_group_id
        self.query_name = packing.query_name(name)
        self._form = form
        self._run = run
        self._stop_dir = stop_dir
        self._changed = threading.Condition()
        self._wanted: dict[str, Member] = {}
        self._running: set[str] = set()  # the members of the generation running now
        self._stop_file: Path | None = None  # that generation's
        self._dirty = False  # members changed since the generation running now was formed
        self._changed_at = 0.0  # monotonic time of the last change of the members
        self._pending_since: float | None = None  # of the first change not formed yet
        self._thread: threading.Thread | None = None
        self._generations = 0
        self._started_at = 0.0  # monotonic time the running generation was formed
        self._query_id: str | None = None  # Spark's id of the running generation's query
        self._query_ended = False  # that query has stopped (its last writes may go on)

    def members(self) -> list[str]:
        with self._changed:
            return sorted(self._wanted)

    def holds(self, item: str) -> bool:
        return item in self.items()

    def items(self) -> set[str]:
        with self._changed:
            return {m.item for m in self._wanted.values()}

    def is_open(self) -> bool:
        """No generation is formed or running: a join costs no running query a batch."""
        with self._changed:
            return not self._running

    def steady_members(self, seconds: float) -> list[Member]:
        """The members, if its generation has run them unchanged for `seconds`; else none."""
        with self._changed:
            steady = self._running and not self._dirty and set(self._wanted) == self._running
            if not steady or time.monotonic() - self._started_at < seconds:
                return []
            return list(self._wanted.values())

    def join(self, member: Member) -> None:
        with self._changed:
            self._wanted[member.group_id] = member
            self._restart_locked()

    def leave(self, member: Member, stopped: Callable[[], None] | None = None) -> None:
        """Take `member` out; return once no query of this pack runs it any more and the
        writes of the generation that ran it are made. `stopped` is called before that, once
        that generation's query has ended (if it ends before its run does)."""
        with self._changed:
            if self._wanted.get(member.group_id) is member:
                del self._wanted[member.group_id]
                self._restart_locked()
            while member.group_id in self._running and not self._query_ended:
                self._changed.wait()
            writes_go_on = member.group_id in self._running
        if writes_go_on and stopped is not None:
            stopped()
        with self._changed:
            while member.group_id in self._running:
                self._changed.wait()

    def query_started(self, query_id: str) -> None:
        """A query of this pack's name started: the running generation's (Spark tells it
        while the generation's run starts its query)."""
        with self._changed:
            if self._running and self._query_id is None:
                self._query_id = query_id

    def query_ended(self, query_id: str) -> None:
        """A query stopped without failing; the running generation's, if its id says so."""
        with self._changed:
            if query_id == self._query_id:
                self._query_ended = True
                self._changed.notify_all()

    def _restart_locked(self) -> None:
        """Have the running generation stop (it re-forms), or start the pack's thread."""
        self._dirty = True
        self._changed_at = time.monotonic()
        if self._pending_since is None:
            self._pending_since = self._changed_at
        if self._stop_file is not None:
            self._stop_file.touch()
        if self._thread is None and self._wanted:
            self._thread = threading.Thread(
                target=self._loop, name=f"uatu-{self.query_name}", daemon=True
            )
            self._thread.start()
        self._changed.notify_all()

    def _settled_locked(self) -> None:
        """Wait until the members settle (the module docstring), lock held."""
        while self._pending_since is not None:
            now = time.monotonic()
            due = min(self._changed_at + self._settle, self._pending_since + self._max_settle)
            if now >= due:
                break
            self._changed.wait(due - now)
        self._pending_since = None

    def _loop(self) -> None:
        while True:
            with self._changed:
                self._settled_locked()
                if not self._wanted:
                    self._thread = None
                    return
                members = list(self._wanted.values())
                self._generations += 1
                stop_file = self._stop_dir / f"{self.query_name}.{self._generations}.stop"
                self._stop_file, self._running, self._dirty = stop_file, set(self._wanted), False
                self._started_at = time.monotonic()
                self._query_id, self._query_ended = None, False
            failure = self._run_generation(members, stop_file)
            with self._changed:
                for member in members:
                    if failure is not None and self._wanted.get(member.group_id) is member:
                        member.failure = failure
                        del self._wanted[member.group_id]
                    member.wake.set()
                self._stop_file, self._running = None, set()
                self._changed.notify_all()
            stop_file.unlink(missing_ok=True)

    def _run_generation(self, members: list[Member], stop_file: Path) -> str | None:
        """Form and run one generation until it is stopped; the one line of its failure."""
        try:
            spec = self._form(self.packing, [m.spec for m in members], self.name)
            with self._changed:
                if self._dirty:  # changed while forming: form again
                    return None
            status = self._run(self.packing, spec, str(stop_file))
        except UatuError as e:
            return str(e)
        except Exception as e:  # the worker's other groups keep running
            log.exception("pack %s failed", self.name)
            return f"{type(e).__name__}: {e}"
        return None if status == EXIT_OK else f"its query ended (exit {status})"


class Packer:
    """The worker's packs, by key; `run` is the runner of a group that packs."""

    def __init__(
        self,
        form: FormPack,
        run: RunPack,
        stop_dir: Path,
        settle: tuple[float, float] = (SETTLE_SECONDS, MAX_SETTLE_SECONDS),
        fold_seconds: float = FOLD_SECONDS,
        committed: Committed = lambda _query_name: True,
    ) -> None:
        """`settle`: (SETTLE_SECONDS, MAX_SETTLE_SECONDS) of its packs; `fold_seconds` and
        `committed`: when packs fold (the module docstring)."""
        self._form = form
        self._run = run
        self._stop_dir = stop_dir
        self._settle = settle
        self._fold_seconds = fold_seconds
        self._committed = committed
        self._lock = threading.Lock()
        self._packs: dict[str, list[Pack]] = {}  # by key
        self._folder: threading.Thread | None = None

    def query_started(self, query_name: str, query_id: str) -> None:
        """The worker's query listener: a query started (`Pack.query_started`)."""
        for pack in self._all_packs():
            if pack.query_name == query_name:
                pack.query_started(query_id)

    def query_ended(self, query_id: str) -> None:
        """The worker's query listener: a query stopped without failing."""
        for pack in self._all_packs():
            pack.query_ended(query_id)

    def _all_packs(self) -> list[Pack]:
        with self._lock:
            return [p for of_key in self._packs.values() for p in of_key]

    def pack_of(self, group_id: str) -> Pack | None:
        return next((p for p in self._all_packs() if group_id in p.members()), None)

    def _join(
        self,
        packing: Packing,
        member: Member,
        joined: Callable[[str], None],
        into: Pack | None = None,
    ) -> Pack:
        """Join the member to `into` (the pack a fold chose), unless that took the member's
        item meanwhile; else to an open pack of the key that does not hold its item (a new one
        if none: the module docstring). `joined` is told its query name first; under the
        packer's lock, so two groups of one item never join one pack."""
        with self._lock:
            of_key = self._packs.setdefault(packing.key, [])
            if into is not None and not into.holds(member.item):
                pack: Pack | None = into
            else:
                pack = next((p for p in of_key if p.is_open() and not p.holds(member.item)), None)
            if pack is None:
                name = f"pack-{packing.key}" + (f"-{len(of_key)}" if of_key else "")
                pack = Pack(packing, name, self._form, self._run, self._stop_dir, self._settle)
                of_key.append(pack)
            joined(pack.query_name)
            pack.join(member)
            if self._folder is None:
                self._folder = threading.Thread(
                    target=self._fold_loop, name="uatu-pack-folder", daemon=True
                )
                self._folder.start()
            return pack

    def _fold_loop(self) -> None:
        while True:
            time.sleep(FOLD_POLL_SECONDS)
            with self._lock:
                keys = list(self._packs.values())
            for of_key in keys:
                self._fold(of_key)

    def _fold(self, of_key: list[Pack]) -> None:
        """Move the members of the key's steady packs into the largest of them (the module
        docstring), a member whose item that pack holds already staying where it is."""
        steady = [(p, ms) for p in list(of_key) if (ms := p.steady_members(self._fold_seconds))]
        if len(steady) < 2:  # the common case: no need to ask the queries' progress
            return
        steady = [(p, ms) for p, ms in steady if self._committed(p.query_name)]
        if len(steady) < 2:
            return
        target, _ = max(steady, key=lambda pm: len(pm[1]))
        items = target.items()
        for pack, members in steady:
            if pack is target:
                continue
            moving = [m for m in members if m.item not in items]
            if moving:
                log.info("pack %s: %d groups fold into %s", pack.name, len(moving), target.name)
            for member in moving:
                items.add(member.item)
                member.move_to = target
                member.wake.set()

    def run(
        self,
        packing: Packing,
        spec: Any,
        stop_file: str,
        joined: Callable[[str], None] = lambda _: None,
        stopped: Callable[[], None] = lambda: None,
    ) -> int:
        """Run `spec`'s group in its pack (`packing`, its job type's) until `stop_file`
        appears: EXIT_OK once no query runs it any more and its last writes are made;
        PackFailed when its pack's query failed meanwhile. `joined` is told the query name of
        each pack the group joins (before its first batch there; a fold moves it to another);
        `stopped`, once the query that ran it has stopped, if its writes go on after that."""
        member = Member(spec, packing.item)
        pack = self._join(packing, member, joined)
        stop = Path(stop_file)
        while True:
            while member.failure is None and member.move_to is None and not stop.exists():
                member.wake.wait(STOP_POLL_SECONDS)
                member.wake.clear()
            pack.leave(member, stopped if stop.exists() else None)
            if member.failure is not None:
                raise PackFailed(pack.name, member.failure)
            if member.move_to is None or stop.exists():
                return EXIT_OK
            into, member.move_to = member.move_to, None
            pack = self._join(packing, member, joined, into)
