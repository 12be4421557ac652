"""The load generators' door into the project's Java (build/uatu-jvm.jar), through py4j:
`dev.uatu.loadgen` (producer tasks, the consume fold) and `dev.uatu.fold` (Spark-planned
range folds, per-batch state next to the checkpoint)."""

from __future__ import annotations

from typing import Any

from py4j.protocol import Py4JJavaError
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.classic.dataframe import DataFrame as ClassicDataFrame

from core.errors import ConfigError
from jobs.runtime.py4j import jvm_package


def loadgen(spark: SparkSession) -> Any:
    return jvm_package(spark, "dev.uatu.loadgen", "the load generators")


def fold(spark: SparkSession) -> Any:
    return jvm_package(spark, "dev.uatu.fold", "the load generators")


def dataframe(spark: SparkSession, jdf: Any) -> DataFrame:
    return ClassicDataFrame(jdf, spark)


def read_state(spark: SparkSession, directory: str, batch_id: int, *, exact: bool) -> bytes | None:
    """The state saved after batch `batch_id` (exact) or after the newest batch before it."""
    state = fold(spark).BatchState
    raw = (state.read if exact else state.latestBefore)(spark._jsparkSession, directory, batch_id)
    return None if raw is None else bytes(raw)


def write_state(
    spark: SparkSession, directory: str, batch_id: int, data: bytes, keep: int = 5
) -> None:
    fold(spark).BatchState.write(spark._jsparkSession, directory, batch_id, bytearray(data), keep)


def refused_config(error: Py4JJavaError, cluster: str, client: str) -> ConfigError:
    """A ConfigError naming the cluster's properties for a setting the Java client refused."""
    cause = error.java_exception
    while cause.getCause() is not None:
        cause = cause.getCause()
    return ConfigError(
        f"clusters.yaml: clusters.{cluster}.properties",
        f"the Kafka {client} refuses it: {cause.getMessage()}",
    )


def close_clients(spark: SparkSession) -> None:
    """Close the cached producers and pooled consumers in this JVM (an in-process run)."""
    loadgen(spark).Producers.closeAll()
    fold(spark).Consumers.closeAll()
