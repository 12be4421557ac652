"""`extension.topics`: one checked TopicSelection, read the same way by Python and by Spark's
Kafka source (Java regular expressions, `subscribePattern` matching whole names)."""

from __future__ import annotations

from pathlib import Path

import pytest
from uatu.v1.job_options_pb2 import JobOptions

from core.config import ClusterConfig, Settings
from core.errors import InvalidJobGroup
from core.spec import TopicSelection, source_spec, topic_selection
from testing.jobgroups import orders_audit

CLUSTER_TOPICS = [
    "orders.eu",
    "orders.us",
    "orders.us.dlq",
    "orders",
    "xorders.eu",
    "__consumer_offsets",
    "__orders.internal",
    "payments",
]


def _options(*, names=(), pattern="", exclude=""):
    options = JobOptions()
    options.topics.names.extend(names)
    options.topics.pattern = pattern
    options.topics.exclude_pattern = exclude
    return options


def test_a_pattern_selects_whole_names_minus_exclusions_and_internal_topics():
    selection = topic_selection(_options(pattern=r"_*orders\..*", exclude=r".*\.dlq"))
    assert selection is not None
    # "__orders.internal" matches the pattern but is one of Kafka's own (INTERNAL_TOPICS);
    # "xorders.eu" contains a match but is not one; "orders" lacks the dot.
    assert selection.select(CLUSTER_TOPICS) == ["orders.eu", "orders.us"]
    assert selection.subscription() == ("subscribePattern", selection.regex)


def test_names_select_exactly_those_and_subscribe_by_name():
    selection = topic_selection(_options(names=["payments", "orders.us"]))
    assert selection == TopicSelection(names=("payments", "orders.us"))
    assert selection.select([*CLUSTER_TOPICS, "orders.usa"]) == ["orders.us", "payments"]
    assert selection.subscription() == ("subscribe", "payments,orders.us")


def test_nothing_selected_is_none():
    assert topic_selection(JobOptions()) is None


@pytest.mark.parametrize(
    ("kwargs", "field", "value"),
    [
        ({"names": ["a"], "pattern": "a.*"}, "extension.topics.pattern", "a.*"),
        ({"exclude": "x"}, "extension.topics.exclude_pattern", "x"),
        ({"names": ["a"], "exclude": "x"}, "extension.topics.exclude_pattern", "x"),
        ({"pattern": "orders.("}, "extension.topics.pattern", "orders.("),
        ({"pattern": "a.*", "exclude": "[z"}, "extension.topics.exclude_pattern", "[z"),
        ({"names": ["a", "b/c"]}, "extension.topics.names[1]", "b/c"),
        ({"names": ["a", "b", "a"]}, "extension.topics.names[2]", "a"),
        ({"names": ["a", " "]}, "extension.topics.names[1]", ""),
    ],
)
def test_a_bad_selection_names_its_field_and_value(kwargs, field, value):
    with pytest.raises(InvalidJobGroup) as raised:
        topic_selection(_options(**kwargs))
    assert raised.value.field == field
    assert raised.value.value == value


def test_source_spec_takes_the_topic_or_the_selection_never_both():
    settings = Settings(Path("/"), "/w", "/c", {"local": ClusterConfig("local", "127.0.0.1:9")})
    both = orders_audit()
    both.extension.Pack(_options(pattern="orders.*"))
    with pytest.raises(InvalidJobGroup) as raised:
        source_spec(both, settings, bounded_reads=False, many_topics=True)
    assert raised.value.field == "kafka_consumer_task_group.topic"

    many = orders_audit()
    many.kafka_consumer_task_group.topic = ""
    many.extension.Pack(_options(pattern="orders.*"))
    source = source_spec(many, settings, bounded_reads=False, many_topics=True)
    assert source.selection == TopicSelection(pattern="orders.*")
    assert source.subscription() == ("subscribePattern", source.selection.regex)

    neither = orders_audit()
    neither.kafka_consumer_task_group.topic = ""
    with pytest.raises(InvalidJobGroup, match=r"extension\.topics"):
        source_spec(neither, settings, bounded_reads=False, many_topics=True)


@pytest.mark.spark
def test_spark_reads_the_regex_as_python_does(spark):
    """Spark's Kafka source picks topics with java.util.regex through Scala's
    Regex.findFirstIn (a match anywhere in the name; the consumer-based reader uses
    Pattern.matches): `rlike` is the same find, so the two sides must agree name by name."""
    selection = topic_selection(_options(pattern=r"_*orders\..*", exclude=r".*\.(dlq|retry)"))
    assert selection is not None
    rows = spark.createDataFrame([(t,) for t in CLUSTER_TOPICS], "topic string")
    java = rows.where(rows.topic.rlike(selection.regex)).collect()
    assert sorted(r.topic for r in java) == selection.select(CLUSTER_TOPICS)
