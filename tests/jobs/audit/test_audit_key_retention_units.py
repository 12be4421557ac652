"""Key retention's pure parts, without a JVM: `extension.audit.key_retention_seconds` validated
through the job's CLI (exit 2, one line naming the field) and the registry, the batch log
line of the exact keys' state (`jobs.audit.fold.state_line`) and its Prometheus gauges."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.config import load_settings
from jobs import main as job_main
from jobs import registry
from jobs.audit import metrics as audit_metrics
from jobs.audit.fold import state_line, window_keys_line
from jobs.audit.spec import DEFAULT_KEY_RETENTION_SECONDS
from testing.conf import write_conf_dir
from testing.jobgroups import ORDERS_AUDIT, parse
from tests.jobs.test_job_metrics import samples

FIELD = "extension.audit.key_retention_seconds"


@pytest.fixture
def conf_dir(tmp_path: Path) -> Path:
    # Port 9 (discard) on loopback: nothing answers, so no test here can reach a broker.
    return write_conf_dir(tmp_path / "conf", "127.0.0.1:9", tmp_path / "wh", tmp_path / "ck")


def group(**audit: object) -> dict:
    """ORDERS_AUDIT (one exact audit of 60 s windows) with these AuditOptions."""
    return {
        **ORDERS_AUDIT,
        "extension": {"@type": "type.googleapis.com/uatu.v1.JobOptions", "audit": audit},
    }


@pytest.mark.parametrize(
    ("audit", "expected"),
    [
        ({"keyRetentionSeconds": -1}, f"{FIELD}=-1: must be >= 0"),
        # Below the allowed lateness: a record on time would find its window's keys gone.
        (
            {"keyRetentionSeconds": 599, "allowedLatenessSeconds": 600},
            f"{FIELD}=599: must be >= the allowed lateness of the exact audits (600 s)",
        ),
        # No lateness set: a window's lateness is its length (60 s).
        ({"keyRetentionSeconds": 59}, f"{FIELD}=59: must be >= the allowed lateness"),
    ],
)
def test_a_bad_key_retention_exits_2_naming_the_field(
    tmp_path, conf_dir, capsys, audit, expected
) -> None:
    path = tmp_path / "group.json"
    path.write_text(json.dumps(group(**audit)))
    status = job_main.main([str(path), "--once", "--conf-dir", str(conf_dir)])
    err = capsys.readouterr().err.strip()
    assert status == 2
    assert expected in err
    assert len(err.splitlines()) == 1


@pytest.mark.parametrize(
    ("audit", "retention"),
    [
        ({}, DEFAULT_KEY_RETENTION_SECONDS),
        ({"keyRetentionSeconds": 0}, DEFAULT_KEY_RETENTION_SECONDS),
        ({"keyRetentionSeconds": 60}, 60),
        ({"keyRetentionSeconds": 900, "allowedLatenessSeconds": 900}, 900),
    ],
)
def test_a_valid_key_retention_reaches_the_spec(conf_dir, audit, retention) -> None:
    _, spec = registry.validate(parse(group(**audit)), load_settings(conf_dir))
    assert spec.key_retention_seconds == retention


def test_an_approximate_audit_accepts_any_retention(conf_dir) -> None:
    """No exact window, no keys to keep: the lateness bound does not apply."""
    approx = group(keyRetentionSeconds=1, allowedLatenessSeconds=600)
    approx["kafkaConsumerTaskGroup"] = {
        **ORDERS_AUDIT["kafkaConsumerTaskGroup"],
        "auditMetadata": {
            "auditConfigs": [{"auditType": "AUDIT_TYPE_APPROX_UNIQ", "auditIntervalInSeconds": 60}]
        },
    }
    _, spec = registry.validate(parse(approx), load_settings(conf_dir))
    assert spec.key_retention_seconds == 1


def partition_state(keys: int, dropped: int, oldest: int | None, windows: str) -> dict:
    return {
        "state_windows": len(windows.split()),
        "state_keys": keys,
        "state_memory_bytes": 16 * keys,
        "state_windows_read": 1,
        "state_bytes_written": 8 * keys,
        "state_windows_dropped": dropped,
        "state_oldest_window_ms": oldest,
        "state_window_keys": windows,
    }


def test_the_state_line_sums_partitions_and_names_the_oldest_window_kept() -> None:
    state = {
        ("t", 1): partition_state(
            30, 2, 1_800_000_060_000, "i60/w1800000060000=10 i60/w1800000120000=20"
        ),
        ("t", 0): partition_state(5, 1, 1_800_000_000_000, "i60/w1800000000000=5"),
        ("s", 2): partition_state(0, 0, None, ""),
    }
    line = state_line(state)
    assert "exact keys in memory: 35 in 3 windows" in line
    assert "dropped by retention 3" in line
    assert line.endswith("oldest kept 2027-01-15T08:00:00Z")
    assert window_keys_line(state) == (
        "s/p2: -; t/p0: i60/w1800000000000=5; t/p1: i60/w1800000060000=10 i60/w1800000120000=20"
    )
    assert state_line({}) == ""
    assert state_line({("t", 0): partition_state(0, 0, None, "")}).endswith("oldest kept none")


def test_the_key_state_reaches_the_drivers_metrics() -> None:
    """Keys and windows in memory are set per partition; dropped windows add up over batches."""
    for dropped in (2, 3):
        audit_metrics.key_state(
            "kr-units",
            {
                ("orders", 0): partition_state(35, dropped, None, "i60/w0=30 i60/w60000=5"),
                ("orders", 1): partition_state(7, 0, None, "i60/w0=7"),
            },
        )
    labels = (("cluster", "kr-units"), ("partition", "0"), ("topic", "orders"))
    assert samples("uatu_audit_exact_keys")[labels] == 35
    assert samples("uatu_audit_exact_key_windows")[labels] == 2
    assert samples("uatu_audit_exact_key_windows_dropped_total")[labels] == 5
    other = (("cluster", "kr-units"), ("partition", "1"), ("topic", "orders"))
    assert samples("uatu_audit_exact_keys")[other] == 7
    assert other not in samples("uatu_audit_exact_key_windows_dropped_total")
