"""What a replication copy did, recorded: summary rows (`writer.SUMMARY_SCHEMA`, collected
from the copy's Spark job) become one stats batch in `replication_stats` and
`replication_audit` (idempotent Delta appends), the copied offsets are committed to the
JobGroup's consumer group, and MirrorMaker 2's metrics are updated.

The micro-batch copy (`job.py`, `many.py`) `submit`s a batch's rows: they are computed in the
driver (`transforms`: no Spark job), saved under `<checkpoint>/replication-stats/N` before
Spark commits the batch and appended after it, in a thread, off the batch's path
(`jobs.runtime.after_commit`: the steps and the guarantee; `recover` before the query,
`drain` after it). A Spark replay of a batch copies nothing the destination holds, so its
summaries differ from the first attempt's: the saved rows are what the first attempt copied,
and the replay's append is skipped by its marker, as it is when the first attempt's append
committed before a crash. The low-latency copy (`continuous.py`) has no Spark commit to
follow; it `write`s its batches in line, beside its own progress log.

Fault points (core/faults.py): `replication.stats_saved`, `replication.stats_writing`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import reduce
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from core.faults import fault_point
from jobs.replication import metrics, tables
from jobs.replication.spec import ReplicationSpec
from jobs.replication.transforms import Summary, audit_rows, stats_rows
from jobs.replication.writer import JvmSketches
from jobs.runtime import metrics as runtime_metrics
from jobs.runtime import produced
from jobs.runtime.after_commit import (
    STATS_WRITE_SLOTS,
    AfterCommitWriter,
    Ready,
    tables_held_through,
)
from jobs.runtime.delta import append_once
from jobs.runtime.group_offsets import GroupOffsetCommitter
from jobs.runtime.saved_rows import decode_rows, encode_values
from jobs.runtime.template import WriteId

log = logging.getLogger("uatu.replication")

FOLDER = "replication-stats"

# source topic -> partition -> the next offset to copy
NextOffsets = Mapping[str, Mapping[int, int]]


@dataclass(frozen=True)
class BatchStats:
    """One stats batch: its `replication_stats` and `replication_audit` rows (fixed when the
    batch was copied) and the offsets its copy reached."""

    stats: DataFrame
    audit: DataFrame
    next_offsets: NextOffsets


def encode_batch(
    stats: Sequence[Mapping[str, Any]],
    audit: Sequence[Mapping[str, Any]],
    next_offsets: NextOffsets,
) -> dict[str, Any]:
    """A batch's table rows (`transforms`) and offsets as JSON (`decode_batch` reads it
    back)."""
    return {
        "stats": encode_values(tables.REPLICATION_STATS.schema, stats),
        "audit": encode_values(tables.REPLICATION_AUDIT.schema, audit),
        "next_offsets": {
            topic: {str(p): o for p, o in offsets.items()}
            for topic, offsets in next_offsets.items()
        },
    }


def decode_batch(spark: SparkSession, saved: dict[str, Any]) -> BatchStats:
    """`encode_batch`'s value -> the batch (built in the JVM: `decode_rows`)."""
    return BatchStats(
        decode_rows(spark, saved["stats"]),
        decode_rows(spark, saved["audit"]),
        {
            topic: {int(p): int(o) for p, o in offsets.items()}
            for topic, offsets in saved["next_offsets"].items()
        },
    )


@dataclass
class StatsWriter:
    """Records what a copy did: its summary rows (writer.SUMMARY_SCHEMA) become one stats
    batch in `replication_stats` and `replication_audit`, exactly once per (writer id,
    batch id); then the copied offsets go to the JobGroup's consumer group. The MirrorMaker 2
    metrics and `last_record_bytes` follow each batch as it is copied."""

    spec: ReplicationSpec
    # The micro-batch copy's idempotent-write id (its checkpoint's query id): the writes of
    # `submit`ted and recovered batches.
    write_id: WriteId | None = None
    app_id: str = ""  # the low-latency copy's write id, for its in-line `write`s
    # The tables' creation, when it runs beside the copy's start: the first write waits for
    # it (and raises its error).
    tables_ready: Future[None] | None = None
    last_record_bytes: float = 0.0  # mean key+value size of the last batch's records
    # consumer group -> its committer (a pack's members have one each)
    _group_offsets: dict[str, GroupOffsetCommitter] = field(default_factory=dict)
    # The audit rows are appended beside the stats: two independent Delta commits, each mostly
    # fixed cost, overlap instead of adding up.
    _audit_appender: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(1, thread_name_prefix="audit-append")
    )
    # The micro-batch copy's saved batches: `batches.recover` before its query,
    # `batches.finish` after it.
    batches: AfterCommitWriter[BatchStats] = field(init=False)

    def __post_init__(self) -> None:
        self.batches = AfterCommitWriter(
            self.spec.output.checkpoint,
            FOLDER,
            tables.REPLICATION_STATS.name,
            self._write_committed,
            decode_batch,
            log,
            at_saved=_stats_saved,
            at_writing=_stats_writing,
            write_slots=STATS_WRITE_SLOTS,  # with the other stats writers of the application
            held_through=self._held_through,
        )

    def labels(self) -> Mapping[str, str]:
        """The labels of every row; the topics come with each summary row."""
        spec = self.spec
        return {
            "job_group_id": spec.job_group_id,
            "source_cluster": spec.source.cluster.name,
            "destination_cluster": spec.destination_cluster.name,
        }

    # --- the micro-batch copy ---------------------------------------------------------------

    def submit(
        self,
        spark: SparkSession,
        summaries: Sequence[Summary],
        batch_id: int,
        next_offsets: NextOffsets,
    ) -> Totals:
        """In foreachBatch: save the batch's stats and audit rows (durable on return), queue
        their appends and the consumer group's commit of `next_offsets` for after Spark's
        commit of the batch; the batch's totals. Raises an earlier write's error."""
        saved = self._saved(spark, summaries, batch_id, next_offsets)
        self.batches.submit(spark, batch_id, saved)
        return self._copied(saved)

    # --- the low-latency copy ---------------------------------------------------------------

    def write(
        self,
        spark: SparkSession,
        summaries: Sequence[Summary],
        batch_id: int,
        next_offsets: NextOffsets,
    ) -> Totals:
        """Append the batch's stats and audit rows now (both or, after a crash, neither) under
        `app_id`, commit `next_offsets` to the consumer group; the batch's totals."""
        saved = self._saved(spark, summaries, batch_id, next_offsets)
        self._append(self.app_id, [(batch_id, decode_batch(spark, saved))])
        return self._copied(saved)

    def close(self) -> None:
        """Stop the writer's thread (batches not written stay saved for `recover`) and close
        the clients."""
        self.batches.close()
        self._audit_appender.shutdown()
        for committer in self._group_offsets.values():
            committer.close()
        self._group_offsets.clear()

    # --- shared -----------------------------------------------------------------------------

    def _saved(
        self,
        spark: SparkSession,
        summaries: Sequence[Summary],
        batch_id: int,
        next_offsets: NextOffsets,
    ) -> dict[str, Any]:
        """The batch's rows, computed now in the driver (the stats' batch_time is the
        copy's), as JSON; each row names the JobGroup that copied its topic (a pack's
        member's)."""
        by_group: dict[str, list[Summary]] = {}
        for summary in summaries:
            by_group.setdefault(self.spec.group_of(summary["source_topic"]), []).append(summary)
        now, sketches = datetime.now(UTC), JvmSketches(spark)
        stats: list[dict[str, Any]] = []
        audit: list[dict[str, Any]] = []
        for group, rows in sorted(by_group.items()):
            labels = {**self.labels(), "job_group_id": group}
            stats += stats_rows(rows, batch_id, now, labels, sketches)
            audit += audit_rows(rows, self.spec.audit_interval_seconds, batch_id, labels)
        return encode_batch(stats, audit, next_offsets)

    def _copied(self, saved: dict[str, Any]) -> Totals:
        """MirrorMaker 2's metrics, each group's records produced (jobs/runtime/produced.py)
        and the mean record size, from the batch's saved stats rows (their numbers are as
        computed; no Spark job)."""
        rows = saved["stats"]["rows"]
        by_group: dict[str, list[dict[str, Any]]] = {}
        for row in rows:
            by_group.setdefault(row["job_group_id"], []).append(row)
        for group, of_group in sorted(by_group.items()):
            produced.add(group, sum(r["records_replicated"] or 0 for r in of_group))
            if runtime_metrics.serving():
                metrics.replication({**self.labels(), "job_group_id": group}, of_group)
        totals = Totals(
            sum(r["records_replicated"] or 0 for r in rows),
            sum(r["record_bytes_replicated"] or 0 for r in rows),
        )
        if totals.records:
            self.last_record_bytes = totals.bytes / totals.records
        return totals

    def _held_through(self, spark: SparkSession, ready: Ready[BatchStats]) -> list[tuple[int, int]]:
        """What both tables hold of a crashed run's batches (after_commit.HeldThrough)."""
        assert self.write_id is not None, "recover needs the micro-batch's write id"
        paths = [self.spec.output.table(n) for n in ("replication_stats", "replication_audit")]
        return [tables_held_through(spark, paths, self.write_id.of(spark))] * len(ready)

    def _write_committed(self, spark: SparkSession, ready: Ready[BatchStats]) -> str:
        assert self.write_id is not None, "submit and recover need the micro-batch's write id"
        return self._append(self.write_id.of(spark), ready)

    def _append(self, app_id: str, ready: Ready[BatchStats]) -> str:
        """Append the batches' rows to both tables, marked with the newest batch's id, then
        commit the offsets the newest reached; says what, for the log."""
        if self.tables_ready is not None:
            self.tables_ready.result()
        newest = ready[-1][0]
        stats = reduce(DataFrame.unionByName, (b.stats for _, b in ready))
        audit = reduce(DataFrame.unionByName, (b.audit for _, b in ready))
        audit_appended = self._audit_appender.submit(
            append_once,
            audit,
            tables.REPLICATION_AUDIT,
            self.spec.output.table("replication_audit"),
            app_id,
            newest,
        )
        append_once(
            stats,
            tables.REPLICATION_STATS,
            self.spec.output.table("replication_stats"),
            app_id,
            newest,
        )
        audit_appended.result()  # the batches are done only when both are written
        reached: dict[str, dict[int, int]] = {}
        for _, batch in ready:
            for topic, offsets in batch.next_offsets.items():
                reached.setdefault(topic, {}).update(offsets)
        self._commit_group_offsets(reached)
        return "appended to replication_stats and replication_audit"

    def _commit_group_offsets(self, next_offsets: NextOffsets) -> None:
        """Commit the copied offsets of each topic to its consumer group (a pack's member's),
        so lag monitors (Burrow) see the job."""
        for topic, offsets in sorted(next_offsets.items()):
            group = self.spec.consumer_group_of(topic)
            if not group:
                continue
            if group not in self._group_offsets:
                self._group_offsets[group] = GroupOffsetCommitter(
                    self.spec.source.cluster.client_config(), group, topic
                )
            self._group_offsets[group].commit(offsets, topic=topic)


@dataclass(frozen=True)
class Totals:
    """A batch's records and key + value bytes replicated."""

    records: int
    bytes: int


def _stats_saved() -> None:
    fault_point("replication.stats_saved")  # core/faults.py: tests only


def _stats_writing() -> None:
    fault_point("replication.stats_writing")  # core/faults.py: tests only
