"""The bounded-run operator killed while its run goes, in real Airflow 3 (its own venv):
`on_kill` stops `spark-submit.sh` and everything it started, and the task log showed the
run's output while it ran (tests/integrations/airflow_kill_runner.py).

The script is a stand-in with spark-submit.sh's signal contract (SIGTERM stops the job
between two batches and the script exits once it has; its child is the JVM): that the real
script and job keep that contract is tests/jobs/audit/test_audit_job_integration.py's
SIGTERM test. What is under test here is the operator: which process it signals, when, and
that nothing it started outlives the task.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from core.paths import ROOT
from testing.polling import wait_for
from tests.integrations.airflow_venv import AIRFLOW_PY, airflow_env

pytestmark = pytest.mark.integration

RUNNER = Path(__file__).with_name("airflow_kill_runner.py")

# Writes its pid and its child's (the "JVM") to $PIDS, logs its first batch, runs until its
# child ends. TRAP is what it does on SIGTERM.
STAND_IN = """#!/bin/bash
echo $$ > "$PIDS"
sleep 300 &
child=$!
echo $child >> "$PIDS"
trap {trap} TERM
echo "batch 0 committed"
wait $child
"""
GRACEFUL = "'echo \"stop requested\"; kill $child; exit 0'"
DEAF = "''"  # a run that does not stop on SIGTERM: stuck in a batch


def kill_while_running(tmp_path: Path, trap: str, grace: float) -> tuple[dict, list[int]]:
    script = tmp_path / f"spark-submit-{len(trap)}.sh"
    script.write_text(STAND_IN.format(trap=trap))
    script.chmod(0o755)
    pids = tmp_path / f"pids-{len(trap)}"
    done = subprocess.run(
        [str(AIRFLOW_PY), str(RUNNER), str(script), str(grace), json.dumps({"PIDS": str(pids)})],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=ROOT,
        env=airflow_env(),
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    outcome = json.loads(done.stdout.strip().splitlines()[-1])
    return outcome, [int(p) for p in pids.read_text().split()]


def gone(pids: list[int]) -> bool:
    return not any(Path(f"/proc/{pid}").exists() for pid in pids)


def test_on_kill_stops_the_run_gracefully_and_the_log_streams(tmp_path) -> None:
    assert AIRFLOW_PY.exists(), "run `make airflow-venv`"
    outcome, pids = kill_while_running(tmp_path, GRACEFUL, grace=60)
    assert outcome["streamed"], outcome  # the first batch's line was logged while it ran
    assert outcome["ended"] and "the task was killed" in outcome["error"], outcome
    log = outcome["log"]
    # SIGTERM reached the script, which stopped by itself (no SIGKILL needed).
    assert "stop requested" in log and not any("SIGKILL" in line for line in log), log
    wait_for(lambda: gone(pids), 30, "the script and its child to be gone")


def test_on_kill_kills_the_whole_process_group_of_a_run_that_does_not_stop(tmp_path) -> None:
    outcome, pids = kill_while_running(tmp_path, DEAF, grace=1)
    assert outcome["ended"] and "the task was killed" in outcome["error"], outcome
    assert any("SIGKILL" in line for line in outcome["log"]), outcome["log"]
    wait_for(lambda: gone(pids), 30, "the script and its child (the JVM) to be gone")
