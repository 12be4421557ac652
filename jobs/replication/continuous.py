"""The low-latency copy of a continuous replication JobGroup (`extension.replication.low_latency`).

Source, sink, provenance stamp and Delta tables are those of `job.py`; what differs is how the
records move and where the progress is kept.

* **Records.** `ContinuousCopy.java` runs epochs of long-running copy tasks
  (`StreamCopier.java`), one Spark job per epoch of `epoch_seconds` (`epoch_layout`: how many
  tasks, leaving a slot for the stats). A task sends each record as soon as its consumer's
  poll returns it, paced by the JobGroup's flow control, so a record waits for no micro-batch.
  In local mode with three slots or more the epochs relay (`EpochRelay.java`): the next
  epoch's task waits in the JVM and takes over the consumer at the deadline, so polling never
  pauses; otherwise records that arrive while one epoch hands over to the next wait for that
  hand-over. Spark's micro-batch engine and its checkpoint are not used.
* **Progress.** `<checkpoint>/continuous/` (`progress_log.py`): the epochs finished since the
  driver last looked become stats batch N. `offsets/N` is written (every record of N is
  acknowledged by then), both Delta tables are appended (txnAppId = the log's id, txnVersion =
  N), the copied offsets are committed to the consumer group, then `commits/N`.
* **Restart.** The first epoch of every run reads each destination partition's tail and sends
  nothing the destination already holds. Batch N logged but not committed (a crash between
  the two) is counted again with the bounded range copy (`writer.copy_ranges`), which finds
  its records present and sends none, and written as batch N: a table that has N already
  skips it. The copy then resumes at N's end.

Guarantees, as the micro-batch copy's: no loss (a delivery that fails after the task's
attempts fails the epoch, the copy ends with exit 1, and the restart resumes from the log),
order per partition, no duplicate while nothing else writes the destination partitions, and
every source offset counted once in `replication_stats`. Partitions added to the source are
found between epochs (at most once an epoch): the copy stops after its epoch and starts again
with them, from their earliest offset, as the micro-batch copy does.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from pyspark.sql import SparkSession

from core.errors import EXIT_FAILED, EXIT_OK
from core.faults import fault_point
from core.kafka_admin import partition_count
from jobs.replication import progress_log
from jobs.replication.preflight import (
    EARLIEST,
    LATEST,
    ReplicationPlan,
    cover_new_partitions,
    source_watermarks,
)
from jobs.replication.progress_log import LoggedBatch, ProgressLog
from jobs.replication.ranges import SourceRange
from jobs.replication.spec import ReplicationSpec
from jobs.replication.stats import StatsWriter
from jobs.replication.writer import (
    ContinuousCopy,
    DestinationConfig,
    copy_ranges,
    epoch_ranges,
    summary_rows,
)
from jobs.runtime.checkpoint_files import read_offset_log
from jobs.runtime.reporting import Heartbeater, Reporting
from jobs.runtime.runner import StopRequests
from jobs.runtime.source_failure import NO_GAPS, SourceGaps

log = logging.getLogger("uatu.replication")

POLL_SECONDS = 0.5  # how often the driver looks for finished epochs and stop requests
STOP_TIMEOUT_SECONDS = 120.0  # the running epoch's acks after a stop request


def resolved_starts(
    planned: Mapping[int, int], watermarks: Mapping[int, tuple[int, int]]
) -> dict[int, int]:
    """The plan's starting offsets with EARLIEST and LATEST replaced by the partition's low
    and high watermark (pure)."""
    starts = {}
    for partition, offset in planned.items():
        low, high = watermarks[partition]
        starts[partition] = low if offset == EARLIEST else high if offset == LATEST else offset
    return starts


def progress_record(
    name: str, topic: str, starts: Mapping[int, int], ends: Mapping[int, int], seconds: float
) -> dict:
    """A stats batch shaped as a Spark progress record, for the heartbeats (pure)."""

    def offsets(by_partition: Mapping[int, int]) -> dict:
        return {topic: {str(p): o for p, o in sorted(by_partition.items())}}

    return {
        "name": name,
        "timestamp": datetime.now(UTC).isoformat().replace("+00:00", "Z"),
        "batchDuration": int(seconds * 1000),
        "sources": [{"startOffset": offsets(starts), "endOffset": offsets(ends)}],
    }


@dataclass
class StatsBatches:
    """Turns finished epochs into logged, idempotently written stats batches."""

    log: ProgressLog
    stats: StatsWriter
    next_batch: int

    def record(self, copy: ContinuousCopy, epochs: Sequence) -> dict[int, SourceRange]:
        """Log, write and commit `epochs` as the next stats batch; their ranges. Epochs that
        read nothing make no batch."""
        ranges = epoch_ranges(epochs)
        if all(r.until_offset == r.from_offset for r in ranges.values()):
            return ranges
        batch_id = self.next_batch
        starts = {p: r.from_offset for p, r in ranges.items()}
        ends = {p: r.until_offset for p, r in ranges.items()}
        self.log.write_batch(batch_id, starts, ends)
        fault_point("replication.epoch_logged")  # core/faults.py: tests only
        frame = copy.summaries(epochs)  # a local frame: collecting it runs no Spark job
        summaries = summary_rows(frame)
        if summaries:
            topic = self.stats.spec.source.topic
            self.stats.write(frame.sparkSession, summaries, batch_id, {topic: ends})
        self.log.write_commit(batch_id)
        self.next_batch = batch_id + 1
        return ranges


def recount(
    spark: SparkSession,
    batch: LoggedBatch,
    destination: DestinationConfig,
    stats: StatsWriter,
    plog: ProgressLog,
) -> None:
    """Write the stats of batch `batch`, logged by a run that crashed before its commit: its
    range copied again by the bounded copy, which sends nothing the destination holds."""
    ranges = [
        SourceRange(p, batch.starts[p], batch.ends[p])
        for p in sorted(batch.ends)
        if batch.ends[p] > batch.starts.get(p, batch.ends[p])
    ]
    log.info("stats batch %d was logged but not committed: counting it again", batch.batch_id)
    summaries = summary_rows(copy_ranges(spark, ranges, destination))
    if summaries:
        ends = {stats.spec.source.topic: dict(batch.ends)}
        stats.write(spark, summaries, batch.batch_id, ends)
    plog.write_commit(batch.batch_id)


def logged_positions(spark: SparkSession, checkpoint: str) -> dict[int, int]:
    """Where a restart resumes by the log alone: the last logged batch's ends, else the logged
    start; {} for a new checkpoint."""
    plog = ProgressLog(spark, checkpoint)
    last = plog.last()
    if last is not None:
        return dict(last.ends)
    return plog.start() or {}


def start_positions(
    spark: SparkSession,
    spec: ReplicationSpec,
    plan: ReplicationPlan,
    plog: ProgressLog,
    last: LoggedBatch | None,
) -> dict[int, int]:
    """Where each partition's copy starts in this run (progress_log.resume_offsets), with the
    log's start written on a new checkpoint."""
    watermarks = source_watermarks(spec, plan.source_partitions)
    planned = resolved_starts(plan.starting_offsets, watermarks)
    logged_start = plog.start()
    earlier = read_offset_log(spark, spec.output.checkpoint).committed_offsets(spec.source.topic)
    positions = progress_log.resume_offsets(
        plan.source_partitions,
        last,
        logged_start,
        earlier,
        planned,
        {p: low for p, (low, _) in watermarks.items()},
    )
    if last is None and logged_start is None:
        plog.write_start(positions)
    return positions


def run_low_latency(
    spark: SparkSession,
    spec: ReplicationSpec,
    plan: ReplicationPlan,
    destination_for: Callable[[ReplicationPlan], DestinationConfig],
    stats: StatsWriter,
    *,
    write_id_prefix: str,
    stop_file: str | None,
    reporting: Reporting | None,
    gaps: SourceGaps = NO_GAPS,
) -> int:
    """Copy until stopped (stop file, SIGTERM, CANCEL) -> EXIT_OK, or until an epoch fails ->
    EXIT_FAILED. `stats` records each stats batch; its app id becomes the log's. A partition
    that resumes inside one of `gaps` (--skip-lost-records) starts at its end."""
    plog = ProgressLog(spark, spec.output.checkpoint)
    # The copy runs without Spark's engine: the id its progress log keeps stands for the
    # query id of the job's other idempotent writes.
    stats.app_id = f"{write_id_prefix}-continuous-{plog.app_id()}"
    last = plog.last()
    if last is not None and not last.committed:
        recount(spark, last, destination_for(plan), stats, plog)
        last = plog.last()
    positions = start_positions(spark, spec, plan, plog, last)
    positions = {p: gaps.past(p, offset) for p, offset in positions.items()}
    batches = StatsBatches(plog, stats, 0 if last is None else last.batch_id + 1)
    heartbeater = None
    if reporting is not None:
        committed = progress_record(spec.query_name, spec.source.topic, positions, positions, 1)
        heartbeater = reporting.start_fed(spark, spec.query_name, committed)
    layout = epoch_layout(
        spark.sparkContext.defaultParallelism, (spark.sparkContext.master or "").startswith("local")
    )
    try:
        with StopRequests(stop_file, heartbeater) as stop:
            while True:
                copy = ContinuousCopy(
                    spark,
                    destination_for(plan),
                    positions,
                    epoch_ms=spec.epoch_seconds * 1000,
                    max_tasks=layout.max_tasks,
                    relay=layout.relay,
                )
                copy.start()
                log.info(
                    "low-latency copy of %s/%s -> %s/%s from %s: epochs of %d s, %d task(s), %s",
                    spec.source.cluster.name,
                    spec.source.topic,
                    spec.destination_cluster.name,
                    spec.destination_topic,
                    positions,
                    spec.epoch_seconds,
                    min(layout.max_tasks, len(positions)),
                    "relayed between epochs"
                    if layout.relay
                    else "a pause at each epoch's end (a relay needs local[3] or more)",
                )
                try:
                    outcome = _copy_until_done(
                        spec, plan, copy, batches, positions, stop, heartbeater
                    )
                except Exception:
                    # As a failed micro-batch fails its query: the run ends with exit 1 and the
                    # job explains it (a deleted source topic fails the group offsets' commit
                    # or the partition check first).
                    log.exception("the low-latency copy of %s failed", spec.source.topic)
                    copy.request_stop()
                    copy.join(STOP_TIMEOUT_SECONDS)
                    return EXIT_FAILED
                if isinstance(outcome, int):
                    return outcome
                plan = outcome  # the source grew: copy again with its new partitions
                added = sorted(set(plan.source_partitions) - set(positions))
                positions.update({p: low for p, (low, _) in source_watermarks(spec, added).items()})
    finally:
        if heartbeater is not None:
            heartbeater.stop()


@dataclass(frozen=True)
class EpochLayout:
    """How many copy tasks an epoch runs, and whether epochs relay (`EpochRelay.java`)."""

    max_tasks: int
    relay: bool


def epoch_layout(slots: int, local: bool) -> EpochLayout:
    """The copy's tasks for `slots` task slots. One slot stays free for the stats. In local
    mode, with at least three slots, each epoch's job is submitted while the one before runs and
    its tasks take over in the JVM without a pause; both epochs' tasks then hold slots, so each
    gets half of the rest. Elsewhere (a cluster's executors are other JVMs), or with fewer
    slots, an epoch starts when the one before has ended."""
    if local and slots >= 3:
        return EpochLayout(max_tasks=(slots - 1) // 2, relay=True)
    return EpochLayout(max_tasks=max(1, slots - 1), relay=False)


def _copy_until_done(
    spec: ReplicationSpec,
    plan: ReplicationPlan,
    copy: ContinuousCopy,
    batches: StatsBatches,
    positions: dict[int, int],
    stop: StopRequests,
    heartbeater: Heartbeater | None,
) -> int | ReplicationPlan:
    """Record the copy's epochs until it ends: an exit code, or the grown plan after the
    source gained partitions (the copy is stopped, its last epochs recorded)."""
    checked = time.monotonic()

    def take(epochs: Sequence) -> None:
        started = time.monotonic()
        ranges = batches.record(copy, epochs)
        before = dict(positions)
        positions.update({p: r.until_offset for p, r in ranges.items()})
        if heartbeater is not None and ranges:
            seconds = (epochs[-1].endedMs() - epochs[0].startedMs()) / 1000
            heartbeater.listener.record(
                progress_record(spec.query_name, spec.source.topic, before, positions, seconds)
            )
        copied = sum(r.until_offset - r.from_offset for r in ranges.values())
        if copied:
            log.info(
                "stats batch %d: %d records read in %d epoch(s), recorded in %.1f s",
                batches.next_batch - 1,
                copied,
                len(epochs),
                time.monotonic() - started,
            )

    def finish(reason: str) -> bool:
        copy.request_stop()
        ended = copy.join(STOP_TIMEOUT_SECONDS)
        take(copy.drain())
        if not ended:
            log.error("the copy did not stop within %.0f s (%s)", STOP_TIMEOUT_SECONDS, reason)
        return ended

    while True:
        epochs = copy.wait(POLL_SECONDS)
        if epochs:
            take(epochs)
        if not copy.running:
            take(copy.drain())
            log.error("the low-latency copy of %s failed: %s", spec.source.topic, copy.failure)
            return EXIT_FAILED
        reason = stop.reason()
        if reason is not None:
            log.info("received %s, stopping the copy after its epoch", reason)
            return EXIT_OK if finish(reason) else EXIT_FAILED
        if time.monotonic() - checked > spec.epoch_seconds:
            checked = time.monotonic()
            field_name = "kafka_consumer_task_group.topic"
            count = partition_count(spec.source.cluster, spec.source.topic, field_name)
            new = set(range(count)) - set(plan.source_partitions)
            if new:
                log.info("source %s has new partitions %s", spec.source.topic, sorted(new))
                if not finish("new source partitions"):
                    return EXIT_FAILED
                return cover_new_partitions(spec, plan, new)
