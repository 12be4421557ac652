"""Bad input is refused before any Spark work: exit 2, one line naming the field and value."""

from __future__ import annotations

import copy
import json
import logging
from pathlib import Path

import pytest

from core.config import load_settings
from core.errors import ConfigError, InvalidJobGroup
from jobs import main as job_main
from testing.conf import write_conf_dir
from testing.jobgroups import ORDERS_AUDIT, minimal_group


@pytest.fixture
def conf_dir(tmp_path: Path) -> Path:
    # Port 9 (discard) on loopback: nothing answers, so no test here can reach a broker.
    return write_conf_dir(tmp_path / "conf", "127.0.0.1:9", tmp_path / "wh", tmp_path / "ck")


def run_main(tmp_path: Path, conf_dir: Path, group: dict | str, capsys) -> tuple[int, str]:
    path = tmp_path / "group.json"
    path.write_text(group if isinstance(group, str) else json.dumps(group))
    status = job_main.main([str(path), "--once", "--conf-dir", str(conf_dir)])
    return status, capsys.readouterr().err.strip()


def with_change(path: list, value) -> dict:
    group = copy.deepcopy(ORDERS_AUDIT)
    node = group
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return group


CASES = [
    (
        with_change(["kafkaConsumerTaskGroup", "cluster"], "nowhere"),
        "kafka_consumer_task_group.cluster='nowhere'",
    ),
    (with_change(["kafkaConsumerTaskGroup", "topic"], ""), "kafka_consumer_task_group.topic=''"),
    (with_change(["type"], "JOB_TYPE_INVALID"), "type='JOB_TYPE_INVALID'"),
    (with_change(["flowControl"], {"messagesPerSec": -5}), "flow_control.messages_per_sec=-5.0"),
    (with_change(["flowControl"], {"bytesPerSec": -1}), "flow_control.bytes_per_sec=-1.0"),
    (with_change(["jobGroupId"], "../etc"), "job_group_id='../etc'"),
    (
        with_change(
            ["kafkaConsumerTaskGroup", "auditMetadata", "auditConfigs"],
            [{"auditType": "AUDIT_TYPE_INVALID", "auditIntervalInSeconds": 60}],
        ),
        "audit_configs[0].audit_type='AUDIT_TYPE_INVALID'",
    ),
    (
        with_change(
            ["kafkaConsumerTaskGroup", "auditMetadata", "auditConfigs"],
            [{"auditType": "AUDIT_TYPE_EXACT_UNIQ", "auditIntervalInSeconds": 0}],
        ),
        "audit_configs[0].audit_interval_in_seconds=0",
    ),
    (
        with_change(
            ["kafkaConsumerTaskGroup", "auditMetadata", "auditConfigs"],
            [{"auditType": "AUDIT_TYPE_EXACT_UNIQ", "auditIntervalInSeconds": -60}],
        ),
        "audit_configs[0].audit_interval_in_seconds=-60",
    ),
    (
        with_change(
            ["kafkaConsumerTaskGroup", "auditMetadata", "auditConfigs"],
            [{"auditType": "AUDIT_TYPE_XDC", "auditIntervalInSeconds": 60}],
        ),
        # A cross-tier audit needs its own config (XDC: the other DC's cluster and topic).
        "audit_configs[0].cross_dc_audit_config='unset'",
    ),
    (with_change(["kafkaConsumerTaskGroup", "auditMetadata"], {}), "audit_configs=[]"),
    (
        with_change(["auditTaskGroup"], {"cluster": "elsewhere"}),
        "audit_task_group.cluster='elsewhere'",
    ),
    (
        with_change(
            ["extension"],
            {
                "@type": "type.googleapis.com/uber.data.kafka.datatransfer.FlowControl",
                "messagesPerSec": 1,
            },
        ),
        "extension.@type='type.googleapis.com/uber.data.kafka.datatransfer.FlowControl'",
    ),
    (
        with_change(
            ["extension"],
            {
                "@type": "type.googleapis.com/uatu.v1.JobOptions",
                "audit": {"eventTime": {"source": "FIELD_SOURCE_HEADER"}},
            },
        ),
        "extension.audit.event_time.field=''",
    ),
    (
        with_change(
            ["extension"],
            {"@type": "type.googleapis.com/uatu.v1.JobOptions", "audit": {"hllLgConfigK": 30}},
        ),
        "extension.audit.hll_lg_config_k=30",
    ),
    (with_change(["kafkaConsumerTaskGroup", "colour"], "blue"), "colour"),
    ('{"jobGroupId": "x", ', "not a valid JobGroup JSON"),
]


@pytest.mark.parametrize(("group", "expected"), CASES)
def test_bad_jobgroup_exits_2_naming_field_and_value(tmp_path, conf_dir, capsys, group, expected):
    status, err = run_main(tmp_path, conf_dir, group, capsys)
    assert status == 2
    assert expected in err
    assert len(err.splitlines()) == 1
    # Nothing is written: not even the warehouse or checkpoint roots exist.
    assert not (tmp_path / "wh").exists()
    assert not (tmp_path / "ck").exists()


def test_unreachable_cluster_is_a_clear_error(tmp_path, conf_dir, capsys, monkeypatch):
    """Exit 1 (failed, may be retried), not 2 (bad input): the cluster may only be down."""
    # The message and the exit status are what is tested, not how long a run waits.
    monkeypatch.setattr(job_main, "SOURCE_CLUSTER_WAIT_S", 1.0)
    status, err = run_main(tmp_path, conf_dir, ORDERS_AUDIT, capsys)
    assert status == 1
    assert "cluster 'local' at 127.0.0.1:9 did not answer" in err
    assert len(err.splitlines()) == 1
    # Nothing half-written: not even the warehouse or checkpoint roots exist.
    assert not (tmp_path / "wh").exists()
    assert not (tmp_path / "ck").exists()


def test_missing_jobgroup_file(tmp_path, conf_dir, capsys):
    status = job_main.main([str(tmp_path / "absent.json"), "--conf-dir", str(conf_dir)])
    assert status == 2
    assert "absent.json" in capsys.readouterr().err


def test_environment_overrides_storage_roots(conf_dir):
    settings = load_settings(conf_dir, env={"UATU_WAREHOUSE": "/data/wh"})
    assert settings.warehouse == "/data/wh"
    assert settings.checkpoints.endswith("/ck")
    assert settings.clusters["local"].spark_kafka_options() == {
        "kafka.bootstrap.servers": "127.0.0.1:9"
    }


def test_malformed_clusters_file_names_the_file(tmp_path, conf_dir):
    (conf_dir / "clusters.yaml").write_text("clusters:\n  local: {}\n")
    with pytest.raises(ConfigError, match=r"clusters.yaml.*clusters.local.bootstrap_servers=None"):
        load_settings(conf_dir)


def test_java_only_client_property_is_a_config_error_naming_the_cluster(tmp_path, conf_dir, capsys):
    (conf_dir / "clusters.yaml").write_text(
        "clusters:\n  local:\n    bootstrap_servers: 127.0.0.1:9\n"
        "    properties: {sasl.jaas.config: 'x required;'}\n"
    )
    status, err = run_main(tmp_path, conf_dir, ORDERS_AUDIT, capsys)
    assert status == 2
    assert "clusters.local.properties.sasl.jaas.config: x has no librdkafka form" in err
    assert "admin_properties" in err and len(err.strip().splitlines()) == 1


# --- The bad-input contract under attack (issue 20): every case exits 2 with one line. -------


def options(**output) -> dict:
    group = copy.deepcopy(ORDERS_AUDIT)
    group["extension"] = {"@type": "type.googleapis.com/uatu.v1.JobOptions", "output": output}
    return group


HOSTILE = [
    pytest.param(
        b'{"jobGroupId": "caf\xe9", "type": "JOB_TYPE_KAFKA_AUDIT"}', "not UTF-8", id="latin-1"
    ),
    pytest.param(with_change(["type"], 99), "type=99: not a value of JobType", id="enum-number"),
    pytest.param(
        with_change(
            ["kafkaConsumerTaskGroup", "auditMetadata", "auditConfigs"],
            [{"auditType": 42, "auditIntervalInSeconds": 60}],
        ),
        "audit_configs[0].audit_type=42",
        id="nested-enum-number",
    ),
    pytest.param(
        with_change(["flowControl"], {"messagesPerSec": "Infinity"}),
        "flow_control.messages_per_sec=inf",
        id="infinite-rate",
    ),
    pytest.param(
        with_change(["flowControl"], {"bytesPerSec": 1e308}),
        "flow_control.bytes_per_sec=1e+308",
        id="overflowing-rate",
    ),
    pytest.param(
        with_change(["jobGroupId"], "x" * (2 << 20)), "larger than 1048576 bytes", id="2-MB-value"
    ),
    pytest.param(
        with_change(["kafkaConsumerTaskGroup", "consumerGroup"], "g" * 5000),
        "consumer_group='ggg",
        id="long-field",
    ),
    pytest.param(
        with_change(
            ["kafkaConsumerTaskGroup", "auditMetadata", "auditConfigs"],
            [
                {"auditType": "AUDIT_TYPE_EXACT_UNIQ", "auditIntervalInSeconds": i + 1}
                for i in range(5000)
            ],
        ),
        "audit_configs='5000 items': at most 64",
        id="long-config-list",
    ),
    pytest.param(
        with_change(["jobGroupId"], "orders-audit\n"), "job_group_id='orders-audit\\n'", id="nl"
    ),
    pytest.param(
        '{"jobGroupId": "a", "job_group_id": "b", "type": "JOB_TYPE_KAFKA_AUDIT"}',
        "key given twice: 'jobGroupId' and 'job_group_id'",
        id="both-id-spellings",
    ),
    pytest.param(
        with_change(["kafkaConsumerTaskGroup", "topic"], "orders;rm -rf"),
        "not a Kafka topic name",
        id="topic-characters",
    ),
    pytest.param(
        with_change(["kafkaConsumerTaskGroup", "topic"], "t" * 250),
        "not a Kafka topic name",
        id="topic-length",
    ),
    pytest.param("[" * 100_000 + "]" * 100_000, "nested too deep", id="deep-json"),
    # protobuf's JSON parser takes true as 1 and any float as its integer part.
    pytest.param(with_change(["type"], True), "type=True: not a value of JobType", id="enum-true"),
    pytest.param(with_change(["type"], 2.0), "type=2.0: not a value of JobType", id="enum-float"),
    pytest.param(with_change(["type"], "2"), "type='2': not a value of JobType", id="enum-text"),
    pytest.param(
        with_change(
            ["kafkaConsumerTaskGroup", "auditMetadata", "auditConfigs"],
            [{"auditType": 1.0, "auditIntervalInSeconds": 60}],
        ),
        "audit_configs[0].audit_type=1.0: not a value of AuditType",
        id="nested-enum-float",
    ),
    pytest.param(
        with_change(
            ["extension"],
            {
                "@type": "type.googleapis.com/uatu.v1.JobOptions",
                "audit": {"eventTime": {"source": False}},
            },
        ),
        "extension.audit.event_time.source=False",
        id="enum-in-extension",
    ),
    # The JVM reads max_inflight_messages as an int: 4294967328 would become 32.
    pytest.param(
        with_change(["flowControl"], {"maxInflightMessages": 4294967328}),
        "flow_control.max_inflight_messages=4294967328.0: must be 0 to 2.14748e+09",
        id="inflight-over-int",
    ),
    pytest.param(
        minimal_group(
            "dispatch",
            "d",
            None,
            retryConfig={
                "retryEnabled": True,
                "retryQueues": [{"retryQueueTopic": "retry one", "processingDelayMs": 10}],
            },
        ),
        "retry_config.retry_queues[0].retry_queue_topic='retry one': not a Kafka topic name",
        id="retry-topic-name",
    ),
    pytest.param(
        minimal_group("dispatch", "d", None, rpcDispatcherTaskGroup={"dlqTopic": ".."}),
        "rpc_dispatcher_task_group.dlq_topic='..': not a Kafka topic name",
        id="dlq-topic-dotdot",
    ),
    pytest.param(
        minimal_group(
            "dispatch", "d", None, resqConfig={"resqEnabled": True, "resqTopic": "re/sq"}
        ),
        "resq_config.resq_topic='re/sq': not a Kafka topic name",
        id="resq-topic-name",
    ),
    pytest.param(
        minimal_group(
            "dispatch",
            "d",
            None,
            resqConfig={
                "resqEnabled": True,
                "resqTopic": "resq",
                "flowControl": {"maxInflightMessages": 1e12},
            },
        ),
        "resq_config.flow_control.max_inflight_messages=1000000000000.0",
        id="resq-inflight",
    ),
    pytest.param(
        minimal_group("replication", "r", None, kafkaDispatcherTaskGroup={"topic": "."}),
        "kafka_dispatcher_task_group.topic='.': not a Kafka topic name",
        id="destination-topic-dot",
    ),
    pytest.param(
        minimal_group("loadgen-produce", "p", None, kafkaDispatcherTaskGroup={"topic": ".."}),
        "kafka_dispatcher_task_group.topic='..': not a Kafka topic name",
        id="produce-topic-dotdot",
    ),
]


@pytest.mark.parametrize(("group", "expected"), HOSTILE)
def test_hostile_jobgroup_exits_2_with_one_short_line(tmp_path, conf_dir, capsys, group, expected):
    path = tmp_path / "group.json"
    if isinstance(group, bytes):
        path.write_bytes(group)
    else:
        path.write_text(group if isinstance(group, str) else json.dumps(group))
    status = job_main.main([str(path), "--check", "--conf-dir", str(conf_dir)])
    err = capsys.readouterr().err.strip()
    assert status == 2, err
    assert expected in err
    assert len(err.splitlines()) == 1
    assert len(err) < 1000  # echoed values are truncated


def test_unreachable_cluster_prints_one_line_and_nothing_from_librdkafka(
    tmp_path, conf_dir, capfd, caplog
):
    """librdkafka's own log lines go through Python logging, not straight to fd 2. Before the
    wait, the log says what it waits for and how long: --check's 5 s unless told otherwise."""
    path = tmp_path / "group.json"
    path.write_text(json.dumps(ORDERS_AUDIT))
    caplog.set_level(logging.INFO, logger="uatu")
    status = job_main.main([str(path), "--check", "--conf-dir", str(conf_dir)])
    err = capfd.readouterr().err.strip()
    assert status == 1
    assert err.splitlines() == [err] and "cluster 'local' at 127.0.0.1:9 did not answer" in err
    waits = [r.getMessage() for r in caplog.records if "waiting up to" in r.getMessage()]
    assert waits == ["checking cluster local at 127.0.0.1:9 (waiting up to 5 s for its brokers)"]


@pytest.mark.parametrize("value", ["0", "-1", "soon", "3601"])
def test_a_check_timeout_that_is_not_a_duration_exits_2(tmp_path, conf_dir, capsys, value):
    path = tmp_path / "group.json"
    path.write_text(json.dumps(ORDERS_AUDIT))
    with pytest.raises(SystemExit) as exited:
        job_main.main([str(path), "--check", "--check-timeout", value, "--conf-dir", str(conf_dir)])
    assert exited.value.code == 2
    assert f"--check-timeout: {value!r} is not a number of seconds" in capsys.readouterr().err


PATHS_REFUSED = [
    pytest.param({"auditCountsPath": "/etc"}, "audit_counts_path='/etc': must be under", id="etc"),
    pytest.param({"auditCountsPath": "../../x"}, "audit_counts_path='../../x'", id="dotdot"),
    pytest.param({"auditCountsPath": "file:///etc/x"}, "must be under", id="file-uri"),
    pytest.param({"auditCountsPath": "hdfs://any-host/wh"}, "must be under", id="other-host"),
    pytest.param({"auditCountsPath": "ftp://h/x"}, "scheme 'ftp' is not one of", id="scheme"),
    pytest.param({"checkpointPath": "other-group"}, "the group's own folder", id="checkpoint"),
    pytest.param({"checkpointPath": "/tmp/elsewhere"}, "must be under", id="checkpoint-out"),
    pytest.param({"auditCountsPath": "a%2e%2e/x"}, "'%'", id="percent"),
]


@pytest.mark.parametrize(("output", "expected"), PATHS_REFUSED)
def test_output_paths_outside_the_roots_exit_2(tmp_path, conf_dir, capsys, output, expected):
    status, err = run_main(tmp_path, conf_dir, options(**output), capsys)
    assert status == 2
    assert expected in err and len(err.splitlines()) == 1
    assert not (tmp_path / "wh").exists() and not (tmp_path / "ck").exists()


def test_output_paths_under_the_roots_are_kept_normalised(tmp_path, conf_dir):
    from jobs import registry
    from testing.jobgroups import parse

    settings = load_settings(conf_dir)
    group = options(
        auditCountsPath="team-a/./audit_counts",
        checkpointPath=f"{settings.checkpoints}/orders-audit/v2",
    )
    _, spec = registry.validate(parse(group), settings)
    assert spec.output.table("audit_counts") == f"{settings.warehouse}/team-a/audit_counts"
    assert spec.output.checkpoint == f"{settings.checkpoints}/orders-audit/v2"


def test_a_symlink_under_the_warehouse_does_not_lead_out_of_it(tmp_path, conf_dir):
    from jobs import registry
    from testing.jobgroups import parse

    settings = load_settings(conf_dir)
    (tmp_path / "wh").mkdir()
    (tmp_path / "wh" / "escape").symlink_to("/etc")
    with pytest.raises(InvalidJobGroup, match="must be under"):
        registry.validate(parse(options(auditCountsPath="escape/x")), settings)


def test_is_secure_refuses_a_plaintext_cluster(tmp_path, conf_dir, capsys):
    group = with_change(["securityConfig"], {"isSecure": True})
    status, err = run_main(tmp_path, conf_dir, group, capsys)
    assert status == 2
    assert "security_config.is_secure=True: cluster 'local' is not reached over TLS" in err


def test_ten_thousand_offset_ranges_are_checked_for_a_partition_listed_twice(conf_dir):
    """One range per partition of a large topic; the last repeats the first partition."""
    from jobs import registry
    from testing.jobgroups import parse

    ranges = [{"partition": p, "startOffset": 0, "endOffset": 5} for p in range(10_000)]
    ranges[-1]["partition"] = 0
    group = parse(
        minimal_group(
            "dispatch",
            "d",
            None,
            kafkaConsumerTaskGroup={"partitionOffsetRanges": {"partitionOffsetRange": ranges}},
        )
    )
    with pytest.raises(InvalidJobGroup, match=r"partition_offset_range\[9999\].partition=0"):
        registry.validate(group, load_settings(conf_dir))


# --- every field honoured or refused (issue 45) ----------------------------------------------

TS = "2026-01-01T00:00:00Z"
UNREAD = [
    pytest.param(
        minimal_group("audit", "a", None, kafkaConsumerTaskGroup={"processingDelayMs": 500}),
        "kafka_consumer_task_group.processing_delay_ms=500: refused rather than ignored: "
        "JOB_TYPE_KAFKA_AUDIT does not use it",
        id="audit-processing-delay",
    ),
    pytest.param(
        minimal_group("audit", "a", None, kafkaConsumerTaskGroup={"startTimestamp": TS}),
        "kafka_consumer_task_group.start_timestamp='set': not supported by JOB_TYPE_KAFKA_AUDIT",
        id="audit-start-timestamp",
    ),
    pytest.param(
        minimal_group("audit", "a", None, retryConfig={"retryEnabled": True}),
        "retry_config.retry_enabled=True: refused rather than ignored",
        id="audit-retry-config",
    ),
    pytest.param(
        minimal_group(
            "tier-audit",
            "t",
            None,
            kafkaConsumerTaskGroup={"isolationLevel": "ISOLATION_LEVEL_READ_COMMITTED"},
        ),
        "kafka_consumer_task_group.isolation_level='ISOLATION_LEVEL_READ_COMMITTED'",
        id="tiers-isolation-level",
    ),
    pytest.param(
        minimal_group(
            "tier-audit",
            "t",
            None,
            kafkaConsumerTaskGroup={"autoOffsetResetPolicy": "AUTO_OFFSET_RESET_POLICY_LATEST"},
        ),
        "kafka_consumer_task_group.auto_offset_reset_policy='AUTO_OFFSET_RESET_POLICY_LATEST': "
        "a cross-tier audit reads its topics from the earliest offset",
        id="tiers-latest",
    ),
    pytest.param(
        minimal_group("replication", "r", None, flowControl={"maxInflightMessages": 10}),
        "flow_control.max_inflight_messages=10.0: refused rather than ignored: "
        "JOB_TYPE_KAFKA_REPLICATION does not use it",
        id="replication-inflight",
    ),
    pytest.param(
        minimal_group("replication", "r", None, kafkaDispatcherTaskGroup={"dedupEnabled": True}),
        "kafka_dispatcher_task_group.dedup_enabled=True: refused rather than ignored: "
        "Uber's internal dedup service",
        id="replication-dedup",
    ),
    pytest.param(
        minimal_group("dispatch", "d", None, resqConfig={"acksOneProducer": True}),
        "resq_config.acks_one_producer=True: refused rather than ignored",
        id="dispatch-resq-acks-one",
    ),
    pytest.param(
        minimal_group("dispatch", "d", None, rpcDispatcherTaskGroup={"retryCluster": "local"}),
        "rpc_dispatcher_task_group.retry_cluster='local': refused rather than ignored",
        id="dispatch-retry-cluster",
    ),
    pytest.param(
        minimal_group("loadgen-consume", "c", None, flowControl={"bytesPerSec": 1000}),
        "flow_control.bytes_per_sec=1000.0: refused rather than ignored",
        id="consume-bytes-per-sec",
    ),
    pytest.param(
        minimal_group("availability", "v", None, miscConfig={"scaleResetEnabled": True}),
        "misc_config.scale_reset_enabled=True: refused rather than ignored: no autoscaler",
        id="scale-reset",
    ),
    pytest.param(
        minimal_group(
            "availability",
            "v",
            None,
            availabilityTaskGroup={"availabilityJobType": "AVAILABILITY_JOB_TYPE_NATIVE_CONSUMER"},
        ),
        "availability_task_group.availability_job_type='AVAILABILITY_JOB_TYPE_NATIVE_CONSUMER'",
        id="availability-native-consumer",
    ),
    pytest.param(
        {
            **minimal_group("audit", "a"),
            "extension": {
                "@type": "type.googleapis.com/uatu.v1.JobOptions",
                "dispatch": {"channels": 2},
                "audit": {"verdictHorizonSeconds": 60},
            },
        },
        "extension.audit.verdict_horizon_seconds=60: refused rather than ignored",
        id="another-types-options",
    ),
]


@pytest.mark.parametrize(("group", "expected"), UNREAD)
def test_a_field_the_job_type_does_not_use_is_refused_naming_it(
    tmp_path, conf_dir, capsys, group, expected
):
    path = tmp_path / "group.json"
    path.write_text(json.dumps(group))
    status = job_main.main([str(path), "--check", "--conf-dir", str(conf_dir)])
    err = capsys.readouterr().err.strip()
    assert status == 2, err
    assert expected in err and err.splitlines() == [err]


def test_misc_config_turns_on_debug_logging_and_tags_the_job_with_its_owner():
    import logging

    from prometheus_client import generate_latest

    from jobs.prepare import apply_misc_config
    from jobs.runtime.metrics import REGISTRY
    from testing.jobgroups import parse

    group = parse(
        minimal_group(
            "audit", "owned", None, miscConfig={"enableDebug": True, "ownerServiceName": "payments"}
        )
    )
    loggers = [logging.getLogger(n) for n in ("uatu", "uatu.librdkafka")]
    before = [lg.level for lg in loggers]
    try:
        apply_misc_config(group, "JOB_TYPE_KAFKA_AUDIT")
        assert [lg.level for lg in loggers] == [logging.DEBUG, logging.DEBUG]
    finally:
        for lg, level in zip(loggers, before, strict=True):
            lg.setLevel(level)
    text = generate_latest(REGISTRY).decode()
    assert (
        'uatu_job_info{job_group_id="owned",job_type="JOB_TYPE_KAFKA_AUDIT",'
        'owner_service="payments"} 1.0' in text
    )
    quiet = parse(minimal_group("audit", "quiet"))
    apply_misc_config(quiet, "JOB_TYPE_KAFKA_AUDIT")
    assert [lg.level for lg in loggers] == before


def test_every_example_jobgroup_is_valid():
    """The examples users copy pass every check a run makes before Spark, field by field."""
    from core.config import ClusterConfig, Settings
    from core.jobgroup import load_jobgroup
    from core.paths import ROOT
    from jobs import registry

    files = sorted((ROOT / "examples").rglob("*.json"))
    assert len(files) >= 5
    for path in files:
        group = load_jobgroup(path)
        names = {group.kafka_consumer_task_group.cluster, group.kafka_dispatcher_task_group.cluster}
        clusters = {n: ClusterConfig(n, "127.0.0.1:9") for n in names if n}
        registry.validate(group, Settings(ROOT / "conf", "/w", "/c", clusters))
