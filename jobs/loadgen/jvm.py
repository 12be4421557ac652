"""The load generators' door into the project's Java (build/uatu-jvm.jar), through py4j:
`dev.uatu.loadgen` (producer tasks, the consume fold) and `dev.uatu.fold` (Spark-planned
range folds, per-batch state next to the checkpoint)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from py4j.protocol import Py4JJavaError
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.classic.dataframe import DataFrame as ClassicDataFrame

from core.errors import ConfigError


def package(spark: SparkSession, name: str) -> Any:
    """A py4j view of Java package `name` (e.g. "dev.uatu.loadgen")."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None, "the load generators need a classic (JVM) Spark session"
    view = jvm
    for part in name.split("."):
        view = getattr(view, part)
    return view


def loadgen(spark: SparkSession) -> Any:
    return package(spark, "dev.uatu.loadgen")


def fold(spark: SparkSession) -> Any:
    return package(spark, "dev.uatu.fold")


def java_map(spark: SparkSession, items: Mapping) -> Any:
    """A java.util.LinkedHashMap with `items` in their order (py4j does not convert dicts)."""
    result = package(spark, "java.util").LinkedHashMap()
    for key, value in items.items():
        result.put(key, value)
    return result


def java_list(spark: SparkSession, items: Iterable) -> Any:
    result = package(spark, "java.util").ArrayList()
    for item in items:
        result.add(item)
    return result


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
