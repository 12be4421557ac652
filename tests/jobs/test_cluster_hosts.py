"""What a cluster's hosts need: `./spark-submit.sh` against a real Spark standalone master, in
client mode (the driver here, its executors on the cluster's worker), with the checkout and
its venv hidden from the worker and everything it starts (a mount namespace:
`devservices.spark_standalone`'s `hidden`). The executors get the jars and the job zip from
the driver and run no Python, so the audit counts every record and the replication copies
every record once (docs/operations.md, "What each host needs"). A job that ran Python on
executors fails here; the code-shape test keeps such calls out of the code
(tests/core/test_code_shape.py)."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
from google.protobuf import json_format

from core.paths import C1_ONLY_JIT, ROOT
from devservices.spark_standalone import start_standalone
from testing.conf import write_conf_dir
from testing.demo_data import audit_dataset, produce
from testing.jobgroups import audit_group, replication_group
from testing.jobrun import run_job
from tests.controlplane.test_worker_pool import audited_messages, copied_exactly

pytestmark = pytest.mark.integration


def test_jobs_run_on_executors_that_see_neither_the_checkout_nor_its_venv(kafka, tmp_path):
    assert not tmp_path.is_relative_to(ROOT)  # the worker's own dirs must stay visible to it
    topic, copy = f"hosts-{uuid.uuid4().hex[:8]}", f"hosts-copy-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(topic, partitions=2)
    kafka.create_topic(copy, partitions=2)
    records = audit_dataset(300, 2, int(time.time() * 1000))
    produce(kafka.bootstrap_servers, topic, records)
    warehouse = tmp_path / "wh"
    conf = write_conf_dir(tmp_path / "conf", kafka.bootstrap_servers, warehouse, tmp_path / "ck")
    groups = [
        audit_group("hosts-audit", topic, from_earliest=True),
        replication_group("hosts-copy", topic, copy),
    ]

    with start_standalone(tmp_path / "cluster", cores=2, memory="2g", hidden=[ROOT]) as cluster:
        # The worker's view of the checkout is an empty dir; this process's is not.
        worker_view = Path(f"/proc/{cluster.worker.pid}/root") / ROOT.relative_to("/")
        assert (ROOT / ".venv" / "bin" / "python").exists()
        assert list(worker_view.iterdir()) == []

        env = {
            "SPARK_MASTER": cluster.master_url,
            "SPARK_LOCAL_IP": "127.0.0.1",  # the driver's address, for the executors
            "UATU_SPARK_SUBMIT_ARGS": (
                "--conf spark.sql.shuffle.partitions=2 --conf spark.executor.memory=1g "
                f"--conf spark.executor.extraJavaOptions={C1_ONLY_JIT}"
            ),
        }
        for group in groups:
            data = json_format.MessageToDict(group)
            status, log = run_job(data, tmp_path, conf, "--once", env=env)
            assert status == 0, log[-4000:]
        # The tasks ran in the worker's executors (one application per run), not in a driver.
        executor_logs = [p.read_text() for p in cluster.worker_dir.glob("app-*/*/stderr")]
        assert len(executor_logs) == len(groups)
        assert all("Finished task" in text for text in executor_logs), executor_logs

    assert audited_messages(warehouse, "hosts-audit") == len(records)
    assert copied_exactly(kafka.bootstrap_servers, topic, copy, partitions=2)
