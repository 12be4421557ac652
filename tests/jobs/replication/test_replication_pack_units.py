"""Which replications share one query (jobs/replication/packs.py `pack_key`), the refusals of a
pack that cannot be, and how a pack's spec routes each member's topic, without a broker or
Spark. The packs' runs on a real broker are test_replication_packs.py's."""

from __future__ import annotations

import json
from pathlib import Path
from types import MappingProxyType

import pytest
from google.protobuf import json_format

from core.config import ClusterConfig, Settings
from core.jobgroup import parse_jobgroup
from jobs import registry
from jobs.replication.packs import pack_key
from jobs.replication.spec import ReplicationSpec
from testing.jobgroups import replication_group

LOCAL = ClusterConfig("local", "b:9092", MappingProxyType({}))
OTHER = ClusterConfig("other", "c:9092", MappingProxyType({}))
SETTINGS = Settings(
    conf_dir=Path("conf"),
    warehouse="/wh",
    checkpoints="/ck",
    clusters=MappingProxyType({"local": LOCAL, "other": OTHER}),
)


def copy(group_id: str = "g1", topic: str = "t1", **changes) -> dict:
    """testing.jobgroups' uncapped continuous copy of `topic` into `<topic>.copy`, as protobuf
    JSON; `changes` set or replace its parts (`a__b`: field b of a)."""
    data = json_format.MessageToDict(replication_group(group_id, topic, f"{topic}.copy"))
    for path, value in changes.items():
        *parents, leaf = path.split("__")
        node = data
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return data


def spec_of(data: dict) -> ReplicationSpec:
    _, spec = registry.validate(parse_jobgroup(json.dumps(data)), SETTINGS)
    assert isinstance(spec, ReplicationSpec)
    return spec


def test_copies_between_two_clusters_share_a_key_whatever_their_topics_and_groups():
    key = pack_key(spec_of(copy("g1", "t1")))
    assert key is not None
    # each member's own: its destination topic, consumer group, where a new checkpoint starts
    assert (
        pack_key(
            spec_of(
                copy(
                    "g2",
                    "t2",
                    kafkaDispatcherTaskGroup__topic="elsewhere",
                    kafkaConsumerTaskGroup__consumerGroup="cg2",
                    kafkaConsumerTaskGroup__autoOffsetResetPolicy="AUTO_OFFSET_RESET_POLICY_LATEST",
                )
            )
        )
        == key
    )


@pytest.mark.parametrize(
    "changes",
    [
        {"flowControl": {"messagesPerSec": 100}},
        {"flowControl": {"bytesPerSec": 100000}},
        {"extension__replication": {"lowLatency": True}},
        {"extension__replication": {"partitionMapping": "PARTITION_MAPPING_MODULO"}},
        {"replicationTaskGroup": {"isContinuous": False}},
        {"kafkaConsumerTaskGroup__startTimestamp": "2026-12-01T00:00:00Z"},
        {
            "kafkaConsumerTaskGroup__partitionOffsetRanges": {
                "partitionOffsetRange": [{"partition": 0, "startOffset": "0", "endOffset": "5"}]
            }
        },
        {
            "kafkaConsumerTaskGroup__topic": "",
            "kafkaDispatcherTaskGroup__topic": "",
            "extension__topics": {"names": ["t1", "t2"]},
            "extension__replication": {"topicNaming": "TOPIC_NAMING_SOURCE_PREFIX"},
        },
    ],
    ids=[
        "messages-cap",
        "bytes-cap",
        "low-latency",
        "modulo",
        "bounded",
        "start-time",
        "offset-ranges",
        "topic-selection",
    ],
)
def test_a_copy_that_cannot_share_a_query_has_no_key(changes):
    assert pack_key(spec_of(copy(**changes))) is None


@pytest.mark.parametrize(
    "changes",
    [
        {"kafkaConsumerTaskGroup__cluster": "other"},
        {"kafkaDispatcherTaskGroup__cluster": "other"},
        {"kafkaConsumerTaskGroup__isolationLevel": "ISOLATION_LEVEL_READ_COMMITTED"},
        {"kafkaDispatcherTaskGroup__isAcksOne": True},
        {
            "kafkaDispatcherTaskGroup__encodedFormatInfo": {
                "encodedFormatType": "ENCODED_FORMAT_TYPE_PROTOBUF",
                "schemaVersion": 3,
            }
        },
        {"extension__replication": {"createDestinationTopic": True}},
        {"extension__trigger": {"intervalSeconds": 3}},
        {"extension__replication": {"auditIntervalSeconds": 30}},
        {"extension__output": {"replicationStatsPath": "/wh/other_stats"}},
    ],
    ids=[
        "source-cluster",
        "destination-cluster",
        "isolation",
        "acks",
        "encoded-format",
        "creates-destinations",
        "trigger",
        "audit-interval",
        "stats-table",
    ],
)
def test_copies_that_differ_in_what_one_query_does_for_all_do_not_share_a_key(changes):
    assert pack_key(spec_of(copy("g2", "t2", **changes))) != pack_key(spec_of(copy()))


def test_a_packs_routes_name_each_topics_destination_group_and_consumer_group():
    alone = spec_of(copy("g1", "t1", kafkaConsumerTaskGroup__consumerGroup="cg1"))
    assert (alone.destination_of("t1"), alone.group_of("t1")) == ("t1.copy", "g1")
    assert alone.consumer_group_of("t1") == "cg1"
    pack = ReplicationSpec(
        **{
            **alone.__dict__,
            "job_group_id": "pack-k",
            "routes": (("t1", "t1.copy", "g1", "cg1"), ("t2", "elsewhere", "g2", "")),
        }
    )
    assert [(pack.destination_of(t), pack.group_of(t)) for t in ("t1", "t2")] == [
        ("t1.copy", "g1"),
        ("elsewhere", "g2"),
    ]
    assert (pack.consumer_group_of("t1"), pack.consumer_group_of("t2")) == ("cg1", "")
    with pytest.raises(KeyError, match="'t3' is no member topic of the pack pack-k"):
        pack.destination_of("t3")
