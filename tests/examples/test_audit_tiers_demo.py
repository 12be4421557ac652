"""`make demo-audit-tiers`'s steps end to end on a broker of its own: every verdict, count and
gap it prints must match what it did to the topics, and it prints the loss with its offset
range.

The demo's jobs run in this process, through the same entry point `./spark-submit.sh` calls
(`jobs.main.main`) on the test session: what is tested is the demo and the jobs' results, not
the launch, which the spark-submit tests hold (tests/jobs/audit/test_audit_job_integration.py
among them). A `spark-submit.sh` per job would add a JVM's start and its first Delta writes.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from devservices.kafka import start_cluster
from examples import audit_tiers_demo
from jobs import main as job_main
from testing.jobrun import NOT_INHERITED

pytestmark = pytest.mark.integration

# Variables of the test process that would point the demo's jobs elsewhere: those a job run
# never inherits, and the stop file of an in-process run.
_JOB_ENV = (*NOT_INHERITED, "UATU_STOP_FILE")


def run_in_session(jobgroup: Path, conf_dir: Path, *args: str) -> None:
    """The demo's JobRunner for this test: `spark-submit.sh`'s entry point in this process."""
    status = job_main.main([str(jobgroup), *args, "--conf-dir", str(conf_dir)])
    assert status == 0, f"{jobgroup.name} exited with status {status}"


def test_the_demo_finds_the_loss_and_the_duplication_it_made(
    spark, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in _JOB_ENV:
        monkeypatch.delenv(name, raising=False)
    cluster = start_cluster(tmp_path / "kafka")
    try:
        matched = audit_tiers_demo.run_demo(cluster, spark, tmp_path / "demo", run_in_session)
    finally:
        cluster.stop()
    out = capsys.readouterr().out
    assert matched, out[-4000:]
    assert "MISMATCH" not in out
    assert "replication gaps" in out and "expected [(0, 0, 49)]  got [(0, 0, 49)]  OK" in out
    assert out.count("DUPLICATION") >= 2 and "LOSS" in out
