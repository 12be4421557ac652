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

A group that ran in a pack and now runs alone (an UPDATE gave it flow control) goes on, on a
worker, in a generation of its own (`alone_spec`: pack_generations.form_alone), starting where
its copy ends by the rules below; its own checkpoint stopped where it joined the pack
(`refuse_moved_copy` refuses it there).

Each membership is a generation with its own checkpoint (jobs/runtime/pack_generations.py),
whose first batch starts where each member's copy ends in the checkpoint it last ran on:

* the copy ends at the end offsets, in its offset log, of the newest of its last batch Spark
  committed, the last batch whose stats the tables hold, and the last batch whose stats it
  saved (a batch whose stats were saved copied its range first: its stats hold what it
  copied). A range whose batch was neither committed nor saved is copied again: its records
  are already at the destination (the copy's tail check skips them) and its stats count them
  as already present, as a Spark replay's do;
* that checkpoint's stats saved and not yet appended (a worker killed before their write) are
  the new generation's to append (`owes_saved_stats`; pack_generations' `inherited`): its job
  appends them beside its first batches, under that checkpoint's write id
  (`InheritedStats`; `StatsWriter.batches.recover`: a batch the tables hold is skipped by its
  marker), then deletes that checkpoint if it is a generation. Its first batch does not wait
  for a Delta append on a loaded driver;
* a member whose own checkpoint last ran the low-latency copy, which keeps its progress in a
  log of its own, starts where that log's last batch with its stats written ends
  (`low_latency_end`);
* a member never run starts where its JobGroup says (earliest, or latest).

Fault points (core/faults.py): `replication.pack_ledgers` (between the generation's file and
the members' ledgers), `replication.inherited_stats` (a generation about to append the saved
stats of a checkpoint it inherited).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait

from pyspark.sql import SparkSession

from core.errors import EXIT_FAILED, MovedToPack
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
from jobs.runtime.pack_generations import LEDGER, Positions, ledger_of
from jobs.runtime.template import WriteId

KIND = "replication pack"

log = logging.getLogger("uatu.replication")


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
    routes = tuple(sorted(_route(m) for m in members))
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
        owes=lambda checkpoint: owes_saved_stats(spark, checkpoint),
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


def alone_spec(spark: SparkSession, spec: ReplicationSpec, checkpoints: str) -> ReplicationSpec:
    """The spec a worker runs a replication that does not pack (`pack_key` None) by: `spec`
    itself, unless its ledger names a generation (it ran in a pack: its own checkpoint is
    stale). Then the generation of it alone (pack_generations.form_alone), its copy starting
    where it ended in the generation it last ran in (`copy_end`), under `checkpoints` (the
    site's checkpoint root)."""
    if spec.routes or spec.many_topics:
        return spec
    return pack_generations.form_alone(
        spark,
        spec,
        kind=KIND,
        checkpoints=checkpoints,
        route=_route(spec),
        end_of=lambda checkpoint: copy_end(spark, spec, checkpoint),
        before_ledgers=_before_ledgers,
        owes=lambda checkpoint: owes_saved_stats(spark, checkpoint),
    )


def _route(spec: ReplicationSpec) -> tuple[str, str, str, str]:
    """What a pack holds of the replication of `spec`'s topic (ReplicationSpec.routes)."""
    return (
        spec.source.topic,
        spec.destination_topic,
        spec.job_group_id,
        spec.source.consumer_group,
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
    read ({} when it never ran), counting the batches whose stats it saved: the module
    docstring's rule. `member` is a spec of the pack's key (its tables are that query's);
    `own_topic`, when `checkpoint` is a member's own, that member's topic (found by itself
    for a generation of a member alone): its low-latency copy, if that ran last there, kept
    its progress in a log of its own (`low_latency_end`)."""
    files = HadoopFiles(spark)
    own_topic = own_topic or pack_generations.alone_topic(files, checkpoint)
    if own_topic is not None and _low_latency_ran_last(files, checkpoint):
        return {own_topic: low_latency_end(spark, checkpoint)}
    if not files.exists(f"{checkpoint}/metadata"):  # its query never started
        return pack_generations.planned_start(files, checkpoint) or {}
    log = read_offset_log(spark, checkpoint)
    saved = CheckpointFiles(spark, checkpoint, FOLDER).numbers()
    written = -1
    if log.replay_batch is not None:
        # A batch planned and not committed: its stats may be written all the same (before
        # Spark's commit when the query ended: `AfterCommitWriter.drain`, which then deletes
        # their files). The tables' markers say; with no batch in flight, every batch
        # written is committed.
        paths = [table for _, table in tables.locations(member)]
        write_id = WriteId(tables.WRITE_ID_PREFIX, checkpoint).of(spark)
        written = tables_held_through(spark, paths, write_id)[1]
    done = max([*log.committed, *saved, written], default=-1)
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


def owes_saved_stats(spark: SparkSession, checkpoint: str) -> bool:
    """Whether the copy of `checkpoint` saved stats it did not append (`copy_end` counts
    their batches as done: a new generation inherits them)."""
    return bool(CheckpointFiles(spark, checkpoint, FOLDER).numbers())


class InheritedStats:
    """A pack generation's duty to append the stats saved under the checkpoints it inherited
    (the module docstring), beside its query: `start` before the query, `finish` after it."""

    def __init__(self) -> None:
        self._done: Future[None] | None = None

    def start(
        self, spark: SparkSession, pack: ReplicationSpec, tables_ready: Future[None] | None
    ) -> None:
        """Append, in a thread of its own, the saved stats of each checkpoint the generation
        of `pack` (a pack's spec) inherited, then release that checkpoint
        (pack_generations.release); nothing when it inherited none. `tables_ready`: the
        tables' creation beside the query, when it runs (the appends wait for it)."""
        owed = pack_generations.inherited(HadoopFiles(spark), pack.output.checkpoint)
        if not owed:
            return
        appender = ThreadPoolExecutor(1, thread_name_prefix="inherited-stats")
        self._done = appender.submit(_append_inherited, spark, pack, owed, tables_ready)
        appender.shutdown(wait=False)

    def finish(self, status: int) -> int:
        """After the query that ended with `status`: wait for the appends; EXIT_FAILED, its
        one line logged, when one failed (the checkpoint stays inherited: the generation's
        next run, or the next generation, appends it)."""
        if self._done is None:
            return status
        try:
            self._done.result()
        except Exception as error:  # the failure is the run's, as a stats write's is
            log.error("the inherited saved stats were not appended: %s", error)
            return EXIT_FAILED
        return status

    def close(self) -> None:
        """Wait for the appends (ended or not, once): the next generation formed on this
        worker inherits what is left, and must not append it at the same time."""
        if self._done is not None:
            wait([self._done])


def _append_inherited(
    spark: SparkSession,
    pack: ReplicationSpec,
    owed: Sequence[str],
    tables_ready: Future[None] | None,
) -> None:
    files = HadoopFiles(spark)
    for checkpoint in owed:
        if owes_saved_stats(spark, checkpoint):  # else appended before (a resumed generation)
            _append_saved_stats(spark, pack, checkpoint, tables_ready)
        pack_generations.release(files, KIND, checkpoint)


def _append_saved_stats(
    spark: SparkSession, pack: ReplicationSpec, checkpoint: str, tables_ready: Future[None] | None
) -> None:
    """Append the stats the query of `checkpoint` saved and did not append, under its write
    id, to the tables of `pack`."""
    started = time.monotonic()
    fault_point("replication.inherited_stats")  # core/faults.py: tests only
    # The rows name their own groups; no consumer-group commits (no routes, no group): the
    # pack's batches commit newer offsets.
    spec = dataclasses.replace(
        pack,
        source=dataclasses.replace(pack.source, consumer_group=""),
        output=dataclasses.replace(pack.output, checkpoint=checkpoint),
        routes=(),
    )
    writer = StatsWriter(
        spec, WriteId(tables.WRITE_ID_PREFIX, checkpoint), tables_ready=tables_ready
    )
    try:
        appended = writer.batches.recover(spark)
    finally:
        writer.close()
    log.info(
        "%s: appended the stats of batches %s saved under %s (inherited) in %.1f s",
        pack.job_group_id,
        appended,
        checkpoint,
        time.monotonic() - started,
    )


def _before_ledgers() -> None:
    fault_point("replication.pack_ledgers")  # core/faults.py: tests only
