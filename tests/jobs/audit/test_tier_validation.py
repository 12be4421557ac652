"""Bad cross-tier audit configs are refused before any Spark work: `jobs.main` exits 2 with one
line naming the field and its value (`jobs/audit/tiers/spec.py`), and writes nothing."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from jobs import main as job_main
from testing.conf import write_conf_dir

CONFIGS = "kafka_consumer_task_group.audit_metadata.audit_configs"


def group(*configs: dict[str, Any], **extension: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "jobGroupId": "tiers",
        "type": "JOB_TYPE_KAFKA_AUDIT",
        "kafkaConsumerTaskGroup": {
            "cluster": "local",
            "topic": "uatu-audit",
            "auditMetadata": {"auditConfigs": list(configs)},
        },
    }
    if extension:
        out["extension"] = {"@type": "type.googleapis.com/uatu.v1.JobOptions", **extension}
    return out


def info(cluster: str = "local", topic: str = "orders") -> dict[str, str]:
    return {"cluster": cluster, "topic": topic}


def xdc(**config: Any) -> dict[str, Any]:
    base = {
        "crossDcChecks": {"source": [info()], "destination": [info(topic="orders-agg")]},
        "failureThreshold": 0.01,
    }
    base.update(config)
    return {
        "auditType": "AUDIT_TYPE_XDC",
        "auditIntervalInSeconds": 60,
        "crossDcAuditConfig": base,
    }


def replication(source: list, destination: list) -> dict[str, Any]:
    return {
        "auditType": "AUDIT_TYPE_REPLICATION",
        "auditIntervalInSeconds": 60,
        "replicationAuditConfig": {
            "replicationChecks": [{"source": source, "destination": destination}]
        },
    }


SERVICE = {"auditType": "AUDIT_TYPE_SERVICE_AUDIT_AGGREGATION", "auditIntervalInSeconds": 60}
XDC_BASE = f"{CONFIGS}[0].cross_dc_audit_config"
REPL_BASE = f"{CONFIGS}[0].replication_audit_config.replication_checks[0]"

CASES = [
    (group(xdc(failureThreshold=1.5)), f"{XDC_BASE}.failure_threshold=1.5"),
    (group(xdc(failureThreshold=-0.1)), f"{XDC_BASE}.failure_threshold=-0.1"),
    (
        group(xdc(crossDcChecks={"source": [], "destination": [info()]})),
        f"{XDC_BASE}.cross_dc_checks.source=[]",
    ),
    (
        group(xdc(crossDcChecks={"source": [info("dc9")], "destination": [info()]})),
        f"{XDC_BASE}.cross_dc_checks.source[0].cluster='dc9'",
    ),
    (group(xdc(sendToUdq=True)), f"{XDC_BASE}.send_to_udq=True"),
    (group(replication([], [info(topic="copy")])), f"{REPL_BASE}.source=[]"),
    (group(replication([info()], [])), f"{REPL_BASE}.destination=[]"),
    (
        group(replication([info()], [info(topic="bad topic!")])),
        f"{REPL_BASE}.destination[0].topic='bad topic!'",
    ),
    (
        group(replication([info()], [info()])),
        f"{REPL_BASE}.destination=['local/orders']",
    ),
    (
        group(
            {
                "auditType": "AUDIT_TYPE_RETENTION",
                "auditIntervalInSeconds": 60,
                "retentionAuditConfig": {"partitionCount": 0},
            }
        ),
        f"{CONFIGS}[0].retention_audit_config.partition_count=0",
    ),
    (
        group({"auditType": "AUDIT_TYPE_RETENTION", "auditIntervalInSeconds": 60}),
        f"{CONFIGS}[0].retention_audit_config='unset'",
    ),
    (
        group({**SERVICE, "auditIntervalInSeconds": 0}),
        f"{CONFIGS}[0].audit_interval_in_seconds=0",
    ),
    (
        group(SERVICE, {"auditType": "AUDIT_TYPE_EXACT_UNIQ", "auditIntervalInSeconds": 60}),
        f"{CONFIGS}[1].audit_type='AUDIT_TYPE_EXACT_UNIQ'",
    ),
    (group(SERVICE, SERVICE), f"{CONFIGS}[1]="),
    (
        group(SERVICE, audit={"allowedLatenessSeconds": -5}),
        "extension.audit.allowed_lateness_seconds=-5",
    ),
]


@pytest.fixture
def conf_dir(tmp_path: Path) -> Path:
    # Port 9 (discard) on loopback: nothing answers, so no test here can reach a broker.
    return write_conf_dir(tmp_path / "conf", "127.0.0.1:9", tmp_path / "wh", tmp_path / "ck")


@pytest.mark.parametrize(("bad", "expected"), CASES)
def test_bad_tier_audit_config_exits_2_naming_the_field(tmp_path, conf_dir, capsys, bad, expected):
    path = tmp_path / "group.json"
    path.write_text(json.dumps(bad))
    status = job_main.main([str(path), "--once", "--conf-dir", str(conf_dir)])
    err = capsys.readouterr().err.strip()
    assert status == 2, err
    assert expected in err
    assert len(err.splitlines()) == 1
    assert not (tmp_path / "wh").exists() and not (tmp_path / "ck").exists()


def test_a_valid_tier_group_passes_validation(conf_dir):
    """The cases above differ from this group in one field each, so each can fail."""
    from core.config import load_settings
    from jobs import registry
    from testing.jobgroups import parse

    ok = group(SERVICE, xdc(), replication([info()], [info(topic="orders-copy")]))
    _job_type, spec = registry.validate(parse(copy.deepcopy(ok)), load_settings(conf_dir))
    assert [c.audit_type for c in spec.checks] == [  # type: ignore[attr-defined]
        "AUDIT_TYPE_SERVICE_AUDIT_AGGREGATION",
        "AUDIT_TYPE_XDC",
        "AUDIT_TYPE_REPLICATION",
    ]
