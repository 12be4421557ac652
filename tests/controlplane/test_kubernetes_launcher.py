"""The Spark Operator launcher without a cluster: golden manifests and a fake `kubectl`.

Goldens live in tests/controlplane/golden/kubernetes/<case>.yaml; regenerate them with
`UATU_UPDATE_GOLDEN=1 .venv/bin/pytest tests/controlplane/test_kubernetes_launcher.py` and
read the diff.
The fake kubectl (written into tmp_path) records its argv and stdin and answers `get` with a
canned SparkApplication, so the launcher runs its real subprocess path.
"""

from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import replace
from pathlib import Path

import grpc
import pytest
import yaml
from google.protobuf import json_format
from uber.data.kafka.datatransfer.job_group_pb2 import JobGroup

from controlplane.errors import LaunchFailed, grpc_status
from controlplane.launchers.base import LaunchRecord, launch_details
from controlplane.launchers.kubernetes import (
    MAX_NAME,
    KubernetesConfig,
    KubernetesConfigError,
    KubernetesLauncher,
    app_name,
    render_manifests,
    render_worker_manifests,
)
from controlplane.reconcile import definition_of
from core.errors import ConfigError
from core.paths import SPARK_JARS_DIR
from testing.jobgroups import audit_group

GOLDEN_DIR = Path(__file__).parent / "golden" / "kubernetes"
JARS = (
    "/opt/uatu/var/jars/spark/delta-spark_4.2_2.13-4.4.0.jar",
    "/opt/uatu/var/jars/spark/spark-sql-kafka-0-10_2.13-4.2.0.jar",
)


# Three shapes: defaults; a site deployment (own namespace, site conf, control-plane env,
# bigger executors, extra sparkConf, an id that needs a hashed name); a 100-character id.
GOLDEN_CASES = {
    "audit_defaults": (
        audit_group("audit-orders", "orders", 100, ("AUDIT_TYPE_APPROX_UNIQ",)),
        {},
        KubernetesConfig(jars=JARS),
    ),
    "audit_site_conf": (
        audit_group("Payments_Audit.EU", "payments", 500, ("AUDIT_TYPE_APPROX_UNIQ",)),
        {"UATU_CONTROL_PLANE": "uatu-controlplane.uatu:8080", "UATU_WORKER_ID": "7"},
        KubernetesConfig(
            namespace="streaming",
            image="registry.example.com/uatu-spark:0.1.0",
            service_account="uatu-spark",
            executor_instances=4,
            executor_memory="4g",
            jars=JARS,
            conf_dir="/etc/uatu/conf",
            conf_config_map="uatu-site-conf",
            stop_grace_seconds=60,
            spark_conf={"spark.sql.shuffle.partitions": "16"},
        ),
    ),
    "audit_long_id": (
        audit_group(
            "team-" + "x" * 95,
            "clicks",
            1000,
            ("AUDIT_TYPE_APPROX_UNIQ", "AUDIT_TYPE_REPLICATION"),
        ),
        {},
        KubernetesConfig(jars=JARS),
    ),
}


class _GoldenDumper(yaml.SafeDumper):
    """Multi-line strings (the JobGroup JSON) as literal blocks, so goldens read like YAML."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_GoldenDumper.add_representer(str, _str)


def to_yaml(manifests: list[dict]) -> str:
    return yaml.dump_all(manifests, Dumper=_GoldenDumper, sort_keys=True, explicit_start=True)


@pytest.mark.parametrize("case", sorted(GOLDEN_CASES))
def test_manifests_match_golden(case):
    group, env, config = GOLDEN_CASES[case]
    manifests = render_manifests(group, definition_of(group), env, config)
    rendered = to_yaml(manifests)
    golden = GOLDEN_DIR / f"{case}.yaml"
    if os.environ.get("UATU_UPDATE_GOLDEN") == "1":
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(rendered)
    assert golden.exists(), f"no golden {golden}; run with UATU_UPDATE_GOLDEN=1"
    assert rendered == golden.read_text()
    # The mounted file is the JobGroup itself, and the YAML round-trips to the same objects.
    assert list(yaml.safe_load_all(rendered)) == manifests
    data = manifests[0]["data"]["jobgroup.json"]
    assert json_format.Parse(data, JobGroup()) == group


def test_render_is_deterministic_and_env_wins_over_conf_dir():
    group, _, config = GOLDEN_CASES["audit_defaults"]
    env = {"UATU_CONF_DIR": "/elsewhere", "B": "2", "A": "1"}
    first = render_manifests(group, "d1", env, config)
    assert first == render_manifests(group, "d1", dict(reversed(env.items())), config)
    driver_env = first[1]["spec"]["driver"]["env"]
    assert [e["name"] for e in driver_env] == [
        "A", "B", "UATU_CONF_DIR", "UATU_METRICS_HOST", "UATU_METRICS_PORT", "UATU_STOP_FILE",
    ]  # fmt: skip
    assert {"name": "UATU_CONF_DIR", "value": "/elsewhere"} in driver_env


def test_the_driver_pod_names_its_metrics_port_for_prometheus_or_serves_none():
    """Prometheus's kubernetes_sd pod role keeps pods annotated prometheus.io/scrape and
    scrapes prometheus.io/port: the driver serves /metrics there, on the pod's address."""
    group, _, config = GOLDEN_CASES["audit_defaults"]
    driver = render_manifests(group, "d", {}, replace(config, metrics_port=9100))[1]["spec"][
        "driver"
    ]
    assert driver["annotations"] == {
        "prometheus.io/scrape": "true", "prometheus.io/port": "9100",
        "prometheus.io/path": "/metrics",
    }  # fmt: skip
    assert driver["ports"] == [{"name": "uatu-metrics", "containerPort": 9100, "protocol": "TCP"}]
    env = {e["name"]: e["value"] for e in driver["env"]}
    assert (env["UATU_METRICS_PORT"], env["UATU_METRICS_HOST"]) == ("9100", "0.0.0.0")
    off = render_manifests(group, "d", {}, replace(config, metrics_port=0))[1]["spec"]["driver"]
    assert "annotations" not in off and "ports" not in off
    assert not any(e["name"].startswith("UATU_METRICS") for e in off["env"])
    with pytest.raises(ConfigError, match="metrics_port=70000: must be a port, or 0 for none"):
        replace(config, metrics_port=70000)


# --- app_name -----------------------------------------------------------------------------

DNS_1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")


@pytest.mark.parametrize(
    "job_group_id",
    ["audit-orders", "Audit-Orders", "audit_orders", "a.b/c", "123", "-x-", "", "ÄÖÜ", "x" * 100],
)
def test_app_name_is_a_short_dns_label(job_group_id):
    name = app_name(job_group_id)
    assert DNS_1035.fullmatch(name), name
    assert len(name) <= MAX_NAME <= 63 - len("-ui-svc")
    assert app_name(job_group_id) == name  # deterministic


def test_app_name_keeps_valid_ids_readable():
    assert app_name("audit-orders") == "uatu-audit-orders"
    assert app_name("Audit_Orders").startswith("uatu-audit-orders-")


def test_app_name_keeps_ids_apart_that_sanitize_or_truncate_alike():
    ids = ["audit-orders", "Audit-Orders", "audit_orders", "audit.orders", "audit--orders"]
    assert len({app_name(i) for i in ids}) == len(ids)
    prefix = "p" * 80
    long_a, long_b = app_name(prefix + "a"), app_name(prefix + "b")
    assert long_a != long_b
    assert long_a[:40] == long_b[:40]  # same readable prefix, different hash suffix
    assert len(long_a) == MAX_NAME


# --- the launcher against a fake kubectl ----------------------------------------------------

FAKE_KUBECTL = """\
#!{python}
# Fake kubectl: records argv and stdin, answers from answers.json by subcommand.
import json, sys
from pathlib import Path

here = Path(__file__).parent
args = sys.argv[1:]
verb = next(a for a in args if not a.startswith("-"))
stdin = sys.stdin.read() if verb == "apply" else ""
with open(here / "calls.jsonl", "a") as calls:
    calls.write(json.dumps({{"argv": args, "stdin": stdin}}) + "\\n")
answer = json.loads((here / "answers.json").read_text()).get(verb, {{}})
sys.stdout.write(answer.get("stdout", ""))
sys.stderr.write(answer.get("stderr", ""))
sys.exit(answer.get("exit", 0))
"""


class FakeKubectl:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.path = folder / "kubectl"
        self.path.write_text(FAKE_KUBECTL.format(python=sys.executable))
        self.path.chmod(0o755)
        self.answer({})

    def answer(self, answers: dict) -> None:
        (self.folder / "answers.json").write_text(json.dumps(answers))

    def answer_state(self, state: str | None) -> None:
        status = {} if state is None else {"applicationState": {"state": state}}
        self.answer({"get": {"stdout": json.dumps({"kind": "SparkApplication", "status": status})}})

    def calls(self) -> list[dict]:
        log = self.folder / "calls.jsonl"
        if not log.exists():
            return []
        return [json.loads(line) for line in log.read_text().splitlines()]


@pytest.fixture
def kubectl(tmp_path):
    return FakeKubectl(tmp_path)


@pytest.fixture
def launcher(kubectl):
    config = KubernetesConfig(jars=JARS, namespace="ns", kubectl=str(kubectl.path))
    return KubernetesLauncher(config, clock=lambda: 1234.5)


def launched(launcher, kubectl):
    group, _, _ = GOLDEN_CASES["audit_defaults"]
    return launcher.launch(group, "def1", {"UATU_WORKER_ID": "3"})


def test_launch_deletes_the_old_application_then_applies_the_manifests(launcher, kubectl):
    group, _, _ = GOLDEN_CASES["audit_defaults"]
    record = launcher.launch(group, "def1", {"UATU_WORKER_ID": "3"})

    assert record == LaunchRecord(
        handle="ns/uatu-audit-orders",
        definition="def1",
        started_at=1234.5,
        log=f"{kubectl.path} logs -n ns uatu-audit-orders-driver",
        details=launch_details(
            namespace="ns", name="uatu-audit-orders", config_map="uatu-audit-orders-jobgroup"
        ),
    )
    assert LaunchRecord.from_json(record.to_json()) == record  # the store keeps it as JSON
    delete, apply = kubectl.calls()
    assert delete["argv"] == [
        "--request-timeout=30s", "delete", "sparkapplication", "uatu-audit-orders", "-n", "ns",
        "--ignore-not-found", "--wait=true", "--timeout=120s", "--cascade=foreground",
    ]  # fmt: skip
    assert apply["argv"] == ["--request-timeout=30s", "apply", "-f", "-"]
    sent = json.loads(apply["stdin"])
    assert sent["kind"] == "List"
    assert sent["items"] == render_manifests(
        group, "def1", {"UATU_WORKER_ID": "3"}, launcher.config
    )


def test_launch_failure_carries_kubectl_stderr(launcher, kubectl):
    kubectl.answer(
        {"apply": {"exit": 1, "stderr": 'error: no matches for kind "SparkApplication"'}}
    )
    group, _, _ = GOLDEN_CASES["audit_defaults"]
    with pytest.raises(LaunchFailed, match='no matches for kind "SparkApplication"') as failed:
        launcher.launch(group, "def1", {})
    assert failed.value.handle == "ns/uatu-audit-orders"
    assert grpc_status(failed.value) is grpc.StatusCode.UNAVAILABLE


@pytest.mark.parametrize(
    ("state", "alive"),
    [
        (None, True),  # no status yet: the operator has not seen it
        ("", True),
        ("SUBMITTED", True),
        ("RUNNING", True),
        ("PENDING_RERUN", True),
        ("INVALIDATING", True),
        ("UNKNOWN", True),
        ("SUSPENDING", True),
        ("RESUMING", True),
        ("SUCCEEDING", False),
        ("FAILING", False),
        ("COMPLETED", False),
        ("FAILED", False),
        ("SUBMISSION_FAILED", False),
        ("SUSPENDED", False),
    ],
)
def test_alive_follows_the_operator_state(launcher, kubectl, state, alive):
    record = launched(launcher, kubectl)
    kubectl.answer_state(state)
    assert launcher.alive(record) is alive
    (get,) = kubectl.calls()[-1:]
    assert get["argv"] == [
        "--request-timeout=30s", "get", "sparkapplication", "uatu-audit-orders", "-n", "ns",
        "-o", "json", "--ignore-not-found",
    ]  # fmt: skip


def test_not_found_is_not_alive(launcher, kubectl):
    record = launched(launcher, kubectl)
    kubectl.answer({"get": {"stdout": ""}})  # what --ignore-not-found prints for NotFound
    assert launcher.alive(record) is False


def test_alive_raises_when_kubectl_fails_instead_of_guessing(launcher, kubectl):
    record = launched(launcher, kubectl)
    stderr = "Unable to connect to the server: dial tcp 10.0.0.1:6443: i/o timeout"
    kubectl.answer({"get": {"exit": 1, "stderr": stderr}})
    with pytest.raises(LaunchFailed, match="i/o timeout"):
        launcher.alive(record)


def test_alive_raises_on_a_state_it_does_not_know(launcher, kubectl):
    record = launched(launcher, kubectl)
    kubectl.answer_state("HIBERNATING")
    with pytest.raises(LaunchFailed, match="HIBERNATING"):
        launcher.alive(record)


def test_cancel_deletes_the_application_then_the_config_map(launcher, kubectl):
    record = launched(launcher, kubectl)
    before = len(kubectl.calls())
    launcher.cancel(record)
    calls = [c["argv"] for c in kubectl.calls()[before:]]
    assert [c[1:4] for c in calls] == [
        ["delete", "sparkapplication", "uatu-audit-orders"],
        ["delete", "configmap", "uatu-audit-orders-jobgroup"],
    ]
    assert all({"-n", "ns", "--ignore-not-found", "--wait=true"} <= set(c) for c in calls)


def test_cancel_failure_is_a_named_error(launcher, kubectl):
    record = launched(launcher, kubectl)
    kubectl.answer({"delete": {"exit": 1, "stderr": "error: timed out waiting for the condition"}})
    with pytest.raises(LaunchFailed, match="timed out waiting"):
        launcher.cancel(record)


def test_missing_kubectl_is_a_named_error(tmp_path):
    config = KubernetesConfig(jars=JARS, kubectl=str(tmp_path / "no-such-kubectl"))
    group, _, _ = GOLDEN_CASES["audit_defaults"]
    with pytest.raises(LaunchFailed, match="no-such-kubectl"):
        KubernetesLauncher(config).launch(group, "d", {})


# --- configuration --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("namespace", "Bad_Namespace"),
        ("image", ""),
        ("service_account", "UPPER"),
        ("spark_version", "4.2"),
        ("driver_cores", 0),
        ("executor_instances", -1),
        ("driver_memory", "2 GB"),
        ("executor_memory", "lots"),
        ("main_file", "jobs/main.py"),
        ("jars", ()),
        ("jars", ("relative.jar",)),
        ("conf_config_map", "Site Conf"),
        ("stop_grace_seconds", 0),
        ("delete_timeout_seconds", True),
    ],
)
def test_config_errors_name_the_field_and_value(field, value):
    with pytest.raises(KubernetesConfigError) as failed:
        KubernetesConfig(**{"jars": JARS, field: value})
    assert failed.value.field == field
    assert field in str(failed.value)
    assert grpc_status(failed.value) is grpc.StatusCode.FAILED_PRECONDITION


def test_default_config_uses_the_project_jars_at_their_image_paths():
    jar_dir = SPARK_JARS_DIR
    if not any(jar_dir.glob("*.jar")):
        pytest.skip("no jars in var/jars/spark (run `make jars`)")
    config = KubernetesConfig()
    # The replication sink is in the project's jar, which `make build` compiles before tests.
    assert config.jars == (
        *(f"/opt/uatu/var/jars/spark/{p.name}" for p in sorted(jar_dir.glob("*.jar"))),
        "/opt/uatu/build/uatu-jvm.jar",
    )
    assert config.spark_version == "4.2.0"


def test_the_site_conf_can_come_from_a_secret() -> None:
    """clusters.yaml with credentials belongs in a Secret, mounted read-only (issue 20)."""
    from uber.data.kafka.datatransfer.job_group_pb2 import JobGroup

    from controlplane.launchers.kubernetes import KubernetesConfig, render_manifests
    from core.errors import ConfigError

    config = KubernetesConfig(conf_secret="uatu-site-conf", jars=("/opt/uatu/x.jar",))
    _, app = render_manifests(JobGroup(job_group_id="g"), "d", {}, config)
    assert {
        "name": "uatu-conf",
        "secret": {"secretName": "uatu-site-conf", "defaultMode": 0o400},
    } in (app["spec"]["volumes"])
    mount = {"name": "uatu-conf", "mountPath": config.conf_dir, "readOnly": True}
    assert mount in app["spec"]["driver"]["volumeMounts"]
    assert app["spec"]["executor"]["volumeMounts"] == [mount]
    with pytest.raises(ConfigError, match="not both"):
        KubernetesConfig(conf_secret="a", conf_config_map="b", jars=("/opt/uatu/x.jar",))


def test_the_worker_secret_travels_in_a_secret_only_the_driver_reads(launcher, kubectl):
    """Not in the SparkApplication (readable by more people), not on executors (issue 20)."""
    group, _, _ = GOLDEN_CASES["audit_defaults"]
    env = {"UATU_WORKER_ID": "3", "UATU_WORKER_SECRET": "s3cr3t-value"}
    config_map, secret, app = render_manifests(group, "d", env, launcher.config)
    assert secret["kind"] == "Secret" and secret["stringData"] == {"secret": "s3cr3t-value"}
    assert "s3cr3t-value" not in json.dumps([config_map, app])
    driver_env = {e["name"]: e for e in app["spec"]["driver"]["env"]}
    assert driver_env["UATU_WORKER_SECRET"]["valueFrom"] == {
        "secretKeyRef": {"name": secret["metadata"]["name"], "key": "secret"}
    }
    assert "UATU_WORKER_SECRET" not in {e["name"] for e in app["spec"]["executor"]["env"]}

    record = launcher.launch(group, "def1", env)
    assert record.details["worker_secret"] == "uatu-audit-orders-worker"
    launcher.cancel(record)
    deleted = [c["argv"][2:4] for c in kubectl.calls() if c["argv"][1] == "delete"]
    assert deleted[-3:] == [
        ["sparkapplication", "uatu-audit-orders"],
        ["configmap", "uatu-audit-orders-jobgroup"],
        ["secret", "uatu-audit-orders-worker"],
    ]


def test_a_worker_application_runs_main_py_worker_without_a_jobgroup(launcher, kubectl):
    """The pool's worker (`serve --workers` with this launcher): the group's application
    without its JobGroup: no ConfigMap, no jobgroup volume, `jobs/main.py worker`."""
    group, _, _ = GOLDEN_CASES["audit_defaults"]
    env = {"UATU_WORKER_ID": "3", "UATU_WORKER_SECRET": "s3cr3t-value"}
    secret, worker = render_worker_manifests("worker-0", "worker", env, launcher.config)
    _, _, app = render_manifests(group, "worker", env, launcher.config)
    assert worker["metadata"]["name"] == "uatu-worker-0"
    assert secret["metadata"]["name"] == "uatu-worker-0-worker"
    assert worker["spec"]["arguments"] == ["worker"]
    assert [v["name"] for v in worker["spec"]["volumes"]] == []
    assert worker["spec"]["driver"]["volumeMounts"] == []
    # Everything else is the group's application's (names aside).
    for part in ("sparkConf", "deps", "restartPolicy", "executor"):
        assert worker["spec"][part] == json.loads(
            json.dumps(app["spec"][part]).replace("uatu-audit-orders", "uatu-worker-0")
        )
    driver = {k: v for k, v in worker["spec"]["driver"].items() if k != "volumeMounts"}
    assert driver == json.loads(
        json.dumps({k: v for k, v in app["spec"]["driver"].items() if k != "volumeMounts"})
        .replace("uatu-audit-orders", "uatu-worker-0")
    )  # fmt: skip

    from controlplane.pool_slots import WorkerLauncher

    assert isinstance(launcher, WorkerLauncher)  # serve --workers takes it (assembly.py)
    record = launcher.launch_worker("worker-0", "worker", env)
    assert record.handle == "ns/uatu-worker-0" and "config_map" not in record.details
    applied = json.loads(kubectl.calls()[-1]["stdin"])["items"]
    assert [m["kind"] for m in applied] == ["Secret", "SparkApplication"]
    launcher.cancel(record)
    deleted = [c["argv"][2:4] for c in kubectl.calls() if c["argv"][1] == "delete"]
    assert deleted[-2:] == [
        ["sparkapplication", "uatu-worker-0"],
        ["secret", "uatu-worker-0-worker"],
    ]
