"""Generations of a pack: the checkpoints a pack of JobGroups reads in, one per membership.

A pack (jobs/worker/packer.py) is one streaming query for many groups of one job type, each
reading its own topic. Spark's Kafka source keeps a query's positions in its checkpoint and,
when the checkpoint's `subscribe` list changes, reads an added topic from its earliest offset
and a re-added one again (docs/controlplane.md). So a pack never changes its list: each
membership is a *generation*, a query with a checkpoint of its own,
`<checkpoints>/packs/<key>/<id>`, whose first batch starts (Spark's `startingOffsets` as JSON)
where each member's results end. Where that is, is the job type's own rule (`EndOf`: the
audit's counts, jobs/audit/packs.py; the replication's copy, jobs/replication/packs.py), read
from the checkpoint each member last ran on, which its *ledger* names
(`<its own checkpoint>/pack.json`; without one, its own checkpoint, where it ran alone). Each
such checkpoint is read once, and several at once (END_READERS): after a worker died, the
generations its groups ran in are each read by the formation that takes them in (their
saved writes inherited: below). A member never run starts where its JobGroup says (earliest,
or latest).

Order of the steps: the generation's own file (`<generation>/pack.json`: its routes, starting
offsets and the members' ledgers), then each member's ledger, then the query. A crash before
every ledger is written leaves the new generation without a batch, so an old ledger and a new
one give the same positions. Forming the membership every ledger already names resumes that
generation: an ordinary restart on its checkpoint, exactly-once as any query. A generation no
ledger names any more is deleted by the formation that moved the last of them
(`_remove_superseded`): it can never be named again.

A checkpoint some member last ran on may owe writes: results its query saved and did not write
to its tables before it stopped (a worker killed between the two). The job type's `Owes` says
so, and its `EndOf` counts them as done, so the new generation need not wait for them: its
file lists each such checkpoint (`inherited`, with those the generations it supersedes had
inherited and not yet written), its job writes them beside its first batches, under the old
checkpoint's write id, and then deletes that checkpoint (`release`). Until then the checkpoint
is kept (`_remove_superseded` skips it), and a crash meanwhile leaves the duty in the file:
the resumed generation writes them, or the next one inherits them. Two generations that
inherit one checkpoint (its members split) may both write it: the job type's writes are
idempotent per (checkpoint, batch), as a restart's are.

A member that leaves its pack to run alone (an UPDATE gave it flow control, which its job type
does not pack) cannot go back to its own checkpoint: that stopped where the member joined the
pack. It goes on in a generation of its own instead (`form_alone`), formed as a pack's is,
starting where its results end in the generation it last ran in; its ledger names that one,
and a later pack takes it in from there.

A member joins a pack only once the query it last ran on has stopped (a worker re-forms a
pack without a group before the control plane places the group elsewhere: never in two
places); `form` does not check it.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, cast

from pyspark.sql import SparkSession

from core import kafka_admin
from core.config import ClusterConfig
from core.spec import JobSpec, SourceSpec
from jobs.runtime.checkpoint_files import HadoopFiles

log = logging.getLogger("uatu.packs")

LEDGER = "pack.json"
# How many members' ledgers a new generation writes at once.
LEDGER_WRITERS = 8
# How many checkpoints the members last ran on a new generation reads at once.
END_READERS = 4
# Spark's startingOffsets JSON for a partition without a position.
EARLIEST, LATEST = -2, -1
# The last part of the route of a generation of one member that runs alone (`form_alone`), and
# the key it is kept under: a pack of that one member (the same route otherwise) never resumes
# it, as its query is of another shape.
ALONE = "alone"

Positions = dict[str, dict[int, int]]  # {topic: {partition: next offset}}
# What a pack holds of one member, as strings, the member's topic first; a generation is
# resumed only by exactly its routes.
Route = tuple[str, ...]
# A checkpoint some member last ran on -> where the results of its query end, per partition
# of the topics it read ({} when it never ran): the job type's rule.
EndOf = Callable[[str], Positions]
# A checkpoint -> whether its query saved results it did not write, which its EndOf counts as
# done: the new generation writes them (`inherited`).
Owes = Callable[[str], bool]


@dataclass(frozen=True)
class Member:
    """What a pack needs to know of one member (a JobGroup's spec) to place it."""

    group: str  # its JobGroup id
    topic: str  # the one topic it reads
    checkpoint: str  # its own checkpoint, where its ledger is
    from_latest: bool  # never run, it starts at the latest offsets (else the earliest)
    key: str | None  # its job type's pack key; None: it runs alone

    @classmethod
    def of(cls, group: str, source: SourceSpec, checkpoint: str, key: str | None) -> Member:
        """The member of JobGroup `group` that reads `source`'s one topic."""
        return cls(group, source.topic, checkpoint, source.starting_offsets == "latest", key)


def common_key(kind: str, members: Sequence[Member]) -> str:
    """The pack key every one of `members` has; ValueError naming the members that do not
    pack together, or the topics listed twice (a pack reads each topic once)."""
    if not members:
        raise ValueError(f"{kind}: no members")
    keys = {m.key for m in members}
    if None in keys or len(keys) != 1:
        alone = [m.group for m in members if m.key is None]
        raise ValueError(
            f"{kind}: members that do not pack together: "
            f"{alone or sorted(m.group for m in members)}"
        )
    topics = [m.topic for m in members]
    twice = sorted({t for t in topics if topics.count(t) > 1})
    if twice:
        raise ValueError(f"{kind}: each topic once, {twice} listed twice")
    (key,) = keys
    assert key is not None
    return key


def form(
    spark: SparkSession,
    *,
    kind: str,
    checkpoints: str,
    members: Sequence[Member],
    routes: tuple[Route, ...],
    cluster: ClusterConfig,
    end_of: EndOf,
    before_ledgers: Callable[[], None],
    owes: Owes = lambda _checkpoint: False,
) -> tuple[str, dict[str, dict[str, int]]]:
    """The generation of a pack of `kind` ("audit pack") whose `members` (of one key, each
    topic once: `common_key`) on `cluster` hold `routes`: the one every member's ledger names
    when it has exactly these routes, else a new one under `checkpoints` (the site's
    checkpoint root) starting where `end_of` says each member's results end. Returns its
    checkpoint and its startingOffsets JSON. `before_ledgers` runs between the generation's
    file and the ledgers: the job type's fault point there (core/faults.py). `owes`: the
    checkpoints whose saved writes the new generation inherits (the module docstring)."""
    key = common_key(kind, members)
    return _generation(
        spark,
        kind=kind,
        key=key,
        checkpoints=checkpoints,
        members=members,
        routes=routes,
        cluster=cluster,
        end_of=end_of,
        before_ledgers=before_ledgers,
        owes=owes,
    )


class GroupSpec(JobSpec, Protocol):
    """What `form_alone` reads of a job type's spec of one group: a job spec with its
    source (frozen dataclasses)."""

    @property
    def source(self) -> SourceSpec: ...


SpecT = TypeVar("SpecT", bound=GroupSpec)


def form_alone(
    spark: SparkSession,
    spec: SpecT,
    *,
    kind: str,
    checkpoints: str,
    route: Route,
    end_of: EndOf,
    before_ledgers: Callable[[], None],
    owes: Owes = lambda _checkpoint: False,
) -> SpecT:
    """The spec a group that its job type runs alone (not packed: flow control, say) goes on
    by: `spec` itself when its ledger names no generation (it runs on its own checkpoint, as
    ever); else, as it ran in a pack and its own checkpoint is stale, `spec` on a generation
    of it alone, starting there (Spark's startingOffsets JSON). That generation is the one
    its ledger names when it is this member's alone (`route`, marked ALONE); else a new one,
    `<checkpoints>/packs/alone/<id>`, starting where its results end in the one it last ran
    on, as `form`'s do."""
    member = Member.of(spec.job_group_id, spec.source, spec.output.checkpoint, None)
    if ledger_of(HadoopFiles(spark), member.checkpoint) is None:
        return spec
    checkpoint, starting = _generation(
        spark,
        kind=kind,
        key=ALONE,
        checkpoints=checkpoints,
        members=[member],
        routes=((*route, ALONE),),
        cluster=spec.source.cluster,
        end_of=end_of,
        before_ledgers=before_ledgers,
        owes=owes,
    )
    source = dataclasses.replace(spec.source, starting_offsets=json.dumps(starting, sort_keys=True))
    output = dataclasses.replace(spec.output, checkpoint=checkpoint)
    # A frozen dataclass, which the Protocol cannot say: replace it through Any.
    return cast(SpecT, dataclasses.replace(cast(Any, spec), source=source, output=output))


def _generation(
    spark: SparkSession,
    *,
    kind: str,
    key: str,
    checkpoints: str,
    members: Sequence[Member],
    routes: tuple[Route, ...],
    cluster: ClusterConfig,
    end_of: EndOf,
    before_ledgers: Callable[[], None],
    owes: Owes,
) -> tuple[str, dict[str, dict[str, int]]]:
    """`form`'s generation, under `<checkpoints>/packs/<key>/`."""
    routes = tuple(sorted(routes))
    files = HadoopFiles(spark)
    ledgers = {m.group: ledger_of(files, m.checkpoint) for m in members}
    current = set(ledgers.values())
    if len(current) == 1 and None not in current:
        (checkpoint,) = current
        assert checkpoint is not None
        kept = files.read_text(f"{checkpoint}/{LEDGER}")
        if kept is not None and _routes(json.loads(kept)) == routes:
            log.info("%s %s: resuming %s (%d members)", kind, key, checkpoint, len(members))
            return checkpoint, json.loads(kept)["starting"]
    checkpoint = f"{checkpoints.rstrip('/')}/packs/{key}/{uuid.uuid4().hex[:12]}"
    started = time.monotonic()
    held, owed = _read_last_ran(files, members, ledgers, end_of, owes)
    positions = spark_json(_starting(members, held, cluster))
    positions_read = time.monotonic()
    own_ledgers = [f"{m.checkpoint}/{LEDGER}" for m in members]
    files.write_json(
        f"{checkpoint}/{LEDGER}",
        {
            "routes": [list(r) for r in routes],
            "starting": positions,
            "ledgers": own_ledgers,
            "inherited": owed,
        },
    )
    before_ledgers()
    # Several at once: one write is a few file-system round trips through py4j, and a
    # generation of a worker's groups has dozens of members.
    with ThreadPoolExecutor(LEDGER_WRITERS, thread_name_prefix="uatu-ledger") as pool:
        list(pool.map(lambda at: files.write_json(at, {"checkpoint": checkpoint}), own_ledgers))
    groups = sorted(m.group for m in members)
    log.info(
        "%s %s: new generation %s for %d members (%s): their positions read in %.1f s, the "
        "ledgers written in %.1f s; it writes the saved results of %s",
        kind,
        key,
        checkpoint,
        len(members),
        ", ".join(groups[:5]) + (" ..." if len(groups) > 5 else ""),
        positions_read - started,
        time.monotonic() - positions_read,
        owed or "no checkpoint",
    )
    _remove_superseded(files, kind, {c for c in current if c is not None} - set(owed))
    return checkpoint, positions


def _read_last_ran(
    files: HadoopFiles,
    members: Sequence[Member],
    ledgers: Mapping[str, str | None],
    end_of: EndOf,
    owes: Owes,
) -> tuple[dict[str, dict[int, int]], list[str]]:
    """Each member's topic's positions where it last ran (by group; `ledgers`: the pack
    checkpoint each member's ledger names, None when it ran alone or never ran), and the
    checkpoints whose saved writes the new generation inherits: those they last ran on that
    owe writes, and those the generations among them had inherited that still do (a crash
    came before that generation wrote them). Each checkpoint is read once, END_READERS at
    once."""
    last_ran = {m.group: ledgers[m.group] or m.checkpoint for m in members}
    read = sorted(set(last_ran.values()))

    def read_one(checkpoint: str) -> tuple[Positions, list[str]]:
        owed = [c for c in (checkpoint, *inherited(files, checkpoint)) if owes(c)]
        return end_of(checkpoint), owed

    with ThreadPoolExecutor(min(END_READERS, len(read)), thread_name_prefix="uatu-ends") as pool:
        found = dict(zip(read, pool.map(read_one, read), strict=True))
    held = {m.group: found[last_ran[m.group]][0].get(m.topic, {}) for m in members}
    return held, sorted({c for _, owed in found.values() for c in owed})


def _starting(
    members: Sequence[Member], held: Mapping[str, Mapping[int, int]], cluster: ClusterConfig
) -> Positions:
    """Where each member's topic starts in a new generation, every partition (Spark's JSON
    names them all; EARLIEST or LATEST where the member has no position): where it is
    `held`, by group."""
    partitions = kafka_admin.topic_partitions(cluster)
    starting: Positions = {}
    for member in members:
        default = LATEST if member.from_latest else EARLIEST
        count = partitions.get(member.topic, 0)
        starting[member.topic] = {p: held[member.group].get(p, default) for p in range(count)}
    return starting


def inherited(files: HadoopFiles, generation: str) -> list[str]:
    """The checkpoints whose saved writes the generation at `generation` is to write ([] for
    a member's own checkpoint, or a generation that inherited none)."""
    kept = files.read_text(f"{generation}/{LEDGER}")
    return [] if kept is None else [str(c) for c in json.loads(kept).get("inherited", [])]


def release(files: HadoopFiles, kind: str, checkpoint: str) -> None:
    """After a generation wrote the saved writes of `checkpoint` (one of its `inherited`):
    delete it when it is a generation no ledger names (a member's own is kept)."""
    _remove_superseded(files, kind, {checkpoint})


def ledger_of(files: HadoopFiles, own_checkpoint: str) -> str | None:
    """The pack checkpoint the ledger under a member's `own_checkpoint` names; None without a
    ledger (it ran alone, or never ran), or when `own_checkpoint` is a generation (a member
    alone runs on one: `form_alone`)."""
    text = files.read_text(f"{own_checkpoint}/{LEDGER}")
    named = None if text is None else json.loads(text).get("checkpoint")
    return None if named is None else str(named)


def alone_topic(files: HadoopFiles, checkpoint: str) -> str | None:
    """The topic of the member `checkpoint` is the generation alone of (`form_alone`); None
    for any other checkpoint."""
    kept = files.read_text(f"{checkpoint}/{LEDGER}")
    routes = _routes(json.loads(kept)) if kept is not None else ()
    return routes[0][0] if len(routes) == 1 and routes[0][-1] == ALONE else None


def planned_start(files: HadoopFiles, checkpoint: str) -> Positions | None:
    """Where the generation at `checkpoint` was to start (its file's starting offsets); None
    when `checkpoint` is no generation (a member's own)."""
    kept = files.read_text(f"{checkpoint}/{LEDGER}")
    if kept is None:
        return None
    return {
        t: {int(p): int(o) for p, o in ps.items()} for t, ps in json.loads(kept)["starting"].items()
    }


def spark_json(positions: Positions) -> dict[str, dict[str, int]]:
    """`positions` as Spark's startingOffsets JSON value."""
    return {t: {str(p): o for p, o in sorted(ps.items())} for t, ps in sorted(positions.items())}


def _remove_superseded(files: HadoopFiles, kind: str, previous: set[str]) -> None:
    """Delete each of the `previous` generations (the checkpoints the members' ledgers named
    before) that no ledger names any more: only its own members' ledgers, which its file
    lists, ever named it, and a ledger is only ever rewritten to a new generation. A
    member's own checkpoint (it ran alone) is never deleted."""
    for checkpoint in sorted(previous):
        kept = files.read_text(f"{checkpoint}/{LEDGER}")
        generation = json.loads(kept) if kept is not None else {}
        if "ledgers" not in generation:
            continue
        named = any(
            (text := files.read_text(ledger)) is not None
            and json.loads(text).get("checkpoint") == checkpoint
            for ledger in generation["ledgers"]
        )
        if not named:
            files.delete(checkpoint, recursive=True)
            log.info("%s: removed %s, a generation no member counts on", kind, checkpoint)


def _routes(kept: Mapping) -> tuple[Route, ...]:
    return tuple(sorted(tuple(str(part) for part in route) for route in kept.get("routes", [])))
