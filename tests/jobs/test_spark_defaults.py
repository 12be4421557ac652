"""Spark hardened by default (issue 20, item 6): what `spark-submit.sh` hands spark-submit.

A stand-in `spark-submit` (UATU_VENV pointing at a folder holding it) records its argv and
environment, so no JVM starts.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from core.paths import JOBS_ZIP, PROJECT_JAR, ROOT, SPARK_JARS_DIR
from jobs.runtime.session import BASE_CONF, TUNABLE_DEFAULTS, session_settings
from jobs.worker.main import WRITES_POOL_MIN_SHARE

pytestmark = pytest.mark.skipif(
    not (JOBS_ZIP.exists() and PROJECT_JAR.exists() and SPARK_JARS_DIR.is_dir()),
    reason="spark-submit.sh needs `make build` (job zip, project jar) and var/jars/spark",
)

RECORDER = """#!/bin/sh
python3 -c 'import json, os, sys; json.dump({"argv": sys.argv[1:], "env": dict(os.environ)},
    open(os.environ["RECORD"], "w"))' "$@"
"""


def run_script(tmp_path: Path, master: str | None, *args: str) -> dict:
    """What spark-submit.sh hands spark-submit for `args` (default: a JobGroup, `--once`)."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    fake = venv / "bin" / "spark-submit"
    fake.write_text(RECORDER)
    fake.chmod(0o755)
    record = tmp_path / "record.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPARK_", "UATU_"))}
    env.update(UATU_VENV=str(venv), RECORD=str(record), UATU_STOP_FILE=str(tmp_path / "stop"))
    if master:
        env["SPARK_MASTER"] = master
    if not args:
        group = tmp_path / "g.json"
        group.write_text("{}")
        args = (str(group), "--once")
    subprocess.run([str(ROOT / "spark-submit.sh"), *args], env=env, check=True, timeout=60)
    return json.loads(record.read_text())


def master_of(argv: list[str]) -> str:
    return argv[argv.index("--master") + 1]


def conf_of(argv: list[str]) -> dict[str, str]:
    pairs = [argv[i + 1] for i, word in enumerate(argv) if word == "--conf"]
    return dict(pair.split("=", 1) for pair in pairs)


def test_local_mode_keeps_driver_and_ui_on_loopback_and_the_ui_cannot_kill(tmp_path) -> None:
    seen = run_script(tmp_path, None)
    conf = conf_of(seen["argv"])
    assert conf["spark.ui.killEnabled"] == "false"
    assert conf["spark.driver.bindAddress"] == "127.0.0.1"
    assert conf["spark.driver.host"] == "127.0.0.1"
    assert seen["env"]["SPARK_LOCAL_IP"] == "127.0.0.1"  # the UI's bind address


def test_cluster_masters_still_disable_ui_kill(tmp_path) -> None:
    seen = run_script(tmp_path, "spark://10.1.2.3:7077")
    conf = conf_of(seen["argv"])
    assert conf["spark.ui.killEnabled"] == "false"
    assert "spark.driver.bindAddress" not in conf  # executors elsewhere must reach it
    assert "SPARK_LOCAL_IP" not in seen["env"]


def test_a_local_worker_has_task_slots_beyond_its_writes_pool_and_a_job_has_two(
    tmp_path,
) -> None:
    """A worker's after-commit writes are served first up to WRITES_POOL_MIN_SHARE task slots;
    a local worker gets twice the cores, at least 4, so its queries' batches keep two slots
    (on local[2] a moved pack's fold waited for a slot far longer than its tasks ran:
    docs/benchmarks.md, "Fleet, part 2"). SPARK_MASTER wins for both."""
    cores = len(os.sched_getaffinity(0))  # what nproc counts
    worker = master_of(run_script(tmp_path / "w", None, "worker")["argv"])
    assert worker == f"local[{max(4, 2 * cores)}]"
    assert max(4, 2 * cores) - WRITES_POOL_MIN_SHARE >= 2
    assert master_of(run_script(tmp_path / "j", None)["argv"]) == "local[2]"
    given = run_script(tmp_path / "g", "local[3]", "worker")
    assert master_of(given["argv"]) == "local[3]"


def test_every_session_disables_ui_kill() -> None:
    assert BASE_CONF["spark.ui.killEnabled"] == "false"


def test_a_tunable_given_at_launch_wins_over_the_default_and_the_job_wins_over_both() -> None:
    shuffle = "spark.sql.shuffle.partitions"
    assert session_settings(set(), {})[shuffle] == TUNABLE_DEFAULTS[shuffle] == "8"
    # Launched with it (spark-submit --conf): the session keeps the launch value.
    assert shuffle not in session_settings({shuffle}, {})
    assert session_settings({shuffle}, {shuffle: "1"})[shuffle] == "1"  # the job's own choice
    # What every session needs is set whatever the launch said.
    launched = set(BASE_CONF) | set(TUNABLE_DEFAULTS)
    assert session_settings(launched, {}) == BASE_CONF


@pytest.mark.spark
def test_a_session_does_not_record_python_call_sites(spark) -> None:
    """The test session is built as the jobs' are (build_session): PySpark sees its query
    context debugging off, so building a Column walks no stack and makes no extra JVM calls."""
    from pyspark.errors.utils import is_debugging_enabled

    assert spark.conf.get("spark.python.sql.dataFrameDebugging.enabled") == "false"
    assert is_debugging_enabled() is False
