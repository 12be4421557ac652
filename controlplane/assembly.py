"""`python -m controlplane serve`: its typed options and the parts they assemble.

`ServeOptions` is built once from the command line and validated before anything starts
(a bad value raises ConfigError naming the option). `assemble` then builds, in order: the
store (SQLite file, or etcd when `--store` is an http:// endpoint list), the leadership
(SoleLeader with SQLite; an etcd lease-backed election otherwise), the launcher (local,
standalone or kubernetes), the JobGroups and Workers domains, and the reconciler.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from controlplane.jobgroups import JobGroups
from controlplane.launchers.base import Launcher
from controlplane.launchers.local import LocalLauncher
from controlplane.reconciler import Reconciler
from controlplane.state.base import Store
from controlplane.state.leadership import Leadership, SoleLeader
from controlplane.state.sqlite import SqliteStore
from controlplane.workers import Workers
from core import kafka_admin
from core.config import Settings
from core.errors import ConfigError

LAUNCHERS = ("local", "standalone", "kubernetes")


@dataclass(frozen=True)
class ServeOptions:
    address: str
    advertise: str
    app_control_plane: str  # what applications heartbeat to: every replica, comma-separated
    store: str
    etcd_prefix: str
    leader_ttl_seconds: int
    launcher: str
    apps_dir: Path
    spark_master: str | None
    standalone_rest_url: str | None
    kubernetes_config: Path | None
    reconcile: bool
    reconcile_seconds: float
    lease_seconds: float | None
    startup_seconds: float
    heartbeat_seconds: float
    partition_refresh_seconds: float

    def __post_init__(self) -> None:
        if self.launcher not in LAUNCHERS:
            raise ConfigError("--launcher", f"{self.launcher!r} is not one of {LAUNCHERS}")
        if self.launcher == "standalone" and not (
            self.standalone_rest_url and (self.spark_master or "").startswith("spark://")
        ):
            raise ConfigError(
                "--launcher standalone",
                "needs --standalone-rest-url http://HOST:6066 and --spark-master spark://HOST:7077",
            )
        if self.launcher == "kubernetes" and self.kubernetes_config is None:
            raise ConfigError("--launcher kubernetes", "needs --kubernetes-config FILE.yaml")
        for name in ("reconcile_seconds", "startup_seconds", "heartbeat_seconds"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"--{name.replace('_', '-')}", f"{getattr(self, name)} <= 0")
        if self.lease_seconds is not None and self.lease_seconds <= self.heartbeat_seconds:
            raise ConfigError(
                "--lease-seconds",
                f"{self.lease_seconds} must exceed --heartbeat-seconds {self.heartbeat_seconds}",
            )

    @property
    def uses_etcd(self) -> bool:
        return self.store.startswith(("http://", "https://"))


@dataclass
class ControlPlane:
    store: Store
    leadership: Leadership
    job_groups: JobGroups
    workers: Workers
    reconciler: Reconciler | None


def assemble(options: ServeOptions, settings: Settings) -> ControlPlane:
    store: Store
    leadership: Leadership
    if options.uses_etcd:
        from controlplane.state.etcd_leader import EtcdLeadership
        from controlplane.state.etcd_store import EtcdStore

        endpoint = options.store.split(",")[0]
        leader_key = f"{options.etcd_prefix.rstrip('/')}/leader"
        election = EtcdLeadership(
            endpoint, options.advertise, leader_key, options.leader_ttl_seconds
        )
        leadership = election
        store = EtcdStore(endpoint, options.etcd_prefix, election.fence, leader_key=leader_key)
    else:
        store = SqliteStore(Path(options.store))
        leadership = SoleLeader(options.advertise)
    job_groups = JobGroups(
        store, settings, kafka_admin.partition_count, fresh_seconds=3 * options.heartbeat_seconds
    )
    reconciler = None
    if options.reconcile:
        reconciler = Reconciler(
            store,
            build_launcher(options, settings),
            interval=options.reconcile_seconds,
            lease_seconds=options.lease_seconds,
            startup_seconds=options.startup_seconds,
            app_env={
                "UATU_CONTROL_PLANE": options.app_control_plane,
                "UATU_HEARTBEAT_SECONDS": str(options.heartbeat_seconds),
            },
            leadership=leadership,
            refresh_partitions=job_groups.refresh_partitions,
            partition_refresh_seconds=options.partition_refresh_seconds,
        )
        job_groups.subscribe(reconciler.wake)
    return ControlPlane(store, leadership, job_groups, Workers(store, leadership), reconciler)


def build_launcher(options: ServeOptions, settings: Settings) -> Launcher:
    if options.launcher == "standalone":
        from controlplane.launchers.standalone import StandaloneLauncher

        assert options.standalone_rest_url and options.spark_master  # checked in __post_init__
        return StandaloneLauncher(
            options.standalone_rest_url,
            options.spark_master,
            options.apps_dir,
            conf_dir=settings.conf_dir,
        )
    if options.launcher == "kubernetes":
        from controlplane.launchers.kubernetes import KubernetesLauncher

        assert options.kubernetes_config is not None
        return KubernetesLauncher(kubernetes_config(options.kubernetes_config))
    return LocalLauncher(
        options.apps_dir, conf_dir=settings.conf_dir, spark_master=options.spark_master
    )


def kubernetes_config(path: Path):
    """KubernetesConfig from a YAML mapping of its fields; unknown fields are errors."""
    from dataclasses import fields

    from controlplane.launchers.kubernetes import KubernetesConfig

    try:
        data = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as e:
        raise ConfigError(str(path), str(e)) from None
    if not isinstance(data, dict):
        raise ConfigError(str(path), "expected a mapping of KubernetesConfig fields")
    known = {f.name for f in fields(KubernetesConfig)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(str(path), f"unknown field(s) {unknown}; known: {sorted(known)}")
    if "jars" in data:
        data["jars"] = tuple(data["jars"])
    return KubernetesConfig(**data)
