"""The one small local SparkSession of the test suite and the benches' table reads."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from pyspark.sql import SparkSession

from core.paths import project_jars
from jobs.runtime.session import build_session

# For the test suite and the benches' table reads on a 2-core machine: frames of a handful of
# rows, so 2 shuffle partitions and 1 Delta snapshot task; no UI; SerialGC for a small heap.
SMALL_LOCAL_CONF = {
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.ui.enabled": "false",
    "spark.databricks.delta.snapshotPartitions": "1",
    "spark.driver.extraJavaOptions": "-XX:+UseSerialGC",
}


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
