"""Real Airflow 3 (its own venv) runs the example DAG against a real broker and the real jobs.

Two past hours of `af-orders` are produced by a service through the audit client
(`clients.AuditedProducer`), which reports what the broker acknowledged to `af-audit`; then
retention (delete_records) removes the first LOST records of partition 0, all of the earlier
hour. Truth: the later hour's SERVICE -> Kafka check is OK (RECORDS each side), the earlier
hour's is LOSS (EARLIER reported, EARLIER - LOST in Kafka).

`dag.test()` of the later hour runs the counting audit and then the cross-tier audit
(`spark-submit.sh JOBGROUP --once` each), and the deferrable sensor, whose trigger reads
`audit_verdicts` with delta-rs, gets OK. A second run, for the earlier hour, runs no job (the
verdicts are written) and its sensor task fails on LOSS. `make airflow-test`.

The Airflow venv runs the provider and the uatu-spark client from their wheels, with no
PYTHONPATH (`airflow_venv.py`); only the jobs run from the checkout (`spark-submit.sh` in
UATU_HOME), as on a real Airflow next to a Spark deployment.
"""

from __future__ import annotations

import json
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

from clients import AuditedProducer, AuditSettings
from core.paths import ROOT
from integrations.query import run_sql
from integrations.tables import find_tables
from integrations.verdicts import read_newest
from testing.conf import write_conf_dir
from tests.integrations.airflow_venv import AIRFLOW_PY, AIRFLOW_VENV, airflow_env

pytestmark = pytest.mark.integration

RUNNER = Path(__file__).with_name("airflow_dag_runner.py")
TOPIC, AUDIT_TOPIC = "af-orders", "af-audit"
RECORDS, EARLIER, LOST = 240, 120, 10
# docs/query.md's current verdict per check and window (DataFusion's dialect).
NEWEST_SQL = """
SELECT check_name, "cluster", topic, window_start, verdict, left_count, right_count, revision
FROM (SELECT *, row_number() OVER (PARTITION BY job_group_id, check_type, check_name, "cluster",
                                   topic, window_start ORDER BY revision DESC) AS newest
      FROM audit_verdicts)
WHERE newest = 1
"""


def produce_in_hour(producer: AuditedProducer, hour: datetime, count: int, tag: str) -> None:
    base_ms = int(hour.timestamp() * 1000)
    for i in range(count):
        stamp = base_ms + (i * 13_000) % 3_500_000  # spread over the hour, all inside it
        producer.produce(TOPIC, key=f"{tag}{i}", value=f"v{i}", partition=i % 2, timestamp=stamp)
        producer.poll(0)


def run_dag(home: Path, logical_date: datetime, conf: dict) -> tuple[dict, str]:
    done = subprocess.run(
        [str(AIRFLOW_PY), str(RUNNER), str(home), logical_date.isoformat(), json.dumps(conf)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        cwd=ROOT,
        env=airflow_env(),
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1]), output


def test_the_provider_and_its_client_are_the_installed_wheels(tmp_path) -> None:
    """Every module the provider imports resolves inside the Airflow venv (never the
    checkout), the provider is registered under Airflow's entry point, and the wheel's `uatu`
    command answers."""
    probe = (
        "import json, importlib, importlib.metadata as m\n"
        "names = ['uatu_airflow.hooks', 'uatu_airflow.operators', 'uatu_airflow.sensors',\n"
        "         'uatu_airflow.triggers', 'core.channel', 'integrations.verdicts',\n"
        "         'uber.data.kafka.datatransfer.master_admin_service_pb2_grpc',\n"
        "         'uatu.v1.job_options_pb2']\n"
        "files = {n: importlib.import_module(n).__file__ for n in names}\n"
        "points = [e.value for e in m.entry_points(group='apache_airflow_provider')]\n"
        "print(json.dumps({'files': files, 'points': points}))\n"
    )
    done = subprocess.run(
        [str(AIRFLOW_PY), "-c", probe],
        capture_output=True, text=True, timeout=120, check=False, cwd=tmp_path, env=airflow_env(),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    outside = {n: f for n, f in found["files"].items() if not f.startswith(str(AIRFLOW_VENV))}
    assert outside == {}
    assert "uatu_airflow:get_provider_info" in found["points"]
    version = subprocess.run(
        [str(AIRFLOW_VENV / "bin" / "uatu"), "--version"],
        capture_output=True, text=True, timeout=60, check=True, cwd=tmp_path, env=airflow_env(),
    )  # fmt: skip
    assert version.stdout == "uatu 0.1.0\n"


def test_example_dag_audits_the_hour_defers_and_fails_on_loss(kafka, tmp_path) -> None:
    assert AIRFLOW_PY.exists(), "run `make airflow-venv`"
    kafka.create_topic(TOPIC, partitions=2)
    kafka.create_topic(AUDIT_TOPIC, partitions=1)
    hour = (datetime.now(UTC) - timedelta(hours=3)).replace(minute=0, second=0, microsecond=0)
    earlier = hour - timedelta(hours=1)
    producer = AuditedProducer(
        {"bootstrap.servers": kafka.bootstrap_servers, "acks": "all"},
        AuditSettings(service="af-api", cluster="local", audit_topic=AUDIT_TOPIC),
    )
    produce_in_hour(producer, earlier, EARLIER, "e")  # first: offsets 0.. of both partitions
    produce_in_hour(producer, hour, RECORDS, "k")
    producer.close()
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers})
    for future in admin.delete_records([TopicPartition(TOPIC, 0, LOST)]).values():
        future.result(timeout=30)

    warehouse = tmp_path / "warehouse"
    conf_dir = write_conf_dir(
        tmp_path / "conf", kafka.bootstrap_servers, warehouse, tmp_path / "ck"
    )
    count = {
        "jobGroupId": "af-orders-count",
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
    tiers = {
        "jobGroupId": "af-orders-tiers",
        "type": "JOB_TYPE_KAFKA_AUDIT",
        "kafkaConsumerTaskGroup": {
            "cluster": "local",
            "topic": AUDIT_TOPIC,
            "consumerGroup": "af-tiers",
            "auditMetadata": {
                "auditConfigs": [
                    {
                        "auditType": "AUDIT_TYPE_SERVICE_AUDIT_AGGREGATION",
                        "auditIntervalInSeconds": 3600,
                    }
                ]
            },
        },
    }
    groups = []
    for group in (count, tiers):
        path = tmp_path / f"{group['jobGroupId']}.json"
        path.write_text(json.dumps(group))
        groups.append(str(path))
    conf = {
        "job_groups": groups,
        "warehouse": str(warehouse),
        "cluster": "local",
        "topic": TOPIC,
        "conf_dir": str(conf_dir),
    }

    # A data-interval timetable's run at `end` covers [end - 1 h, end): the hour produced into.
    result, output = run_dag(tmp_path / "airflow", hour + timedelta(hours=1), conf)
    assert result["tasks"] == {"audit_bounded": "success", "wait_for_verdict": "success"}, output[
        -4000:
    ]
    assert result["state"] == "success"
    assert "DEFERRED" in output  # the sensor deferred, and its trigger ran in the triggerer loop
    assert "'verdict': 'OK'" in output
    assert f"'left_count': {RECORDS}, 'right_count': {RECORDS}" in output
    # What the cross-tier job wrote, read here as the sensor reads it: both hours as produced,
    # and the rows the SQL of docs/query.md finds.
    rows = read_newest(warehouse, cluster="local", topic=TOPIC)
    shown = [
        (r["check_name"], r["window_start"], r["verdict"], r["left_count"], r["right_count"])
        for r in rows
    ]
    assert shown == [
        ("service->kafka", earlier, "LOSS", EARLIER, EARLIER - LOST),
        ("service->kafka", hour, "OK", RECORDS, RECORDS),
    ]
    found = run_sql(NEWEST_SQL, find_tables(warehouse)).to_pylist()
    assert sorted(found, key=lambda r: r["window_start"]) == [
        {k: r[k] for k in found[0]} for r in rows
    ]

    # The earlier hour: no job to run, its verdict is already written.
    loss, output = run_dag(tmp_path / "airflow", hour, {**conf, "job_groups": []})
    assert loss["tasks"]["audit_bounded"] == "success"
    assert loss["tasks"]["wait_for_verdict"] == "failed", output[-4000:]
    assert (
        f"verdict LOSS: service->kafka local/{TOPIC} window {earlier.isoformat()}: LOSS, "
        f"SERVICE local/{TOPIC} {EARLIER} -> kafka local/{TOPIC} {EARLIER - LOST}"
    ) in output, output[-4000:]
