"""Audit packs: the audits of many JobGroups in one streaming query.

Why: a query has a fixed cost per trigger (Spark plans it, the fold runs a job, a MERGE
commits), so one query per audit group makes a worker's cost grow with its number of groups.
Audits of one cluster with one configuration can share a query instead: one subscription of
all their topics, one fold, one MERGE whose rows each name their own group
(`tables.routed`), so the cost grows with the traffic.

Which audits pack together (`pack_key`): one named topic each, labelled with its own name;
approximate audits only (an exact audit's keys are kept under its checkpoint per batch and do
not move between checkpoints); no flow control (a cap is one group's, Spark's record budget
the whole query's); the same cluster, consumer group, isolation level, audit configs, event
time, dedupe key, lateness, future skew, HLL precision, trigger interval and counts table.
Any other audit runs alone. A pack audits each topic once: two groups of the same topic go to
two packs (`form_pack` refuses one pack with both).

Read positions. Spark's Kafka source keeps a query's positions in its checkpoint and, when the
checkpoint's `subscribe` list changes, reads an added topic from its earliest offset and a
re-added one again (docs/controlplane.md). So a pack never changes its list: each membership
is a *generation*, a query with a checkpoint of its own, `<checkpoints>/packs/<key>/<id>`,
whose first batch starts (Spark's `startingOffsets` as JSON) where each member's counts end:

* where a member's counts end is read from the checkpoint it last ran on, named by its
  *ledger* (`<its own checkpoint>/pack.json`; without one, its own checkpoint, where it ran
  alone): the end offsets, in its offset log, of the newest batch of that query that
  audit_counts holds (its idempotent-write marker, `delta.written_through`), not of the
  newest batch Spark committed: the counts MERGE follows Spark's commit
  (jobs/audit/counts_writer.py), so a batch committed and not merged when that query
  stopped is read again by the new generation. Its partials saved under the old checkpoint
  are never merged (that checkpoint never runs again). With no batch in the table, where
  that checkpoint started;
* a member never run starts where its JobGroup says (earliest, or latest).

Order of the steps: the generation's own file (`<generation>/pack.json`: its routes and
starting offsets), then each member's ledger, then the query. A crash before every ledger is
written leaves the new generation without a batch, so an old ledger and a new one give the
same positions. Forming the membership every ledger already names resumes that generation:
an ordinary restart on its checkpoint, exactly-once as any audit. A generation no ledger
names any more is deleted by the formation that moved the last of them
(`_remove_superseded`): it can never be named again.

A member joins a pack only once the query it last ran on has stopped (a worker re-forms a
pack without a group before the control plane places the group elsewhere: never in two
places); `form_pack` does not check it.

Fault point (core/faults.py): `audit.pack_ledgers` (between the generation's file and the
members' ledgers).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import time
import uuid
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

from pyspark.sql import SparkSession

from core import kafka_admin
from core.errors import CountsMovedToPack
from core.faults import fault_point
from core.spec import TopicSelection
from jobs.audit import tables
from jobs.audit.spec import AuditSpec
from jobs.runtime.checkpoint_files import (
    HadoopFiles,
    batch_end_offsets,
    read_offset_log,
)
from jobs.runtime.delta import written_through
from jobs.runtime.template import WriteId

log = logging.getLogger("uatu.audit")

LEDGER = "pack.json"
# How many members' ledgers a new generation writes at once.
LEDGER_WRITERS = 8
# Spark's startingOffsets JSON for a partition without a position.
EARLIEST, LATEST = -2, -1

Positions = dict[str, dict[int, int]]  # {topic: {partition: next offset}}


def pack_key(spec: AuditSpec) -> str | None:
    """The key shared by the audits `spec` may share a query with; None when it runs alone
    (the module docstring says which audits pack)."""
    source = spec.source
    alone = (
        source.selection is not None
        or spec.routes
        or spec.has_exact_audit
        or spec.max_messages_per_sec > 0
        or spec.max_bytes_per_sec > 0
        or source.bounded
        or source.start_timestamp_ms is not None
        or spec.audited_topic != source.topic
        or spec.audited_cluster != source.cluster.name
    )
    if alone:
        return None
    shape = (
        source.cluster.name,
        source.cluster.bootstrap_servers,
        source.consumer_group,
        source.read_committed,
        spec.windows,
        spec.event_time,
        spec.dedupe_key,
        spec.allowed_lateness_seconds,
        spec.max_future_skew_seconds,
        spec.hll_lg_config_k,
        spec.trigger_interval_seconds,
        spec.output.table("audit_counts"),
    )
    return hashlib.sha256(repr(shape).encode()).hexdigest()[:16]


def form_pack(
    spark: SparkSession, members: Sequence[AuditSpec], checkpoints: str, name: str = ""
) -> AuditSpec:
    """The spec of the query that audits `members` (AuditSpecs of one `pack_key`, each topic
    once) under `checkpoints` (the site's checkpoint root): the generation every member's
    ledger names when it has exactly these members, else a new generation starting where
    each member's counts end. Its job_group_id is `name` (default `pack-<key>`): its query
    is `audit-<name>` whatever the generation. ValueError for members that do not pack
    together."""
    key = _common_key(members)
    name = name or f"pack-{key}"
    routes = tuple(sorted((m.source.topic, m.job_group_id) for m in members))
    files = HadoopFiles(spark)
    ledgers = {m.job_group_id: _ledger_of(files, m) for m in members}
    current = set(ledgers.values())
    if len(current) == 1 and None not in current:
        (checkpoint,) = current
        assert checkpoint is not None
        kept = files.read_text(f"{checkpoint}/{LEDGER}")
        if kept is not None and _routes(json.loads(kept)) == routes:
            log.info("audit pack %s: resuming %s (%d members)", key, checkpoint, len(members))
            return _pack_spec(members, name, checkpoint, routes, json.loads(kept)["starting"])
    checkpoint = f"{checkpoints.rstrip('/')}/packs/{key}/{uuid.uuid4().hex[:12]}"
    starting = _new_generation(spark, files, members, ledgers, key, checkpoint, routes)
    _remove_superseded(files, {c for c in current if c is not None})
    return _pack_spec(members, name, checkpoint, routes, _spark_json(starting))


def _new_generation(
    spark: SparkSession,
    files: HadoopFiles,
    members: Sequence[AuditSpec],
    ledgers_read: Mapping[str, str | None],
    key: str,
    checkpoint: str,
    routes: tuple[tuple[str, str], ...],
) -> Positions:
    """Write the generation's file, then the members' ledgers (the module docstring's
    order); its starting offsets. `ledgers_read`: what each member's ledger named, by group."""
    started = time.monotonic()
    starting = _starting_offsets(spark, members, ledgers_read)
    positions_read = time.monotonic()
    ledgers = [f"{m.output.checkpoint}/{LEDGER}" for m in members]
    files.write_json(
        f"{checkpoint}/{LEDGER}",
        {
            "routes": [list(r) for r in routes],
            "starting": _spark_json(starting),
            "ledgers": ledgers,
        },
    )
    fault_point("audit.pack_ledgers")  # core/faults.py: tests only
    # Several at once: one write is a few file-system round trips through py4j, and a
    # generation of a worker's groups has dozens of members.
    with ThreadPoolExecutor(LEDGER_WRITERS, thread_name_prefix="uatu-ledger") as pool:
        list(pool.map(lambda ledger: files.write_json(ledger, {"checkpoint": checkpoint}), ledgers))
    log.info(
        "audit pack %s: new generation %s for %d members (%s): their positions read in "
        "%.1f s, the ledgers written in %.1f s",
        key,
        checkpoint,
        len(members),
        ", ".join(group for _, group in routes[:5]) + (" ..." if len(routes) > 5 else ""),
        positions_read - started,
        time.monotonic() - positions_read,
    )
    return starting


def _remove_superseded(files: HadoopFiles, previous: set[str]) -> None:
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
            log.info("audit pack: removed %s, a generation no member counts on", checkpoint)


def _common_key(members: Sequence[AuditSpec]) -> str:
    if not members:
        raise ValueError("an audit pack needs at least one member")
    keys = {pack_key(m) for m in members}
    if None in keys or len(keys) != 1:
        alone = [m.job_group_id for m in members if pack_key(m) is None]
        raise ValueError(
            f"audits that do not pack together: {alone or sorted(m.job_group_id for m in members)}"
        )
    topics = [m.source.topic for m in members]
    twice = sorted({t for t in topics if topics.count(t) > 1})
    if twice:
        raise ValueError(f"an audit pack audits each topic once: {twice} listed twice")
    (key,) = keys
    assert key is not None
    return key


def _pack_spec(
    members: Sequence[AuditSpec],
    name: str,
    checkpoint: str,
    routes: tuple[tuple[str, str], ...],
    starting_json: Mapping[str, Mapping[str, int]],
) -> AuditSpec:
    first = members[0]
    topics = tuple(topic for topic, _ in routes)
    source = dataclasses.replace(
        first.source,
        topic="",
        selection=TopicSelection(names=topics),
        starting_offsets=json.dumps(starting_json, sort_keys=True),
    )
    return dataclasses.replace(
        first,
        job_group_id=name,
        source=source,
        audited_topic="",
        output=dataclasses.replace(first.output, checkpoint=checkpoint),
        routes=routes,
    )


def _routes(kept: Mapping) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((str(t), str(g)) for t, g in kept.get("routes", [])))


def refuse_moved_counts(spark: SparkSession, spec: AuditSpec) -> None:
    """CountsMovedToPack when `spec` is one group's audit (not a pack) whose ledger names a
    pack: its own checkpoint resumes where its counts stood before the pack counted on."""
    if spec.routes:
        return
    moved = _ledger_of(HadoopFiles(spark), spec)
    if moved is not None:
        raise CountsMovedToPack(spec.job_group_id, f"{spec.output.checkpoint}/{LEDGER}", moved)


def _ledger_of(files: HadoopFiles, member: AuditSpec) -> str | None:
    """The pack checkpoint `member`'s ledger names; None without a ledger (it ran alone, or
    never ran)."""
    text = files.read_text(f"{member.output.checkpoint}/{LEDGER}")
    return None if text is None else str(json.loads(text)["checkpoint"])


def _starting_offsets(
    spark: SparkSession, members: Sequence[AuditSpec], ledgers: Mapping[str, str | None]
) -> Positions:
    """Where each member's topic starts in a new generation: where its counts end, every
    partition (Spark's JSON names them all; EARLIEST or LATEST where the member has none).
    `ledgers`: the pack checkpoint each member's ledger names, by group (None: it ran alone
    or never ran). Each checkpoint the members last ran on is read once."""
    partitions = kafka_admin.topic_partitions(members[0].source.cluster)
    counts_path = members[0].output.table("audit_counts")  # one table: the same pack_key
    ends: dict[str, Positions] = {}
    starting: Positions = {}
    for member in members:
        topic = member.source.topic
        checkpoint = ledgers[member.job_group_id] or member.output.checkpoint
        if checkpoint not in ends:
            ends[checkpoint] = counts_end(spark, checkpoint, counts_path)
        held = ends[checkpoint].get(topic, {})
        default = LATEST if member.source.starting_offsets == "latest" else EARLIEST
        starting[topic] = {p: held.get(p, default) for p in range(partitions.get(topic, 0))}
    return starting


def counts_end(spark: SparkSession, checkpoint: str, counts_path: str) -> Positions:
    """Where the counts the audit query of `checkpoint` wrote to `counts_path` end, per
    partition of the topics it read ({} when it never ran): the module docstring's first
    rule."""
    files = HadoopFiles(spark)
    if not files.exists(f"{checkpoint}/metadata"):  # its query never started
        kept = files.read_text(f"{checkpoint}/{LEDGER}")
        return _from_spark_json(json.loads(kept)["starting"]) if kept else {}
    write_id = WriteId(tables.WRITE_ID_PREFIX, checkpoint).of(spark)
    through = written_through(spark, counts_path, write_id)
    if through is None:
        started = read_offset_log(spark, checkpoint).started_sources or ()
        return {t: {int(p): int(o) for p, o in s[t].items()} for s in started for t in s}
    ends = batch_end_offsets(spark, checkpoint, through)
    if ends is None:
        raise RuntimeError(
            f"{checkpoint}: audit_counts holds batch {through}, whose offsets are no longer "
            f"in the checkpoint's offset log"
        )
    return ends


def _spark_json(positions: Positions) -> dict[str, dict[str, int]]:
    return {t: {str(p): o for p, o in sorted(ps.items())} for t, ps in sorted(positions.items())}


def _from_spark_json(data: Mapping[str, Mapping[str, int]]) -> Positions:
    return {t: {int(p): int(o) for p, o in ps.items()} for t, ps in data.items()}
