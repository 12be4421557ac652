"""`python -m controlplane serve`: its typed options and the parts they assemble.

`ServeOptions` is built once from the command line and validated before anything starts
(a bad value raises ConfigError naming the option; so does a non-loopback address without
TLS and authentication, unless --insecure). `assemble` then builds, in order: the server's
security (certificates, auth file), the store (SQLite file, locked against a second control
plane, or etcd when `--store` is an http(s):// endpoint list), the leadership
(SoleLeader with SQLite; an etcd lease-backed election otherwise), the launcher (local,
standalone or kubernetes), the JobGroups and Workers domains, and the reconciler.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import yaml

from controlplane.auth import ensure_token_file, load_auth_file
from controlplane.jobgroups import JobGroups, WorkerQuota
from controlplane.launchers.base import Launcher
from controlplane.launchers.local import LocalLauncher
from controlplane.lookups import PartitionLookups
from controlplane.placement import Capacity
from controlplane.pool import WorkerPool
from controlplane.pool_slots import WorkerLauncher
from controlplane.reconciler import Reconciler
from controlplane.server import ServerSecurity
from controlplane.state.base import Store
from controlplane.state.etcd_client import EtcdAccess
from controlplane.state.leadership import Leadership, SoleLeader
from controlplane.state.sqlite import SqliteStore
from controlplane.workers import Workers
from core import kafka_admin
from core.channel import DEFAULT_TOKEN_FILE, is_loopback
from core.config import Settings
from core.errors import ConfigError
from core.secret_files import read_secret_file

LAUNCHERS = ("local", "standalone", "kubernetes")

log = logging.getLogger("uatu.controlplane")


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
    # Security (docs/security.md): TLS, mTLS, admin auth, and what applications are given.
    tls_cert: Path | None = None
    tls_key: Path | None = None
    tls_client_ca: Path | None = None
    auth_token_file: Path | None = None
    admin_token_file: Path | None = None  # created with a random token if missing
    insecure: bool = False
    reflection: bool = False
    app_ca: Path | None = None
    app_tls_cert: Path | None = None
    app_tls_key: Path | None = None
    allow_external_workers: bool = False
    max_groups: int = 20_000
    max_running: int = 200
    standalone_rest_token_file: Path | None = None
    etcd_ca: Path | None = None
    # The interface launched applications serve /metrics on (--metrics-address's host), or
    # None: they serve none.
    metrics_host: str | None = None
    etcd_cert: Path | None = None
    etcd_key: Path | None = None
    etcd_user: str | None = None
    etcd_password_file: Path | None = None
    # A pool of worker applications that run many JobGroups each (controlplane/pool.py); 0
    # runs an application per group.
    workers: int = 0
    max_workers: int = 0  # above `workers`: the pool follows the load up to this many
    worker_capacity: int = 50
    worker_messages_per_sec: float = 0.0  # 0: no bound
    worker_bytes_per_sec: float = 0.0

    def __post_init__(self) -> None:
        self._check_security()
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

    def _check_security(self) -> None:
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ConfigError("--tls-cert", "--tls-cert and --tls-key go together")
        if self.tls_client_ca is not None and self.tls_cert is None:
            raise ConfigError("--tls-client-ca", "mTLS needs TLS: give --tls-cert and --tls-key")
        if (self.app_tls_cert is None) != (self.app_tls_key is None):
            raise ConfigError("--app-tls-cert", "--app-tls-cert and --app-tls-key go together")
        if self.tls_client_ca is not None and self.reconcile and self.app_tls_cert is None:
            raise ConfigError(
                "--tls-client-ca",
                "every caller must then present a certificate, applications too: "
                "give --app-tls-cert and --app-tls-key",
            )
        authenticated = any(
            f is not None for f in (self.auth_token_file, self.admin_token_file, self.tls_client_ca)
        )
        exposed = not is_loopback(self.address) and not (self.tls and authenticated)
        if exposed and not self.insecure:
            raise ConfigError(
                "--address",
                f"{self.address} is not a loopback address: anyone who reaches it could "
                "launch applications; give --tls-cert/--tls-key and --auth-token-file "
                "(or --tls-client-ca), or --insecure to accept that",
            )
        if self.workers < 0:
            raise ConfigError("--workers", f"{self.workers} < 0")
        if self.max_workers and self.max_workers < max(self.workers, 1):
            raise ConfigError(
                "--max-workers", f"{self.max_workers} is below --workers {self.workers}"
            )
        for name in ("max_groups", "max_running", "worker_capacity"):
            if getattr(self, name) < 1:
                raise ConfigError(f"--{name.replace('_', '-')}", f"{getattr(self, name)} < 1")
        for name in ("worker_messages_per_sec", "worker_bytes_per_sec"):
            if getattr(self, name) < 0:
                raise ConfigError(f"--{name.replace('_', '-')}", f"{getattr(self, name)} < 0")

    @property
    def tls(self) -> bool:
        return self.tls_cert is not None

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
    security: ServerSecurity


def _read(path: Path, option: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as e:
        raise ConfigError(option, f"{path}: {e.strerror or e}") from None


def server_security(options: ServeOptions) -> ServerSecurity:
    """The files the security options name, read and checked once, before anything starts
    (the --admin-token-file is created then if missing, and one line says where it is)."""
    authenticated = options.auth_token_file or options.admin_token_file
    if options.insecure and not is_loopback(options.address):
        log.warning(
            "--insecure: %s is served %s; anyone who reaches it can %s",
            options.address,
            "over TLS" if options.tls else "in plaintext",
            "call the admin API" if not authenticated else "read the traffic",
        )
    admin_token = None
    if options.admin_token_file is not None:
        admin_token, created = ensure_token_file(options.admin_token_file)
        log.info(token_file_line(options.admin_token_file, created))
    return ServerSecurity(
        tls_cert_chain=_read(options.tls_cert, "--tls-cert") if options.tls_cert else None,
        tls_key=_read(options.tls_key, "--tls-key") if options.tls_key else None,
        client_ca=_read(options.tls_client_ca, "--tls-client-ca")
        if options.tls_client_ca
        else None,
        policy=load_auth_file(options.auth_token_file) if options.auth_token_file else None,
        reflection=options.reflection,
        admin_token=admin_token,
    )


def token_file_line(path: Path, created: bool) -> str:
    """Where the admin token is, and how the CLI finds it (pure)."""
    how = (
        "the CLI on this host reads it by default"
        if path.resolve() == DEFAULT_TOKEN_FILE.resolve()
        else f"give the CLI --token-file {path} (or $UATU_CONTROL_PLANE_TOKEN_FILE)"
    )
    where = f"created in {path} (mode 0600)" if created else f"read from {path}"
    return f"admin token {where}; {how}"


def etcd_access(options: ServeOptions) -> EtcdAccess:
    """Every endpoint of --store, with its TLS files and credentials (read once, here)."""
    password = None
    if options.etcd_password_file is not None:
        password = read_secret_file(options.etcd_password_file, "--etcd-password-file").strip()
    if (options.etcd_user is None) != (password is None):
        raise ConfigError("--etcd-user", "--etcd-user and --etcd-password-file go together")
    if (options.etcd_cert is None) != (options.etcd_key is None):
        raise ConfigError("--etcd-cert", "--etcd-cert and --etcd-key go together")
    access = EtcdAccess(
        endpoints=tuple(e.strip() for e in options.store.split(",") if e.strip()),
        ca_file=str(options.etcd_ca) if options.etcd_ca else None,
        cert_file=str(options.etcd_cert) if options.etcd_cert else None,
        key_file=str(options.etcd_key) if options.etcd_key else None,
        user=options.etcd_user,
        password=password,
    )
    if (
        options.etcd_user
        and not is_loopback_url_list(access.endpoints)
        and not all(e.startswith("https://") for e in access.endpoints)
    ):
        raise ConfigError("--etcd-user", "a password is sent to etcd only over https://")
    return access


def is_loopback_url_list(endpoints: tuple[str, ...]) -> bool:
    return all(is_loopback(e.split("://", 1)[-1].rstrip("/")) for e in endpoints)


def application_env(options: ServeOptions) -> dict[str, str]:
    """What every launched application is told about the control plane (reporting.py)."""
    env = {
        "UATU_CONTROL_PLANE": options.app_control_plane,
        "UATU_HEARTBEAT_SECONDS": str(options.heartbeat_seconds),
    }
    if options.tls:
        ca = options.app_ca or options.tls_cert
        assert ca is not None
        env["UATU_CONTROL_PLANE_CA"] = str(ca.resolve())
    if options.app_tls_cert is not None and options.app_tls_key is not None:
        env["UATU_CONTROL_PLANE_CERT"] = str(options.app_tls_cert.resolve())
        env["UATU_CONTROL_PLANE_KEY"] = str(options.app_tls_key.resolve())
    return env


def assemble(options: ServeOptions, settings: Settings) -> ControlPlane:
    security = server_security(options)
    store: Store
    leadership: Leadership
    if options.uses_etcd:
        from controlplane.state.etcd_leader import EtcdLeadership
        from controlplane.state.etcd_store import EtcdStore

        endpoint = etcd_access(options)
        leader_key = f"{options.etcd_prefix.rstrip('/')}/leader"
        election = EtcdLeadership(
            endpoint, options.advertise, leader_key, options.leader_ttl_seconds
        )
        leadership = election
        store = EtcdStore(endpoint, options.etcd_prefix, election.fence, leader_key=leader_key)
    else:
        store = SqliteStore(Path(options.store), exclusive=True)
        leadership = SoleLeader(options.advertise)
    job_groups = JobGroups(
        store,
        settings,
        PartitionLookups(kafka_admin.partition_count),
        fresh_seconds=3 * options.heartbeat_seconds,
        max_groups=options.max_groups,
        quota=worker_quota(options),
    )
    reconciler = None
    workers = Workers(store, leadership, allow_external=options.allow_external_workers)
    if options.reconcile:
        launcher = build_launcher(options, settings)
        pool = None
        if options.workers:
            pool = build_pool(options, store, launcher)
            workers.pool = pool
        reconciler = Reconciler(
            store,
            pool or launcher,
            pool=pool,
            interval=options.reconcile_seconds,
            lease_seconds=options.lease_seconds,
            startup_seconds=options.startup_seconds,
            app_env=application_env(options),
            leadership=leadership,
            refresh_partitions=job_groups.refresh_all_partitions,
            partition_refresh_seconds=options.partition_refresh_seconds,
            # A pool's limit is its workers' capacity, not a count of applications.
            max_running=None if pool is not None else options.max_running,
        )
        job_groups.subscribe(reconciler.wake)
    return ControlPlane(store, leadership, job_groups, workers, reconciler, security)


def worker_quota(options: ServeOptions) -> WorkerQuota:
    """The unit of a group's scale: the traffic bounds of one worker, where given."""
    default = WorkerQuota()
    return WorkerQuota(
        options.worker_messages_per_sec or default.messages_per_sec,
        options.worker_bytes_per_sec or default.bytes_per_sec,
    )


def build_pool(options: ServeOptions, store: Store, launcher: Launcher) -> WorkerPool:
    """`--workers N`: the pool of worker applications the site's launcher starts."""
    if not isinstance(launcher, WorkerLauncher):
        raise ConfigError(
            "--workers", f"the {options.launcher} launcher does not start worker applications"
        )
    return WorkerPool(
        store,
        launcher,
        size=options.workers,
        max_size=options.max_workers or None,
        capacity=Capacity(
            options.worker_capacity, options.worker_messages_per_sec, options.worker_bytes_per_sec
        ),
        app_env=application_env(options),
        lease_seconds=options.lease_seconds or 60.0,
        startup_seconds=options.startup_seconds,
    )


def build_launcher(options: ServeOptions, settings: Settings) -> Launcher:
    if options.launcher == "standalone":
        from controlplane.launchers.standalone import StandaloneLauncher

        assert options.standalone_rest_url and options.spark_master  # checked in __post_init__
        return StandaloneLauncher(
            options.standalone_rest_url,
            options.spark_master,
            options.apps_dir,
            conf_dir=settings.conf_dir,
            rest_token=read_secret_file(
                options.standalone_rest_token_file, "--standalone-rest-token-file"
            ).strip()
            if options.standalone_rest_token_file
            else None,
            metrics_host=options.metrics_host,
        )
    if options.launcher == "kubernetes":
        from controlplane.launchers.kubernetes import KubernetesLauncher

        assert options.kubernetes_config is not None
        return KubernetesLauncher(kubernetes_config(options.kubernetes_config))
    return LocalLauncher(
        options.apps_dir,
        conf_dir=settings.conf_dir,
        spark_master=options.spark_master,
        metrics_host=options.metrics_host,
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
