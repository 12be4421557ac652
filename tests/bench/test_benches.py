"""The benches' entry points (`python -m bench.<module> --help`) and the audit bench's JobGroup."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.audit_bench import TOPIC, write_job
from core.paths import ROOT


@pytest.mark.parametrize(
    "module", ["audit_bench", "availability_bench", "controlplane_bench", "replication_bench"]
)
def test_each_bench_answers_help_as_its_make_target_runs_it(module: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", f"bench.{module}", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"usage: python -m bench.{module}")
    assert "--quick" in done.stdout


def test_audit_jobgroup_reads_from_the_earliest_offset_with_the_default_trigger(
    tmp_path: Path,
) -> None:
    conf = write_job("AUDIT_TYPE_EXACT_UNIQ", "127.0.0.1:9", tmp_path / "exact", 1_000_000)
    assert (conf / "clusters.yaml").exists()
    group = json.loads((tmp_path / "exact" / "jobgroup.json").read_text())
    assert group["jobGroupId"] == "bench-exact"
    assert group["type"] == "JOB_TYPE_KAFKA_AUDIT"
    # 1M records per batch over the job's default 10 s trigger: no JobOptions extension.
    assert group["flowControl"] == {"messagesPerSec": 100_000}
    assert "extension" not in group
    source = group["kafkaConsumerTaskGroup"]
    assert source["topic"] == TOPIC
    assert source["consumerGroup"] == "bench-exact"
    assert source["autoOffsetResetPolicy"] == "AUTO_OFFSET_RESET_POLICY_EARLIEST"
    assert source["auditMetadata"]["auditConfigs"] == [
        {"auditType": "AUDIT_TYPE_EXACT_UNIQ", "auditIntervalInSeconds": 60}
    ]
    unlimited = write_job("AUDIT_TYPE_APPROX_UNIQ", "127.0.0.1:9", tmp_path / "approx", 0)
    assert unlimited.is_dir()
    assert "flowControl" not in json.loads((tmp_path / "approx" / "jobgroup.json").read_text())
