"""Site configuration: where tables and checkpoints live, and how to reach each Kafka cluster.

Loaded once, before any Spark work, into frozen dataclasses:

* `conf/uatu.yaml` gives the Delta warehouse root and the checkpoint root; the environment
  variables `UATU_WAREHOUSE` and `UATU_CHECKPOINTS` override them. Relative paths are relative
  to the project root (the folder that holds `conf/`).
* `conf/clusters.yaml` maps a logical cluster name to bootstrap servers plus Kafka client
  properties (SASL, TLS, ...), which are passed unchanged to Spark's Kafka source and sink::

      clusters:
        local:
          bootstrap_servers: 127.0.0.1:9092
          properties:            # optional, any (Java) Kafka client property
            security.protocol: PLAINTEXT
          admin_properties: {}   # optional: librdkafka names for the pre-start topic check,
                                 # when they differ from the Java ones (e.g. sasl.jaas.config)
          proxy:                 # optional: the cluster's kafka-pixy, for PROXY_* probes
            grpc_address: 127.0.0.1:19091
            cluster: default     # the cluster's name in kafka-pixy's own config

The conf folder is `$UATU_CONF_DIR` if set, else `<project root>/conf`.

Secrets need not be written into clusters.yaml: any `properties` or `admin_properties` value
may use ``${env:NAME}`` or ``${file:PATH:KEY}`` (core/secret_files.py), resolved at load time.
A clusters.yaml that holds a literal secret (a password, a JAAS config with one) and is
readable by others gets a warning naming it.

librdkafka clients of the pre-start checks (`check_client_config()`) log through Python
logging (logger `uatu.librdkafka`, quiet unless UATU_LIBRDKAFKA_LOG_LEVEL says otherwise),
never straight to stderr: a failing check prints one line, not a page of connection errors.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml

from core import secret_files
from core.errors import ConfigError
from core.kafka_properties import librdkafka_form
from core.paths import CONF_DIR

log = logging.getLogger("uatu.config")

# librdkafka's own log lines, routed through Python logging (confluent-kafka `logger=`).
LIBRDKAFKA_LOG = logging.getLogger("uatu.librdkafka")
_level = os.environ.get("UATU_LIBRDKAFKA_LOG_LEVEL", "CRITICAL").upper()
LIBRDKAFKA_LOG.setLevel(_level if _level in logging.getLevelNamesMapping() else "CRITICAL")

SECURE_PROTOCOLS = ("SSL", "SASL_SSL")
_SECRET_KEY = re.compile(r"password|secret|jaas|token|sasl\.oauthbearer", re.IGNORECASE)


@dataclass(frozen=True)
class ClusterConfig:
    """How to reach one Kafka cluster."""

    name: str
    bootstrap_servers: str
    properties: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    admin_properties: Mapping[str, str] | None = None  # None: the same as `properties`
    proxy_grpc_address: str | None = None  # kafka-pixy in front of the cluster
    proxy_cluster: str = "default"  # the cluster's name in kafka-pixy's config

    def spark_kafka_options(self) -> dict[str, str]:
        """Options for Spark's Kafka source/sink: client properties get the `kafka.` prefix."""
        options = {f"kafka.{k}": v for k, v in self.properties.items()}
        options["kafka.bootstrap.servers"] = self.bootstrap_servers
        return options

    def java_client_config(self) -> dict[str, str]:
        """Configuration for a Java Kafka client (the replication sink's producer)."""
        return {**self.properties, "bootstrap.servers": self.bootstrap_servers}

    def librdkafka_properties(self) -> dict[str, str]:
        """`admin_properties` when given, else `properties` in librdkafka's form
        (`core.kafka_properties`): a cluster's settings are written once."""
        if self.admin_properties is not None:
            return dict(self.admin_properties)
        return librdkafka_form(self.properties, f"clusters.yaml: clusters.{self.name}.properties")

    def client_config(self) -> dict[str, Any]:
        """Configuration for a librdkafka client (the checks, probes and group commits)."""
        return {**self.librdkafka_properties(), "bootstrap.servers": self.bootstrap_servers}

    def check_client_config(self) -> dict[str, Any]:
        """`client_config()` for a client of a pre-start check: its log lines go to the
        `uatu.librdkafka` logger, not to stderr, so a failed check prints one line.

        librdkafka queues such a client's log lines until it is polled: a client that lives
        long must be polled (`core.kafka_admin.shared_admin` polls at each use)."""
        return {**self.client_config(), "logger": LIBRDKAFKA_LOG}

    @property
    def encrypted(self) -> bool:
        """True when both client kinds talk TLS to the brokers (SSL or SASL_SSL)."""
        protocols = {self.properties.get("security.protocol", "PLAINTEXT").upper()}
        if self.admin_properties is not None:
            protocols.add(self.admin_properties.get("security.protocol", "PLAINTEXT").upper())
        return protocols <= set(SECURE_PROTOCOLS)


@dataclass(frozen=True)
class Settings:
    """Everything a job needs from conf/: storage roots and the cluster directory."""

    conf_dir: Path
    warehouse: str
    checkpoints: str
    clusters: Mapping[str, ClusterConfig]


def default_conf_dir() -> Path:
    return Path(os.environ.get("UATU_CONF_DIR", CONF_DIR))


def add_conf_dir_argument(parser: argparse.ArgumentParser) -> None:
    """`--conf-dir`, as every command that reads the site's configuration takes it."""
    parser.add_argument(
        "--conf-dir",
        type=Path,
        default=None,
        help=f"folder with uatu.yaml and clusters.yaml (default: $UATU_CONF_DIR or "
        f"{default_conf_dir()})",
    )


def _read_yaml(path: Path) -> dict:
    try:
        with path.open() as f:
            data = yaml.safe_load(f)
    except FileNotFoundError:
        raise ConfigError(str(path), "file not found") from None
    except yaml.YAMLError as e:
        raise ConfigError(str(path), f"not valid YAML: {e}") from None
    if not isinstance(data, dict):
        raise ConfigError(str(path), "top level must be a mapping")
    return data


def _resolve_path(value: str, root: Path) -> str:
    # URIs (s3a://, hdfs://, file:/) are kept; plain relative paths hang off the project root.
    if "://" in value or value.startswith("file:") or Path(value).is_absolute():
        return value
    return str((root / value).resolve())


def _client_properties(
    raw: dict, field: str, base_dir: Path, env: Mapping[str, str] | None
) -> Mapping[str, str]:
    """String properties with ${env:...} / ${file:...} references resolved."""
    return MappingProxyType(
        {
            str(k): secret_files.resolve(str(v), f"{field}.{k}", base_dir, env)
            for k, v in raw.items()
        }
    )


def literal_secrets(data: dict) -> list[str]:
    """Fields of a clusters.yaml mapping that hold a secret written out (no reference)."""
    found = []
    for name, spec in (data.get("clusters") or {}).items():
        if not isinstance(spec, dict):
            continue
        for kind in ("properties", "admin_properties"):
            for key, value in (spec.get(kind) or {}).items():
                if _SECRET_KEY.search(str(key)) and "${" not in str(value) and str(value):
                    found.append(f"clusters.{name}.{kind}.{key}")
    return found


def parse_clusters(
    data: dict,
    source: str,
    base_dir: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> dict[str, ClusterConfig]:
    """Validate the `clusters:` mapping of clusters.yaml into ClusterConfig objects;
    references in properties are resolved against `env` and files under `base_dir`."""
    base_dir = base_dir or Path(source).parent
    clusters = data.get("clusters")
    if not isinstance(clusters, dict) or not clusters:
        raise ConfigError(source, "'clusters' must be a non-empty mapping of name -> settings")
    parsed = {}
    for name, spec in clusters.items():
        if not isinstance(spec, dict):
            raise ConfigError(source, f"clusters.{name} must be a mapping")
        servers = spec.get("bootstrap_servers")
        if not isinstance(servers, str) or not servers.strip():
            raise ConfigError(source, f"clusters.{name}.bootstrap_servers={servers!r} is empty")
        props = spec.get("properties") or {}
        admin_props = spec.get("admin_properties") or None  # {}: not given
        for key, value in (("properties", props), ("admin_properties", admin_props or {})):
            if not isinstance(value, dict):
                raise ConfigError(source, f"clusters.{name}.{key} must be a mapping")
        proxy = spec.get("proxy") or {}
        if not isinstance(proxy, dict) or not isinstance(proxy.get("grpc_address", ""), str):
            raise ConfigError(source, f"clusters.{name}.proxy must map grpc_address to host:port")
        field = f"{source}: clusters.{name}"
        properties = _client_properties(props, f"{field}.properties", base_dir, env)
        if admin_props is None:
            librdkafka_form(properties, f"{field}.properties")  # refused here, before any work
        parsed[str(name)] = ClusterConfig(
            name=str(name),
            bootstrap_servers=servers.strip(),
            properties=properties,
            admin_properties=None
            if admin_props is None
            else _client_properties(admin_props, f"{field}.admin_properties", base_dir, env),
            proxy_grpc_address=proxy.get("grpc_address") or None,
            proxy_cluster=str(proxy.get("cluster") or "default"),
        )
    return parsed


def load_settings(conf_dir: Path | None = None, env: Mapping[str, str] | None = None) -> Settings:
    """Load conf/uatu.yaml and conf/clusters.yaml, applying environment overrides."""
    conf_dir = conf_dir or default_conf_dir()
    env = os.environ if env is None else env
    main = _read_yaml(conf_dir / "uatu.yaml")
    root = conf_dir.resolve().parent
    paths = {}
    for key, env_var in (("warehouse", "UATU_WAREHOUSE"), ("checkpoints", "UATU_CHECKPOINTS")):
        value = env.get(env_var) or main.get(key)
        if not isinstance(value, str) or not value:
            raise ConfigError(str(conf_dir / "uatu.yaml"), f"'{key}' must be a non-empty path")
        paths[key] = _resolve_path(value, root)
    clusters_file = conf_dir / "clusters.yaml"
    data = _read_yaml(clusters_file)
    written_out = literal_secrets(data)
    if written_out and clusters_file.stat().st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        log.warning(
            "%s holds secrets (%s) and is readable by others; chmod 600 it, or use "
            "${env:NAME} / ${file:PATH:KEY} references",
            clusters_file, ", ".join(written_out),
        )  # fmt: skip
    clusters = parse_clusters(data, str(clusters_file), conf_dir, env)
    return Settings(
        conf_dir=conf_dir,
        warehouse=paths["warehouse"],
        checkpoints=paths["checkpoints"],
        clusters=MappingProxyType(clusters),
    )
