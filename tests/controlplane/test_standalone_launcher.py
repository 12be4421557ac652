"""The standalone launcher: its pure request builder, its answers to a stub master, and the
real thing (a Spark standalone master and two workers on 127.0.0.1): a worker pool of two
worker applications running audits. A JobGroup's own application (`launch`) and a worker
application (`launch_worker`) differ only in the request's application argument and files,
which the stub tests hold; the cluster runs the worker applications."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest
from uber.data.kafka.datatransfer import job_pb2

from controlplane.errors import LaunchFailed
from controlplane.launchers.base import LaunchRecord, launch_details
from controlplane.launchers.standalone import Resources, StandaloneLauncher, submission_request
from core.kafka_admin import partition_count
from core.paths import C1_ONLY_JIT
from core.processes import free_ports, group_pids
from devservices.spark_standalone import StandaloneCluster, main, running_pids, start_standalone
from testing.conf import write_conf_dir
from testing.demo_data import audit_dataset, produce
from testing.jobgroups import audit_group
from testing.polling import wait_for
from tests.controlplane.in_process import in_process_control_plane
from tests.controlplane.test_worker_pool import audited_messages

ROOT = Path("/srv/uatu")
JARS = ["/srv/uatu/var/jars/spark/a.jar", "/srv/uatu/var/jars/spark/b.jar"]


def request(**overrides: Any) -> dict:
    args: dict[str, Any] = {
        "app_name": "uatu-g1",
        "master_url": "spark://m:7077",
        "jars": JARS,
        "stop_file": Path("/shared/apps/g1/stop"),
        "root": ROOT,
        "spark_version": "4.2.0",
    }
    return submission_request(Path("/shared/apps/g1/jobgroup.json"), **{**args, **overrides})


def test_request_runs_main_py_with_the_job_zip_through_python_runner():
    body = request()
    assert body["action"] == "CreateSubmissionRequest"
    assert body["clientSparkVersion"] == "4.2.0"
    assert body["appResource"] == ""
    assert body["mainClass"] == "org.apache.spark.deploy.PythonRunner"
    assert body["appArgs"] == [
        "/srv/uatu/jobs/main.py",
        "/srv/uatu/build/uatu-jobs.zip",
        "/shared/apps/g1/jobgroup.json",
    ]


def test_request_spark_properties_mirror_spark_submit_sh():
    props = request()["sparkProperties"]
    assert props == {
        "spark.app.name": "uatu-g1",
        "spark.master": "spark://m:7077",
        "spark.submit.deployMode": "cluster",
        "spark.driver.supervise": "false",
        "spark.driver.memory": "1g",
        "spark.driver.cores": "1",
        "spark.executor.memory": "1g",
        "spark.executor.cores": "2",
        "spark.cores.max": "2",
        "spark.jars": ",".join(JARS),
        "spark.submit.pyFiles": "/srv/uatu/build/uatu-jobs.zip",
        "spark.files": "/srv/uatu/build/uatu-jobs.zip",
        "spark.driver.extraJavaOptions": (
            "-Dlog4j2.configurationFile=file:/srv/uatu/conf/log4j2.properties"
        ),
    }
    assert all(isinstance(v, str) for v in props.values())  # the REST API wants strings


def test_request_environment_defaults_and_caller_env_wins():
    assert request()["environmentVariables"] == {
        "UATU_CONF_DIR": "/srv/uatu/conf",
        "UATU_STOP_FILE": "/shared/apps/g1/stop",
        "PYSPARK_PYTHON": "/srv/uatu/.venv/bin/python",
        "PYSPARK_DRIVER_PYTHON": "/srv/uatu/.venv/bin/python",
    }
    env = request(
        conf_dir=Path("/etc/uatu"),
        python=Path("/opt/py/bin/python3"),
        env={"UATU_CONTROL_PLANE": "cp:8087", "UATU_CONF_DIR": "/override"},
    )["environmentVariables"]
    assert env == {
        "UATU_CONF_DIR": "/override",
        "UATU_STOP_FILE": "/shared/apps/g1/stop",
        "PYSPARK_PYTHON": "/opt/py/bin/python3",
        "PYSPARK_DRIVER_PYTHON": "/opt/py/bin/python3",
        "UATU_CONTROL_PLANE": "cp:8087",
    }


def test_request_resources_and_extra_conf():
    props = request(
        resources=Resources("2g", 2, "3g", 1, 4),
        extra_conf={"spark.sql.shuffle.partitions": "4", "spark.cores.max": "8"},
    )["sparkProperties"]
    assert props["spark.driver.memory"] == "2g"
    assert props["spark.driver.cores"] == "2"
    assert props["spark.executor.memory"] == "3g"
    assert props["spark.executor.cores"] == "1"
    assert props["spark.cores.max"] == "8"  # extra_conf wins, like UATU_SPARK_SUBMIT_ARGS
    assert props["spark.sql.shuffle.partitions"] == "4"


# --- against a stub master: failure semantics, no Spark -----------------------------------


class StubMaster:
    """An HTTP server answering REST calls from `routes`: path -> (status, body bytes).

    `after[path]` runs once a request for `path` was answered (a state change it causes).
    """

    def __init__(self) -> None:
        self.routes: dict[str, tuple[int, bytes]] = {}
        self.after: dict[str, Callable[[], None]] = {}
        self.requests: list[tuple[str, str, bytes]] = []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                stub.requests.append((self.command, self.path, self.rfile.read(length)))
                status, body = stub.routes.get(self.path, (404, b"{}"))
                self.send_response(status)
                self.end_headers()
                self.wfile.write(body)
                if self.path in stub.after:
                    stub.after[self.path]()

            do_GET = do_POST = _answer

            def log_message(self, *args: object) -> None:
                pass

        self.server = HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()

    def answer(self, path: str, body: dict | bytes, status: int = 200) -> None:
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.routes[f"/v1/submissions/{path}"] = (status, raw)


@pytest.fixture
def stub() -> Iterator[StubMaster]:
    master = StubMaster()
    yield master
    master.server.shutdown()
    master.server.server_close()


def stub_launcher(rest_url: str, tmp_path: Path, **kwargs: Any) -> StandaloneLauncher:
    return StandaloneLauncher(
        rest_url, "spark://m:7077", tmp_path / "apps", jars=JARS, http_timeout=2, **kwargs
    )


def record_for(driver_id: str, tmp_path: Path) -> LaunchRecord:
    details = launch_details(submission_id=driver_id, stop_file=str(tmp_path / "stop"))
    return LaunchRecord(driver_id, "def", 0.0, "log", details)


def test_launch_posts_the_request_and_records_the_submission(stub, tmp_path):
    stub.answer("create", {"success": True, "submissionId": "driver-1", "message": "ok"})
    launcher = stub_launcher(stub.url, tmp_path, worker_dir=Path("/w"))
    record = launcher.launch(audit_group("g1", "t"), "def-1", {"UATU_WORKER_ID": "7"})
    method, path, body = stub.requests[0]
    assert (method, path) == ("POST", "/v1/submissions/create")
    sent = json.loads(body)
    assert sent["environmentVariables"]["UATU_WORKER_ID"] == "7"
    assert sent["appArgs"][2] == str((tmp_path / "apps" / "g1" / "jobgroup.json").resolve())
    assert (
        json.loads((tmp_path / "apps" / "g1" / "jobgroup.json").read_text())["jobGroupId"] == "g1"
    )
    assert record.handle == record.detail("submission_id") == "driver-1"
    assert record.definition == "def-1"
    assert record.log == "/w/driver-1/stdout"
    assert isinstance(record.started_at, float)
    assert LaunchRecord.from_json(record.to_json()) == record  # the store keeps it as JSON


def test_launch_worker_submits_a_worker_application(stub, tmp_path):
    stub.answer("create", {"success": True, "submissionId": "driver-9", "message": "ok"})
    launcher = stub_launcher(stub.url, tmp_path, worker_dir=Path("/w"))
    env = {"UATU_WORKER_ID": "7", "UATU_WORKER_SECRET": "s3cret", "UATU_WORKER_FENCE_SECONDS": "10"}
    record = launcher.launch_worker("worker-0", "worker", env)
    sent = json.loads(stub.requests[0][2])
    main_py, py_files, app_arg = sent["appArgs"]
    assert (main_py.endswith("jobs/main.py"), py_files.endswith("uatu-jobs.zip")) == (True, True)
    assert app_arg == "worker"
    assert sent["sparkProperties"]["spark.app.name"] == "uatu-worker-0"
    assert sent["environmentVariables"]["UATU_WORKER_FENCE_SECONDS"] == "10"
    assert sent["environmentVariables"]["UATU_STOP_FILE"] == str(
        (tmp_path / "apps" / "worker-0" / "stop").resolve()
    )
    written = json.loads((tmp_path / "apps" / "worker-0" / "submission.json").read_text())
    assert "s3cret" not in json.dumps(written)  # the secret is not kept on disk
    assert not (tmp_path / "apps" / "worker-0" / "jobgroup.json").exists()
    assert (record.handle, record.definition, record.log) == (
        "driver-9",
        "worker",
        "/w/driver-9/stdout",
    )
    assert "jobgroup_file" not in record.details


def test_drivers_serve_metrics_named_in_the_shared_workdir_only_when_asked(stub, tmp_path):
    """With a metrics host the driver, wherever the master places it, serves /metrics on that
    interface and names it under the launcher's workdir (shared storage, as the stop files),
    where the control plane's /sd reads it; without one it serves none."""
    for host, expected in ((None, {}), ("0.0.0.0", {
        "UATU_METRICS_PORT": "0", "UATU_METRICS_HOST": "0.0.0.0",
        "UATU_METRICS_SD_DIR": str((tmp_path / "apps" / "metrics-sd").resolve()),
    })):  # fmt: skip
        stub.requests.clear()
        stub.answer("create", {"success": True, "submissionId": "driver-3", "message": "ok"})
        stub_launcher(stub.url, tmp_path, metrics_host=host).launch_worker("w", "worker", {})
        sent = json.loads(stub.requests[0][2])["environmentVariables"]
        assert {k: v for k, v in sent.items() if k.startswith("UATU_METRICS")} == expected


def test_launch_raises_with_the_masters_message_when_rejected(stub, tmp_path):
    standby = "Can only accept driver submissions in ALIVE state. Current state: STANDBY."
    stub.answer("create", {"success": False, "message": standby})
    with pytest.raises(LaunchFailed, match="STANDBY"):
        stub_launcher(stub.url, tmp_path).launch(audit_group("g1", "t"), "d", {})
    stub.answer("create", {"message": "Malformed request: missing mainClass"}, status=400)
    with pytest.raises(LaunchFailed, match="Malformed request"):
        stub_launcher(stub.url, tmp_path).launch(audit_group("g1", "t"), "d", {})


@pytest.mark.parametrize(
    ("answer", "status", "alive"),
    [
        ({"success": True, "driverState": "SUBMITTED"}, 200, True),
        ({"success": True, "driverState": "RUNNING"}, 200, True),
        ({"success": True, "driverState": "RELAUNCHING"}, 200, True),
        ({"success": True, "driverState": "UNKNOWN"}, 200, True),  # master recovering
        ({"success": True, "driverState": "FINISHED"}, 200, False),
        ({"success": True, "driverState": "KILLED"}, 200, False),
        ({"success": True, "driverState": "FAILED"}, 200, False),
        ({"success": True, "driverState": "ERROR"}, 200, False),
        ({"success": False, "message": "not found"}, 200, False),  # master forgot it
        (b"<html>proxy error</html>", 502, True),  # no usable answer: unknown
    ],
)
def test_alive_follows_the_driver_state(stub, tmp_path, answer, status, alive):
    stub.answer("status/driver-1", answer, status)
    assert stub_launcher(stub.url, tmp_path).alive(record_for("driver-1", tmp_path)) is alive


def test_an_unreachable_master_is_alive_unknown_and_fails_launch_and_cancel(tmp_path, caplog):
    (port,) = free_ports(1)  # nothing listens there
    launcher = stub_launcher(f"http://127.0.0.1:{port}", tmp_path, grace_seconds=0.5)
    assert launcher.alive(record_for("driver-1", tmp_path)) is True
    assert "assuming it still runs" in caplog.text
    with pytest.raises(LaunchFailed, match="launch of g1 failed"):
        launcher.launch(audit_group("g1", "t"), "d", {})
    with pytest.raises(LaunchFailed, match="cancel of driver-1 failed"):
        launcher.cancel(record_for("driver-1", tmp_path))


def test_cancel_kills_a_driver_still_waiting_for_resources_at_once(stub, tmp_path):
    # It would never see its stop file, so sitting out the grace period would be pointless.
    stub.answer("status/driver-1", {"success": True, "driverState": "SUBMITTED"})
    stub.answer("kill/driver-1", {"success": True, "message": "Kill request submitted"})
    stub.after["/v1/submissions/kill/driver-1"] = lambda: stub.answer(
        "status/driver-1", {"success": True, "driverState": "KILLED"}
    )
    launcher = stub_launcher(stub.url, tmp_path, grace_seconds=600, kill_timeout=10)
    launcher.cancel(record_for("driver-1", tmp_path))
    assert [(m, p) for m, p, _ in stub.requests] == [
        ("GET", "/v1/submissions/status/driver-1"),
        ("POST", "/v1/submissions/kill/driver-1"),
        ("GET", "/v1/submissions/status/driver-1"),
    ]
    assert (tmp_path / "stop").exists()
    assert not launcher.alive(record_for("driver-1", tmp_path))


def test_cancel_of_a_driver_that_stops_by_itself_sends_no_kill(stub, tmp_path):
    stub.answer("status/driver-1", {"success": True, "driverState": "FINISHED"})
    stub_launcher(stub.url, tmp_path).cancel(record_for("driver-1", tmp_path))
    assert [p for _, p, _ in stub.requests] == ["/v1/submissions/status/driver-1"]


def test_cancel_raises_when_the_driver_survives_the_kill(stub, tmp_path):
    stub.answer("status/driver-1", {"success": True, "driverState": "RUNNING"})
    stub.answer("kill/driver-1", {"success": False, "message": "Driver driver-1 not found"})
    launcher = stub_launcher(stub.url, tmp_path, grace_seconds=0, kill_timeout=0)
    with pytest.raises(LaunchFailed, match="still RUNNING"):
        launcher.cancel(record_for("driver-1", tmp_path))


# --- against a real standalone master and worker ------------------------------------------


def test_standalone_cli_has_help(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    assert "up" in capsys.readouterr().out


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    cluster = start_standalone(
        tmp_path_factory.mktemp("standalone"), cores=2, memory="3g", workers=2
    )
    groups = [p.pid for p in cluster.daemons if p is not None]
    try:
        yield cluster
    finally:
        cluster.stop()
        assert [pid for pgid in groups for pid in group_pids(pgid)] == []


def _cmdline(pid: int) -> list[bytes]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return []  # exited meanwhile


def launched_pids(cluster: StandaloneCluster) -> list[int]:
    """Every process the workers started (drivers, executors): their groups minus the JVMs."""
    daemons = {w.pid for w in cluster.workers}
    return [
        pid for w in cluster.workers if w.pid for pid in group_pids(w.pid) if pid not in daemons
    ]


def cluster_processes(cluster: StandaloneCluster) -> list[str]:
    """Command lines of every process the workers started."""
    return [b" ".join(_cmdline(pid)).decode(errors="replace") for pid in launched_pids(cluster)]


def worker_python_envs(cluster: StandaloneCluster) -> list[dict[str, str]]:
    """The environments of the Python drivers of the worker applications running on `cluster`."""
    envs = []
    for pid in launched_pids(cluster):
        cmdline = _cmdline(pid)
        if cmdline[1:2] and cmdline[1].endswith(b"jobs/main.py") and b"worker" in cmdline[2:]:
            raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            envs.append(dict(e.decode().split("=", 1) for e in raw if b"=" in e))
    return envs


def cluster_launcher(
    cluster: StandaloneCluster,
    tmp_path: Path,
    conf: Path,
    grace_seconds: float = 30,
    **resources: Any,
) -> StandaloneLauncher:
    """The launcher of the tests on `cluster`: C1-only drivers and executors."""
    return StandaloneLauncher(
        cluster.rest_url,
        cluster.master_url,
        tmp_path / "apps",
        conf_dir=conf,
        worker_dir=cluster.worker_dir,
        grace_seconds=grace_seconds,
        # C1 only, as for the suite's other Spark JVMs (tests/conftest.py): SPARK_SUBMIT_OPTS
        # reaches neither a cluster's executors nor a driver the cluster starts (a driver's
        # default options come before the launcher's extraJavaOptions, which stay as they are).
        extra_conf={
            "spark.driver.defaultJavaOptions": C1_ONLY_JIT,
            "spark.executor.extraJavaOptions": C1_ONLY_JIT,
        },
        **resources,
    )


@pytest.mark.integration
def test_a_worker_pool_runs_on_the_standalone_cluster(standalone, kafka, tmp_path):
    """`serve --launcher standalone --workers 2`, in this process: two worker applications
    submitted to the cluster's two Spark workers, one audit placed on each, each counting
    exactly the records produced; CANCEL over the wire stops one query, not its application.
    Each driver runs on a worker with its executor on the suite's JIT setting, and its Python
    gets the control plane's environment. At the end one application is cancelled through its
    stop file (FINISHED) and the other with no grace (the master kills it: KILLED)."""
    # What `python -m devservices.spark_standalone down` would stop.
    assert running_pids(standalone.dir) == [d.pid for d in standalone.daemons]
    assert len(standalone.workers) == 2
    suffix = uuid.uuid4().hex[:8]
    now_ms = int(time.time() * 1000)
    sent = {}
    for n in (1, 2):
        topic = f"sa-pool-{n}-{suffix}"
        kafka.create_topic(topic, partitions=2)
        sent[f"sa-pool-{n}"] = (topic, audit_dataset(80 * n, 2, now_ms, seed=n))
        produce(kafka.bootstrap_servers, topic, sent[f"sa-pool-{n}"][1])
    warehouse = tmp_path / "wh"
    conf = write_conf_dir(tmp_path / "conf", kafka.bootstrap_servers, warehouse, tmp_path / "ck")
    # One core for the driver and one executor of one core: two applications fit the
    # cluster's four cores.
    launcher = cluster_launcher(standalone, tmp_path, conf, executor_cores=1, max_cores=1)
    started = time.monotonic()
    launched: list[LaunchRecord] = []
    try:
        with in_process_control_plane(tmp_path, conf, partition_count) as plane:
            pool = plane.start(launcher, size=2, lease_seconds=60, heartbeat_seconds=1)
            wait_for(lambda: len(pool.live_workers()) == 2, 240, "two worker applications")
            print(f"two worker applications heartbeating: {time.monotonic() - started:.1f} s")
            slots = [plane.store.launches()[f"~worker/{n}"] for n in (0, 1)]
            launched.extend(slots)
            assert all(launcher.driver_state(r.handle) == "RUNNING" for r in slots)
            for group_id, (topic, _) in sent.items():
                group = audit_group(group_id, topic, from_earliest=True)
                plane.groups.add(group, job_pb2.JOB_STATE_RUNNING, None)
            wait_for(
                lambda: all(audited_messages(warehouse, g) == len(r) for g, (_, r) in sent.items()),
                240,
                "both audits to count every record",
            )
            print(f"both audits counted: {time.monotonic() - started:.1f} s")
            placed = {plane.store.launches()[g].worker_id for g in sent}
            assert placed == {r.worker_id for r in slots}  # one group on each application
            jvms = [p for p in cluster_processes(standalone) if "java" in p.split(" ", 1)[0]]
            assert sum("CoarseGrainedExecutorBackend" in p for p in jvms) == 2
            assert sum("DriverWrapper" in p for p in jvms) == 2
            assert all(C1_ONLY_JIT in p for p in jvms), jvms  # the suite's JIT setting reached them
            envs = worker_python_envs(standalone)
            assert sorted(e["UATU_WORKER_ID"] for e in envs) == sorted(
                str(r.worker_id) for r in slots
            )
            assert all(e["UATU_CONF_DIR"] == str(conf.resolve()) for e in envs)

            plane.groups.set_state("sa-pool-1", job_pb2.JOB_STATE_CANCELED)
            wait_for(
                lambda: "sa-pool-1" not in pool.heard.running(0, pool.pool_worker_ids()),
                60,
                "the worker to report the query stopped",
            )
            assert all(launcher.driver_state(r.handle) == "RUNNING" for r in slots)
            assert plane.store.launches()["~worker/0"] == slots[0]  # nothing relaunched
    finally:  # the control plane stopped first: it would relaunch the workers being stopped
        # One worker stopped through its stop file, the other with no grace: the master kills
        # its driver.
        hard = cluster_launcher(
            standalone, tmp_path, conf, grace_seconds=0, executor_cores=1, max_cores=1
        )
        for record, stopper in zip(launched, (launcher, hard), strict=False):
            stopper.cancel(record)
    assert [launcher.driver_state(r.handle) for r in launched] == ["FINISHED", "KILLED"]
    assert "received stop file" in Path(launched[0].log).read_text()
    assert not any(launcher.alive(r) for r in launched)
    # The killed driver JVM leaves its Python process behind for a moment: it exits once its
    # next call into the JVM fails.
    wait_for(lambda: cluster_processes(standalone) == [], 60, "no driver or executor processes")
