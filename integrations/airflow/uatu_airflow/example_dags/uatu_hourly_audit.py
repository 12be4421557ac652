"""For each hour: run the audits bounded, wait (deferred) for the hour's verdict, fail on LOSS.

The verdict is the cross-tier audit's (`audit_verdicts`); a counting audit alone has none.
Params (all overridable per run):

* `job_groups`: JobGroups (JSON files or dicts) run `--once` one after the other: by default
  `examples/audit-tiers/count-orders.json` (counts `orders`) and then `tiers.json` (compares
  what the services reported with those counts: SERVICE_AUDIT_AGGREGATION, and a
  REPLICATION check of `orders-copy`). An empty list runs nothing: the audits run elsewhere
  (e.g. continuously under the control plane) and the DAG only waits for their verdict;
* `warehouse`: where their tables are;
* `cluster`/`topic`: whose verdicts (the checked, downstream side of a check);
* `check_names`: only these checks (empty: every check judging the topic in the hour);
* `conf_dir`: the site configuration the jobs run with.

The checkout is found through UATU_HOME (default: three folders above this file).
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta
from pathlib import Path

from airflow.sdk import DAG, Param
from airflow.timetables.interval import CronDataIntervalTimetable

from uatu_airflow.operators import UatuBoundedRunOperator
from uatu_airflow.sensors import AuditWindowSensor

UATU_HOME = Path(os.environ.get("UATU_HOME", Path(__file__).resolve().parents[4]))
EXAMPLES = UATU_HOME / "examples" / "audit-tiers"

with DAG(
    dag_id="uatu_hourly_audit",
    # Data intervals [hour, hour + 1): the window the sensor checks is the run's hour.
    schedule=CronDataIntervalTimetable("@hourly", timezone="UTC"),
    start_date=datetime(2024, 1, 1),
    catchup=False,
    # Lists stay lists when rendered (job_groups, check_names).
    render_template_as_native_obj=True,
    params={
        "job_groups": Param(
            [str(EXAMPLES / "count-orders.json"), str(EXAMPLES / "tiers.json")], type="array"
        ),
        "warehouse": Param(str(UATU_HOME / "var" / "warehouse")),
        "cluster": Param("local"),
        "topic": Param("orders"),
        "check_names": Param([], type="array"),
        "conf_dir": Param(str(UATU_HOME / "conf")),
    },
    tags=["uatu"],
) as dag:
    audit = UatuBoundedRunOperator(
        task_id="audit_bounded",
        job_group="{{ params.job_groups }}",
        spark_submit=str(UATU_HOME / "spark-submit.sh"),
        env={"UATU_CONF_DIR": "{{ params.conf_dir }}"},
    )
    verdict = AuditWindowSensor(
        task_id="wait_for_verdict",
        warehouse="{{ params.warehouse }}",
        cluster="{{ params.cluster }}",
        topic="{{ params.topic }}",
        check_names="{{ params.check_names }}",
        poll_seconds=2,
        timeout=timedelta(minutes=30).total_seconds(),
    )
    audit >> verdict
