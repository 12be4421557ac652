"""Run each JobGroup as a Spark Operator `SparkApplication` (kubeflow/spark-operator, v1beta2).

The Kubernetes form of `spark-submit.sh JOBGROUP.json`: a ConfigMap holds the JobGroup JSON,
and a `SparkApplication` (type Python, cluster mode, restartPolicy Never) runs
`jobs/main.py <mounted jobgroup.json>` from the project image; a worker application of the
pool (`serve --workers`, controlplane/pool.py) is the same SparkApplication running
`jobs/main.py worker`, without a ConfigMap. Everything is rendered by pure functions
(`app_name`, `render_manifests`, `render_worker_manifests`, the `*_argv` builders);
`KubernetesLauncher` only runs `kubectl` with those argv lists (no shell) and reads its
output.

Launcher contract (controlplane/launchers/base.py `Launcher`):

* `launch` deletes any earlier SparkApplication of the same name (waiting until it is gone),
  then `kubectl apply`s the ConfigMap and a fresh SparkApplication. The delete matters: with
  restartPolicy Never a FAILED application stays FAILED, and re-applying an unchanged spec is
  a no-op for the operator, so a relaunch must start from a new object.
* `alive` reads `.status.applicationState.state` (below); a missing object is not alive.
* `cancel` deletes the SparkApplication and the ConfigMap; garbage collection deletes the
  driver pod it owns, and with it the executors. Cancel is graceful first: the driver's
  preStop hook creates the job's stop file (`UATU_STOP_FILE`), the job stops its query and
  exits 0 within `stop_grace_seconds`; after that the kubelet kills the pod. A hard kill is
  safe anyway (every write is exactly-once), only not clean.

Every kubectl failure raises `LaunchFailed` carrying kubectl's stderr; nothing is guessed.

`alive()` per operator state (the state machine in the operator's
internal/controller/sparkapplication/controller.go). The rule: alive while a driver may be
running or the operator will start one by itself, because a second driver on the same
checkpoint must never be started next to it.

=================  =====  ==========================================================
state              alive  why
=================  =====  ==========================================================
"" (new)           yes    the operator has not submitted it yet; it will
SUBMITTED          yes    spark-submit ran; the driver pod is starting
RUNNING            yes    the driver pod runs
PENDING_RERUN      yes    the operator deletes the old driver and resubmits itself
INVALIDATING       yes    the spec changed; the operator reruns it (then PENDING_RERUN)
UNKNOWN            yes    the driver pod's phase is unknown (e.g. node lost): it may still
                          run, so no second driver until the operator settles it
SUSPENDING,        yes    newer operators (spec.suspend): the driver still runs /
RESUMING                  is about to run
SUCCEEDING         no     the driver pod terminated (0); with Never -> COMPLETED next
FAILING            no     the driver pod failed or vanished; with Never -> FAILED next
COMPLETED, FAILED  no     terminal
SUBMISSION_FAILED  no     spark-submit failed; with Never no retry (-> FAILED)
SUSPENDED          no     stopped by spec.suspend; the control plane's wish wins
any other          error  `LaunchFailed`: a state this table does not know is not guessed
=================  =====  ==========================================================

Cluster requirements: the operator's mutating webhook enabled (it applies `volumes`,
`volumeMounts` and the driver `lifecycle`; on by default in its Helm chart); an image with
the project tree at IMAGE_ROOT (built with `make setup build`), so the paths in
`KubernetesConfig` exist;
a site conf (`conf_secret`, a Secret, or `conf_config_map`, mounted at `conf_dir`; a Secret
when clusters.yaml holds credentials, see docs/security.md) whose uatu.yaml points the warehouse
and checkpoints at shared storage (s3a://, hdfs://), not at the pod's own disk.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from google.protobuf import json_format
from uatu.v1 import job_options_pb2  # noqa: F401 (registers the JobGroup.extension Any type)
from uber.data.kafka.datatransfer.job_group_pb2 import JobGroup

from controlplane.errors import LaunchFailed
from controlplane.launchers.base import LaunchRecord, launch_details
from controlplane.launchers.kubernetes_config import (  # noqa: F401  (the launcher's settings)
    IMAGE_ROOT,
    KubernetesConfig,
    KubernetesConfigError,
)

log = logging.getLogger("uatu.kubernetes")

API_VERSION = "sparkoperator.k8s.io/v1beta2"
JOB_GROUP_LABEL = "uatu.io/job-group"
DEFINITION_ANNOTATION = "uatu.io/definition"
JOB_GROUP_ID_ANNOTATION = "uatu.io/job-group-id"
MANAGED_BY = {"app.kubernetes.io/managed-by": "uatu-controlplane"}
JOBGROUP_FILE = "jobgroup.json"
STOP_FILE = "/tmp/uatu-stop"
WORKER_SECRET_ENV = "UATU_WORKER_SECRET"  # inside the driver container; the preStop hook creates it

# Names stay short enough that `<name>-ui-svc`, the UI Service the operator creates, is a
# valid (<= 63 character) Service name even on operators that do not truncate it.
MAX_NAME = 56
NAME_PREFIX = "uatu-"  # also makes every name start with a letter, as Service names must

ALIVE_STATES = frozenset(
    {"", "SUBMITTED", "RUNNING", "PENDING_RERUN", "INVALIDATING", "UNKNOWN", "SUSPENDING",
     "RESUMING"}
)  # fmt: skip
DEAD_STATES = frozenset(
    {"SUCCEEDING", "FAILING", "COMPLETED", "FAILED", "SUBMISSION_FAILED", "SUSPENDED"}
)


def app_name(job_group_id: str) -> str:
    """The SparkApplication name of a JobGroup: deterministic, a DNS-1035 label <= MAX_NAME.

    `uatu-<id>` when the id is already lowercase alphanumerics and dashes and fits; otherwise
    the sanitized, truncated id plus `-<8 hex of sha256(id)>`, so ids that differ only in
    case, punctuation or past the cut still get different names.
    """
    sanitized = re.sub(r"[^a-z0-9]+", "-", job_group_id.lower()).strip("-")
    name = NAME_PREFIX + sanitized
    if sanitized and sanitized == job_group_id and len(name) <= MAX_NAME:
        return name
    digest = hashlib.sha256(job_group_id.encode()).hexdigest()[:8]
    return f"{name[: MAX_NAME - len(digest) - 1].rstrip('-')}-{digest}"


def config_map_name(job_group_id: str) -> str:
    return f"{app_name(job_group_id)}-jobgroup"


def worker_secret_name(job_group_id: str) -> str:
    return f"{app_name(job_group_id)}-worker"


@dataclass(frozen=True)
class _App:
    """What differs between the application of a JobGroup and a worker application."""

    key: str  # the JobGroup id, or the worker's name: what the object names derive from
    arguments: list[str]  # jobs/main.py's
    jobgroup_json: str | None  # the ConfigMap's content; None: no ConfigMap (a worker)


def render_manifests(
    group: JobGroup, definition: str, env: Mapping[str, str], config: KubernetesConfig
) -> list[dict[str, Any]]:
    """[ConfigMap with the JobGroup JSON, SparkApplication running it] for `kubectl apply`.

    `env` (control-plane address, worker id, ...) goes to the driver and the executors, over
    UATU_CONF_DIR; `definition` is recorded as the `uatu.io/definition` annotation. The
    worker secret (UATU_WORKER_SECRET), when `env` has one, goes into a Secret of its own
    between the two, which only the driver reads (`secretKeyRef`): it is not written into
    the SparkApplication, which more people may read.
    """
    app = _App(
        group.job_group_id,
        [f"{config.jobgroup_dir}/{JOBGROUP_FILE}"],
        json_format.MessageToJson(group, indent=2),
    )
    return _render(app, definition, env, config)


def render_worker_manifests(
    name: str, definition: str, env: Mapping[str, str], config: KubernetesConfig
) -> list[dict[str, Any]]:
    """[Secret, SparkApplication] of a worker application named `name` (`jobs/main.py
    worker`, controlplane/pool.py): as `render_manifests`, without a JobGroup ConfigMap."""
    return _render(_App(name, ["worker"], None), definition, env, config)


def _render(
    app: _App, definition: str, env: Mapping[str, str], config: KubernetesConfig
) -> list[dict[str, Any]]:
    name = app_name(app.key)
    labels = {**MANAGED_BY, JOB_GROUP_LABEL: name}
    annotations = {DEFINITION_ANNOTATION: definition, JOB_GROUP_ID_ANNOTATION: app.key}

    def metadata(object_name: str) -> dict[str, Any]:
        return {
            "name": object_name,
            "namespace": config.namespace,
            "labels": dict(labels),
            "annotations": dict(annotations),
        }

    secret_value = env.get(WORKER_SECRET_ENV)
    pod_env = {"UATU_CONF_DIR": config.conf_dir, **env}
    pod_env.pop(WORKER_SECRET_ENV, None)
    application = {
        "apiVersion": API_VERSION,
        "kind": "SparkApplication",
        "metadata": metadata(name),
        "spec": {
            "type": "Python",
            "mode": "cluster",
            "image": config.image,
            "sparkVersion": config.spark_version,
            "mainApplicationFile": f"local://{config.main_file}",
            "arguments": list(app.arguments),
            "deps": {
                "pyFiles": [f"local://{config.py_files}"],
                "jars": [f"local://{jar}" for jar in config.jars],
            },
            "sparkConf": _spark_conf(config),
            # The control plane relaunches (with backoff and give-up); the operator must not.
            "restartPolicy": {"type": "Never"},
            "volumes": _volumes(app, config),
            "driver": _driver(app, config, labels, pod_env, secret_value is not None),
            "executor": {
                "cores": config.executor_cores,
                "instances": config.executor_instances,
                "memory": config.executor_memory,
                "labels": dict(labels),
                "env": _env_list(pod_env),
                **({"volumeMounts": _conf_mounts(config)} if _has_conf(config) else {}),
            },
        },
    }
    manifests: list[dict[str, Any]] = []
    if app.jobgroup_json is not None:
        manifests.append(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": metadata(config_map_name(app.key)),
                "data": {JOBGROUP_FILE: app.jobgroup_json},
            }
        )
    if secret_value is not None:
        manifests.append(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": metadata(worker_secret_name(app.key)),
                "type": "Opaque",
                "stringData": {"secret": secret_value},
            }
        )
    return [*manifests, application]


def _spark_conf(config: KubernetesConfig) -> dict[str, str]:
    """What spark-submit.sh passes on its command line, as sparkConf."""
    java_options = f"-Dlog4j2.configurationFile=file:{config.log4j_config}"
    return {
        "spark.driver.extraJavaOptions": java_options,
        # Executors run in their own JVMs here (local mode had none): same quiet logging.
        "spark.executor.extraJavaOptions": java_options,
        "spark.pyspark.python": config.python,
        "spark.pyspark.driver.python": config.python,
        "spark.executorEnv.PYSPARK_PYTHON": config.python,
        **config.spark_conf,
    }


def _has_conf(config: KubernetesConfig) -> bool:
    return bool(config.conf_config_map or config.conf_secret)


def _conf_mounts(config: KubernetesConfig) -> list[dict[str, Any]]:
    """Fresh dicts on every call: no object is shared in the output."""
    if not _has_conf(config):
        return []
    return [{"name": "uatu-conf", "mountPath": config.conf_dir, "readOnly": True}]


def _volumes(app: _App, config: KubernetesConfig) -> list[dict[str, Any]]:
    volumes: list[dict[str, Any]] = []
    if app.jobgroup_json is not None:
        volumes.append({"name": "jobgroup", "configMap": {"name": config_map_name(app.key)}})
    if config.conf_config_map:
        volumes.append({"name": "uatu-conf", "configMap": {"name": config.conf_config_map}})
    elif config.conf_secret:
        volumes.append(
            {
                "name": "uatu-conf",
                "secret": {"secretName": config.conf_secret, "defaultMode": 0o400},
            }
        )
    return volumes


def _driver(
    app: _App,
    config: KubernetesConfig,
    labels: Mapping[str, str],
    pod_env: Mapping[str, str],
    with_secret: bool,
) -> dict[str, Any]:
    secret_ref = []
    if with_secret:
        secret_ref = [
            {
                "name": WORKER_SECRET_ENV,
                "valueFrom": {
                    "secretKeyRef": {"name": worker_secret_name(app.key), "key": "secret"}
                },
            }
        ]
    mounts = [] if app.jobgroup_json is None else [
        {"name": "jobgroup", "mountPath": config.jobgroup_dir, "readOnly": True}
    ]  # fmt: skip
    driver_env = {**pod_env, "UATU_STOP_FILE": STOP_FILE, **_metrics_env(config)}
    return {
        "cores": config.driver_cores,
        "memory": config.driver_memory,
        "serviceAccount": config.service_account,
        "labels": dict(labels),
        **_metrics_pod(config),
        "env": _env_list(driver_env) + secret_ref,
        "volumeMounts": [*mounts, *_conf_mounts(config)],
        # Graceful cancel: the stop file makes the job stop its query and exit 0; the hook
        # then lasts until the container exits or the grace period ends.
        "terminationGracePeriodSeconds": config.stop_grace_seconds,
        "lifecycle": {
            "preStop": {
                "exec": {
                    "command": [
                        "/bin/sh",
                        "-c",
                        f"touch {STOP_FILE}; sleep {config.stop_grace_seconds}",
                    ]
                }
            }
        },
    }


def _metrics_env(config: KubernetesConfig) -> dict[str, str]:
    """The driver serves /metrics on the pod's address (jobs/runtime/metrics.py)."""
    if not config.metrics_port:
        return {}
    return {"UATU_METRICS_PORT": str(config.metrics_port), "UATU_METRICS_HOST": "0.0.0.0"}


def _metrics_pod(config: KubernetesConfig) -> dict[str, Any]:
    """The driver pod's port and the annotations Prometheus's kubernetes_sd pod role keeps
    (docs/metrics.md): the cluster's own discovery finds every driver, nothing to list."""
    if not config.metrics_port:
        return {}
    port = str(config.metrics_port)
    return {
        "annotations": {
            "prometheus.io/scrape": "true",
            "prometheus.io/port": port,
            "prometheus.io/path": "/metrics",
        },
        "ports": [{"name": "uatu-metrics", "containerPort": config.metrics_port,
                   "protocol": "TCP"}],
    }  # fmt: skip


def _env_list(env: Mapping[str, str]) -> list[dict[str, str]]:
    return [{"name": key, "value": str(env[key])} for key in sorted(env)]


def apply_argv(config: KubernetesConfig) -> list[str]:
    """`kubectl apply` reading the manifests (a v1 List, JSON) from stdin."""
    return [*_kubectl(config), "apply", "-f", "-"]


def get_argv(config: KubernetesConfig, namespace: str, name: str) -> list[str]:
    """`kubectl get` of one SparkApplication as JSON; prints nothing (exit 0) if it is absent."""
    return [*_kubectl(config), "get", "sparkapplication", name, "-n", namespace,
            "-o", "json", "--ignore-not-found"]  # fmt: skip


def delete_argv(config: KubernetesConfig, kind: str, namespace: str, name: str) -> list[str]:
    """`kubectl delete` of one object, waiting until it is gone; absent is fine (idempotent).

    Foreground cascading: the object goes only after the dependents that block its deletion
    (the driver pod the operator owns) are gone, so a relaunch does not overlap the old driver.
    """
    return [*_kubectl(config), "delete", kind, name, "-n", namespace, "--ignore-not-found",
            "--wait=true", f"--timeout={config.delete_timeout_seconds}s",
            "--cascade=foreground"]  # fmt: skip


def _kubectl(config: KubernetesConfig) -> list[str]:
    return [config.kubectl, f"--request-timeout={config.request_timeout_seconds}s"]


def is_alive_state(state: str, handle: str) -> bool:
    """The table in the module docstring; an unknown state raises `LaunchFailed`."""
    if state in ALIVE_STATES:
        return True
    if state in DEAD_STATES:
        return False
    raise LaunchFailed("status", handle, f"unknown SparkApplication state {state!r}")


Runner = Callable[..., "subprocess.CompletedProcess[str]"]


class KubernetesLauncher:
    """`Launcher` on the Spark Operator through `kubectl` (its current context and KUBECONFIG).

    Launch records: handle ("namespace/name"), namespace, name, config_map, definition,
    started_at, log (a `kubectl logs` command for the driver). Every call blocks for at most
    about the kubectl timeouts in `config`.
    """

    def __init__(
        self,
        config: KubernetesConfig,
        runner: Runner = subprocess.run,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self.runner = runner
        self.clock = clock

    def launch(self, group: JobGroup, definition: str, env: Mapping[str, str]) -> LaunchRecord:
        manifests = render_manifests(group, definition, env, self.config)
        return self._apply(group.job_group_id, manifests, definition)

    def launch_worker(self, name: str, definition: str, env: Mapping[str, str]) -> LaunchRecord:
        """A worker application (`jobs/main.py worker`) named `name`, as `launch`."""
        return self._apply(name, render_worker_manifests(name, definition, env, self.config),
                           definition)  # fmt: skip

    def _apply(self, key: str, manifests: list[dict], definition: str) -> LaunchRecord:
        """Delete any earlier application of the name, apply `manifests`; the record."""
        application = manifests[-1]
        by_kind = {m["kind"]: m["metadata"]["name"] for m in manifests[:-1]}
        namespace = self.config.namespace
        name = application["metadata"]["name"]
        handle = f"{namespace}/{name}"
        self._run("launch", handle, delete_argv(self.config, "sparkapplication", namespace, name))
        manifest_list = {"apiVersion": "v1", "kind": "List", "items": manifests}
        self._run("launch", handle, apply_argv(self.config), stdin=json.dumps(manifest_list))
        log.info("launched %s as SparkApplication %s", key, handle)
        return LaunchRecord(
            handle=handle,
            definition=definition,
            started_at=self.clock(),
            log=f"{self.config.kubectl} logs -n {namespace} {name}-driver",
            details=launch_details(
                namespace=namespace,
                name=name,
                **({"config_map": by_kind["ConfigMap"]} if "ConfigMap" in by_kind else {}),
                **({"worker_secret": by_kind["Secret"]} if "Secret" in by_kind else {}),
            ),
        )

    def observes(self, record: LaunchRecord) -> bool:
        return True  # the cluster's API answers from any host

    def alive(self, record: LaunchRecord) -> bool:
        namespace, name = str(record.detail("namespace")), str(record.detail("name"))
        out = self._run("status", record.handle, get_argv(self.config, namespace, name))
        if not out.strip():
            return False  # NotFound: deleted (by us, a person, or the operator's TTL)
        try:
            status = json.loads(out).get("status") or {}
        except (ValueError, AttributeError) as e:
            detail = f"kubectl printed no object: {e}"
            raise LaunchFailed("status", record.handle, detail) from e
        state = (status.get("applicationState") or {}).get("state", "")
        return is_alive_state(state, record.handle)

    def cancel(self, record: LaunchRecord) -> None:
        namespace, handle = str(record.detail("namespace")), record.handle
        # The application first: its driver stops; the ConfigMap only fed its volume.
        objects = [("sparkapplication", str(record.detail("name")))]
        if record.details.get("config_map"):  # a worker application has none
            objects.append(("configmap", str(record.details["config_map"])))
        if record.details.get("worker_secret"):
            objects.append(("secret", str(record.details["worker_secret"])))
        for kind, name in objects:
            self._run("cancel", handle, delete_argv(self.config, kind, namespace, name))
        log.info("canceled SparkApplication %s", handle)

    def _run(self, action: str, handle: str, argv: Sequence[str], stdin: str = "") -> str:
        # Bounded even if kubectl ignores its own timeouts (a hung exec credential plugin).
        limit = self.config.delete_timeout_seconds + self.config.request_timeout_seconds + 30
        try:
            done = self.runner(
                list(argv), input=stdin, capture_output=True, text=True, timeout=limit, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as e:
            raise LaunchFailed(action, handle, f"{argv[0]}: {e}") from e
        if done.returncode != 0:
            detail = (done.stderr or done.stdout or "").strip()
            raise LaunchFailed(
                action, handle, f"{' '.join(argv)} exited {done.returncode}: {detail}"
            )
        return str(done.stdout)
