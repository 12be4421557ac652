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
two packs (`form_pack` refuses one pack with both). A group that ran in a pack and now runs
alone (an UPDATE gave it flow control) goes on, on a worker, in a generation of its own
(`alone_spec`: pack_generations.form_alone), starting where its counts end by the rules
below; its own checkpoint stopped where it joined the pack (`refuse_moved_counts` refuses it
there).

Read positions: each membership is a *generation*, a query with a checkpoint of its own
(jobs/runtime/pack_generations.py: the generations, the members' ledgers and the order of
their steps). A new generation starts where each member's counts end:

* where a member's counts end is read from the checkpoint it last ran on, named by its
  ledger: the end offsets, in its offset log, of the newest batch of that query that
  audit_counts holds (its idempotent-write marker, `delta.written_through`), not of the
  newest batch Spark committed: the counts MERGE follows Spark's commit
  (jobs/audit/counts_writer.py), so a batch committed and not merged when that query
  stopped is read again by the new generation. Its partials saved under the old checkpoint
  are never merged (that checkpoint never runs again). With no batch in the table, where
  that checkpoint started;
* a member never run starts where its JobGroup says (earliest, or latest).

Fault point (core/faults.py): `audit.pack_ledgers` (between the generation's file and the
members' ledgers).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping, Sequence

from pyspark.sql import SparkSession

from core.errors import MovedToPack
from core.faults import fault_point
from core.spec import TopicSelection
from jobs.audit import tables
from jobs.audit.spec import AuditSpec
from jobs.runtime import pack_generations
from jobs.runtime.checkpoint_files import HadoopFiles, batch_end_offsets, read_offset_log
from jobs.runtime.delta import written_through
from jobs.runtime.pack_generations import LEDGER, Positions, ledger_of
from jobs.runtime.template import WriteId

KIND = "audit pack"


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
    each member's counts end (jobs/runtime/pack_generations.py). Its job_group_id is `name`
    (default `pack-<key>`): its query is `audit-<name>` whatever the generation. ValueError
    for members that do not pack together."""
    placed = [
        pack_generations.Member.of(m.job_group_id, m.source, m.output.checkpoint, pack_key(m))
        for m in members
    ]
    key = pack_generations.common_key(KIND, placed)
    counts_path = members[0].output.table("audit_counts")  # one table: the same pack_key
    routes = tuple(sorted((m.source.topic, m.job_group_id) for m in members))
    checkpoint, starting = pack_generations.form(
        spark,
        kind=KIND,
        checkpoints=checkpoints,
        members=placed,
        routes=routes,
        cluster=members[0].source.cluster,
        end_of=lambda checkpoint: counts_end(spark, checkpoint, counts_path),
        before_ledgers=_before_ledgers,
    )
    return _pack_spec(members, name or f"pack-{key}", checkpoint, routes, starting)


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


def alone_spec(spark: SparkSession, spec: AuditSpec, checkpoints: str) -> AuditSpec:
    """The spec a worker runs an audit that does not pack (`pack_key` None) by: `spec`
    itself, unless its ledger names a generation (it ran in a pack: its own checkpoint is
    stale). Then the generation of it alone (pack_generations.form_alone), its counts
    starting where they ended in the generation it last ran in (`counts_end`), under
    `checkpoints` (the site's checkpoint root)."""
    if spec.routes or spec.source.selection is not None:
        return spec
    counts_path = spec.output.table("audit_counts")
    return pack_generations.form_alone(
        spark,
        spec,
        kind=KIND,
        checkpoints=checkpoints,
        route=(spec.source.topic, spec.job_group_id),
        end_of=lambda checkpoint: counts_end(spark, checkpoint, counts_path),
        before_ledgers=_before_ledgers,
    )


def refuse_moved_counts(spark: SparkSession, spec: AuditSpec) -> None:
    """MovedToPack when `spec` is one group's audit (not a pack) whose ledger names a
    pack: its own checkpoint resumes where its counts stood before the pack counted on."""
    if spec.routes:
        return
    moved = ledger_of(HadoopFiles(spark), spec.output.checkpoint)
    if moved is not None:
        raise MovedToPack("audit", spec.job_group_id, f"{spec.output.checkpoint}/{LEDGER}", moved)


def counts_end(spark: SparkSession, checkpoint: str, counts_path: str) -> Positions:
    """Where the counts the audit query of `checkpoint` wrote to `counts_path` end, per
    partition of the topics it read ({} when it never ran): the module docstring's first
    rule."""
    files = HadoopFiles(spark)
    if not files.exists(f"{checkpoint}/metadata"):  # its query never started
        return pack_generations.planned_start(files, checkpoint) or {}
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


def _before_ledgers() -> None:
    fault_point("audit.pack_ledgers")  # core/faults.py: tests only
