"""KAFKA_AUDIT entry module: Kafka topic(s) -> Delta table `audit_counts`.

Source: the JobGroup's kafka_consumer_task_group topic, every partition; or a topic selection
(extension.topics: names, or a pattern whose matching topics Spark's source finds again at
every trigger), every partition of every selected topic, in one query. Spark's Kafka source
plans each micro-batch from `starting_offsets` (earliest unless auto_offset_reset_policy is
LATEST) and keeps the checkpoint, at most maxOffsetsPerTrigger records a batch
(flow_control.messages_per_sec x the trigger interval, and bytes_per_sec the same way through
the topic's observed record size, `jobs/audit/flow.py`). The batch's rows are never read:
`fold.AuditFolder` reads the planned offset ranges in JVM tasks, one per partition, and folds
them into per-window partial aggregates. Spark's progress therefore reports 0 input rows; the
job logs each batch's records itself.

Sink: Delta MERGE into `audit_counts` (schema in `jobs/audit/tables.py`), one row per cluster,
topic (a selection's: the record's own), partition, audit type, interval and window. Every
micro-batch updates the windows its records fall in, so late records update their window (and
are counted in late_count) instead of being dropped. Exact audits keep their distinct keys
under the checkpoint. The MERGE runs in a thread of its own once Spark has committed the
batch, beside the next batch's fold (`jobs/audit/counts_writer.py`); foreachBatch only saves
the batch's partials under the checkpoint. A run ends once every batch it folded is in the table.

Guarantee: exactly-once per checkpoint. Offsets are in the checkpoint; a batch's exact keys
are computed against earlier batches' keys only and written before its partials are saved;
the partials are saved before Spark commits the batch, and MERGEd as an idempotent Delta
transaction keyed by (query id, batch id). Killing the driver at any point and restarting on
the same checkpoint yields the same counts as an uninterrupted run.
Latency columns are the one exception by nature: they are measured against the wall clock of
the batch that audited the record. Records deleted before the job read them stop it (exit 1,
the range in `source_data_loss`); a `--skip-lost-records` run reads past exactly that range
on the same checkpoint, so no window is counted twice (`jobs/runtime/source_failure.py`).
A pattern's topic deleted mid-run is logged and recorded in `source_data_loss`; the job goes
on with the others.

Trigger: AvailableNow with --once (process what is there, write, exit 0), else every
trigger interval until stopped.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from core import kafka_admin
from core.errors import ClusterUnreachable, UatuError
from core.faults import fault_point
from jobs.audit import metrics, tables
from jobs.audit.counts_writer import CountsWriter
from jobs.audit.flow import BytePacer, sample_selection_record_bytes
from jobs.audit.fold import AuditFolder
from jobs.audit.packs import alone_spec, form_pack, pack_key, refuse_moved_counts
from jobs.audit.spec import AuditSpec, query_name
from jobs.audit.transforms import WINDOW_KEY
from jobs.runtime import metrics as runtime_metrics
from jobs.runtime import source_failure
from jobs.runtime.delta import any_table_exists, ensure_tables
from jobs.runtime.kafka_source import source_read_options
from jobs.runtime.reporting import Reporting
from jobs.runtime.runner import QuerySettings
from jobs.runtime.tables import data_loss_path
from jobs.runtime.template import Packing, StreamingJob

log = logging.getLogger("uatu.audit")


def build_stream(
    spark: SparkSession, spec: AuditSpec, mean_record_bytes: float | None = None
) -> DataFrame:
    """Spark's Kafka source over the topic: it plans the batches, the fold reads them."""
    options = source_read_options(
        spec.source,
        max_offsets_per_trigger=spec.max_offsets_per_trigger(mean_record_bytes),
        own_loss_checks=True,  # the fold reads every planned range itself, see fold.py
    )
    return spark.readStream.format("kafka").options(**options).load()


class AuditBatchWriter:
    """foreachBatch function: fold one micro-batch into the audit table, exactly once."""

    def __init__(self, spec: AuditSpec, folder: AuditFolder, counts: CountsWriter) -> None:
        self.spec = spec
        self.folder = folder
        self.counts = counts
        self.pacer = BytePacer(spec.max_bytes_per_sec) if spec.max_bytes_per_sec > 0 else None
        self.last_record_bytes = 0.0  # mean key + value size of the last batch's records
        self.records: dict[int, int] = {}  # records of the recent batches, by batch id

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        started = time.monotonic()
        spark = batch.sparkSession
        spec = self.spec
        phases = PhaseTimes()
        if spec.source.selection is not None and spec.source.selection.pattern:
            source_failure.record_vanished(
                spark,
                checkpoint=spec.output.checkpoint,
                batch_id=batch_id,
                job_group_id=spec.job_group_id,
                cluster=spec.source.cluster.name,
                loss_table=data_loss_path(spec.output.table("audit_counts")),
            )
        with phases("keys" if spec.has_exact_audit else "fold"):
            # Reads the batch's offset ranges in JVM tasks. Exact audits' keys of this batch
            # are written (under the checkpoint) when this returns: the keys commit.
            folded = self.folder.fold(batch, batch_id)
        fault_point("audit.keys_committed")  # core/faults.py: tests only
        if folded is None:  # an idle topic
            self._remember(batch_id, 0)
            return
        with phases("save"):
            # Durable on return; the MERGE into audit_counts follows Spark's commit of the
            # batch, in the writer's thread, while the next batch is folded.
            self.counts.submit(spark, batch_id, folded.partials)
        if runtime_metrics.serving():
            self._publish(folded.partials)
        self._remember(batch_id, folded.records)
        if folded.records:
            self.last_record_bytes = folded.mean_record_bytes
        state = folded.state_line()
        log.info(
            "batch %d folded: %d records, %d bytes; %s%s",
            batch_id,
            folded.records,
            folded.bytes,
            phases,
            f"; {state}" if state else "",
        )
        if self.pacer is not None:
            wait = self.pacer.delay(started, folded.bytes, time.monotonic())
            if wait > 0:
                self.counts.release(batch_id)  # Spark commits the batch after the wait only
                log.info("flow control: waiting %.2f s (bytes_per_sec)", wait)
                time.sleep(wait)

    def _remember(self, batch_id: int, records: int) -> None:
        self.records[batch_id] = records
        for old in [b for b in self.records if b < batch_id - 100]:
            del self.records[old]

    def _publish(self, computed: DataFrame) -> None:
        """The batch's per-window increments -> the driver's Prometheus metrics."""
        exact = F.col("audit_type") == "AUDIT_TYPE_EXACT_UNIQ"
        rows = computed.select(
            *WINDOW_KEY,
            "window_end",
            "message_count",
            "bytes",
            "no_event_time_count",
            "late_count",
            # Records whose window keys had expired are of unknown uniqueness, not duplicates.
            F.when(
                exact,
                F.col("message_count")
                - F.col("new_unique_count")
                - F.col("unique_estimated_count"),
            ).alias("duplicate_count"),
            "unique_estimated_count",
        ).collect()
        lateness = self.spec.allowed_lateness_seconds
        metrics.audit_windows(
            [r.asDict() for r in rows],
            {w.interval_seconds: lateness or w.interval_seconds for w in self.spec.windows},
            datetime.now(UTC),
        )


class PhaseTimes:
    """Wall time per named phase of a batch, for the progress log."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        started = time.monotonic()
        try:
            yield
        finally:
            self.seconds[name] = time.monotonic() - started

    def __str__(self) -> str:
        return ", ".join(f"{name} {s:.1f} s" for name, s in self.seconds.items())


class AuditJob(StreamingJob[AuditSpec]):
    """The audit job in the shared template: its table, its stream, its batch writer."""

    write_id_prefix = tables.WRITE_ID_PREFIX

    def __init__(self, spec: AuditSpec) -> None:
        super().__init__(spec)
        self._mean_record_bytes: float | None = None
        self._folder: AuditFolder | None = None
        self._writer: AuditBatchWriter | None = None
        self._gaps: dict[str, source_failure.SourceGaps] = {}  # by topic (--skip-lost-records)
        self._counts = CountsWriter(
            spec.output.table("audit_counts"),
            spec.output.checkpoint,
            self.write_id().of,
            spec.job_group_id,
            spec.routes,
        )

    @classmethod
    def packing(cls, spec: AuditSpec) -> Packing | None:
        """An audit that packs (`packs.pack_key`) shares a query with the others of its key,
        each topic in one member of a pack (jobs/audit/packs.py)."""
        key = pack_key(spec)
        if key is None:
            return None
        return Packing(key, spec.source.topic, form_pack, query_name, cls)

    @classmethod
    def alone_spec(cls, spark: SparkSession, spec: AuditSpec, checkpoints: str) -> AuditSpec:
        return alone_spec(spark, spec, checkpoints)  # packs.py

    def check(self) -> None:
        """With a byte cap, sample the topic's record size (before any Spark work); for a
        topic selection, a few of its topics' (`flow.sample_selection_record_bytes`)."""
        spec = self.spec
        if spec.max_bytes_per_sec <= 0:
            return
        self._mean_record_bytes = sample_selection_record_bytes(spec)
        log.info(
            "flow control: %.0f bytes/s at a mean record size of %s: at most %s records a batch",
            spec.max_bytes_per_sec,
            "unknown (empty topic; 1024 assumed)"
            if self._mean_record_bytes is None
            else f"{self._mean_record_bytes:.0f} bytes",
            spec.max_offsets_per_trigger(self._mean_record_bytes),
        )

    def ensure_tables(self, spark: SparkSession) -> None:
        """An existing table is checked against its schema before the query starts; a new
        one is created beside the first batch (`CountsWriter.create_table_beside`)."""
        located = tables.locations(self.spec)
        if any_table_exists(spark, [path for _, path in located]):
            ensure_tables(spark, located)
        else:
            self._counts.create_table_beside(spark)
        spec = self.spec
        log.info(
            "auditing %s/%s (%s) into %s: %s",
            spec.source.cluster.name,
            spec.source.selection or spec.source.topic,
            spec.source.cluster.bootstrap_servers,
            spec.output.table("audit_counts"),
            ", ".join(f"{w.audit_type}/{w.interval_seconds}s" for w in spec.windows),
        )

    def stream(self, spark: SparkSession) -> DataFrame:
        return build_stream(spark, self.spec, self._mean_record_bytes)

    def batch_writer(self, spark: SparkSession) -> AuditBatchWriter:
        self._folder = AuditFolder(spark, self.spec, self._gaps)
        self._writer = AuditBatchWriter(self.spec, self._folder, self._counts)
        return self._writer

    def before_query(self, spark: SparkSession) -> int | None:
        """Write the counts a crashed run saved and did not MERGE, before any new batch (a
        group whose counts went on in an audit pack is refused: `packs.refuse_moved_counts`)."""
        refuse_moved_counts(spark, self.spec)
        self._counts.recover(spark, in_background=True)  # before the run's own, beside them
        return None

    def run_stream(
        self, spark: SparkSession, *, once: bool, stop_file: str | None, reporting: Reporting | None
    ) -> int:
        """The query, then the MERGEs still queued: the run ends with every batch it folded
        in audit_counts (or, after a failure, saved for the next start)."""
        status = super().run_stream(spark, once=once, stop_file=stop_file, reporting=reporting)
        return self._counts.batches.finish(status)

    def query_settings(self, *, once: bool, stop_file: str | None) -> QuerySettings:
        writer = self._writer
        settings = super().query_settings(once=once, stop_file=stop_file)
        if writer is None:
            return settings
        return dataclasses.replace(
            settings,
            record_bytes=lambda: writer.last_record_bytes,
            batch_records=writer.records.get,
        )

    def close(self) -> None:
        self._counts.close()
        if self._folder is not None:
            self._folder.close()

    def skip_lost_records(self, spark: SparkSession, *, once: bool) -> None:
        spec = self.spec
        for topic in self._source_topics(spark):
            gaps = source_failure.skip_lost(
                spark,
                job_group_id=spec.group_of(topic),
                cluster=spec.source.cluster,
                source=source_failure.Source(topic, spec.output.checkpoint),
                loss_table=data_loss_path(spec.output.table("audit_counts")),
            )
            if gaps:
                self._gaps[topic] = gaps
        fault_point("source.lost_recorded")  # core/faults.py: tests only

    def explain_failure(self, spark: SparkSession) -> UatuError | None:
        spec = self.spec
        return source_failure.explain_sources(
            spark,
            job_group_id=spec.job_group_id,
            cluster=spec.source.cluster,
            sources=[
                source_failure.Source(t, spec.output.checkpoint) for t in self._source_topics(spark)
            ],
            loss_table=data_loss_path(spec.output.table("audit_counts")),
        )

    def _source_topics(self, spark: SparkSession) -> list[str]:
        """The topics whose lost records a start skips or a failure explains: the one topic;
        a selection's names; a pattern's topics in the checkpoint that the cluster still lists
        (a deleted one is recorded as the run goes, `source_failure.record_vanished`, and
        is not the cause of a failure)."""
        selection = self.spec.source.selection
        if selection is None:
            return [self.spec.source.topic]
        if selection.names:
            return list(selection.names)
        try:
            existing = kafka_admin.topic_partitions(self.spec.source.cluster)
        except ClusterUnreachable as e:
            log.warning("cannot list the topics of the selection: %s", e)
            return []
        return [
            t
            for t in source_failure.checkpoint_topics(spark, self.spec.output.checkpoint)
            if t in existing and selection.matches(t)
        ]
