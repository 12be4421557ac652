"""The driver's view of the project's Java classes through py4j (classic Spark sessions only)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from pyspark.sql import SparkSession


def jvm_package(spark: SparkSession, dotted: str, user: str):  # a py4j package view
    """The py4j view of Java package `dotted`; `user` names who needs it in the error."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None, f"{user} needs a classic (JVM) Spark session"
    package = jvm
    for part in dotted.split("."):
        package = getattr(package, part)
    return package


def java_map(spark: SparkSession, items: Mapping) -> object:
    """A java.util.LinkedHashMap with `items` in their order (py4j does not convert dicts)."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    result = jvm.java.util.LinkedHashMap()
    for key, value in items.items():
        result.put(key, value)
    return result


def java_list(spark: SparkSession, items: Iterable) -> object:
    """A java.util.ArrayList of `items`."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    result = jvm.java.util.ArrayList()
    for item in items:
        result.add(item)
    return result
