"""The driver's view of Java classes through py4j (classic Spark sessions only).

Why not `spark.sparkContext._jvm.a.b.C`: py4j walks such a name one part at a time, a round
trip to the JVM for each, and the JVM resolves every part that is a package (`a`, `a.b`) by
trying it as a class: under the name itself and under each package PySpark imports into the
gateway's view, every try a search of every jar on the classpath that finds nothing: for
`org.apache.hadoop.fs.Path`, four such parts, many times the cost of the one lookup of the
whole name (docs/benchmarks.md, "Test suite"). The job's drivers look up classes in loops
(the after-commit writers look for Spark's commit files while a batch waits), so every Java
class the project names goes through `java_class`, or `jvm_package` for a package of them:
one lookup of the whole name, when the class is used.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from py4j.java_gateway import JavaClass, JavaPackage
from pyspark.sql import SparkSession


def _gateway_client(spark: SparkSession, user: str) -> Any:
    gateway = spark.sparkContext._gateway
    assert gateway is not None, f"{user} needs a classic (JVM) Spark session"
    return gateway._gateway_client


def java_class(spark: SparkSession, name: str, user: str = "this") -> Any:  # a py4j JavaClass
    """The py4j handle of the Java class of fully qualified `name` (`Outer$Inner` for a nested
    one): call it to construct, take its attributes for static members. Costs no round trip
    until used; `user` names who needs it in the error of a session without a JVM."""
    return JavaClass(name, _gateway_client(spark, user))


def jvm_package(spark: SparkSession, dotted: str, user: str) -> Any:  # a py4j JavaPackage
    """The py4j view of Java package `dotted`: its attribute `C` is `java_class` of
    `dotted.C`, one round trip. `user` names who needs it in the error."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None, f"{user} needs a classic (JVM) Spark session"
    return JavaPackage(dotted, _gateway_client(spark, user), jvm_id=jvm._id)


def java_map(spark: SparkSession, items: Mapping) -> Any:
    """A java.util.LinkedHashMap with `items` in their order (py4j does not convert dicts)."""
    result = java_class(spark, "java.util.LinkedHashMap")()
    for key, value in items.items():
        result.put(key, value)
    return result


def string_map(spark: SparkSession, java_map: Any) -> dict[str, str]:
    """A java.util.Map of strings as a dict, read in one round trip (as JSON, by Spark's
    Jackson): py4j reads a map a key at a time, two round trips a key, and ends its iteration
    on a Java exception, which PySpark converts at the cost of a few dozen more."""
    mapper = java_class(spark, "com.fasterxml.jackson.databind.ObjectMapper")()
    return dict(json.loads(str(mapper.writeValueAsString(java_map))))


def java_list(spark: SparkSession, items: Iterable) -> Any:
    """A java.util.ArrayList of `items`."""
    result = java_class(spark, "java.util.ArrayList")()
    for item in items:
        result.add(item)
    return result
