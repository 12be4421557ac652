"""Kafka security end to end (issue 20, item 8): a broker with a SASL_SSL listener (a CA made
in the test, SCRAM-SHA-512 and PLAIN users), and the suite's jobs against it.

* `--check` with SCRAM and with PLAIN: the SCRAM cluster gives the librdkafka properties
  (`admin_properties`), the PLAIN cluster only the Java client's, translated for librdkafka
  (`core/kafka_properties.py`); both authenticate;
* a bounded audit (`--once`) counts every record produced over SASL_SSL;
* a bounded replication copies SCRAM -> PLAIN on the same broker;
* an availability job writes probe rows over PLAIN (librdkafka producers and consumers on the
  translated settings);
* no password appears in any process's argv, in the logs, in the heartbeats (a recording
  MasterWorkerService) or in the tables.

Passwords never appear in clusters.yaml either: it holds ${file:...} references.

The broker is `devservices.kafka.start_cluster(..., sasl_ssl=SaslSsl)`: the SASL_SSL listener
next to PLAINTEXT (still the inter-broker listener and the test's own), SCRAM users created
through the Admin API once the broker answers.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc
import pytest
import yaml
from uber.data.kafka.datatransfer import master_worker_service_pb2 as mw_pb2
from uber.data.kafka.datatransfer import master_worker_service_pb2_grpc as mw_grpc

from core.config import load_settings
from core.paths import ROOT
from core.processes import free_ports
from devservices import kafka as devkafka
from testing.conf import write_conf_dir
from testing.kafka_security import SaslSsl
from testing.polling import wait_for
from testing.tls import TestCA
from testing.topic_data import count_records

pytestmark = pytest.mark.integration

SCRAM, PLAIN = "secure-scram", "secure-plain"


@pytest.fixture(scope="module")
def sasl_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[object, SaslSsl]]:
    tmp = tmp_path_factory.mktemp("sasl-kafka")
    ca = TestCA.create(tmp / "pki")
    sasl = SaslSsl.create(tmp / "sasl", ca, port=free_ports(1)[0])
    cluster = devkafka.start_cluster(tmp / "kafka", n_brokers=1, sasl_ssl=sasl)
    try:
        yield cluster, sasl
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def conf_dir(tmp_path_factory: pytest.TempPathFactory, sasl_kafka) -> Path:
    cluster, sasl = sasl_kafka
    base = tmp_path_factory.mktemp("sasl-conf")
    conf = write_conf_dir(
        base / "conf",
        cluster.bootstrap_servers,  # "local": the PLAINTEXT listener, for the test's own use
        base / "wh",
        base / "ck",
        more_clusters={
            # SCRAM gives both forms; PLAIN only the Java form, which its librdkafka clients
            # (--check, the availability probes) read translated (core/kafka_properties.py).
            SCRAM: sasl.cluster_entry("alice", "SCRAM-SHA-512", librdkafka=True),
            PLAIN: sasl.cluster_entry("bob", "PLAIN"),
        },
    )
    (conf / "clusters.yaml").chmod(0o600)
    text = (conf / "clusters.yaml").read_text()
    assert not any(p in text for p in sasl.passwords())  # references only
    return conf


class RecordingWorkers(mw_grpc.MasterWorkerServiceServicer):
    """A MasterWorkerService that keeps every request's bytes and metadata."""

    def __init__(self) -> None:
        self.seen: list[bytes] = []
        self._next = 1000

    def RegisterWorker(self, request, context):
        self.seen.append(request.SerializeToString() + repr(context.invocation_metadata()).encode())
        self._next += 1
        worker = mw_pb2.Participants(worker=request.participants.worker)
        worker.worker.id = self._next
        return mw_pb2.RegisterWorkerResponse(participants=worker)

    def Heartbeat(self, request, context):
        self.seen.append(request.SerializeToString())
        return mw_pb2.HeartbeatResponse(participants=request.participants)


@pytest.fixture(scope="module")
def heartbeats() -> Iterator[tuple[str, RecordingWorkers]]:
    recorder = RecordingWorkers()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    mw_grpc.add_MasterWorkerServiceServicer_to_server(recorder, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"127.0.0.1:{port}", recorder
    finally:
        server.stop(None)


class ArgvWatch:
    """Samples the argv of every process while jobs run: no password may show up there."""

    def __init__(self, passwords: list[str]) -> None:
        self._passwords = [p.encode() for p in passwords]
        self.leaks: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> ArgvWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            for entry in Path("/proc").iterdir():
                if not entry.name.isdigit():
                    continue
                try:
                    argv = (entry / "cmdline").read_bytes()
                except OSError:
                    continue
                if any(p in argv for p in self._passwords):
                    self.leaks.append(argv.replace(b"\0", b" ")[:300].decode(errors="replace"))


def submit(group: dict, workdir: Path, conf: Path, env: dict, *args: str) -> subprocess.Popen:
    path = workdir / f"{group['jobGroupId']}.json"
    path.write_text(json.dumps(group))
    log = (workdir / f"{group['jobGroupId']}.log").open("a")
    return subprocess.Popen(
        [str(ROOT / "spark-submit.sh"), str(path), *args],
        env={**os.environ, "UATU_CONF_DIR": str(conf), **env},
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def audit_group(group_id: str, cluster: str, topic: str) -> dict:
    return {
        "jobGroupId": group_id,
        "type": "JOB_TYPE_KAFKA_AUDIT",
        "securityConfig": {"isSecure": True},
        "kafkaConsumerTaskGroup": {
            "cluster": cluster,
            "topic": topic,
            "auditMetadata": {
                "auditConfigs": [
                    {"auditType": "AUDIT_TYPE_EXACT_UNIQ", "auditIntervalInSeconds": 60}
                ]
            },
        },
    }


def produce(conf: Path, cluster: str, topic: str, n: int) -> None:
    from confluent_kafka import Producer

    producer = Producer(load_settings(conf).clusters[cluster].client_config())
    for i in range(n):
        producer.produce(topic, key=f"k{i}".encode(), value=json.dumps({"i": i}).encode())
    assert producer.flush(60) == 0


def probes_over_sasl(spark, table: Path) -> int:
    """Probe windows in which records went over the SASL_SSL listener and came back."""
    if not any((table / "_delta_log").glob("*.json")):  # a folder alone is not a table yet
        return 0
    return (
        spark.read.format("delta")
        .load(str(table))
        .where(f"cluster = '{PLAIN}' AND produced > 0 AND consumed > 0")
        .count()
    )


def test_jobs_over_sasl_ssl_leak_no_password(spark, sasl_kafka, conf_dir, heartbeats, tmp_path):
    cluster, sasl = sasl_kafka
    target, recorder = heartbeats
    source, copy = f"sasl-{uuid.uuid4().hex[:6]}", f"sasl-copy-{uuid.uuid4().hex[:6]}"
    for topic in (source, copy):
        cluster.create_topic(topic, partitions=2)
    produce(conf_dir, SCRAM, source, 200)
    env = {"UATU_CONTROL_PLANE": target, "UATU_HEARTBEAT_SECONDS": "1"}
    with ArgvWatch(sasl.passwords()) as argv:
        # --check: given librdkafka properties (SCRAM) and translated Java ones (PLAIN).
        for name in (SCRAM, PLAIN):
            check = submit(audit_group(f"check-{name}", name, source), tmp_path, conf_dir, env,
                           "--check")  # fmt: skip
            assert check.wait(timeout=120) == 0, (tmp_path / f"check-{name}.log").read_text()

        audit = submit(audit_group("audit", SCRAM, source), tmp_path, conf_dir, env, "--once")
        assert audit.wait(timeout=600) == 0, (tmp_path / "audit.log").read_text()[-3000:]

        replication = {
            "jobGroupId": "replicate",
            "type": "JOB_TYPE_KAFKA_REPLICATION",
            "securityConfig": {"isSecure": True},
            "kafkaConsumerTaskGroup": {"cluster": SCRAM, "topic": source, "consumerGroup": "r"},
            "kafkaDispatcherTaskGroup": {"cluster": PLAIN, "topic": copy, "isSecure": True},
            "replicationTaskGroup": {"isContinuous": False},
        }
        copied = submit(replication, tmp_path, conf_dir, env)
        assert copied.wait(timeout=600) == 0, (tmp_path / "replicate.log").read_text()[-3000:]

        availability = {
            "jobGroupId": "probe",
            "type": "JOB_TYPE_KAFKA_AVAILABILITY",
            "kafkaConsumerTaskGroup": {"cluster": PLAIN, "topic": f"probe-{uuid.uuid4().hex[:6]}"},
            "availabilityTaskGroup": {
                "availabilityJobType": "AVAILABILITY_JOB_TYPE_NATIVE_PRODUCER"
            },
            "extension": {
                "@type": "type.googleapis.com/uatu.v1.JobOptions",
                "availability": {"probeWindowSeconds": 2, "skipConsumerLag": True},
            },
        }
        probe = submit(availability, tmp_path, conf_dir, env)
        probes_table = conf_dir.parent / "wh" / "availability_probes"
        try:
            wait_for(lambda: probes_over_sasl(spark, probes_table), 300, "probe rows")
        finally:
            os.killpg(probe.pid, signal.SIGTERM)
            probe.wait(timeout=120)
        time.sleep(1)
    assert argv.leaks == []

    counts = spark.read.format("delta").load(str(conf_dir.parent / "wh" / "audit_counts"))
    assert counts.groupBy().sum("message_count").first()[0] == 200
    # Read back over PLAINTEXT: every record reached the copy, once.
    assert count_records(cluster.bootstrap_servers, copy, partitions=2) == 200

    passwords = sasl.passwords()
    for log in tmp_path.glob("*.log"):
        text = log.read_text(errors="replace")
        assert not any(p in text for p in passwords), log
    assert recorder.seen, "the jobs heartbeated"
    assert not any(p.encode() in seen for seen in recorder.seen for p in passwords)
    for table in (conf_dir.parent / "wh").iterdir():
        rows = spark.read.format("delta").load(str(table)).collect()
        dumped = repr(rows)
        assert not any(p in dumped for p in passwords), table.name
    assert yaml.safe_load((conf_dir / "clusters.yaml").read_text())  # still references only
