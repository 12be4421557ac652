"""LOAD_GEN_PRODUCE and LOAD_GEN_CONSUME entry module: traffic of a chosen shape at a chosen
rate into a topic, and what arrives measured like Kafka's perf tools.

LOAD_GEN_PRODUCE
  Source: none. Spark's `rate` source only paces the micro-batches and keeps the checkpoint;
  its rows are never read. Sink: the kafka_dispatcher_task_group topic, one generator per
  partition (`generator.py`, JVM producer tasks), each record with a `loadgen` header
  (generator id, sequence number, send time). Rate: flow_control caps held record by record
  (`plan.py`). Guarantee: at least once; state (sequence numbers, schedule) under the
  checkpoint. Trigger: back to back, each batch producing `trigger.interval_seconds`; a
  bounded run (`total_records` / `duration_seconds`, required by --once) stops by itself and
  exits 0. Output: a ProducerPerformance-style line per batch and at the end; no table.

LOAD_GEN_CONSUME
  Source: the kafka_consumer_task_group topic; Spark's Kafka source plans the offset ranges,
  JVM tasks fold them (`measure.py`). Sink: Delta `loadgen_stats` (`tables.py`), exactly
  once. Trigger: every trigger interval; AvailableNow with --once. Output: a
  ConsumerPerformance-style line per batch.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping

from pyspark.sql import DataFrame, SparkSession

from core import kafka_admin
from core.errors import InvalidJobGroup
from jobs.loadgen import tables
from jobs.loadgen.generator import ProduceBatchWriter, check_producer, warm_up
from jobs.loadgen.measure import MeasureBatchWriter
from jobs.loadgen.plan import default_producer_tasks
from jobs.loadgen.spec import ConsumeSpec, ProduceSpec
from jobs.runtime.delta import ensure_tables
from jobs.runtime.kafka_source import source_read_options
from jobs.runtime.reporting import Reporting
from jobs.runtime.runner import QuerySettings
from jobs.runtime.template import StreamingJob

log = logging.getLogger("uatu.loadgen")

SESSION_CONF = {
    # One producer task per partition group and one fold per partition; a speculative second
    # attempt would send or read twice.
    "spark.speculation": "false",
}


def executor_count(spark: SparkSession) -> int:
    """Executors registered so far (on a cluster, those that have started); 1 in local mode,
    where the driver runs the tasks."""
    known = spark.sparkContext._jsc.sc().statusTracker().getExecutorInfos()  # type: ignore[union-attr]
    return max(1, len(known) - 1)  # the list includes the driver


class LoadGenProduceJob(StreamingJob[ProduceSpec]):
    """LOAD_GEN_PRODUCE in the shared template."""

    session_conf = SESSION_CONF

    def __init__(self, spec: ProduceSpec) -> None:
        super().__init__(spec)
        self.partitions = 0
        self._writer: ProduceBatchWriter | None = None
        self._spark: SparkSession | None = None

    def check(self) -> None:
        spec = self.spec
        topic = spec.required_topic()
        self.partitions = kafka_admin.partition_count(spec.cluster, topic.topic, topic.field)

    def run(
        self,
        *,
        once: bool,
        stop_file: str | None = None,
        reporting: Reporting | None = None,
        skip_lost_records: bool = False,
    ) -> int:
        if once and not self.spec.bounded:
            raise InvalidJobGroup(
                "extension.loadgen.total_records",
                self.spec.total_records,
                "--once needs a bound: set total_records or duration_seconds",
            )
        return super().run(
            once=once, stop_file=stop_file, reporting=reporting, skip_lost_records=skip_lost_records
        )

    def check_session(self, spark: SparkSession) -> None:
        check_producer(spark, self.spec)

    def ensure_tables(self, spark: SparkSession) -> None:
        """No table: the generator's record is its state under the checkpoint."""

    def before_query(self, spark: SparkSession) -> int | None:
        warm_up(spark, self.spec)
        return None

    def stream(self, spark: SparkSession) -> DataFrame:
        # One row a second: a micro-batch always has new input, and the rows are never read.
        return spark.readStream.format("rate").option("rowsPerSecond", 1).load()

    def batch_writer(self, spark: SparkSession) -> ProduceBatchWriter:
        tasks = self.spec.producer_tasks or default_producer_tasks(
            self.partitions, executor_count(spark)
        )
        self._spark = spark
        self._writer = ProduceBatchWriter(self.spec, self.partitions, min(tasks, self.partitions))
        return self._writer

    def finished(self, _progress: Mapping) -> bool:
        return self._writer is not None and self._writer.done

    def close(self) -> None:
        if self._writer is not None and self._spark is not None:
            self._writer.close(self._spark)
            if not self.spec.bounded:
                print(self._writer.totals.summary(), flush=True)

    def query_settings(self, *, once: bool, stop_file: str | None) -> QuerySettings:
        # Batches run back to back (each produces a trigger interval's worth); a bounded run
        # ends through `until`. Not AvailableNow: on the rate source that is a single batch.
        return dataclasses.replace(
            super().query_settings(once=False, stop_file=stop_file),
            trigger_interval_seconds=0,
            until=self.finished if self.spec.bounded else None,
            log_batches=False,
            poll_seconds=1,
        )


class LoadGenConsumeJob(StreamingJob[ConsumeSpec]):
    """LOAD_GEN_CONSUME in the shared template."""

    write_id_prefix = "uatu-loadgen"

    session_conf = SESSION_CONF

    def __init__(self, spec: ConsumeSpec) -> None:
        super().__init__(spec)
        self._writer: MeasureBatchWriter | None = None
        self._spark: SparkSession | None = None

    def ensure_tables(self, spark: SparkSession) -> None:
        ensure_tables(spark, tables.locations(self.spec))

    def stream(self, spark: SparkSession) -> DataFrame:
        spec = self.spec
        options = source_read_options(
            spec.source, max_offsets_per_trigger=spec.max_offsets_per_trigger()
        )
        return spark.readStream.format("kafka").options(**options).load()

    def before_query(self, spark: SparkSession) -> int | None:
        self._spark = spark
        self._writer = MeasureBatchWriter(self.spec, self.write_id())
        self._writer.recover(spark)
        tables.warm_up_writes(spark, f"{self.spec.output.checkpoint}/loadgen-warm-up")
        return None

    def batch_writer(self, spark: SparkSession) -> MeasureBatchWriter:
        assert self._writer is not None, "made by before_query"
        return self._writer

    def query_settings(self, *, once: bool, stop_file: str | None) -> QuerySettings:
        return dataclasses.replace(
            super().query_settings(once=once, stop_file=stop_file), log_batches=False
        )

    def close(self) -> None:
        if self._writer is not None and self._spark is not None:
            self._writer.close(self._spark)
