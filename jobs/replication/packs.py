"""Replication packs: the copies of many JobGroups in one streaming query.

Why: a query has a fixed cost per trigger (Spark plans it, the copy runs a Spark job, the
stats take two Delta commits), so one query per replication group makes a worker's cost grow
with its number of groups, and each query's first batch waits behind every other query's
tasks. Copies between the same two clusters can share a query instead: the copy of many
topics (`many.py`: one subscription, one Spark job copying every planned range to its topic's
destination), with each member's own destination topic, stats rows (their job_group_id is the
member's) and consumer group (`ReplicationSpec.routes`).

Which replications pack together (`pack_key`): a continuous micro-batch copy of one topic
(no low latency, no offset ranges, no start time), partition N to N (no modulo mapping), and
no flow control (a cap paces one group's copy, and a pack's batch waits for its slowest
member: a capped group runs alone, where an UPDATE of its caps applies in place); the same
source and destination clusters, isolation level, acks, encoded format, creation of missing
destinations, trigger and audit intervals, and tables. Any other replication runs alone. A
pack copies each topic once: two groups of the same topic go to two packs.

Each membership is a generation with its own checkpoint (jobs/runtime/pack_generations.py),
whose first batch starts where each member's copy ends in the checkpoint it last ran on:

* that checkpoint's stats saved and not yet appended (a crash before their write) are
  appended first, under that checkpoint's write id (`StatsWriter.batches.recover`: a batch
  the tables hold is skipped by its marker): that checkpoint never runs again;
* then the copy ends at the end offsets, in its offset log, of the newer of its last batch
  Spark committed and the last batch whose stats the tables hold (a batch whose stats were
  saved and not committed copied its range: its stats hold what it copied). A range whose
  batch was neither committed nor saved is copied again: its records are already at the
  destination (the copy's tail check skips them) and its stats count them as already
  present, as a Spark replay's do;
* a member whose own checkpoint last ran the low-latency copy, which keeps its progress in a
  log of its own, starts where that log's last batch with its stats written ends
  (`low_latency_end`);
* a member never run starts where its JobGroup says (earliest, or latest).

Fault point (core/faults.py): `replication.pack_ledgers` (between the generation's file and
the members' ledgers).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Sequence

from pyspark.sql import SparkSession

from core.errors import MovedToPack
from core.faults import fault_point
from core.spec import TopicSelection
from jobs.replication import tables
from jobs.replication.progress_log import FOLDER as PROGRESS_FOLDER
from jobs.replication.progress_log import ProgressLog
from jobs.replication.spec import ReplicationSpec
from jobs.replication.stats import FOLDER, StatsWriter
from jobs.runtime import pack_generations
from jobs.runtime.after_commit import tables_held_through
from jobs.runtime.checkpoint_files import (
    CheckpointFiles,
    HadoopFiles,
    batch_end_offsets,
    read_offset_log,
)
from jobs.runtime.delta import ensure_tables
from jobs.runtime.pack_generations import LEDGER, Positions, ledger_of
from jobs.runtime.template import WriteId

KIND = "replication pack"


def pack_key(spec: ReplicationSpec) -> str | None:
    """The key shared by the replications `spec` may share a query with; None when it runs
    alone (the module docstring says which replications pack)."""
    source = spec.source
    alone = (
        spec.many_topics
        or spec.routes
        or not spec.continuous
        or spec.low_latency
        or spec.modulo_partitions
        or spec.max_messages_per_sec > 0
        or spec.max_bytes_per_sec > 0
        or source.bounded
        or bool(source.offset_ranges)
        or source.start_timestamp_ms is not None
    )
    if alone:
        return None
    shape = (
        "replication",
        source.cluster.name,
        source.cluster.bootstrap_servers,
        source.read_committed,
        spec.destination_cluster.name,
        spec.destination_cluster.bootstrap_servers,
        spec.acks_all,
        spec.encoded_format,
        spec.create_destination_topic,
        spec.trigger_interval_seconds,
        spec.audit_interval_seconds,
        spec.output.table("replication_stats"),
        spec.output.table("replication_audit"),
    )
    return hashlib.sha256(repr(shape).encode()).hexdigest()[:16]


def form_pack(
    spark: SparkSession, members: Sequence[ReplicationSpec], checkpoints: str, name: str = ""
) -> ReplicationSpec:
    """The spec of the query that copies the topics of `members` (ReplicationSpecs of one
    `pack_key`, each topic once) under `checkpoints` (the site's checkpoint root): the
    generation every member's ledger names when it has exactly these members, else a new one
    starting where each member's copy ends (jobs/runtime/pack_generations.py). Its
    job_group_id is `name` (default `pack-<key>`): its query is `replication-<name>`
    whatever the generation. ValueError for members that do not pack together."""
    placed = [
        pack_generations.Member.of(m.job_group_id, m.source, m.output.checkpoint, pack_key(m))
        for m in members
    ]
    key = pack_generations.common_key(KIND, placed)
    routes = tuple(
        sorted(
            (m.source.topic, m.destination_topic, m.job_group_id, m.source.consumer_group)
            for m in members
        )
    )
    first = members[0]
    own_topics = {m.output.checkpoint: m.source.topic for m in members}
    checkpoint, starting = pack_generations.form(
        spark,
        kind=KIND,
        checkpoints=checkpoints,
        members=placed,
        routes=routes,
        cluster=first.source.cluster,
        end_of=lambda checkpoint: copy_end(spark, first, checkpoint, own_topics.get(checkpoint)),
        before_ledgers=_before_ledgers,
    )
    source = dataclasses.replace(
        first.source,
        topic="",
        consumer_group="",  # each member's own: routes
        selection=TopicSelection(names=tuple(route[0] for route in routes)),
        starting_offsets=json.dumps(starting, sort_keys=True),
    )
    return dataclasses.replace(
        first,
        job_group_id=name or f"pack-{key}",
        source=source,
        destination_topic="",
        output=dataclasses.replace(first.output, checkpoint=checkpoint),
        routes=routes,
    )


def refuse_moved_copy(spark: SparkSession, spec: ReplicationSpec) -> None:
    """MovedToPack when `spec` is one group's copy (not a pack) whose ledger names a pack:
    its own checkpoint resumes where its copy stood before the pack copied on."""
    if spec.routes or spec.many_topics:
        return
    moved = ledger_of(HadoopFiles(spark), spec.output.checkpoint)
    if moved is not None:
        ledger = f"{spec.output.checkpoint}/{LEDGER}"
        raise MovedToPack("replication", spec.job_group_id, ledger, moved)


def copy_end(
    spark: SparkSession, member: ReplicationSpec, checkpoint: str, own_topic: str | None = None
) -> Positions:
    """Where the copy the query of `checkpoint` made ends, per partition of the topics it
    read ({} when it never ran), its saved stats appended first: the module docstring's rule.
    `member` is a spec of the pack's key (its tables are that query's); `own_topic`, when
    `checkpoint` is a member's own, that member's topic: its low-latency copy, if that ran
    last there, kept its progress in a log of its own (`low_latency_end`)."""
    files = HadoopFiles(spark)
    if own_topic is not None and _low_latency_ran_last(files, checkpoint):
        return {own_topic: low_latency_end(spark, checkpoint)}
    if not files.exists(f"{checkpoint}/metadata"):  # its query never started
        return pack_generations.planned_start(files, checkpoint) or {}
    spec = dataclasses.replace(
        member,
        source=dataclasses.replace(member.source, consumer_group=""),
        output=dataclasses.replace(member.output, checkpoint=checkpoint),
        routes=(),
    )
    write_id = WriteId(tables.WRITE_ID_PREFIX, checkpoint)
    _append_saved_stats(spark, spec, write_id)
    log = read_offset_log(spark, checkpoint)
    written = -1
    if log.replay_batch is not None:
        # A batch planned and not committed: its stats may be written all the same (before
        # Spark's commit when the query ended: `AfterCommitWriter.drain`). The tables' markers
        # say; with no batch in flight, every batch written is committed.
        paths = [table for _, table in tables.locations(spec)]
        written = tables_held_through(spark, paths, write_id.of(spark))[1]
    done = max([*log.committed, written], default=-1)
    if done < 0:
        started = log.started_sources or ()
        return {t: {int(p): int(o) for p, o in s[t].items()} for s in started for t in s}
    ends = batch_end_offsets(spark, checkpoint, done)
    if ends is None:
        raise RuntimeError(
            f"{checkpoint}: batch {done} copied its range, and its offsets are no longer in "
            "the checkpoint's offset log"
        )
    return ends


def low_latency_end(spark: SparkSession, checkpoint: str) -> dict[int, int]:
    """Where the low-latency copy of `checkpoint` ends by its progress log
    (jobs/replication/progress_log.py), per partition: its last batch's end once that batch's
    stats are written, else that batch's start (the copy's own restart reads the batch again
    and counts what the destination holds as already present); {} when it never started."""
    plog = ProgressLog(spark, checkpoint)
    last = plog.last()
    if last is not None:
        return dict(last.ends if last.committed else last.starts)
    return plog.start() or {}


def _low_latency_ran_last(files: HadoopFiles, checkpoint: str) -> bool:
    """Whether the low-latency copy's log under `checkpoint` is newer than Spark's offset
    log there (a group may have run both ways)."""
    continuous = files.newest_modification_ms(f"{checkpoint}/{PROGRESS_FOLDER}")
    return continuous > 0 and continuous >= files.newest_modification_ms(f"{checkpoint}/offsets")


def _append_saved_stats(spark: SparkSession, spec: ReplicationSpec, write_id: WriteId) -> None:
    """Append the stats the query of `spec`'s checkpoint saved and did not write (their rows
    name their own groups), under its `write_id`. No consumer-group commits (`spec` has
    none): the pack's next batch commits newer offsets."""
    if not CheckpointFiles(spark, spec.output.checkpoint, FOLDER).numbers():
        return
    ensure_tables(spark, tables.locations(spec))
    writer = StatsWriter(spec, write_id)
    try:
        writer.batches.recover(spark)
    finally:
        writer.close()


def _before_ledgers() -> None:
    fault_point("replication.pack_ledgers")  # core/faults.py: tests only
