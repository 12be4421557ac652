"""Operators: submit a JobGroup to the control plane, or run one bounded with spark-submit.sh."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from airflow.exceptions import AirflowException
from airflow.sdk import BaseOperator
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
    (failed) fail the task with the log's tail, and the JobGroups after it do not run.
    """

    template_fields: Sequence[str] = ("job_group", "env")

    def __init__(
        self,
        *,
        job_group: str | dict | Sequence[str | dict],
        spark_submit: str,
        env: Mapping[str, str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.job_group = job_group
        self.spark_submit = spark_submit
        self.env = dict(env or {})

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
            self.log.info("running %s", " ".join(argv))
            done = subprocess.run(
                argv,
                env={**os.environ, **self.env},
                capture_output=True,
                text=True,
                check=False,
            )
        for line in done.stdout.splitlines()[-40:] + done.stderr.splitlines()[-40:]:
            self.log.info("%s", line)
        if done.returncode != 0:
            raise AirflowException(f"{argv[0]} exited with {done.returncode}")
