"""What a replication copy did, recorded: summary rows (`writer.SUMMARY_SCHEMA`) become one
stats batch in `replication_stats` and `replication_audit` (idempotent Delta appends), the
copied offsets are committed to the JobGroup's consumer group, and MirrorMaker 2's metrics are
updated. Used by the micro-batch copy (`job.py`) and the low-latency copy (`continuous.py`).
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from pyspark.sql import DataFrame, Row
from pyspark.sql import functions as F

from jobs.replication import metrics, tables
from jobs.replication.spec import ReplicationSpec
from jobs.replication.transforms import replication_audit, replication_stats
from jobs.runtime import metrics as runtime_metrics
from jobs.runtime.delta import append_once
from jobs.runtime.group_offsets import GroupOffsetCommitter


@dataclass
class StatsWriter:
    """Records what a copy did: its summary rows (writer.SUMMARY_SCHEMA) become one stats
    batch in `replication_stats` and `replication_audit`, exactly once per (app_id, batch_id);
    then the copied offsets go to the JobGroup's consumer group and the MirrorMaker 2 metrics
    are updated."""

    spec: ReplicationSpec
    app_id: str = ""
    # The tables' creation, when it runs beside the copy's start: the first write waits for
    # it (and raises its error).
    tables_ready: Future[None] | None = None
    last_record_bytes: float = 0.0  # mean key+value size of the last batch's records
    _group_offsets: GroupOffsetCommitter | None = None
    # The audit rows are appended beside the stats: two independent Delta commits, each mostly
    # fixed cost, overlap instead of adding up.
    _audit_appender: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(1, thread_name_prefix="audit-append")
    )

    def labels(self) -> Mapping[str, str]:
        """The labels of every row; the topics come with each summary row."""
        spec = self.spec
        return {
            "job_group_id": spec.job_group_id,
            "source_cluster": spec.source.cluster.name,
            "destination_cluster": spec.destination_cluster.name,
        }

    def write(
        self, summaries: DataFrame, batch_id: int, next_offsets: Mapping[str, Mapping[int, int]]
    ) -> Row:
        """Append the batch's stats and audit rows (both or, after a crash, neither), commit
        `next_offsets` (source topic -> partition -> next offset to copy) to the consumer
        group; returns the batch's totals (records, bytes: key + value bytes replicated)."""
        if self.tables_ready is not None:
            self.tables_ready.result()
        audit = summaries.transform(
            replication_audit, self.spec.audit_interval_seconds, batch_id, self.labels()
        )
        audit_appended = self._audit_appender.submit(
            append_once,
            audit,
            tables.REPLICATION_AUDIT,
            self.spec.output.table("replication_audit"),
            self.app_id,
            batch_id,
        )
        stats = summaries.transform(
            replication_stats, batch_id, F.current_timestamp(), self.labels()
        ).localCheckpoint()
        append_once(
            stats,
            tables.REPLICATION_STATS,
            self.spec.output.table("replication_stats"),
            self.app_id,
            batch_id,
        )
        audit_appended.result()  # the batch is done only when both are written
        if runtime_metrics.serving():  # MirrorMaker 2's metrics, from the rows just written
            metrics.replication(self.labels(), [r.asDict() for r in stats.collect()])
        totals = stats.agg(
            F.coalesce(F.sum("records_replicated"), F.lit(0)).alias("records"),
            F.coalesce(F.sum("record_bytes_replicated"), F.lit(0)).alias("bytes"),
        ).first()
        assert totals is not None
        self._commit_group_offsets(next_offsets)
        if totals["records"]:
            self.last_record_bytes = totals["bytes"] / totals["records"]
        return totals

    def close(self) -> None:
        self._audit_appender.shutdown()
        if self._group_offsets is not None:
            self._group_offsets.close()
            self._group_offsets = None

    def _commit_group_offsets(self, next_offsets: Mapping[str, Mapping[int, int]]) -> None:
        """Commit the copied offsets to consumer_group, so lag monitors (Burrow) see the job."""
        if not self.spec.source.consumer_group:
            return
        if self._group_offsets is None:
            self._group_offsets = GroupOffsetCommitter(
                self.spec.source.cluster.client_config(),
                self.spec.source.consumer_group,
                self.spec.source.topic,
            )
        for topic, offsets in sorted(next_offsets.items()):
            self._group_offsets.commit(offsets, topic=topic)
