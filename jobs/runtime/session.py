"""The one place a SparkSession is built, for jobs and tests alike, and the helpers that
change a session for a block: its settings (`session_conf`) and its streaming listeners
(`listening`).

Jars (Spark's Kafka connector, Delta and the project's own, build/uatu-jvm.jar) are on the
classpath already: `spark-submit.sh` passes them with --jars, and tests pass `jars=`
(`core.paths.project_jars()`, the files in `spark.jars`). Nothing is fetched at run time.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence, Set
from contextlib import contextmanager

from pyspark import SparkConf, SparkContext
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQueryListener

# Settings every session needs; a caller's `conf` wins over these.
BASE_CONF = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    # Windows are epoch-aligned; printing them in UTC keeps what users see equal to what is stored.
    "spark.sql.session.timeZone": "UTC",
    # The UI shows what runs; it does not stop it (docs/security.md). spark-submit.sh also
    # keeps the driver and the UI on loopback in local mode.
    "spark.ui.killEnabled": "false",
    # A FileContext on file: paths (streaming checkpoints, Delta's log) through the project's
    # local file system (build/uatu-jvm.jar, dev.uatu.fs.NioLocalFs): Hadoop's forks a chmod
    # and two readlink processes for each file it writes and renames, several per micro-batch
    # and query, where this sets the same bits through java.nio. (The FileSystem API keeps
    # Hadoop's: spark-submit reads its --jars through it before they are on the classpath.)
    "spark.hadoop.fs.AbstractFileSystem.file.impl": "dev.uatu.fs.NioLocalFs",
}

# Tunables with the project's defaults: a value the application was launched with
# (spark-submit's --conf, so UATU_SPARK_SUBMIT_ARGS, or spark-defaults.conf; in a process that
# already runs a session, that session's launch settings) wins over these, and a caller's
# `conf` over both.
TUNABLE_DEFAULTS = {
    # Audit batches aggregate to few rows; 200 shuffle partitions would be mostly overhead.
    "spark.sql.shuffle.partitions": "8",
    "spark.ui.showConsoleProgress": "false",
    # Delta replays its log with this many tasks (default 50); the audit tables are small and
    # touched every micro-batch, so a handful of tasks is faster.
    "spark.databricks.delta.snapshotPartitions": "2",
    # PySpark records the Python call site of every Column and function call (a walk of the
    # Python stack and five JVM round trips each) for the query context of error messages.
    # A job's driver builds every micro-batch's plans again, and a worker's for each of its
    # groups: a large share of the CPU of building a plan (docs/benchmarks.md). The error still
    # names the expression; an application launched with `true` keeps the call sites.
    "spark.python.sql.dataFrameDebugging.enabled": "false",
}


def session_settings(launched_with: Set[str], conf: Mapping[str, str]) -> dict[str, str]:
    """What `build_session` sets: BASE_CONF, the TUNABLE_DEFAULTS whose key is not in
    `launched_with` (the keys the application was launched with), then `conf`."""
    defaults = {k: v for k, v in TUNABLE_DEFAULTS.items() if k not in launched_with}
    return {**BASE_CONF, **defaults, **conf}


def _launch_settings() -> set[str]:
    """The keys of the Spark JVM's launch settings, when this process has one already
    (spark-submit started it, or a session runs); none when the builder will start it."""
    if SparkContext._gateway is None and "PYSPARK_GATEWAY_PORT" not in os.environ:
        return set()
    SparkContext._ensure_initialized()
    return {key for key, _ in SparkConf().getAll()}  # the JVM's spark.* properties


def build_session(
    app_name: str,
    *,
    master: str | None = None,
    jars: Sequence[str] = (),
    conf: Mapping[str, str] | None = None,
) -> SparkSession:
    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    settings = session_settings(_launch_settings(), conf or {})
    if jars:
        # Spark does not expand globs for local driver jars, so callers pass the files.
        settings["spark.jars"] = ",".join(jars)
    for key, value in settings.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


@contextmanager
def session_conf(spark: SparkSession, conf: Mapping[str, str]) -> Iterator[None]:
    """`conf` set on the session for the block, then each key as it was (unset if it was).
    Callers that share the session across threads serialise the block themselves."""
    before = {key: spark.conf.get(key, None) for key in conf}
    for key, value in conf.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, previous in before.items():
            if previous is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, previous)


@contextmanager
def listening(spark: SparkSession, *listeners: StreamingQueryListener) -> Iterator[None]:
    """`listeners` added to the session's streaming queries for the block, then removed.

    A listener left on a session outlives its run: every later query's events cross py4j to
    it, on the thread that drains Spark's streams listener queue, and a session's stop waits
    for that queue to drain. One job per application never notices; a worker application or
    a test session that runs many jobs in one session does."""
    for listener in listeners:
        spark.streams.addListener(listener)
    try:
        yield
    finally:
        for listener in listeners:
            spark.streams.removeListener(listener)
