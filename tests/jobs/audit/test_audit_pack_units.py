"""Which audits share one query (jobs/audit/packs.py `pack_key`), and the refusals of a pack
that cannot be, without a broker or Spark. The pack's runs on a real broker are
test_audit_packs.py's."""

from __future__ import annotations

import json
from pathlib import Path
from types import MappingProxyType

import pytest
from google.protobuf import json_format

from core.config import ClusterConfig, Settings
from core.jobgroup import parse_jobgroup
from jobs import registry
from jobs.audit.packs import pack_key
from testing.jobgroups import audit_group

LOCAL = ClusterConfig("local", "b:9092", MappingProxyType({}))
OTHER = ClusterConfig("other", "c:9092", MappingProxyType({}))
SETTINGS = Settings(
    conf_dir=Path("conf"),
    warehouse="/wh",
    checkpoints="/ck",
    clusters=MappingProxyType({"local": LOCAL, "other": OTHER}),
)


def audit(group_id: str = "g1", topic: str = "t1", **changes) -> dict:
    """testing.jobgroups' approximate, uncapped audit of one topic, as protobuf JSON;
    `changes` set or replace its parts (`a__b`: field b of a)."""
    data = json_format.MessageToDict(audit_group(group_id, topic, trigger_seconds=None))
    data["extension"] = {"@type": "type.googleapis.com/uatu.v1.JobOptions"}
    for path, value in changes.items():
        *parents, leaf = path.split("__")
        node = data
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return data


def spec_of(data: dict):
    _, spec = registry.validate(parse_jobgroup(json.dumps(data)), SETTINGS)
    return spec


def test_audits_of_one_cluster_and_configuration_share_a_key_whatever_their_topic_and_group():
    key = pack_key(spec_of(audit("g1", "t1")))
    assert key is not None
    assert pack_key(spec_of(audit("g2", "t2"))) == key
    # the group's own checkpoint and where a new one starts are the member's, not the pack's
    assert (
        pack_key(
            spec_of(
                audit(
                    "g3",
                    "t3",
                    kafkaConsumerTaskGroup__autoOffsetResetPolicy="AUTO_OFFSET_RESET_POLICY_LATEST",
                )
            )
        )
        == key
    )


EXACT = [{"auditType": "AUDIT_TYPE_EXACT_UNIQ", "auditIntervalInSeconds": 60}]


@pytest.mark.parametrize(
    "changes",
    [
        {"kafkaConsumerTaskGroup__auditMetadata__auditConfigs": EXACT},
        {"flowControl": {"messagesPerSec": 100}},
        {"flowControl": {"bytesPerSec": 100000}},
        {"auditTaskGroup": {"topic": "relabelled"}},
        {"kafkaConsumerTaskGroup__topic": "", "extension__topics": {"names": ["t1", "t2"]}},
    ],
    ids=["exact", "messages-cap", "bytes-cap", "relabelled-topic", "topic-selection"],
)
def test_an_audit_that_cannot_share_a_query_has_no_key(changes):
    assert pack_key(spec_of(audit(**changes))) is None


@pytest.mark.parametrize(
    "changes",
    [
        {"kafkaConsumerTaskGroup__cluster": "other"},
        {"kafkaConsumerTaskGroup__consumerGroup": "cg"},
        {"kafkaConsumerTaskGroup__isolationLevel": "ISOLATION_LEVEL_READ_COMMITTED"},
        {
            "kafkaConsumerTaskGroup__auditMetadata__auditConfigs": [
                {"auditType": "AUDIT_TYPE_APPROX_UNIQ", "auditIntervalInSeconds": 300}
            ]
        },
        {"extension__audit": {"eventTime": {"source": "FIELD_SOURCE_JSON_FIELD", "field": "ts"}}},
        {"extension__audit": {"dedupeKey": {"source": "FIELD_SOURCE_HEADER", "field": "id"}}},
        {"extension__audit": {"allowedLatenessSeconds": 7}},
        {"extension__audit": {"maxFutureSkewSeconds": 7}},
        {"extension__audit": {"hllLgConfigK": 10}},
        {"extension__trigger": {"intervalSeconds": 3}},
        {"extension__output": {"auditCountsPath": "/wh/other_counts"}},
    ],
    ids=[
        "cluster",
        "consumer-group",
        "isolation",
        "window",
        "event-time",
        "dedupe-key",
        "lateness",
        "future-skew",
        "hll-precision",
        "trigger",
        "counts-table",
    ],
)
def test_audits_that_differ_in_what_one_query_does_for_all_do_not_share_a_key(changes):
    assert pack_key(spec_of(audit("g2", "t2", **changes))) != pack_key(spec_of(audit()))
