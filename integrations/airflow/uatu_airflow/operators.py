"""Operators: submit a JobGroup to the control plane, or run one bounded with spark-submit.sh."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException
from google.protobuf import json_format

from uatu_airflow.hooks import UatuControlPlaneHook, load_group


class UatuJobGroupOperator(BaseOperator):
    """Add (or update) a JobGroup through the control plane and wait until every job of it
    is heartbeating (the Spark application runs). Returns the stored group as JSON."""

    template_fields: Sequence[str] = ("job_group",)

    def __init__(
        self,
        *,
        job_group: str | dict,
        uatu_conn_id: str = UatuControlPlaneHook.default_conn_name,
        wait_seconds: float = 600.0,
        poll_seconds: float = 2.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.job_group = job_group
        self.uatu_conn_id = uatu_conn_id
        self.wait_seconds = wait_seconds
        self.poll_seconds = poll_seconds

    def execute(self, context: Any) -> dict[str, Any]:
        hook = UatuControlPlaneHook(self.uatu_conn_id)
        group = load_group(self.job_group)
        hook.submit(group)
        deadline = time.monotonic() + self.wait_seconds
        while time.monotonic() < deadline:
            stored = hook.get_group(group.job_group_id)
            if stored is not None and hook.running(stored):
                return json_format.MessageToDict(stored)
            time.sleep(self.poll_seconds)
        raise AirflowException(f"{group.job_group_id} not running after {self.wait_seconds} s")


def bounded_run_argv(script: str, jobgroup_file: str) -> list[str]:
    """The command a bounded run executes (pure; no shell)."""
    return [script, jobgroup_file, "--once"]


class UatuBoundedRunOperator(BaseOperator):
    """`spark-submit.sh JOBGROUP --once`: process what the topic holds now, write, exit.

    `job_group` is a JSON file path or a dict (templated), or a list of them run one after
    the other in its order (a counting audit before the cross-tier audit that compares with
    its counts); an empty list runs nothing (the jobs run elsewhere, e.g. continuously under
    the control plane). `spark_submit` is the checkout's script (an Airflow worker needs only
    it and Java, not pyspark in Airflow's venv). Exit status 0 succeeds; 2 (bad input) and 1
    (failed) fail the task, and the JobGroups after it do not run.

    The run's output goes to the task log line by line while it runs. A task that is cleared,
    marked or times out is killed (`on_kill`): the script gets SIGTERM, which stops the job
    between two micro-batches, and its whole process group (spark-submit's JVM, the driver)
    SIGKILL if it is still there `kill_grace_seconds` later.
    """

    template_fields: Sequence[str] = ("job_group", "env")

    def __init__(
        self,
        *,
        job_group: str | dict | Sequence[str | dict],
        spark_submit: str,
        env: Mapping[str, str] | None = None,
        kill_grace_seconds: float = 60.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.job_group = job_group
        self.spark_submit = spark_submit
        self.env = dict(env or {})
        self.kill_grace_seconds = kill_grace_seconds
        self._process: subprocess.Popen[str] | None = None
        self._killed = False

    def execute(self, context: Any) -> int:
        groups = self.job_group
        if isinstance(groups, str | dict):
            groups = [groups]
        if not groups:
            self.log.info("no JobGroup to run")
        for group in groups:
            self._run(group)
        return 0

    def _run(self, job_group: str | dict) -> None:
        with tempfile.TemporaryDirectory(prefix="uatu-airflow-") as tmp:
            path = job_group
            if not isinstance(path, str) or not path.endswith(".json"):
                data = path if isinstance(path, dict) else json.loads(path)
                path = str(Path(tmp) / "jobgroup.json")
                Path(path).write_text(json.dumps(data))
            argv = bounded_run_argv(self.spark_submit, path)
            if self._killed:
                raise AirflowException(f"killed before {' '.join(argv)}")
            self.log.info("running %s", " ".join(argv))
            status = self._stream(argv)
        if self._killed:
            raise AirflowException(f"{argv[0]} was stopped: the task was killed")
        if status != 0:
            raise AirflowException(f"{argv[0]} exited with {status}")

    def _stream(self, argv: list[str]) -> int:
        """Run `argv` in a process group of its own, logging each line of its output (stderr
        too) as it comes; its exit status."""
        process = subprocess.Popen(
            argv,
            env={**os.environ, **self.env},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self._process = process
        try:
            assert process.stdout is not None
            for line in process.stdout:
                self.log.info("%s", line.rstrip("\n"))
            return process.wait()
        finally:
            self._process = None

    def on_kill(self) -> None:
        """Stop the running `spark-submit.sh`: SIGTERM (the job stops between two batches),
        then SIGKILL to its process group after `kill_grace_seconds`."""
        self._killed = True
        process = self._process
        if process is None or process.poll() is not None:
            return
        self.log.info("stopping %d (SIGTERM)", process.pid)
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=self.kill_grace_seconds)
        except subprocess.TimeoutExpired:
            self.log.warning("%d still running after %.0f s: SIGKILL", process.pid,
                             self.kill_grace_seconds)  # fmt: skip
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
