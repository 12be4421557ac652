"""The generated protos match uForwarder's wire contract (numbers typed from the reference)."""

from __future__ import annotations

import pytest
from google.protobuf.descriptor import FieldDescriptor
from uber.data.kafka.consumer import dlq_metadata_pb2
from uber.data.kafka.datatransfer import (
    job_group_pb2,
    job_pb2,
    job_status_pb2,
    master_admin_service_pb2,
    master_worker_service_pb2,
    worker_pb2,
)

# (message class, {field name: (number, protobuf type name)}) from uforwarder-api.md §1.
EXPECTED_FIELDS = [
    (
        job_group_pb2.JobGroup,
        {
            "job_group_id": (1, "string"),
            "type": (2, "enum"),
            "flow_control": (3, "message"),
            "kafka_consumer_task_group": (4, "message"),
            "rpc_dispatcher_task_group": (5, "message"),
            "security_config": (6, "message"),
            "retry_config": (7, "message"),
            "kafka_dispatcher_task_group": (8, "message"),
            "misc_config": (9, "message"),
            "audit_task_group": (10, "message"),
            "resq_config": (11, "message"),
            "availability_task_group": (12, "message"),
            "replication_task_group": (13, "message"),
            "extension": (14, "message"),
        },
    ),
    (
        job_group_pb2.KafkaConsumerTaskGroup,
        {
            "cluster": (1, "string"),
            "topic": (2, "string"),
            "consumer_group": (3, "string"),
            "auto_offset_reset_policy": (4, "enum"),
            "start_timestamp": (5, "message"),
            "end_timestamp": (6, "message"),
            "processing_delay_ms": (7, "int32"),
            "isolation_level": (8, "enum"),
            "audit_metadata": (9, "message"),
            "partition_offset_ranges": (10, "message"),
        },
    ),
    (
        job_group_pb2.KafkaDispatcherTaskGroup,
        {
            "cluster": (1, "string"),
            "topic": (2, "string"),
            "dedup_enabled": (3, "bool"),
            "is_secure": (4, "bool"),
            "is_acks_one": (5, "bool"),
            "encoded_format_info": (6, "message"),
        },
    ),
    (
        job_pb2.KafkaDispatcherTask,
        {
            "cluster": (1, "string"),
            "topic": (2, "string"),
            "dedup_enabled": (3, "bool"),
            "partition": (4, "int32"),
            "is_secure": (5, "bool"),
            "is_acks_one": (6, "bool"),
            "encoded_format_info": (7, "message"),
        },
    ),
    (
        job_pb2.KafkaConsumerTask,
        {
            "cluster": (1, "string"),
            "topic": (2, "string"),
            "partition": (3, "int32"),
            "consumer_group": (4, "string"),
            "auto_offset_reset_policy": (5, "enum"),
            "start_offset": (6, "int64"),
            "end_offset": (7, "int64"),
            "processing_delay_ms": (8, "int32"),
            "isolation_level": (9, "enum"),
            "audit_metadata": (10, "message"),
            "committed_offset": (11, "int64"),
        },
    ),
    (
        job_pb2.AuditConfig,
        {
            "audit_type": (1, "enum"),
            "audit_interval_in_seconds": (2, "int32"),
            "cross_dc_audit_config": (3, "message"),
            "replication_audit_config": (4, "message"),
            "retention_audit_config": (5, "message"),
        },
    ),
    (
        job_pb2.FlowControl,
        {
            "messages_per_sec": (1, "double"),
            "bytes_per_sec": (2, "double"),
            "max_inflight_messages": (3, "double"),
        },
    ),
    (
        job_pb2.StoredJob,
        {
            "last_updated": (1, "message"),
            "job": (2, "message"),
            "state": (3, "enum"),
            "worker_id": (4, "int64"),
            "scale": (5, "double"),
            "job_pod": (6, "string"),
        },
    ),
    (
        job_group_pb2.PartitionOffsetRange,
        {"partition": (1, "uint32"), "start_offset": (2, "uint64"), "end_offset": (3, "uint64")},
    ),
    (
        job_status_pb2.KafkaConsumerTaskStatus,
        {
            "read_offset": (1, "int64"),
            "commit_offset": (2, "int64"),
            "messages_per_sec": (3, "double"),
            "bytes_per_sec": (4, "double"),
            "messages_inflight": (5, "double"),
            "bytes_inflight": (6, "double"),
            "total_messages_inflight": (7, "int64"),
            "total_bytes_inflight": (8, "int64"),
            "cpu_usage": (9, "double"),
        },
    ),
    (
        worker_pb2.Node,
        {"id": (1, "int64"), "host": (2, "string"), "port": (3, "int32"), "zone": (4, "string")},
    ),
    (
        master_admin_service_pb2.GetClusterScaleStatusResponse,
        {
            "total_jobgroup_count": (1, "uint32"),
            "total_worker_count": (2, "uint32"),
            "total_allowed_messages_per_sec": (3, "double"),
            "total_allowed_bytes_per_sec": (4, "double"),
            "total_used_messages_per_sec": (5, "double"),
            "total_used_bytes_per_sec": (6, "double"),
        },
    ),
    (
        master_worker_service_pb2.HeartbeatRequest,
        {"participants": (1, "message"), "job_status": (2, "message")},
    ),
    (
        dlq_metadata_pb2.DLQMetadata,
        {
            "retry_count": (1, "int64"),
            "topic": (2, "string"),
            "partition": (3, "int32"),
            "offset": (4, "int64"),
            "timestamp_ns": (5, "int64"),
            "data": (6, "bytes"),
            "timeout_count": (7, "int64"),
        },
    ),
]

_TYPE_NAMES = {
    getattr(FieldDescriptor, name): name.removeprefix("TYPE_").lower()
    for name in dir(FieldDescriptor)
    if name.startswith("TYPE_")
}


@pytest.mark.parametrize(
    ("message", "expected"), EXPECTED_FIELDS, ids=[m.DESCRIPTOR.name for m, _ in EXPECTED_FIELDS]
)
def test_field_names_numbers_and_types(message, expected):
    actual = {f.name: (f.number, _TYPE_NAMES[f.type]) for f in message.DESCRIPTOR.fields}
    assert actual == expected


def test_packages_match_uforwarder():
    assert job_group_pb2.DESCRIPTOR.package == "uber.data.kafka.datatransfer"
    assert dlq_metadata_pb2.DESCRIPTOR.package == "uber.data.kafka.consumer"


def test_enum_values():
    assert dict(job_pb2.JobType.items()) == {
        "JOB_TYPE_INVALID": 0,
        "JOB_TYPE_KAFKA_CONSUMER_TO_RPC_DISPATCHER": 1,
        "JOB_TYPE_KAFKA_AUDIT": 2,
        "JOB_TYPE_KAFKA_REPLICATION": 3,
        "JOB_TYPE_LOAD_GEN_PRODUCE": 4,
        "JOB_TYPE_LOAD_GEN_CONSUME": 5,
        "JOB_TYPE_KAFKA_AVAILABILITY": 6,
    }
    assert job_pb2.AuditType.Value("AUDIT_TYPE_REPLICATION") == 8
    assert job_pb2.JobState.Value("JOB_STATE_CANCELED") == 4
    assert master_worker_service_pb2.CommandType.Value("COMMAND_TYPE_UPDATE_JOB") == 3


def test_audit_config_oneof():
    oneof = job_pb2.AuditConfig.DESCRIPTOR.oneofs_by_name["config"]
    assert [f.name for f in oneof.fields] == [
        "cross_dc_audit_config",
        "replication_audit_config",
        "retention_audit_config",
    ]


def test_services_and_streaming_rpc():
    admin = master_admin_service_pb2.DESCRIPTOR.services_by_name["MasterAdminService"]
    assert admin.full_name == "uber.data.kafka.datatransfer.MasterAdminService"
    assert [m.name for m in admin.methods] == [
        "AddJobGroup",
        "UpdateJobGroup",
        "UpdateJobGroupState",
        "DeleteJobGroup",
        "GetJobGroup",
        "GetAllJobGroups",
        "GetClusterScaleStatus",
    ]
    streaming = {m.name for m in admin.methods if m.server_streaming}
    assert streaming == {"GetAllJobGroups"}
    worker = master_worker_service_pb2.DESCRIPTOR.services_by_name["MasterWorkerService"]
    assert [m.name for m in worker.methods] == ["RegisterWorker", "Heartbeat"]


def test_wire_bytes_are_stable():
    """A JobGroup serialises to the bytes its field numbers dictate (hand-encoded)."""
    group = job_group_pb2.JobGroup(job_group_id="a", type=job_pb2.JOB_TYPE_KAFKA_AUDIT)
    # field 1, wire type 2 (len) = 0x0a, len 1, 'a'; field 2, varint = 0x10, value 2.
    assert group.SerializeToString() == b"\x0a\x01a\x10\x02"
