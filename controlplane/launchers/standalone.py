"""Run one JobGroup as a driver on a Spark standalone cluster, through the master's REST API.

`StandaloneLauncher` implements the `Launcher` protocol (controlplane/launchers/base.py) with the
standalone master's REST submission server (``spark.master.rest.enabled``, port 6066 by
default): ``POST /v1/submissions/create``, ``GET /v1/submissions/status/<id>`` and
``POST /v1/submissions/kill/<id>``. The launch handle is the submission id (``driver-...``).

Spark rejects ``--deploy-mode cluster`` for Python apps on standalone clusters, so the
submission runs ``org.apache.spark.deploy.PythonRunner`` as the driver's main class: the
worker starts a driver JVM, which starts the venv's Python on ``jobs/main.py`` with the
job zip on its PYTHONPATH. `submission_request` (pure) builds that request so that the driver
gets what ``spark-submit.sh`` would pass: the same jars, py-files, entry point, conf dir,
Python, log4j config and stop file, plus the caller's extra environment.

Storage: every path in the request (``jobs/main.py``, the job zip, the jars, the Python, the
conf dir, the JobGroup file and stop file under ``workdir``) is read *on the worker that runs
the driver*. On the loopback cluster of the tests they are simply local; on a real cluster
the project (same path) and ``workdir`` must be on storage every worker mounts. Without a
shared ``workdir`` the graceful stop file is never seen and cancel falls back to a kill.

Failure semantics, chosen so that a flaky master never makes the reconciler start a second
copy of a running job:

* ``launch`` raises `LaunchFailed` (gRPC UNAVAILABLE) with the master's message when the
  master is unreachable or rejects the submission. The REST create call is not idempotent:
  if the master accepted it and only the answer was lost, that driver runs untracked.
* ``alive`` is True for SUBMITTED, RUNNING and RELAUNCHING, and also when the answer is
  unknown: the master is unreachable, answers garbage, or reports UNKNOWN (its state while it
  recovers from a failover). A warning is logged; the reconciler then leaves the group
  alone instead of relaunching it. False for FINISHED, KILLED, FAILED, ERROR, and for a
  submission the master does not know (a master restarted without recovery mode forgets its
  drivers, and tells the workers that re-register with it to kill them: Master.scala,
  WorkerLatestState).
* ``cancel`` touches the stop file, waits up to ``grace_seconds`` for the driver to finish by
  itself (graceful query stop, state FINISHED), then asks the master to kill it and waits up
  to ``kill_timeout`` seconds. It raises `LaunchFailed` if it cannot confirm the driver
  ended (master unreachable, driver still running), so the caller keeps the launch record
  and retries. A kill stops the driver JVM at once (safe, every write is exactly-once, but
  the micro-batch in flight is lost); the Python driver is left behind by the JVM and exits
  when its next call into it fails (the job polls every 2 s).
"""

from __future__ import annotations

import importlib.metadata
import json
import logging
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from uber.data.kafka.datatransfer.job_group_pb2 import JobGroup

from controlplane.errors import LaunchFailed
from controlplane.launchers.base import LaunchRecord, launch_details
from controlplane.launchers.submit import metrics_env, metrics_sd_dir, prepare_app_dir
from core.paths import ROOT, project_jars

# The pyspark release the jobs run with, read from its package metadata: the control plane
# never imports pyspark itself.
SPARK_VERSION = importlib.metadata.version("pyspark")

log = logging.getLogger("uatu.launcher.standalone")

# Driver states (org.apache.spark.deploy.master.DriverState) in which the driver runs or will.
LIVE_STATES = frozenset({"SUBMITTED", "RUNNING", "RELAUNCHING"})
# UNKNOWN: "temporarily not known due to master failure recovery"; it resolves by itself.
UNKNOWN_STATE = "UNKNOWN"

_POLL_S = 0.5


@dataclass(frozen=True)
class Resources:
    """What one application asks the cluster for (driver and executors together).

    ``max_cores`` (``spark.cores.max``) caps the executor cores of the application; with the
    defaults that is one executor with 2 task slots, next to a 1-core driver.
    """

    driver_memory: str = "1g"
    driver_cores: int = 1
    executor_memory: str = "1g"
    executor_cores: int = 2
    max_cores: int = 2


def submission_request(
    app_arg: Path | str,
    *,
    app_name: str,
    master_url: str,
    jars: Sequence[str],
    stop_file: Path,
    conf_dir: Path | None = None,
    env: Mapping[str, str] | None = None,
    resources: Resources = Resources(),
    extra_conf: Mapping[str, str] | None = None,
    root: Path = ROOT,
    python: Path | None = None,
    spark_version: str = SPARK_VERSION,
) -> dict:
    """The ``CreateSubmissionRequest`` body that runs ``jobs/main.py app_arg`` (pure):
    ``app_arg`` is a JobGroup file, or ``worker`` for a worker application (jobs/worker/).

    Mirrors ``spark-submit.sh``: ``jars`` become ``spark.jars`` (on the driver's class path
    and shipped to executors), ``root/build/uatu-jobs.zip`` is the py-files argument of
    PythonRunner and ``spark.submit.pyFiles``/``spark.files`` (executors), ``python``
    (default: the project venv) runs the driver (executors run no Python), the driver logs with
    ``root/conf/log4j2.properties``, and the environment carries ``UATU_CONF_DIR`` (default
    ``root/conf``) and ``UATU_STOP_FILE``. ``env`` (control-plane address, job ids) is added
    last and wins, as with LocalLauncher; so does ``extra_conf`` over the Spark properties.
    ``spark.master`` is the standalone master, so executors run on the cluster too.
    """
    python = python or root / ".venv" / "bin" / "python"
    py_files = str(root / "build" / "uatu-jobs.zip")
    properties = {
        "spark.app.name": app_name,
        "spark.master": master_url,
        "spark.submit.deployMode": "cluster",
        # The reconciler relaunches dead applications with backoff; a supervising worker
        # relaunching them as well would race it into running two copies.
        "spark.driver.supervise": "false",
        "spark.driver.memory": resources.driver_memory,
        "spark.driver.cores": str(resources.driver_cores),
        "spark.executor.memory": resources.executor_memory,
        "spark.executor.cores": str(resources.executor_cores),
        "spark.cores.max": str(resources.max_cores),
        "spark.jars": ",".join(jars),
        # What spark-submit sets for --py-files: executors fetch the zip and import from it.
        "spark.submit.pyFiles": py_files,
        "spark.files": py_files,
        "spark.driver.extraJavaOptions": (
            f"-Dlog4j2.configurationFile=file:{root / 'conf' / 'log4j2.properties'}"
        ),
        **(extra_conf or {}),
    }
    environment = {
        "UATU_CONF_DIR": str(conf_dir or root / "conf"),
        "UATU_STOP_FILE": str(stop_file),
        "PYSPARK_PYTHON": str(python),
        "PYSPARK_DRIVER_PYTHON": str(python),
        **(env or {}),
    }
    return {
        "action": "CreateSubmissionRequest",
        "clientSparkVersion": spark_version,
        # Empty: there is no application jar; the worker then fetches nothing.
        "appResource": "",
        "mainClass": "org.apache.spark.deploy.PythonRunner",
        # PythonRunner's arguments: <main python file> <py-files, comma-separated> <app args>.
        "appArgs": [str(root / "jobs" / "main.py"), py_files, str(app_arg)],
        "sparkProperties": properties,
        "environmentVariables": environment,
    }


SECRET_ENV = ("UATU_WORKER_SECRET",)


def redacted(request: dict) -> dict:
    """The request as written to submission.json: the worker secret is not kept on disk."""
    env = dict(request.get("environmentVariables", {}))
    env.update({name: "<redacted>" for name in SECRET_ENV if name in env})
    return {**request, "environmentVariables": env}


class MasterUnreachable(Exception):
    """No usable answer from the REST server (not reachable, timed out, not JSON)."""


class StandaloneLauncher:
    """Launches JobGroups through a standalone master's REST API; see the module docstring.

    ``rest_url`` is the REST server (``http://master:6066``), ``master_url`` what drivers and
    executors connect to (``spark://master:7077``). ``workdir/<job_group_id>/`` holds the
    JobGroup file, the stop file and ``submission.json`` (the last request sent).
    ``worker_dir``, when the worker's work dir is visible from here, makes the record's
    "log" the driver's output file (``<worker_dir>/<driver-id>/stdout``) instead of a hint.
    Not thread-safe; one reconciler thread calls it.
    """

    def __init__(
        self,
        rest_url: str,
        master_url: str,
        workdir: Path,
        *,
        conf_dir: Path | None = None,
        driver_memory: str = "1g",
        executor_memory: str = "1g",
        executor_cores: int = 2,
        max_cores: int = 2,
        extra_conf: Mapping[str, str] | None = None,
        jars: Sequence[str] | None = None,
        worker_dir: Path | None = None,
        grace_seconds: float = 15.0,
        kill_timeout: float = 30.0,
        http_timeout: float = 5.0,
        rest_token: str | None = None,
        metrics_host: str | None = None,
    ) -> None:
        """`metrics_host`: the interface the drivers serve /metrics on, named in
        `workdir`/metrics-sd (shared storage, as the stop files are) for the control plane's
        /sd; None: they serve none."""
        self.rest_url = rest_url.rstrip("/")
        self.metrics_host = metrics_host
        self.master_url = master_url
        self.workdir = workdir
        self.conf_dir = conf_dir
        self.resources = Resources(
            driver_memory=driver_memory,
            executor_memory=executor_memory,
            executor_cores=executor_cores,
            max_cores=max_cores,
        )
        self.extra_conf = dict(extra_conf or {})
        self.jars = list(jars) if jars is not None else project_jars()
        self.worker_dir = worker_dir
        self.grace_seconds = grace_seconds
        self.kill_timeout = kill_timeout
        self.http_timeout = http_timeout
        # A JWS for a REST server behind spark.master.rest.filters=...JWSFilter.
        self._rest_token = rest_token

    def launch(self, group: JobGroup, definition: str, env: Mapping[str, str]) -> LaunchRecord:
        """Submit the group; the record's handle (and "submission_id" detail) is the driver id.

        Not idempotent: if the master accepts but its answer is lost (timeout), this raises
        and the driver it started is not tracked; a retry submits a second one.
        """
        app_dir = (self.workdir / group.job_group_id).resolve()
        files = prepare_app_dir(app_dir, group)
        return self._submit(
            group.job_group_id, app_dir, files.jobgroup_file, files.stop_file, definition, env
        )

    def launch_worker(self, name: str, definition: str, env: Mapping[str, str]) -> LaunchRecord:
        """Submit a worker application (`jobs/main.py worker`) named `name`, as `launch`."""
        app_dir = (self.workdir / name).resolve()
        files = prepare_app_dir(app_dir, None)
        return self._submit(name, app_dir, "worker", files.stop_file, definition, env)

    def _metrics_env(self) -> dict[str, str]:
        if self.metrics_host is None:
            return {}
        return metrics_env(metrics_sd_dir(self.workdir.resolve()), self.metrics_host)

    def _submit(
        self,
        name: str,
        app_dir: Path,
        app_arg: Path | str,
        stop_file: Path,
        definition: str,
        env: Mapping[str, str],
    ) -> LaunchRecord:
        request = submission_request(
            app_arg,
            app_name=f"uatu-{name}",
            master_url=self.master_url,
            jars=self.jars,
            stop_file=stop_file,
            conf_dir=self.conf_dir.resolve() if self.conf_dir else None,
            env={**self._metrics_env(), **env},
            resources=self.resources,
            extra_conf=self.extra_conf,
        )
        (app_dir / "submission.json").write_text(json.dumps(redacted(request), indent=2) + "\n")
        try:
            response = self._call("POST", "create", request)
        except MasterUnreachable as e:
            raise LaunchFailed("launch", name, f"master {self.rest_url}: {e}") from e
        driver_id = response.get("submissionId")
        if not response.get("success") or not driver_id:
            raise LaunchFailed(
                "launch",
                name,
                f"master {self.rest_url} rejected the submission: {response.get('message')}",
            )
        if response.get("unknownFields"):
            log.warning("master ignored request fields %s", response["unknownFields"])
        log.info("launched %s as %s on %s", name, driver_id, self.master_url)
        return LaunchRecord(
            handle=driver_id,
            definition=definition,
            started_at=time.time(),
            log=self._log_location(driver_id),
            details=launch_details(
                submission_id=driver_id,
                master_url=self.master_url,
                rest_url=self.rest_url,
                stop_file=str(stop_file),
                **({"jobgroup_file": str(app_arg)} if isinstance(app_arg, Path) else {}),
            ),
        )

    def observes(self, record: LaunchRecord) -> bool:
        return True  # the cluster's API answers from any host

    def alive(self, record: LaunchRecord) -> bool:
        """True while the driver runs or may; True (and a warning) when nobody can tell."""
        driver_id = str(record.detail("submission_id"))
        try:
            state = self.driver_state(driver_id)
        except MasterUnreachable as e:
            log.warning("%s: master unreachable (%s); assuming it still runs", driver_id, e)
            return True
        if state == UNKNOWN_STATE:
            log.warning("%s: state UNKNOWN (master recovering); assuming it still runs", driver_id)
            return True
        return state in LIVE_STATES

    def cancel(self, record: LaunchRecord) -> None:
        """Stop file, grace period, kill; returns once the driver ended, else LaunchFailed."""
        driver_id = str(record.detail("submission_id"))
        Path(str(record.detail("stop_file"))).touch()
        state = self._wait_while_live(driver_id, self.grace_seconds, skip_if_submitted=True)
        if state in LIVE_STATES or state == UNKNOWN_STATE:
            log.warning(
                "%s still %s after %.0f s; killing it", driver_id, state, self.grace_seconds
            )
            try:
                answer = self._call("POST", f"kill/{driver_id}")
            except MasterUnreachable as e:
                raise LaunchFailed("cancel", driver_id, f"kill via {self.rest_url}: {e}") from e
            log.info("%s: %s", driver_id, answer.get("message"))
            state = self._wait_while_live(driver_id, self.kill_timeout)
        if state in LIVE_STATES or state == UNKNOWN_STATE:
            raise LaunchFailed(
                "cancel", driver_id, f"still {state} {self.kill_timeout:.0f} s after kill"
            )
        log.info("%s ended: %s", driver_id, state)

    def driver_state(self, driver_id: str) -> str | None:
        """The master's driverState for ``driver_id``; None if the master does not know it.

        Raises `MasterUnreachable` when there is no usable answer.
        """
        status = self._call("GET", f"status/{driver_id}")
        if not status.get("success"):
            return None
        state = status.get("driverState")
        return str(state) if state else None

    def _wait_while_live(
        self, driver_id: str, timeout: float, skip_if_submitted: bool = False
    ) -> str | None:
        """Poll until the driver leaves the live states or ``timeout`` passes; last state."""
        deadline = time.monotonic() + timeout
        state: str | None = UNKNOWN_STATE
        while True:
            try:
                state = self.driver_state(driver_id)
            except MasterUnreachable as e:
                log.warning("%s: master unreachable while waiting (%s)", driver_id, e)
                state = UNKNOWN_STATE
            # A driver waiting for resources never sees its stop file: no point waiting.
            if skip_if_submitted and state == "SUBMITTED":
                return state
            if (state not in LIVE_STATES and state != UNKNOWN_STATE) or (
                time.monotonic() >= deadline
            ):
                return state
            time.sleep(_POLL_S)

    def _log_location(self, driver_id: str) -> str:
        # PythonRunner merges the Python driver's stdout and stderr into the driver JVM's
        # stdout: the job's own log and error lines are in <driver-id>/stdout, Spark's in
        # <driver-id>/stderr.
        if self.worker_dir is not None:
            return str(self.worker_dir / driver_id / "stdout")
        return (
            f"{driver_id}/stdout under the work dir of the worker running it "
            f"({self.rest_url}/v1/submissions/status/{driver_id} names the worker)"
        )

    def _call(self, method: str, action: str, body: dict | None = None) -> dict:
        """One REST call; the JSON answer, also for 4xx/5xx answers that carry one."""
        url = f"{self.rest_url}/v1/submissions/{action}"
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(url, data=data, method=method)
        request.add_header("Content-Type", "application/json;charset=UTF-8")
        if self._rest_token:
            request.add_header("Authorization", f"Bearer {self._rest_token}")
        try:
            with urllib.request.urlopen(request, timeout=self.http_timeout) as resp:
                return _json_object(resp.read())
        except urllib.error.HTTPError as e:
            # The REST server explains rejections (400 malformed, 500 internal) in JSON.
            try:
                return _json_object(e.read())
            except MasterUnreachable:
                raise MasterUnreachable(f"HTTP {e.code} from {url}") from e
        except OSError as e:  # connection refused, timeouts, DNS (URLError is an OSError)
            raise MasterUnreachable(f"{url}: {e}") from e


def _json_object(raw: bytes) -> dict:
    try:
        value = json.loads(raw)
    except ValueError as e:
        raise MasterUnreachable(f"not JSON: {raw[:200]!r}") from e
    if not isinstance(value, dict):
        raise MasterUnreachable(f"not a JSON object: {raw[:200]!r}")
    return value
