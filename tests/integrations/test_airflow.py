"""Real Airflow 3 (its own venv) runs the example DAG against a real broker and the real job.

For one past hour: records are produced with Kafka timestamps inside that hour; `dag.test()`
runs `spark-submit.sh JOBGROUP --once` (the audit job, bounded), then the deferrable sensor,
whose trigger reads `audit_counts` with delta-rs. With the producer's true count the verdict is
OK; with a larger expected count it is LOSS and the sensor task fails. `make airflow-test`.
"""

from __future__ import annotations

import json
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from confluent_kafka import Producer

from core.paths import ROOT
from testing.conf import write_conf_dir

pytestmark = pytest.mark.integration

AIRFLOW_PY = ROOT / "integrations" / "airflow" / ".venv" / "bin" / "python"
RUNNER = Path(__file__).with_name("airflow_dag_runner.py")
TOPIC = "af-orders"
RECORDS = 240


def produce_in_hour(bootstrap: str, hour: datetime) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    base_ms = int(hour.timestamp() * 1000)
    for i in range(RECORDS):
        stamp = base_ms + (i * 13_000) % 3_500_000  # spread over the hour, all inside it
        producer.produce(TOPIC, key=f"k{i}", value=f"v{i}", partition=i % 2, timestamp=stamp)
    assert producer.flush(30) == 0


def run_dag(home: Path, logical_date: datetime, conf: dict) -> tuple[dict, str]:
    done = subprocess.run(
        [str(AIRFLOW_PY), str(RUNNER), str(home), logical_date.isoformat(), json.dumps(conf)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        cwd=ROOT,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1]), output


def test_example_dag_audits_the_hour_defers_and_fails_on_loss(kafka, tmp_path) -> None:
    assert AIRFLOW_PY.exists(), "run `make airflow-venv`"
    kafka.create_topic(TOPIC, partitions=2)
    hour = (datetime.now(UTC) - timedelta(hours=3)).replace(minute=0, second=0, microsecond=0)
    produce_in_hour(kafka.bootstrap_servers, hour)
    warehouse = tmp_path / "warehouse"
    conf_dir = write_conf_dir(
        tmp_path / "conf", kafka.bootstrap_servers, warehouse, tmp_path / "ck"
    )
    group = {
        "jobGroupId": "af-orders-audit",
        "type": "JOB_TYPE_KAFKA_AUDIT",
        "kafkaConsumerTaskGroup": {
            "cluster": "local",
            "topic": TOPIC,
            "auditMetadata": {
                "auditConfigs": [
                    {"auditType": "AUDIT_TYPE_EXACT_UNIQ", "auditIntervalInSeconds": 60}
                ]
            },
        },
    }
    jobgroup = tmp_path / "af-orders-audit.json"
    jobgroup.write_text(json.dumps(group))
    conf = {
        "job_group": str(jobgroup),
        "warehouse": str(warehouse),
        "cluster": "local",
        "topic": TOPIC,
        "conf_dir": str(conf_dir),
        "expected_count": RECORDS,
    }

    # A data-interval timetable's run at `end` covers [end - 1 h, end): the hour produced into.
    logical_date = hour + timedelta(hours=1)
    result, output = run_dag(tmp_path / "airflow-ok", logical_date, conf)
    assert result["tasks"] == {"audit_bounded": "success", "wait_for_verdict": "success"}, output[
        -4000:
    ]
    assert result["state"] == "success"
    assert "DEFERRED" in output  # the sensor deferred, and its trigger ran in the triggerer loop
    assert "'verdict': 'OK'" in output

    loss, output = run_dag(
        tmp_path / "airflow-loss", logical_date, {**conf, "expected_count": RECORDS + 5}
    )
    assert loss["tasks"]["audit_bounded"] == "success"
    assert loss["tasks"]["wait_for_verdict"] == "failed", output[-4000:]
    assert "verdict LOSS: observed 240, expected 245" in output
