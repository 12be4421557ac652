"""Run by the Airflow venv's Python (never the project's): the bounded-run operator killed
while its run goes, as Airflow kills a task that is cleared, marked or timed out.

    integrations/airflow/.venv/bin/python tests/integrations/airflow_kill_runner.py \
        SPARK_SUBMIT GRACE_SECONDS ENV_JSON

`execute` runs in a thread; once the run's first line is in the task log (the log streams
while the run goes), `on_kill` is called from this thread. The last line printed is JSON:
{"streamed": the first line was logged before the run ended, "error": what execute raised,
"log": the task log's lines}.
"""

from __future__ import annotations

import json
import sys
import threading
import time

import structlog
from uatu_airflow.operators import UatuBoundedRunOperator

FIRST_LINE = "batch 0 committed"


def main(spark_submit: str, grace: str, env: str) -> int:
    operator = UatuBoundedRunOperator(
        task_id="bounded_run",
        job_group={"jobGroupId": "kill-me", "type": "JOB_TYPE_KAFKA_AUDIT"},
        spark_submit=spark_submit,
        env=json.loads(env),
        kill_grace_seconds=float(grace),
    )
    outcome: dict = {"error": None}

    def run() -> None:
        try:
            operator.execute({})
        except Exception as e:  # the task's failure, as Airflow would record it
            outcome["error"] = f"{type(e).__name__}: {e}"

    with structlog.testing.capture_logs() as logs:
        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        deadline = time.monotonic() + 60
        while not any(e.get("event") == FIRST_LINE for e in logs):
            if time.monotonic() > deadline or not thread.is_alive():
                break
            time.sleep(0.05)
        outcome["streamed"] = thread.is_alive() and any(e.get("event") == FIRST_LINE for e in logs)
        operator.on_kill()
        thread.join(60)
        outcome["ended"] = not thread.is_alive()
    outcome["log"] = [str(e.get("event")) for e in logs]
    print(json.dumps(outcome))
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
