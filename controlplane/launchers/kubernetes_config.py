"""The Kubernetes launcher's settings (controlplane/launchers/kubernetes.py): where and how
its SparkApplications run, validated when built (`KubernetesConfigError` names the field and
the value)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from core.errors import ConfigError
from core.paths import ROOT, project_jars

IMAGE_ROOT = "/opt/uatu"

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?")
# Spark's byte strings (spark.driver.memory): a positive count and an optional unit.
_SPARK_MEMORY = re.compile(r"[1-9][0-9]*([kmgtp]b?|b)?", re.IGNORECASE)
_SPARK_VERSION = re.compile(r"[0-9]+\.[0-9]+\.[0-9]+")


class KubernetesConfigError(ConfigError):
    """A `KubernetesConfig` field has a value the launcher cannot render or run."""

    def __init__(self, field_name: str, value: object, reason: str) -> None:
        self.field = field_name
        self.value = value
        super().__init__("kubernetes launcher settings", f"{field_name}={value!r}: {reason}")


def _image_jars() -> tuple[str, ...]:
    # The image is built from this checkout, so the jars `make jars` put in var/jars/spark here
    # and the project's jar `make build` compiles (the replication sink) are the ones under
    # IMAGE_ROOT there. (A glob would not do: Spark does not expand globs in local:// jar
    # paths.)
    return tuple(f"{IMAGE_ROOT}/{Path(p).relative_to(ROOT)}" for p in project_jars())


@dataclass(frozen=True)
class KubernetesConfig:
    """Where and how the SparkApplications run. Paths are inside the image; sizes are Spark's.

    Raises `KubernetesConfigError` (a `ConfigError`) naming the field and value when one is
    invalid. `spark_conf` is merged over the launcher's own sparkConf (it wins).
    """

    namespace: str = "default"
    image: str = "uatu-spark:0.1.0"
    service_account: str = "spark-operator-spark"  # the operator Helm chart's Spark account
    spark_version: str = "4.2.0"
    driver_cores: int = 1
    driver_memory: str = "2g"  # spark-submit.sh's UATU_DRIVER_MEMORY default
    executor_cores: int = 1
    executor_memory: str = "2g"
    executor_instances: int = 1
    main_file: str = f"{IMAGE_ROOT}/jobs/main.py"
    py_files: str = f"{IMAGE_ROOT}/build/uatu-jobs.zip"
    jars: tuple[str, ...] = field(default_factory=_image_jars)
    python: str = f"{IMAGE_ROOT}/.venv/bin/python"
    log4j_config: str = f"{IMAGE_ROOT}/conf/log4j2.properties"
    conf_dir: str = f"{IMAGE_ROOT}/conf"  # UATU_CONF_DIR in the pods
    conf_config_map: str = ""  # if set, this ConfigMap is mounted at conf_dir (site conf)
    conf_secret: str = ""  # or this Secret (read-only, 0400): clusters.yaml with credentials
    jobgroup_dir: str = "/etc/uatu/jobgroup"  # where the JobGroup ConfigMap is mounted
    stop_grace_seconds: int = 30
    # The driver's /metrics port (jobs/runtime/metrics.py), named in its pod's
    # prometheus.io/* annotations for Prometheus's pod discovery; 0: no metrics.
    metrics_port: int = 9464
    spark_conf: Mapping[str, str] = field(default_factory=dict, hash=False)
    kubectl: str = "kubectl"
    request_timeout_seconds: int = 30
    delete_timeout_seconds: int = 120

    def __post_init__(self) -> None:
        _check(
            _DNS_LABEL.fullmatch(self.namespace) and len(self.namespace) <= 63,
            "namespace", self.namespace, "not a DNS-1123 label of at most 63 characters",
        )  # fmt: skip
        _check(
            self.image and not re.search(r"\s", self.image),
            "image", self.image, "must be a non-empty image reference without spaces",
        )  # fmt: skip
        _check(
            _DNS_SUBDOMAIN.fullmatch(self.service_account) and len(self.service_account) <= 253,
            "service_account", self.service_account, "not a valid ServiceAccount name",
        )  # fmt: skip
        _check(
            _SPARK_VERSION.fullmatch(self.spark_version),
            "spark_version", self.spark_version, "expected MAJOR.MINOR.PATCH, e.g. 4.2.0",
        )  # fmt: skip
        for name in _POSITIVE_INTS:
            value = getattr(self, name)
            ok = isinstance(value, int) and not isinstance(value, bool) and value >= 1
            _check(ok, name, value, "must be an integer >= 1")
        for name in ("driver_memory", "executor_memory"):
            value = getattr(self, name)
            memory_ok = isinstance(value, str) and _SPARK_MEMORY.fullmatch(value)
            _check(memory_ok, name, value, "not a Spark memory size such as 512m or 2g")
        for name in _IMAGE_PATHS:
            value = getattr(self, name)
            ok = isinstance(value, str) and value.startswith("/")
            _check(ok, name, value, "must be an absolute path inside the image")
        _check(
            self.jars, "jars", self.jars,
            "no jars (Spark's Kafka connector and Delta are needed): run `make jars` here, "
            "or pass the jar paths inside the image",
        )  # fmt: skip
        for jar in self.jars:
            ok = jar.startswith("/") and jar.endswith(".jar")
            _check(ok, "jars", jar, "must be an absolute .jar path inside the image")
        _check(
            not self.conf_config_map or _DNS_SUBDOMAIN.fullmatch(self.conf_config_map),
            "conf_config_map", self.conf_config_map, "not a valid ConfigMap name",
        )  # fmt: skip
        _check(
            not self.conf_secret or _DNS_SUBDOMAIN.fullmatch(self.conf_secret),
            "conf_secret", self.conf_secret, "not a valid Secret name",
        )  # fmt: skip
        _check(
            not (self.conf_secret and self.conf_config_map),
            "conf_secret", self.conf_secret, "give conf_secret or conf_config_map, not both",
        )  # fmt: skip
        port_ok = isinstance(self.metrics_port, int) and 0 <= self.metrics_port <= 65535
        _check(port_ok, "metrics_port", self.metrics_port, "must be a port, or 0 for none")
        _check(self.kubectl, "kubectl", self.kubectl, "must name the kubectl executable")
        for key, value in self.spark_conf.items():
            ok = isinstance(key, str) and isinstance(value, str)
            _check(ok, "spark_conf", {key: value}, "keys and values must be strings")


_POSITIVE_INTS = (
    "driver_cores", "executor_cores", "executor_instances", "stop_grace_seconds",
    "request_timeout_seconds", "delete_timeout_seconds",
)  # fmt: skip
_IMAGE_PATHS = ("main_file", "py_files", "python", "log4j_config", "conf_dir", "jobgroup_dir")


def _check(ok: object, field_name: str, value: object, reason: str) -> None:
    if not ok:
        raise KubernetesConfigError(field_name, value, reason)
