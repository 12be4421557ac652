"""jobs.runtime.py4j against the test session's JVM: Java classes by their whole name, one
lookup each, and a Java map of strings read whole."""

from __future__ import annotations

import pytest

from jobs.runtime.py4j import java_class, java_list, java_map, jvm_package, string_map

pytestmark = pytest.mark.spark


def test_a_class_by_its_whole_name_constructs_and_calls_statics(spark) -> None:
    path = java_class(spark, "org.apache.hadoop.fs.Path")("/tmp/a/b")
    assert str(path.getName()) == "b"
    assert int(java_class(spark, "java.lang.Integer").parseInt("42")) == 42
    entry = java_class(spark, "java.util.AbstractMap$SimpleEntry")("k", "v")  # a nested class
    assert (str(entry.getKey()), str(entry.getValue())) == ("k", "v")


def test_a_package_gives_its_classes_and_a_missing_one_fails_when_called(spark) -> None:
    util = jvm_package(spark, "java.util", "this test")
    assert int(util.Collections.emptyList().size()) == 0
    with pytest.raises(TypeError, match="'JavaPackage' object is not callable"):
        util.NoSuchClassHere()  # py4j takes an unknown name for a package until it is called


def test_lists_and_maps_keep_their_items_and_order(spark) -> None:
    items = {"z": "1", "a": "2", "m": "3"}
    java = java_map(spark, items)
    assert list(java.keySet()) == ["z", "a", "m"]  # a LinkedHashMap: insertion order
    assert list(java_list(spark, [3, 1, 2])) == [3, 1, 2]


def test_a_string_map_reads_whole_and_equals_pys_own_reading(spark) -> None:
    items = {"a.b": "x y", "quote": 'say "hi"\nnext line', "empty": "", "uni": "é€"}
    assert string_map(spark, java_map(spark, items)) == items
    runtime_conf = spark.conf._jconf
    assert string_map(spark, runtime_conf.getAllAsJava()) == dict(spark.conf.getAll)
