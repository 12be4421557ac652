"""Run by the Airflow venv's Python (never the project's): one `dag.test()` of the example DAG.

    integrations/airflow/.venv/bin/python tests/integrations/airflow_dag_runner.py \
        AIRFLOW_HOME LOGICAL_DATE RUN_CONF_JSON

`airflow db migrate` into AIRFLOW_HOME (SQLite) first, then the DAG is loaded from the
provider's example_dags folder (a DAG must be in the DAGs folder to be serialized) and tested.
The last line printed is JSON: {"state": ..., "tasks": {task_id: state}}.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import uatu_airflow

ROOT = Path(__file__).resolve().parents[2]  # UATU_HOME: the jobs run from the checkout
DAGS = Path(uatu_airflow.__file__).parent / "example_dags"  # the installed wheel's


def main(home: str, logical_date: str, run_conf: str) -> int:
    os.environ.update(
        {
            "AIRFLOW_HOME": home,
            "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
            "UATU_HOME": str(ROOT),
        }
    )
    airflow = Path(sys.executable).parent / "airflow"
    subprocess.run([str(airflow), "db", "migrate"], check=True, capture_output=True)
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(DAGS))
    assert not bag.import_errors, bag.import_errors
    dag = bag.get_dag("uatu_hourly_audit")
    run = dag.test(logical_date=datetime.fromisoformat(logical_date), run_conf=json.loads(run_conf))
    tasks = {ti.task_id: str(ti.state) for ti in run.get_task_instances()}
    print(json.dumps({"state": str(run.state), "tasks": tasks}))
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
