"""LOAD_GEN_PRODUCE's micro-batch: plan it (`plan.py`), collect what the JVM generators sent
in it (`dev.uatu.loadgen`), save the generators' state, print a perf-tool line.

Records are generated and sent in the JVM, never as Spark rows or in Python: each group of
partitions has a generator thread with the executor's Java producer (`Runner`), which keeps
sending on its schedule between micro-batches; a batch's task only cuts what it sent into the
batch and waits for the acks. The traffic therefore has no gap while Spark starts the next
batch. Each partition's generator id is `<job_group_id>/<run id>/<partition>`, where the run id
is drawn when a checkpoint is first used: a restarted job continues its sequence numbers, a new
checkpoint starts new generators.

Guarantee: at least once. A batch that completed before a crash is not produced again (its
state file exists). What was sent after the last completed batch (the batch a crash cut short)
is sent again after a restart, and a LOAD_GEN_CONSUME job counts it as duplicates; a graceful
stop saves where the generators stopped, so nothing is sent twice.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from py4j.protocol import Py4JJavaError
from pyspark.sql import DataFrame, SparkSession

from core.faults import fault_point
from jobs.loadgen import jvm
from jobs.loadgen.plan import (
    Bounds,
    PartitionPlan,
    ProduceState,
    after_batch,
    is_done,
    plan_batch,
    task_plans,
)
from jobs.loadgen.spec import ProduceSpec
from jobs.loadgen.transforms import ProduceTotals, produce_line
from jobs.runtime.py4j import java_list, java_map

log = logging.getLogger("uatu.loadgen")

ACK_TIMEOUT_MS = 300_000


def _now_us() -> int:
    return time.time_ns() // 1000


def state_dir(spec: ProduceSpec) -> str:
    return f"{spec.output.checkpoint}/loadgen-produce"


def produce_config(spark: SparkSession, spec: ProduceSpec, partitions: int, prefix: str) -> object:
    """The tasks' `dev.uatu.loadgen.ProduceConfig`: the caps are split evenly per partition."""
    shape = spec.shape
    java = jvm.loadgen(spark)
    java_shape = java.RecordShape(
        shape.size.kind,
        java_list(spark, shape.size.sizes),
        java_list(spark, [float(w) for w in shape.size.weights]),
        shape.key_cardinality,
        shape.duplicate_ratio,
        shape.late_ratio,
        shape.lateness_ms,
        shape.untimed_ratio,
        shape.json_event_time_field or "",
        shape.seed,
    )
    return java.ProduceConfig(
        spec.topic,
        java_map(spark, spec.producer_config()),
        prefix,
        java_shape,
        spec.max_messages_per_sec / partitions,
        spec.max_bytes_per_sec / partitions,
        ACK_TIMEOUT_MS,
    )


def check_producer(spark: SparkSession, spec: ProduceSpec) -> None:
    """Build the Java producer on the driver; a refused setting is a ConfigError now."""
    try:
        jvm.loadgen(spark).LoadGenerator.checkProducer(produce_config(spark, spec, 1, ""))
    except Py4JJavaError as e:
        raise jvm.refused_config(e, spec.cluster.name, "producer") from None


def send(
    spark: SparkSession,
    groups: Sequence[Sequence[PartitionPlan]],
    config: object,
    *,
    batch_id: int,
    previous_batch_id: int,
    window_us: int,
) -> list[dict]:
    """Run one producer task per group now; their rows (ProduceTask.ROW_SCHEMA) as dicts."""
    java = jvm.loadgen(spark)
    tasks = java_list(
        spark,
        [
            java.TaskPlan(
                batch_id,
                previous_batch_id,
                window_us,
                java_list(
                    spark,
                    [
                        java.PartitionPlan(
                            p.partition, p.next_seq, p.quota, p.due_us, p.deadline_us
                        )
                        for p in group
                    ],
                ),
            )
            for group in groups
        ],
    )
    rows = jvm.dataframe(spark, java.LoadGenerator.produce(spark._jsparkSession, tasks, config))
    return [r.asDict() for r in rows.collect()]


def warm_up(spark: SparkSession, spec: ProduceSpec) -> None:
    """Run the batch path once with nothing to send (an empty producer job, the state folder):
    the first real batch then does not pay Spark's and the JVM's first-time costs while its
    generators wait for the next batch to renew them."""
    send(
        spark,
        [],
        produce_config(spark, spec, 1, "warm-up/"),
        batch_id=-1,
        previous_batch_id=-1,
        window_us=0,
    )
    jvm.read_state(spark, state_dir(spec), 0, exact=False)


def stop_generators(spark: SparkSession, prefix: str) -> list[dict]:
    """Stop this JVM's generator threads of `prefix`; rows of what they sent since their cut."""
    rows = jvm.dataframe(spark, jvm.loadgen(spark).LoadGenerator.stop(spark._jsparkSession, prefix))
    return [r.asDict() for r in rows.collect()]


@dataclass
class ProduceBatchWriter:
    """foreachBatch function: one batch of every generator, then its state and progress line."""

    spec: ProduceSpec
    partitions: int
    tasks: int
    done: bool = False
    totals: ProduceTotals = field(default_factory=ProduceTotals)
    _state: ProduceState | None = None
    _config: object | None = None
    _last_line_us: int | None = None

    @property
    def bounds(self) -> Bounds:
        spec = self.spec
        return Bounds(
            partitions=self.partitions,
            batch_seconds=spec.trigger_interval_seconds,
            paced=spec.max_messages_per_sec > 0 or spec.max_bytes_per_sec > 0,
            total_records=spec.total_records,
            duration_seconds=spec.duration_seconds,
        )

    def state(self) -> ProduceState | None:
        return self._state

    def generator_prefix(self, state: ProduceState) -> str:
        return f"{self.spec.job_group_id}/{state.run_id}/"

    def close(self, spark: SparkSession) -> None:
        """Stop this JVM's generator threads and save where they stopped (a graceful stop)."""
        state = self._state
        if state is None:
            return
        rows = stop_generators(spark, self.generator_prefix(state))
        if rows and state.batch_id >= 0:
            self._state = after_batch(state, rows, state.batch_id, self.bounds.paced)
            jvm.write_state(spark, state_dir(self.spec), state.batch_id, self._state.to_json())
            self.totals.add(rows)
            log.info(
                "saved %d records sent after batch %d, before the stop",
                sum(r["records"] for r in rows),
                state.batch_id,
            )

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        spark = batch.sparkSession
        directory = state_dir(self.spec)
        saved = jvm.read_state(spark, directory, batch_id, exact=True)
        if saved is not None:
            # This batch was produced in full before a crash; Spark replays it only because its
            # commit was not recorded. Sending it again would duplicate it.
            self._state = ProduceState.from_json(saved)
            log.info("batch %d was produced before the restart; not sending it again", batch_id)
            self.done = is_done(self._state, self.bounds, _now_us())
            return
        if self._state is None or self._state.batch_id >= batch_id:
            before = jvm.read_state(spark, directory, batch_id, exact=False)
            self._state = ProduceState.from_json(before) if before else ProduceState.new()
        state = self._state
        now = _now_us()
        if is_done(state, self.bounds, now):
            self.done = True
            return
        plans = plan_batch(state, self.bounds, now)
        if self._config is None:
            prefix = self.generator_prefix(state)
            self._config = produce_config(spark, self.spec, self.partitions, prefix)
            log.info(
                "generators %s<partition> -> %s/%s: %d partitions in %d producer tasks, "
                "acks=%s, caps %s msg/s %s B/s",
                prefix,
                self.spec.cluster.name,
                self.spec.topic,
                self.partitions,
                self.tasks,
                "all" if self.spec.acks_all else "1",
                self.spec.max_messages_per_sec or "none",
                self.spec.max_bytes_per_sec or "none",
            )
        rows = send(
            spark,
            task_plans(plans, self.tasks),
            self._config,
            batch_id=batch_id,
            previous_batch_id=state.batch_id,
            window_us=self.bounds.window_us,
        )
        finished = _now_us()
        self._state = after_batch(state, rows, batch_id, self.bounds.paced)
        jvm.write_state(spark, directory, batch_id, self._state.to_json())
        fault_point("loadgen.state_saved")
        self.totals.add(rows)
        since = self._last_line_us or min(
            (r["first_send_us"] for r in rows if r["records"]), default=now
        )
        log.info("%s", produce_line(rows, batch_id, (finished - since) / 1e6))
        self._last_line_us = finished
        self.done = is_done(self._state, self.bounds, finished)
        if self.done:
            log.info("bounded run complete")
            # On stdout alone, as kafka-producer-perf-test prints it (its parsers read it too).
            print(self.totals.summary(), flush=True)
