"""LOAD_GEN_CONSUME's micro-batch: fold the Spark-planned offset ranges in JVM tasks
(`dev.uatu.fold.RangeFolds` with `dev.uatu.loadgen.SequenceFold`), append the rows to
`loadgen_stats` exactly once, print a perf-tool line, commit the offsets to the consumer group.

Spark's Kafka source plans each batch (offsets, maxOffsetsPerTrigger, the checkpoint), but the
batch's rows are never read: one task per partition reads its range with a byte-array consumer
and folds it into a few rows per window and generator. Spark's progress therefore reports 0
input rows; `loadgen_stats` and the progress line have the counts.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from pyspark.sql import DataFrame

from jobs.loadgen import jvm
from jobs.loadgen.spec import ConsumeSpec
from jobs.loadgen.tables import STATS_SCHEMA
from jobs.loadgen.transforms import consume_line, stats_rows
from jobs.runtime.delta import append_once
from jobs.runtime.runner import streaming_query_id

log = logging.getLogger("uatu.loadgen")

# Bigger fetches than the client defaults (500 records a poll, 1 MiB a partition), as the
# replication job's copy reads; the cluster's own properties win.
FETCH_CONFIG = {
    "max.poll.records": "10000",
    "max.partition.fetch.bytes": str(8 << 20),
    "fetch.max.bytes": str(32 << 20),
}
RANGE_TIMEOUT_MS = 120_000
COMMIT_ATTEMPTS = 10
_COORDINATOR_ERRORS = frozenset(
    {
        KafkaError.NOT_COORDINATOR,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    }
)


def consumer_config(spec: ConsumeSpec) -> dict[str, str]:
    """The fold tasks' Java consumer: by assignment, nothing committed, no offset reset (a
    range deleted by retention before it was read fails the task, as failOnDataLoss does)."""
    return {
        **FETCH_CONFIG,
        **spec.cluster.java_client_config(),
        "enable.auto.commit": "false",
        "isolation.level": "read_committed" if spec.read_committed else "read_uncommitted",
        "auto.offset.reset": "none",
    }


def state_dir(spec: ConsumeSpec) -> str:
    return f"{spec.checkpoint_path}/loadgen-sequences"


@dataclass
class MeasureBatchWriter:
    """foreachBatch function: fold, append to loadgen_stats, print, commit offsets."""

    spec: ConsumeSpec
    app_id: str = ""
    _last_line_us: int = field(default_factory=lambda: time.time_ns() // 1000)
    _group_consumer: Consumer | None = None

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        spark = batch.sparkSession
        spec = self.spec
        if not self.app_id:
            self.app_id = f"uatu-loadgen-{streaming_query_id(spark, spec.checkpoint_path)}"
        fold = jvm.fold(spark)
        ranges = fold.RangeFolds.planned(batch._jdf, spec.topic)
        if ranges.isEmpty():
            return
        batch_time_ms = time.time_ns() // 1_000_000
        folded = jvm.loadgen(spark).LoadGenConsume.foldBatch(
            spark._jsparkSession,
            ranges,
            jvm.java_map(spark, consumer_config(spec)),
            spec.window_seconds * 1000,
            state_dir(spec),
            batch_id,
            RANGE_TIMEOUT_MS,
        )
        fold_rows = [r.asDict() for r in jvm.dataframe(spark, folded).collect()]
        folded_us = time.time_ns() // 1000
        rows = stats_rows(
            fold_rows,
            labels=(spec.job_group_id, spec.cluster.name, spec.topic),
            batch_id=batch_id,
            batch_time_ms=batch_time_ms,
            window_seconds=spec.window_seconds,
            folded_us=folded_us,
        )
        if rows:
            append_once(
                spark.createDataFrame(rows, STATS_SCHEMA), spec.stats_path, self.app_id, batch_id
            )
        log.info(
            "%s",
            consume_line(fold_rows, batch_id, (folded_us - self._last_line_us) / 1e6, folded_us),
        )
        self._last_line_us = folded_us
        self._commit_group_offsets(
            {r.partition(): r.untilOffset() for r in ranges}  # type: ignore[attr-defined]
        )

    def _commit_group_offsets(self, next_offsets: dict[int, int]) -> None:
        """Commit the read offsets to consumer_group, so lag monitors see the job. Best effort:
        the checkpoint holds the job's offsets; a commit that fails after a few tries (a
        coordinator still loading) is logged and tried again with the next batch."""
        if not self.spec.consumer_group or not next_offsets:
            return
        if self._group_consumer is None:
            self._group_consumer = Consumer(
                {
                    **self.spec.cluster.client_config(),
                    "group.id": self.spec.consumer_group,
                    "enable.auto.commit": False,
                }
            )
        offsets = [
            TopicPartition(self.spec.topic, p, offset) for p, offset in sorted(next_offsets.items())
        ]
        for attempt in range(COMMIT_ATTEMPTS):
            try:
                self._group_consumer.commit(offsets=offsets, asynchronous=False)
                return
            except KafkaException as e:
                error = e.args[0] if e.args else None
                transient = isinstance(error, KafkaError) and (
                    error.retriable() or error.code() in _COORDINATOR_ERRORS
                )
                if not transient:
                    raise
                if attempt == COMMIT_ATTEMPTS - 1:
                    log.warning("offsets not committed to %s: %s", self.spec.consumer_group, e)
                    return
                time.sleep(0.5)

    def close(self) -> None:
        if self._group_consumer is not None:
            self._group_consumer.close()
            self._group_consumer = None
