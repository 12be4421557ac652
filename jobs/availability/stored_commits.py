"""`consumer_offset_commits` as the lag windows' memory across restarts.

The job stores every commit it records (`tables.CONSUMER_OFFSET_COMMITS`), and a starting job
replays the newest of every partition into its `LagTracker` (`load_windows`), so a restart has
no blind period. A micro-batch that a crash or a failure cut short is run again by the restart
(`replay_batch`) and reads the same commits again; those its first attempt stored are in the
windows already, and `job.record_commits(..., replayed=True)` does not record them twice.
"""

from __future__ import annotations

from pyspark.sql import SparkSession, Window
from pyspark.sql import functions as F

from jobs.availability.lag.tracker import LagTracker
from jobs.availability.spec import AvailabilitySpec
from jobs.runtime.checkpoint_files import read_offset_log
from jobs.runtime.delta import never_written


def load_windows(spark: SparkSession, spec: AvailabilitySpec, tracker: LagTracker) -> int:
    """Replay the newest stored commits of every partition into `tracker`; returns how many."""
    if never_written(spark, spec.output.table("consumer_offset_commits")):
        return 0  # a new table: nothing to replay, and no Delta read in a cold JVM to learn it
    keep = spec.lag.intervals
    newest_first = Window.partitionBy("group", "topic", "partition").orderBy(F.desc("commit_time"))
    rows = (
        spark.read.format("delta")
        .load(spec.output.table("consumer_offset_commits"))
        .where(F.col("cluster") == spec.cluster.name)
        .withColumn("rank", F.row_number().over(newest_first))
        .where(F.col("rank") <= keep)
        .orderBy("commit_time")
        .collect()
    )
    for r in rows:
        commit_ms = int(r["commit_time"].timestamp() * 1000)
        tracker.record(r["group"], r["topic"], r["partition"], r["offset"], commit_ms, r["lag"])
    return len(rows)


def replay_batch(spark: SparkSession, spec: AvailabilitySpec) -> int | None:
    """The batch this start runs again (planned, not committed, by the run before), if any:
    its first attempt may have written some of the tables and the windows already."""
    return read_offset_log(spark, spec.output.checkpoint).replay_batch
