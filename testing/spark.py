"""The one small local SparkSession of the test suite and the benches' table reads."""

from __future__ import annotations

import gc
import subprocess
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQueryListener

from core.paths import C1_ONLY_JIT, cds_java_options, project_jars
from jobs.runtime.py4j import java_class, string_map
from jobs.runtime.session import build_session

# For the test suite and the benches' table reads on a 2-core machine: frames of a handful of
# rows, so 2 shuffle partitions and 1 Delta snapshot task; no UI; SerialGC for a small heap.
# Expressions are interpreted and plans not re-optimized at run time: the suite runs thousands
# of queries once each over a handful of rows, and a profile of its session JVM found code
# generation and its compiler (Janino) in over a quarter of the CPU samples, adaptive
# execution's re-planning in more. Spark supports both modes. The spark-submit.sh runs of
# testing/jobrun.py (the crash-point and exit-path tests) take these SQL settings too
# (`small_submit_args`), as do the demo's jobs (in the test session); the jobs the control plane,
# Airflow and the standalone cluster start keep Spark's defaults, as a site's jobs do.
SMALL_LOCAL_CONF = {
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.ui.enabled": "false",
    "spark.databricks.delta.snapshotPartitions": "1",
    "spark.driver.extraJavaOptions": "-XX:+UseSerialGC",
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
    "spark.sql.adaptive.enabled": "false",
}

# What a spark-submit.sh run of testing/jobrun.py takes from SMALL_LOCAL_CONF: not the UI (the
# metrics tests read it), not the driver's Java options (spark-submit.sh sets its own), not the
# default parallelism (the replication job reads it as its task slots: SPARK_MASTER decides).
_NOT_SUBMITTED = frozenset(
    {"spark.ui.enabled", "spark.driver.extraJavaOptions", "spark.default.parallelism"}
)


def small_submit_args() -> str:
    """SMALL_LOCAL_CONF less _NOT_SUBMITTED (its SQL and Delta settings) as spark-submit
    `--conf` words, for UATU_SPARK_SUBMIT_ARGS."""
    return " ".join(
        f"--conf {key}={value}"
        for key, value in SMALL_LOCAL_CONF.items()
        if key not in _NOT_SUBMITTED
    )


# C1 alone gets a 48 MiB code cache where tiered compilation gets 240 MiB. The test session's
# JVM lives as long as its worker's share of the suite and runs every in-process job, and it
# filled the small cache (the JIT stopped, then "Out of space in CodeCache for method handle
# intrinsic" failed a MERGE): the Spark JVMs get the tiered size back (reserved address space;
# only what is used is committed).
CODE_CACHE = "-XX:ReservedCodeCacheSize=240m"


def suite_java_options() -> str:
    """JVM options of every Spark JVM the suite starts (tests/conftest.py): C1 only with the
    tiered code cache, and the class-data sharing archive of `make build` when there is one
    (as spark-submit.sh uses it)."""
    return f"{C1_ONLY_JIT} {CODE_CACHE} {cds_java_options()}".strip()


def small_local_session(
    app_name: str, warehouse_dir: Path, conf: Mapping[str, str] | None = None
) -> SparkSession:
    """local[2] with the project's jars, SMALL_LOCAL_CONF and its own warehouse folder, log
    level ERROR; `conf` wins."""
    session = build_session(
        app_name,
        master="local[2]",
        jars=project_jars(),
        conf={**SMALL_LOCAL_CONF, "spark.sql.warehouse.dir": str(warehouse_dir), **(conf or {})},
    )
    session.sparkContext.setLogLevel("ERROR")
    return session


@contextmanager
def conf_restored(session: SparkSession) -> Iterator[None]:
    """Give the session back its runtime conf as it was on entry.

    A job run in the test process builds its session with `build_session`, whose getOrCreate
    hands back the shared test session and writes the job's settings into it (8 shuffle
    partitions instead of 2, the metrics settings, ...), so the next test would run with
    them. The session's own SQLConf is written directly: `spark.conf` refuses Spark core keys
    (`spark.speculation`) that getOrCreate set without asking.
    """
    runtime_conf = session.conf._jconf  # type: ignore[attr-defined]
    before = string_map(session, runtime_conf.getAllAsJava())
    try:
        yield
    finally:
        conf = session._jsparkSession.sessionState().conf()  # type: ignore[attr-defined]
        after = string_map(session, runtime_conf.getAllAsJava())
        for key in after.keys() - before.keys():
            conf.unsetConf(key)
        for key, value in before.items():
            if after.get(key) != value:
                conf.setConfString(key, value)


def stop_queries_started_since(session: SparkSession, before: set[str]) -> list[str]:
    """Stop every active streaming query whose id is not in `before`; their names (or ids)."""
    leaked = [q for q in session.streams.active if q.id not in before]
    for query in leaked:
        query.stop()
    return [query.name or query.id for query in leaked]


def _listeners_by_identity(session: SparkSession) -> dict[int, Any]:
    """The session's streaming query listeners in the JVM, keyed by identity hash."""
    identity = java_class(session, "java.lang.System").identityHashCode
    listeners = session._jsparkSession.streams().listListeners()  # type: ignore[attr-defined]
    return {identity(jl): jl for jl in listeners}


def streams_listeners(session: SparkSession) -> set[int]:
    """The session's streaming query listeners in the JVM, by identity hash."""
    return set(_listeners_by_identity(session))


def remove_listeners_added_since(session: SparkSession, before: set[int]) -> list[str]:
    """Remove every streaming listener whose identity is not in `before`; their names (the
    Python class of a Python listener, else the JVM class)."""
    added = {k: jl for k, jl in _listeners_by_identity(session).items() if k not in before}
    if not added:
        return []
    identity = java_class(session, "java.lang.System").identityHashCode
    python_names = {  # a Python listener's JVM side is the wrapper it built when added
        identity(obj._jlistenerobj): type(obj).__name__
        for obj in gc.get_objects()
        if isinstance(obj, StreamingQueryListener) and hasattr(obj, "_jlistenerobj")
    }
    streams = session._jsparkSession.streams()  # type: ignore[attr-defined]
    for jl in added.values():
        streams.removeListener(jl)
    return [python_names.get(key) or jl.getClass().getName() for key, jl in added.items()]


def stop_with_stacks_if_slow(session: SparkSession, dump: Path, after_s: float) -> bool:
    """Stop the session; if that takes longer than `after_s`, write the JVM's thread stacks
    (`jstack`) to `dump` while it still hangs. True when it did: the dump names what a slow
    stop waited for, which a duration alone never says."""
    pid = str(java_class(session, "java.lang.ProcessHandle").current().pid())

    def write_stacks() -> None:
        with dump.open("w") as out:
            subprocess.run(["jstack", pid], stdout=out, stderr=subprocess.STDOUT, check=False)

    watchdog = threading.Timer(after_s, write_stacks)
    watchdog.daemon = True
    watchdog.start()
    try:
        session.stop()
    finally:
        watchdog.cancel()
    watchdog.join()
    return dump.exists()
