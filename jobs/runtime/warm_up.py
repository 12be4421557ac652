"""A worker application's JVM warmed before it takes groups.

A JVM's first Delta commit loads and compiles the classes of Delta's commit path (the
snapshot, the checksum, the Parquet writer), its first MERGE those of the MERGE: seconds of
CPU that would otherwise land on the first batch of the first groups the worker runs, while
they all start at once. `warm_up_delta` makes each of the writes the jobs' batches make, on a
throwaway table of its own: the table's creation (`delta.ensure`), an idempotent append
(`delta.append_once`) and its replay, a MERGE into one writer's rows (`delta.merge_once`),
and a read. The worker (jobs/worker/main.py) runs it before it registers, so the control
plane places groups on it once it is warm.

`warm_up_job_types` then runs each job type's own `StreamingJob.warm_up` (the dispatcher's
builds and closes a throwaway gRPC channel and Kafka producer): several dispatch groups that
start together on a fresh worker would otherwise each wait for the clients' cold classes.

A warm-up that fails is logged and otherwise ignored: it only saves time, and the worker's
groups would meet any real problem with Delta or a client in their own start, named there.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql.types import LongType, StringType, StructField, StructType

from core.errors import error_line
from jobs.runtime import delta
from jobs.runtime.checkpoint_files import HadoopFiles
from jobs.runtime.template import StreamingJob

log = logging.getLogger("uatu.warm_up")

# A table shaped like the jobs' own: a writer column that partitions it, keys to MERGE on.
WARM_UP_TABLE = delta.DeltaTableSpec(
    name="warm_up",
    description="a worker's warm-up writes (removed at once)",
    schema=StructType(
        [
            StructField("writer", StringType(), False),
            StructField("key", LongType(), False),
            StructField("value", LongType(), True),
        ]
    ),
    partition_by=("writer",),
    keys=("key",),
    writer_column="writer",
)
_APP_ID = "warm-up"
_WRITER = "warm-up"


@dataclass(frozen=True)
class WarmUp:
    """What a warm-up did: its steps' seconds in order, and the row count it read back
    (the rows it wrote: proof that the writes took effect), or the one line of its failure."""

    seconds: dict[str, float]
    rows_read: int | None
    failure: str | None = None


def warm_up_delta(spark: SparkSession, root: str) -> WarmUp:
    """Create, append (twice, the second a replay: a no-op), MERGE and read a throwaway
    Delta table in a new folder `<root>/_warm-up-<random>`, then remove the folder. `root`
    is a location every executor sees, as the jobs' own tables are (a worker passes the
    site's checkpoint root): on a cluster, a driver's local folder would scatter the data
    files over the executors' disks. Never raises: a failure is logged and returned."""
    folder = f"{root.rstrip('/')}/_warm-up-{uuid.uuid4().hex[:12]}"
    path = f"{folder}/{WARM_UP_TABLE.name}"
    seconds: dict[str, float] = {}
    try:
        started = time.monotonic()

        def step(name: str) -> None:
            nonlocal started
            now = time.monotonic()
            seconds[name] = now - started
            started = now

        delta.ensure(spark, WARM_UP_TABLE, path)
        step("create")
        rows = spark.range(3).selectExpr("id AS key", "id AS value")
        delta.append_once(rows, WARM_UP_TABLE, path, _APP_ID, 0, writer=_WRITER)
        step("append")
        delta.append_once(rows, WARM_UP_TABLE, path, _APP_ID, 0, writer=_WRITER)  # a replay
        step("replayed append")
        changed = spark.range(2, 5).selectExpr("id AS key", "id * 10 AS value")
        delta.merge_once(
            changed,
            WARM_UP_TABLE,
            path,
            _APP_ID,
            1,
            update={"value": "s.value"},
            insert={"key": "s.key", "value": "s.value"},
            writer=_WRITER,
        )
        step("merge")
        rows_read = spark.read.format("delta").load(path).count()
        step("read")
    except Exception as e:  # only an optimisation: the worker starts anyway
        failure = error_line(e)
        log.warning("warm-up failed (the first batches start cold): %s", failure)
        return WarmUp(seconds, None, failure)
    finally:
        _remove(spark, folder)
    log.info(
        "warmed up in %.1f s (%s)",
        sum(seconds.values()),
        ", ".join(f"{name} {s:.1f} s" for name, s in seconds.items()),
    )
    return WarmUp(seconds, rows_read)


def _remove(spark: SparkSession, folder: str) -> None:
    try:
        HadoopFiles(spark).delete(folder, recursive=True)
    except Exception as e:  # a leftover folder of a few KB; the worker starts anyway
        log.warning("could not remove the warm-up folder %s: %s", folder, e)


def warm_up_job_types(
    spark: SparkSession, runtimes: Iterable[type[StreamingJob[Any]]]
) -> dict[str, float | str]:
    """Run `warm_up` of each runtime that overrides `StreamingJob.warm_up`, in order -> the
    seconds each took, or the one line of its failure, by runtime name. Never raises."""
    done: dict[str, float | str] = {}
    for runtime in runtimes:
        if runtime.warm_up.__func__ is StreamingJob.warm_up.__func__:  # type: ignore[attr-defined]
            continue  # nothing to warm
        started = time.monotonic()
        try:
            runtime.warm_up(spark)
        except Exception as e:  # only an optimisation: the worker starts anyway
            failure = done[runtime.__name__] = error_line(e)
            log.warning("%s's warm-up failed (it starts cold): %s", runtime.__name__, failure)
            continue
        done[runtime.__name__] = time.monotonic() - started
    if done:
        log.info(
            "warmed the job types' clients: %s",
            ", ".join(
                f"{name} {v:.1f} s" if isinstance(v, float) else f"{name} failed"
                for name, v in done.items()
            ),
        )
    return done
