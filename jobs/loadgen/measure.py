"""LOAD_GEN_CONSUME's micro-batch: fold the Spark-planned offset ranges in JVM tasks
(`dev.uatu.fold.RangeFolds` with `dev.uatu.loadgen.SequenceFold`), keep the rows for
`loadgen_stats`, print a perf-tool line, commit the offsets to the consumer group.

Spark's Kafka source plans each batch (offsets, maxOffsetsPerTrigger, the checkpoint), but the
batch's rows are never read: JVM tasks (`dev.uatu.fold.RangeFolds.packed`) read the ranges
with byte-array consumers and fold them into a few rows per window and generator. Spark's
progress therefore reports 0 input rows; `loadgen_stats` and the progress line have the counts.

The rows go to `loadgen_stats` every `FLUSH_SECONDS` and when the query ends, in one Delta
commit for all the batches since the last one, not one commit per batch: a Delta commit of a
few rows costs more than folding a large batch (docs/loadgen.md). Until
then they are saved under the checkpoint with the batch (`PendingStats`); a run that crashed
before writing them writes them when it starts again. Exactly once: each commit carries the
newest batch id it covers as Delta's txnVersion, and a batch already in the table is not
kept again when Spark replays it.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from confluent_kafka import KafkaException
from pyspark.sql import DataFrame, SparkSession

from jobs.loadgen import jvm
from jobs.loadgen.spec import ConsumeSpec
from jobs.loadgen.tables import LOADGEN_STATS, STATS_SCHEMA
from jobs.loadgen.transforms import PendingStats, consume_line
from jobs.runtime.delta import append_once
from jobs.runtime.group_offsets import GroupOffsetCommitter, is_transient
from jobs.runtime.kafka_source import RANGE_TIMEOUT_MS, range_consumer_config
from jobs.runtime.py4j import java_map
from jobs.runtime.template import WriteId

log = logging.getLogger("uatu.loadgen")

FLUSH_SECONDS = 30.0
MAX_BATCH = 2**63 - 1


def consumer_config(spec: ConsumeSpec) -> dict[str, str]:
    """The fold tasks' Java consumer (`range_consumer_config`)."""
    return range_consumer_config(spec.source.cluster, read_committed=spec.source.read_committed)


def state_dir(spec: ConsumeSpec) -> str:
    return f"{spec.output.checkpoint}/loadgen-sequences"


def pending_dir(spec: ConsumeSpec) -> str:
    return f"{spec.output.checkpoint}/loadgen-pending"


@dataclass
class MeasureBatchWriter:
    """foreachBatch function: fold, keep the rows (and write them every FLUSH_SECONDS), print,
    commit offsets."""

    spec: ConsumeSpec
    write_id: WriteId
    pending: PendingStats = field(default_factory=PendingStats)
    _last_line_us: int = field(default_factory=lambda: time.time_ns() // 1000)
    _last_flush: float | None = None  # the first batch starts the interval
    _group_offsets: GroupOffsetCommitter | None = None
    _committing: ThreadPoolExecutor | None = None  # the group commits, one at a time
    _last_commit: Future[None] | None = None

    def recover(self, spark: SparkSession) -> None:
        """Write the rows a previous run kept but did not write (it crashed)."""
        saved = jvm.read_state(spark, pending_dir(self.spec), MAX_BATCH, exact=False)
        if saved is None:
            return
        self.pending = PendingStats.from_json(saved)
        if self.pending.batches:
            log.info("writing the rows of batches %s kept by the previous run", self._kept())
            self.flush(spark)

    def flush(self, spark: SparkSession) -> None:
        """All kept rows into loadgen_stats, in one commit (txnVersion: the newest batch)."""
        spec = self.spec
        if not self.pending.batches:
            return
        rows = self.pending.table_rows(
            (spec.job_group_id, spec.source.cluster.name, spec.source.topic), spec.window_seconds
        )
        last = self.pending.last_batch
        if rows:
            append_once(
                spark.createDataFrame(rows, STATS_SCHEMA),
                LOADGEN_STATS,
                spec.output.table("loadgen_stats"),
                self.write_id.of(spark),
                last,
            )
        self.pending.flushed()
        jvm.write_state(spark, pending_dir(spec), last, self.pending.to_json())
        self._last_flush = time.monotonic()

    def _kept(self) -> str:
        return ", ".join(str(b["batch_id"]) for b in self.pending.batches)

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        started_ns = time.monotonic_ns()
        spark = batch.sparkSession
        spec = self.spec
        fold = jvm.fold(spark)
        ranges = fold.RangeFolds.planned(batch._jdf, spec.source.topic)
        if ranges.isEmpty():
            return
        batch_time_ms = time.time_ns() // 1_000_000
        planned_ns = time.monotonic_ns()
        folded = jvm.loadgen(spark).LoadGenConsume.foldBatch(
            spark._jsparkSession,
            ranges,
            java_map(spark, consumer_config(spec)),
            spec.window_seconds * 1000,
            state_dir(spec),
            batch_id,
            RANGE_TIMEOUT_MS,
        )
        fold_rows = [r.asDict() for r in jvm.dataframe(spark, folded).collect()]
        for r in fold_rows:
            r.pop("state", None)
            if r["latency_ms_sketch"] is not None:
                r["latency_ms_sketch"] = bytes(r["latency_ms_sketch"])
        folded_us = time.time_ns() // 1000
        folded_ns = time.monotonic_ns()
        self.pending.add(batch_id, batch_time_ms, folded_us, fold_rows)
        if self._last_flush is None:
            self._last_flush = started_ns / 1e9
        if time.monotonic() - self._last_flush >= FLUSH_SECONDS:
            self.flush(spark)
        else:
            jvm.write_state(spark, pending_dir(spec), batch_id, self.pending.to_json())
        kept_ns = time.monotonic_ns()
        self._commit_group_offsets(
            {r.partition(): r.untilOffset() for r in ranges}  # type: ignore[attr-defined]
        )
        done_ns = time.monotonic_ns()
        interval_s = (folded_us - self._last_line_us) / 1e6
        batch_ms = (done_ns - started_ns) // 1_000_000
        phases = {
            "plan": planned_ns - started_ns,
            "fold": folded_ns - planned_ns,
            "stats": kept_ns - folded_ns,
            "commit": done_ns - kept_ns,
        }
        log.info(
            "%s (%s)",
            consume_line(fold_rows, batch_id, interval_s, folded_us, batch_ms),
            ", ".join(f"{name} {ns // 1_000_000} ms" for name, ns in phases.items()),
        )
        self._last_line_us = folded_us

    def _commit_group_offsets(self, next_offsets: dict[int, int]) -> None:
        """Commit the read offsets to consumer_group, so lag monitors see the job, in a thread
        of its own: the commit is a round trip to the group coordinator, which the next batch
        need not wait for. Best effort: the checkpoint holds the job's offsets; a commit that
        still fails after a few tries (a coordinator still loading) is logged, and the next
        batch's commit covers its offsets. Any other failure fails the next batch (or the
        run's end), one batch late."""
        if not self.spec.source.consumer_group:
            return
        if self._group_offsets is None:
            self._group_offsets = GroupOffsetCommitter(
                self.spec.source.cluster.client_config(),
                self.spec.source.consumer_group,
                self.spec.source.topic,
            )
            self._committing = ThreadPoolExecutor(1, thread_name_prefix="loadgen-group-commit")
        self._commit_done()
        assert self._committing is not None
        self._last_commit = self._committing.submit(self._group_offsets.commit, next_offsets)

    def _commit_done(self) -> None:
        """Wait for the previous batch's group commit; raise what it raised, unless transient."""
        if self._last_commit is None:
            return
        last, self._last_commit = self._last_commit, None
        try:
            last.result()
        except KafkaException as e:
            if not is_transient(e):
                raise
            log.warning("offsets not committed to %s: %s", self.spec.source.consumer_group, e)

    def close(self, spark: SparkSession) -> None:
        """Write what is kept (the query ended or stopped), then let go of the consumer."""
        started = time.monotonic()
        kept = self._kept()
        self.flush(spark)
        if kept:
            log.info("rows of batches %s written in %.1f s", kept, time.monotonic() - started)
        if self._group_offsets is not None:
            assert self._committing is not None
            try:
                self._commit_done()
            finally:
                self._committing.shutdown()
                self._group_offsets.close()
                self._group_offsets = None
