"""JobGroup builders for tests, benches and examples."""

from __future__ import annotations

import copy

from google.protobuf import json_format
from uatu.v1 import job_options_pb2  # noqa: F401  (registers JobOptions for `extension`)
from uber.data.kafka.datatransfer.job_group_pb2 import JobGroup


def audit_group(
    group_id: str,
    topic: str,
    rate: float = 0,
    audit_types: tuple[str, ...] = ("AUDIT_TYPE_APPROX_UNIQ",),
    trigger_seconds: int | None = 1,
    *,
    consumer_group: str | None = None,
    from_earliest: bool = False,
) -> JobGroup:
    """A KAFKA_AUDIT JobGroup on cluster `local`, 60 s windows, a short trigger interval.

    `rate` 0 means no flow control; `trigger_seconds` None leaves the job's default trigger
    (no JobOptions extension). `consumer_group` names the group (else the job derives one);
    `from_earliest` starts a new group at the earliest offsets instead of the latest.
    """
    source: dict = {
        "cluster": "local",
        "topic": topic,
        "auditMetadata": {
            "auditConfigs": [{"auditType": t, "auditIntervalInSeconds": 60} for t in audit_types]
        },
    }
    if consumer_group is not None:
        source["consumerGroup"] = consumer_group
    if from_earliest:
        source["autoOffsetResetPolicy"] = "AUTO_OFFSET_RESET_POLICY_EARLIEST"
    data: dict = {
        "jobGroupId": group_id,
        "type": "JOB_TYPE_KAFKA_AUDIT",
        "kafkaConsumerTaskGroup": source,
    }
    if trigger_seconds is not None:
        data["extension"] = {
            "@type": "type.googleapis.com/uatu.v1.JobOptions",
            "trigger": {"intervalSeconds": trigger_seconds},
        }
    if rate:
        data["flowControl"] = {"messagesPerSec": rate}
    return json_format.ParseDict(data, JobGroup())


def replication_group(
    group_id: str,
    source: str,
    destination: str,
    *,
    trigger_seconds: int = 1,
    rate: float = 0,
) -> JobGroup:
    """A KAFKA_REPLICATION JobGroup on cluster `local` from the earliest offsets of
    `source` to `destination`; `rate` 0 means no flow control."""
    data: dict = {
        "jobGroupId": group_id,
        "type": "JOB_TYPE_KAFKA_REPLICATION",
        "kafkaConsumerTaskGroup": {
            "cluster": "local",
            "topic": source,
            "autoOffsetResetPolicy": "AUTO_OFFSET_RESET_POLICY_EARLIEST",
        },
        "kafkaDispatcherTaskGroup": {"cluster": "local", "topic": destination},
        "extension": {
            "@type": "type.googleapis.com/uatu.v1.JobOptions",
            "trigger": {"intervalSeconds": trigger_seconds},
        },
    }
    if rate:
        data["flowControl"] = {"messagesPerSec": rate}
    return json_format.ParseDict(data, JobGroup())


# The plain exact audit of topic `orders` that validation, security and control-plane tests
# start from; never mutate it (orders_audit and copy.deepcopy give copies).
ORDERS_AUDIT: dict = {
    "jobGroupId": "orders-audit",
    "type": "JOB_TYPE_KAFKA_AUDIT",
    "kafkaConsumerTaskGroup": {
        "cluster": "local",
        "topic": "orders",
        "auditMetadata": {
            "auditConfigs": [{"auditType": "AUDIT_TYPE_EXACT_UNIQ", "auditIntervalInSeconds": 60}]
        },
    },
}


def orders_audit(**changes: object) -> JobGroup:
    """ORDERS_AUDIT with its top-level fields replaced by `changes`, parsed."""
    return parse({**copy.deepcopy(ORDERS_AUDIT), **changes})


def parse(data: dict) -> JobGroup:
    """A JobGroup from its protobuf-JSON mapping as a dict (`extension` types registered)."""
    return json_format.ParseDict(data, JobGroup())


# One small valid JobGroup (protobuf-JSON dict) of every kind of job this product runs, all on
# cluster `local`: what a test that must hold for every JobType iterates over. The tables each
# kind writes are its `extension.output` fields (`<table>_path`).
MINIMAL_GROUPS: dict[str, dict] = {
    "audit": {
        "type": "JOB_TYPE_KAFKA_AUDIT",
        "kafkaConsumerTaskGroup": {
            "cluster": "local",
            "topic": "t",
            "auditMetadata": {
                "auditConfigs": [
                    {"auditType": "AUDIT_TYPE_APPROX_UNIQ", "auditIntervalInSeconds": 60}
                ]
            },
        },
    },
    "tier-audit": {
        "type": "JOB_TYPE_KAFKA_AUDIT",
        "kafkaConsumerTaskGroup": {
            "cluster": "local",
            "topic": "t",
            "auditMetadata": {
                "auditConfigs": [
                    {
                        "auditType": "AUDIT_TYPE_SERVICE_AUDIT_AGGREGATION",
                        "auditIntervalInSeconds": 60,
                    }
                ]
            },
        },
    },
    "replication": {
        "type": "JOB_TYPE_KAFKA_REPLICATION",
        "kafkaConsumerTaskGroup": {"cluster": "local", "topic": "t"},
        "kafkaDispatcherTaskGroup": {"cluster": "local", "topic": "u"},
    },
    "availability": {
        "type": "JOB_TYPE_KAFKA_AVAILABILITY",
        "kafkaConsumerTaskGroup": {"cluster": "local", "topic": "probe"},
        "availabilityTaskGroup": {"availabilityJobType": "AVAILABILITY_JOB_TYPE_NATIVE_PRODUCER"},
    },
    "loadgen-produce": {
        "type": "JOB_TYPE_LOAD_GEN_PRODUCE",
        "kafkaDispatcherTaskGroup": {"cluster": "local", "topic": "load"},
    },
    "loadgen-consume": {
        "type": "JOB_TYPE_LOAD_GEN_CONSUME",
        "kafkaConsumerTaskGroup": {"cluster": "local", "topic": "load"},
    },
    "dispatch": {
        "type": "JOB_TYPE_KAFKA_CONSUMER_TO_RPC_DISPATCHER",
        "kafkaConsumerTaskGroup": {"cluster": "local", "topic": "t", "consumerGroup": "g"},
        "rpcDispatcherTaskGroup": {"uri": "dns:///127.0.0.1:1", "rpcTimeoutMs": 100},
    },
}


def minimal_group(
    kind: str, job_group_id: str, output: dict | None = None, **sections: dict
) -> dict:
    """`MINIMAL_GROUPS[kind]` with its id, and `output` as its `extension.output` when given.
    Each keyword names a top-level section whose fields it sets (added to what is there)."""
    data = copy.deepcopy(MINIMAL_GROUPS[kind])
    data["jobGroupId"] = job_group_id
    for name, fields in sections.items():
        data.setdefault(name, {}).update(fields)
    if output is not None:
        data["extension"] = {"@type": "type.googleapis.com/uatu.v1.JobOptions", "output": output}
    return data
