"""For each hour: audit a topic bounded, wait (deferred) for the hour's verdict, fail on LOSS.

Params (all overridable per run): `job_group` (the audit JobGroup as a dict or a JSON file),
`warehouse` (where its tables are), `cluster`/`topic` (the audited labels), `expected_count`
(a producer's own tally, or null to compare with nothing but completeness and duplicates),
`replication_job_group_id` (compare with what that replication job read instead).
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

with DAG(
    dag_id="uatu_hourly_audit",
    # Data intervals [hour, hour + 1): the window the sensor checks is the run's hour.
    schedule=CronDataIntervalTimetable("@hourly", timezone="UTC"),
    start_date=datetime(2024, 1, 1),
    catchup=False,
    params={
        "job_group": Param(str(UATU_HOME / "examples" / "audit-demo.json")),
        "warehouse": Param(str(UATU_HOME / "var" / "warehouse")),
        "cluster": Param("local"),
        "topic": Param("demo-orders"),
        "expected_count": Param(None, type=["null", "integer"]),
        "replication_job_group_id": Param(None, type=["null", "string"]),
        "conf_dir": Param(str(UATU_HOME / "conf")),
    },
    tags=["uatu"],
) as dag:
    audit = UatuBoundedRunOperator(
        task_id="audit_bounded",
        job_group="{{ params.job_group }}",
        spark_submit=str(UATU_HOME / "spark-submit.sh"),
        env={"UATU_CONF_DIR": "{{ params.conf_dir }}"},
    )
    verdict = AuditWindowSensor(
        task_id="wait_for_verdict",
        warehouse="{{ params.warehouse }}",
        cluster="{{ params.cluster }}",
        topic="{{ params.topic }}",
        expected_count="{{ params.expected_count }}",
        allowed_lateness_seconds=60,
        replication_job_group_id="{{ params.replication_job_group_id }}",
        poll_seconds=2,
        timeout=timedelta(minutes=30).total_seconds(),
    )
    audit >> verdict
