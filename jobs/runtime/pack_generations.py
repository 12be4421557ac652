"""Generations of a pack: the checkpoints a pack of JobGroups reads in, one per membership.

A pack (jobs/worker/packer.py) is one streaming query for many groups of one job type, each
reading its own topic. Spark's Kafka source keeps a query's positions in its checkpoint and,
when the checkpoint's `subscribe` list changes, reads an added topic from its earliest offset
and a re-added one again (docs/controlplane.md). So a pack never changes its list: each
membership is a *generation*, a query with a checkpoint of its own,
`<checkpoints>/packs/<key>/<id>`, whose first batch starts (Spark's `startingOffsets` as JSON)
where each member's results end. Where that is, is the job type's own rule (`Starting`: the
audit's counts, jobs/audit/packs.py; the replication's copy, jobs/replication/packs.py), read
from the checkpoint each member last ran on, which its *ledger* names
(`<its own checkpoint>/pack.json`; without one, its own checkpoint, where it ran alone).

Order of the steps: the generation's own file (`<generation>/pack.json`: its routes, starting
offsets and the members' ledgers), then each member's ledger, then the query. A crash before
every ledger is written leaves the new generation without a batch, so an old ledger and a new
one give the same positions. Forming the membership every ledger already names resumes that
generation: an ordinary restart on its checkpoint, exactly-once as any query. A generation no
ledger names any more is deleted by the formation that moved the last of them
(`_remove_superseded`): it can never be named again.

A member joins a pack only once the query it last ran on has stopped (a worker re-forms a
pack without a group before the control plane places the group elsewhere: never in two
places); `form` does not check it.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor

from pyspark.sql import SparkSession

from jobs.runtime.checkpoint_files import HadoopFiles

log = logging.getLogger("uatu.packs")

LEDGER = "pack.json"
# How many members' ledgers a new generation writes at once.
LEDGER_WRITERS = 8
# Spark's startingOffsets JSON for a partition without a position.
EARLIEST, LATEST = -2, -1

Positions = dict[str, dict[int, int]]  # {topic: {partition: next offset}}
# What a pack holds of one member, as strings, the member's topic first; a generation is
# resumed only by exactly its routes.
Route = tuple[str, ...]
# (members' ledgers read: group -> the checkpoint it names, None for none) -> where each
# member's topic starts in a new generation, every partition.
Starting = Callable[[Mapping[str, str | None]], Positions]


def form(
    spark: SparkSession,
    *,
    kind: str,
    key: str,
    checkpoints: str,
    members: Mapping[str, str],
    routes: tuple[Route, ...],
    starting: Starting,
    before_ledgers: Callable[[], None],
) -> tuple[str, dict[str, dict[str, int]]]:
    """The generation of a pack of `kind` ("audit pack") and `key` whose `members` (group ->
    its own checkpoint) hold `routes`: the one every member's ledger names when it has exactly
    these routes, else a new one under `checkpoints` (the site's checkpoint root) starting
    where `starting` says. Returns its checkpoint and its startingOffsets JSON.
    `before_ledgers` runs between the generation's file and the ledgers: the job type's fault
    point there (core/faults.py)."""
    routes = tuple(sorted(routes))
    files = HadoopFiles(spark)
    ledgers = {group: ledger_of(files, own) for group, own in members.items()}
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
    positions = spark_json(starting(ledgers))
    positions_read = time.monotonic()
    own_ledgers = [f"{own}/{LEDGER}" for own in members.values()]
    files.write_json(
        f"{checkpoint}/{LEDGER}",
        {"routes": [list(r) for r in routes], "starting": positions, "ledgers": own_ledgers},
    )
    before_ledgers()
    # Several at once: one write is a few file-system round trips through py4j, and a
    # generation of a worker's groups has dozens of members.
    with ThreadPoolExecutor(LEDGER_WRITERS, thread_name_prefix="uatu-ledger") as pool:
        list(pool.map(lambda at: files.write_json(at, {"checkpoint": checkpoint}), own_ledgers))
    groups = sorted(members)
    log.info(
        "%s %s: new generation %s for %d members (%s): their positions read in %.1f s, the "
        "ledgers written in %.1f s",
        kind,
        key,
        checkpoint,
        len(members),
        ", ".join(groups[:5]) + (" ..." if len(groups) > 5 else ""),
        positions_read - started,
        time.monotonic() - positions_read,
    )
    _remove_superseded(files, kind, {c for c in current if c is not None})
    return checkpoint, positions


def ledger_of(files: HadoopFiles, own_checkpoint: str) -> str | None:
    """The pack checkpoint the ledger under a member's `own_checkpoint` names; None without a
    ledger (it ran alone, or never ran)."""
    text = files.read_text(f"{own_checkpoint}/{LEDGER}")
    return None if text is None else str(json.loads(text)["checkpoint"])


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
