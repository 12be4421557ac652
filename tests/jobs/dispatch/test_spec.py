"""The dispatcher's validation: a bad field exits 2 before any Spark work, with one line naming
the field and the value; a good JobGroup gives the spec the job runs."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from google.protobuf import json_format
from uber.data.kafka.datatransfer.job_group_pb2 import JobGroup

from core.config import load_settings
from jobs import main as job_main
from jobs import registry
from jobs.dispatch.dispatcher import config_json, producer_config
from jobs.dispatch.offsets import starts_from_group
from jobs.dispatch.routing import Kind
from jobs.dispatch.spec import DispatchSpec, parse_uri
from testing.conf import write_conf_dir

VALID = {
    "jobGroupId": "orders-dispatch",
    "type": "JOB_TYPE_KAFKA_CONSUMER_TO_RPC_DISPATCHER",
    "kafkaConsumerTaskGroup": {"cluster": "local", "topic": "orders", "consumerGroup": "svc"},
    "rpcDispatcherTaskGroup": {
        "uri": "dns:///127.0.0.1:50051",
        "rpcTimeoutMs": 2000,
        "dlqTopic": "orders-dlq",
    },
    "retryConfig": {
        "retryEnabled": True,
        "retryQueues": [
            {"retryQueueTopic": "orders-r2", "processingDelayMs": 60000, "maxRetryCount": 3},
            {"retryQueueTopic": "orders-r1", "processingDelayMs": 5000, "maxRetryCount": 2},
        ],
    },
    "resqConfig": {"resqEnabled": True, "resqTopic": "orders-resq"},
}


@pytest.fixture
def conf_dir(tmp_path: Path) -> Path:
    # Port 9 (discard): nothing answers, so no case here can reach a broker.
    return write_conf_dir(
        tmp_path / "conf",
        "127.0.0.1:9",
        tmp_path / "wh",
        tmp_path / "ck",
        more_clusters={"other": {"bootstrap_servers": "10.0.0.1:9092"}},
    )


def changed(path: list, value) -> dict:
    group = copy.deepcopy(VALID)
    node = group
    for key in path[:-1]:
        node = node.setdefault(key, {}) if isinstance(key, str) else node[key]
    if value is None:
        node.pop(path[-1], None)
    else:
        node[path[-1]] = value
    return group


RPC = "rpcDispatcherTaskGroup"
TIER0 = ["retryConfig", "retryQueues", 0]
CASES = [
    (changed([RPC, "uri"], "127.0.0.1:50051"), "rpc_dispatcher_task_group.uri='127.0.0.1:50051'"),
    (changed([RPC, "uri"], "http://svc:80"), "rpc_dispatcher_task_group.uri='http://svc:80'"),
    (changed([RPC, "uri"], "dns:///svc"), "rpc_dispatcher_task_group.uri='dns:///svc'"),
    (changed([RPC, "uri"], "ipv4:svc:1"), "rpc_dispatcher_task_group.uri='ipv4:svc:1'"),
    (changed([RPC, "uri"], "unix:relative"), "rpc_dispatcher_task_group.uri='unix:relative'"),
    (changed([RPC, "uri"], None), "rpc_dispatcher_task_group.uri=''"),
    (changed([RPC, "rpcTimeoutMs"], 0), "rpc_dispatcher_task_group.rpc_timeout_ms=0"),
    (changed([RPC, "rpcTimeoutMs"], -5), "rpc_dispatcher_task_group.rpc_timeout_ms=-5"),
    (
        changed([RPC, "rpcTimeoutLimitMs"], 100),
        "rpc_dispatcher_task_group.rpc_timeout_limit_ms=100",
    ),
    (changed([RPC, "maxRpcTimeouts"], -1), "rpc_dispatcher_task_group.max_rpc_timeouts=-1"),
    (changed([RPC, "procedure"], "no-slash"), "rpc_dispatcher_task_group.procedure='no-slash'"),
    (changed([RPC, "retryQueueTopic"], "old"), "rpc_dispatcher_task_group.retry_queue_topic='old'"),
    (changed([RPC, "dlqCluster"], "other"), "rpc_dispatcher_task_group.dlq_cluster='other'"),
    (changed([RPC, "dlqCluster"], "nowhere"), "rpc_dispatcher_task_group.dlq_cluster='nowhere'"),
    (
        changed(["kafkaConsumerTaskGroup", "processingDelayMs"], -1),
        "kafka_consumer_task_group.processing_delay_ms=-1",
    ),
    (
        changed(["kafkaConsumerTaskGroup", "processingDelayMs"], 86_400_001),
        "kafka_consumer_task_group.processing_delay_ms=86400001",
    ),
    (
        changed(["kafkaConsumerTaskGroup", "consumerGroup"], None),
        "kafka_consumer_task_group.consumer_group=''",
    ),
    (
        changed([*TIER0, "processingDelayMs"], 86_400_001),
        "retry_config.retry_queues[0].processing_delay_ms=86400001",
    ),
    (
        changed([*TIER0, "processingDelayMs"], -1),
        "retry_config.retry_queues[0].processing_delay_ms=-1",
    ),
    (
        changed([*TIER0, "maxRetryCount"], -1),
        "retry_config.retry_queues[0].max_retry_count=-1",
    ),
    (
        changed([*TIER0, "retryQueueTopic"], "orders"),
        "retry_config.retry_queues[0].retry_queue_topic='orders'",
    ),
    (
        changed([*TIER0, "retryQueueTopic"], "orders-dlq"),
        "retry_config.retry_queues[0].retry_queue_topic='orders-dlq'",
    ),
    (
        changed([*TIER0, "retryQueueTopic"], ""),
        "retry_config.retry_queues[0].retry_queue_topic=''",
    ),
    (
        changed([*TIER0, "retryQueueTopic"], "orders-r1"),
        "retry_config.retry_queues[1].retry_queue_topic='orders-r1'",
    ),
    (
        changed([*TIER0, "retryCluster"], "other"),
        "retry_config.retry_queues[0].retry_cluster='other'",
    ),
    (changed(["resqConfig", "resqTopic"], ""), "resq_config.resq_topic=''"),
    (changed(["resqConfig", "resqTopic"], "orders-r1"), "resq_config.resq_topic='orders-r1'"),
    (
        changed(["resqConfig", "flowControl"], {"messagesPerSec": -1}),
        "resq_config.flow_control.messages_per_sec=-1.0",
    ),
    (
        changed(["kafkaConsumerTaskGroup", "topic"], "orders-dlq"),
        "kafka_consumer_task_group.topic='orders-dlq'",
    ),
    (changed(["flowControl"], {"maxInflightMessages": -1}), "flow_control.max_inflight_messages"),
    (
        changed(
            ["extension"],
            {"@type": "type.googleapis.com/uatu.v1.JobOptions", "dispatch": {"channels": 100}},
        ),
        "extension.dispatch.channels=100",
    ),
    (
        changed(
            ["extension"],
            {
                "@type": "type.googleapis.com/uatu.v1.JobOptions",
                "dispatch": {"tierTriggerSeconds": -1},
            },
        ),
        "extension.dispatch.tier_trigger_seconds=-1",
    ),
]


@pytest.mark.parametrize(("group", "expected"), CASES, ids=[c[1][:60] for c in CASES])
def test_bad_input_exits_2_naming_the_field(
    tmp_path: Path, conf_dir: Path, capsys, group: dict, expected: str
) -> None:
    path = tmp_path / "group.json"
    path.write_text(json.dumps(group))
    status = job_main.main([str(path), "--once", "--conf-dir", str(conf_dir)])
    err = capsys.readouterr().err.strip()
    assert status == 2
    assert len(err.splitlines()) == 1, err
    assert expected in err, err


def spec_of(conf_dir: Path, data: dict) -> DispatchSpec:
    job_type, spec = registry.validate(
        json_format.ParseDict(data, JobGroup()), load_settings(conf_dir)
    )
    assert job_type.name == "JOB_TYPE_KAFKA_CONSUMER_TO_RPC_DISPATCHER"
    assert isinstance(spec, DispatchSpec)
    return spec


def test_a_valid_group_gives_its_queries_and_defaults(conf_dir: Path) -> None:
    spec = spec_of(conf_dir, VALID)
    assert spec.procedure == "kafka.consumerproxy.svc/orders"
    assert spec.target == "dns:///127.0.0.1:50051"
    assert [t.topic for t in spec.routes.tiers] == ["orders-r1", "orders-r2"]  # by delay
    assert [(q.topic, q.kind, q.delay_ms, q.label) for q in spec.queries()] == [
        ("orders", Kind.MAIN, 0, "main"),
        ("orders-r1", Kind.TIER, 5000, "retry-1"),
        ("orders-r2", Kind.TIER, 60000, "retry-2"),
        ("orders-resq", Kind.RESQ, 0, "resq"),
    ]
    assert spec.checkpoint_of(spec.queries()[1]).endswith("/ck/orders-dispatch/topics/orders-r1")
    assert spec.query_name_of(spec.queries()[0]) == "dispatch-orders-dispatch"
    assert spec.rpc_timeout_limit_ms == 30 * 60 * 1000
    assert spec.hol_grace_ms == 2000  # rpc_timeout_ms, at least 1 s
    assert (spec.flow.max_inflight, spec.max_records_per_batch) == (0, 0)  # adaptive, unlimited
    assert (spec.trigger_interval_seconds, spec.tier_trigger_seconds) == (1, 5)


def test_the_tier_trigger_is_never_shorter_than_the_source_trigger(conf_dir: Path) -> None:
    options = {"@type": "type.googleapis.com/uatu.v1.JobOptions"}
    spec = spec_of(
        conf_dir, changed(["extension"], {**options, "dispatch": {"tierTriggerSeconds": 2}})
    )
    assert (spec.trigger_interval_seconds, spec.tier_trigger_seconds) == (1, 2)
    slow = {**options, "trigger": {"intervalSeconds": 10}, "dispatch": {"tierTriggerSeconds": 2}}
    spec = spec_of(conf_dir, changed(["extension"], slow))
    assert (spec.trigger_interval_seconds, spec.tier_trigger_seconds) == (10, 10)


def test_the_topics_checked_on_the_broker_are_named_by_their_jobgroup_field(
    conf_dir: Path,
) -> None:
    # VALID lists orders-r2 first; the tiers are used sorted by delay, r1 first.
    assert spec_of(conf_dir, VALID).produced_topics() == (
        ("rpc_dispatcher_task_group.dlq_topic", "orders-dlq"),
        ("retry_config.retry_queues[1].retry_queue_topic", "orders-r1"),
        ("retry_config.retry_queues[0].retry_queue_topic", "orders-r2"),
        ("resq_config.resq_topic", "orders-resq"),
    )


def test_retry_disabled_means_no_tiers(conf_dir: Path) -> None:
    spec = spec_of(conf_dir, changed(["retryConfig", "retryEnabled"], False))
    assert spec.routes.tiers == ()
    assert [q.label for q in spec.queries()] == ["main", "resq"]


def test_a_bounded_dlq_source_is_a_redrive_that_reads_only_the_dlq(conf_dir: Path) -> None:
    group = changed(["kafkaConsumerTaskGroup", "topic"], "orders-dlq")
    group["kafkaConsumerTaskGroup"]["partitionOffsetRanges"] = {
        "partitionOffsetRange": [{"partition": 0, "startOffset": "0", "endOffset": "10"}]
    }
    spec = spec_of(conf_dir, group)
    assert spec.source_kind is Kind.DLQ and spec.bounded
    assert [(q.topic, q.label) for q in spec.queries()] == [("orders-dlq", "dlq")]


def test_flow_control_sets_the_batch_cap(conf_dir: Path) -> None:
    spec = spec_of(conf_dir, changed(["flowControl"], {"messagesPerSec": 200, "bytesPerSec": 5e4}))
    assert (spec.flow.messages_per_sec, spec.flow.bytes_per_sec) == (200, 5e4)
    assert spec.max_records_per_batch == 2000  # ten seconds' worth


@pytest.mark.parametrize(
    ("uri", "target"),
    [
        ("dns:///svc.local:50051", "dns:///svc.local:50051"),
        ("dns:svc:1", "dns:///svc:1"),
        ("dns://10.0.0.2:53/svc:1", "dns://10.0.0.2:53/svc:1"),
        ("ipv4:127.0.0.1:5", "dns:///127.0.0.1:5"),
        ("ipv6:[::1]:5", "dns:///[::1]:5"),
        ("unix:/tmp/svc.sock", "unix:///tmp/svc.sock"),
        ("unix:///tmp/svc.sock", "unix:///tmp/svc.sock"),
    ],
)
def test_uri_forms(uri: str, target: str) -> None:
    assert parse_uri(uri) == target


@pytest.mark.parametrize(
    "uri",
    [
        "svc:1",
        "dns:///svc",
        "dns:///svc:0",
        "ipv4:::1:5",
        "ipv6:127.0.0.1:5",
        "ipv4:1.2.3.4:1,5.6.7.8:2",
    ],
)
def test_bad_uris(uri: str) -> None:
    with pytest.raises(ValueError):
        parse_uri(uri)


@pytest.mark.parametrize(
    ("limit", "batch"),
    [(None, 256 << 10), (1_048_588, 256 << 10), (100_000, 50_000), (1, 0)],
)
def test_tier_batches_stay_under_half_the_smallest_topic_limit(
    conf_dir: Path, limit: int | None, batch: int
) -> None:
    """KAFKA-8202: a refused batch no smaller than the topic's limit is split for ever."""
    spec = spec_of(conf_dir, VALID)
    assert producer_config(spec, limit)["batch.size"] == str(batch)
    assert json.loads(config_json(spec, max_message_bytes=limit))["producer_config"][
        "batch.size"
    ] == str(batch)


def test_a_new_checkpoint_starts_from_the_group_unless_the_jobgroup_says_where(
    conf_dir: Path,
) -> None:
    def starts(spec: DispatchSpec) -> list[bool]:
        return [starts_from_group(spec, q.kind) for q in spec.queries()]

    assert starts(spec_of(conf_dir, VALID)) == [True, True, True, True]
    ranges = {"partitionOffsetRange": [{"partition": 0, "startOffset": "3", "endOffset": "9"}]}
    for explicit in (
        changed(["kafkaConsumerTaskGroup", "partitionOffsetRanges"], ranges),
        changed(["kafkaConsumerTaskGroup", "startTimestamp"], "2026-01-01T00:00:00Z"),
    ):
        # The source starts where the JobGroup says; its tiers still resume from the group.
        assert starts(spec_of(conf_dir, explicit)) == [False, True, True, True]
    redrive = changed(["kafkaConsumerTaskGroup", "topic"], "orders-dlq")
    redrive["kafkaConsumerTaskGroup"]["partitionOffsetRanges"] = ranges
    assert starts(spec_of(conf_dir, redrive)) == [False]
