"""The replication of many topics, its pure parts: the JobGroup rules, the naming policy, the
cycle rule and the topic configs a new destination gets (jobs/replication/topics.py)."""

from __future__ import annotations

import re

import pytest

from core.errors import InvalidJobGroup
from jobs.replication.topics import (
    EXCLUDED_CONFIGS,
    TopicNaming,
    copied_from,
    copies_pattern,
    synced_configs,
)
from tests.jobs.replication.test_replication_units import settings, spec  # noqa: F401

OPTIONS = "type.googleapis.com/uatu.v1.JobOptions"


def many(settings, topics: dict, replication: dict | None = None, **overrides):  # noqa: F811
    """The spec of a copy of `topics` (extension.topics) from src to dst."""
    extension = {"@type": OPTIONS, "topics": topics, "replication": replication or {}}
    fields = {"kafkaConsumerTaskGroup.topic": "", "kafkaDispatcherTaskGroup.topic": ""}
    return spec(settings, **(fields | overrides), extension=extension)


PREFIXED = {"topicNaming": "TOPIC_NAMING_SOURCE_PREFIX"}


def test_the_prefix_naming_is_mirror_maker_2s_default_policy() -> None:
    assert TopicNaming("us-east").destination("orders") == "us-east.orders"
    assert TopicNaming().destination("orders") == "orders"


def test_a_copy_is_named_after_an_alias_and_only_then() -> None:
    aliases = ("dst", "src")
    assert copied_from("src.orders", aliases) == "src"
    assert copied_from("dst.src.orders", aliases) == "dst"
    assert [copied_from(t, aliases) for t in ("orders", "srcx.orders", "src.", "x.src.a")] == [
        None,
        None,
        None,
        None,
    ]


def test_the_copies_pattern_matches_whole_names_of_copies_only() -> None:
    pattern = copies_pattern(["src", "a.b", "src"])
    matched = [
        t
        for t in ("src.x", "a.b.x", "srcx.x", "x.src.y", "src.", "a-b.x")
        if re.fullmatch(pattern, t)
    ]
    assert matched == ["src.x", "a.b.x"]
    assert copies_pattern([]) == ""


def test_spec_of_a_pattern_with_the_prefix_naming(settings) -> None:  # noqa: F811
    s = many(
        settings, {"pattern": "orders.*|src\\..*|dst\\..*", "excludePattern": ".*-tmp"}, PREFIXED
    )
    assert s.many_topics and s.source.topic == "" and s.destination_topic == ""
    assert s.destination_of("orders") == "src.orders"  # the alias defaults to the cluster name
    assert s.create_destination_topic
    assert s.copy_aliases == ("dst", "local", "src")  # every cluster of clusters.yaml
    selection = s.source.selection
    assert selection is not None and selection.subscription()[0] == "subscribePattern"
    topics = ["orders", "orders-tmp", "src.orders", "dst.orders", "local.orders", "__x", "ordersX"]
    # The copies match the pattern, and are left out all the same: no cycle.
    assert selection.select(topics) == ["orders", "ordersX"]
    # Spark's source finds the regex in a name (Scala's findFirstIn), not only in a whole one.
    assert [t for t in topics if re.search(selection.regex, t)] == ["orders", "ordersX"]


def test_an_alias_of_ones_own(settings) -> None:  # noqa: F811
    s = many(settings, {"pattern": ".*"}, {**PREFIXED, "sourceAlias": "east"})
    assert s.destination_of("orders") == "east.orders"
    assert s.source.selection is not None
    assert s.source.selection.select(["orders", "east.orders", "src.orders"]) == ["orders"]


def test_identity_naming_between_two_clusters(settings) -> None:  # noqa: F811
    s = many(settings, {"names": ["orders", "payments"]})
    assert s.destination_of("payments") == "payments"
    assert s.source.subscription() == ("subscribe", "orders,payments")


@pytest.mark.parametrize(
    ("topics", "replication", "overrides", "field", "fragment"),
    [
        (
            {"pattern": ".*"},
            {},
            {"kafkaDispatcherTaskGroup.topic": "all"},
            "kafka_dispatcher_task_group.topic",
            "must be empty",
        ),
        (
            {"pattern": ".*"},
            {"lowLatency": True},
            {},
            "extension.replication.low_latency",
            "not with extension.topics",
        ),
        (
            {"pattern": ".*"},
            {"partitionMapping": "PARTITION_MAPPING_MODULO"},
            {},
            "extension.replication.partition_mapping",
            "not with extension.topics",
        ),
        (
            {"pattern": ".*"},
            {},
            {"kafkaDispatcherTaskGroup.cluster": "src"},
            "extension.replication.topic_naming",
            "onto itself",
        ),
        (
            {"pattern": ".*"},
            {},
            {"replicationTaskGroup.isContinuous": False},
            "replication_task_group.is_continuous",
            "continuous",
        ),
        (
            {"names": ["orders", "dst.orders"]},
            {},
            {},
            "extension.topics.names[1]",
            "is a copy from 'dst'",
        ),
        (
            {"pattern": ".*"},
            {**PREFIXED, "sourceAlias": "a.b"},
            {},
            "extension.replication.source_alias",
            "must not contain",
        ),
    ],
)
def test_bad_input_names_field_and_value(
    settings,  # noqa: F811
    topics,
    replication,
    overrides,
    field,
    fragment,
) -> None:
    with pytest.raises(InvalidJobGroup) as error:
        many(settings, topics, replication, **overrides)
    assert error.value.field == field
    assert fragment in str(error.value)
    assert "\n" not in str(error.value)


def test_the_naming_fields_need_many_topics(settings) -> None:  # noqa: F811
    extension = {"@type": OPTIONS, "replication": PREFIXED}
    with pytest.raises(InvalidJobGroup) as error:
        spec(settings, extension=extension)
    assert error.value.field == "extension.replication.topic_naming"


def test_config_sync_takes_what_the_source_sets_except_mirror_maker_2s_exclusions() -> None:
    source = {  # name -> (value, set by the topic itself)
        "retention.ms": ("3600000", True),
        "cleanup.policy": ("compact", True),
        "max.message.bytes": ("2000000", True),
        "compression.type": ("producer", False),  # the broker's: the target has its own
        "min.insync.replicas": ("2", True),  # excluded: a placement setting
        "message.timestamp.type": ("LogAppendTime", True),  # excluded
        "segment.bytes": ("1048576", True),
        "ssl.secret": (None, True),  # sensitive: no value to copy
    }
    assert synced_configs(source) == {
        "cleanup.policy": "compact",
        "max.message.bytes": "2000000",
        "retention.ms": "3600000",
        "segment.bytes": "1048576",
    }
    assert {"min.insync.replicas", "unclean.leader.election.enable"} <= EXCLUDED_CONFIGS
