"""Bad input is refused before any Spark work: exit 2, one line naming the field and value."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from core.config import load_settings
from core.errors import ConfigError
from jobs import main as job_main
from testing.conf import write_conf_dir

VALID = {
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
    group = copy.deepcopy(VALID)
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
    (
        with_change(["type"], "JOB_TYPE_KAFKA_CONSUMER_TO_RPC_DISPATCHER"),
        "type='JOB_TYPE_KAFKA_CONSUMER_TO_RPC_DISPATCHER'",
    ),
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
        "audit_configs[0].audit_type='AUDIT_TYPE_XDC'",
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


def test_unreachable_cluster_is_a_clear_error(tmp_path, conf_dir, capsys):
    status, err = run_main(tmp_path, conf_dir, VALID, capsys)
    assert status == 2
    assert "cluster 'local' at 127.0.0.1:9 did not answer" in err


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
    status, err = run_main(tmp_path, conf_dir, VALID, capsys)
    assert status == 2
    assert "clusters.local" in err and "admin_properties" in err
