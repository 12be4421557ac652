"""A real Spark standalone cluster (one master, one or more workers) on 127.0.0.1, from
pyspark's jars.

Used by the standalone launcher's integration test (:func:`start_standalone`, the
``standalone`` fixture of tests/controlplane/test_standalone_launcher.py) and by hand through
the CLI at the bottom::

    python -m devservices.spark_standalone up [--dir var/standalone] [--cores 4] [--memory 4g]
                                             [--workers 1]
    python -m devservices.spark_standalone status [--dir var/standalone]
    python -m devservices.spark_standalone down [--dir var/standalone]

The master runs its REST submission server (``spark.master.rest.enabled=true``), which is
what ``controlplane/launchers/standalone.py`` talks to. All ports (master RPC, master web UI, REST,
worker RPC, worker web UI) are free ports picked at start. A worker may declare more cores
and memory than the machine has: the daemons only book-keep them, and the apps here are small.
With `--workers N`, the workers after the first are `worker-2` ... `worker-N` (their own pid,
ports and output files) and share the first one's work dir (driver and application dirs are
named by unique ids).

With `--hide PATH` (repeatable) the workers run as hosts that do not have PATH: each worker
starts in a mount namespace of its own (``unshare --map-root-user --mount``, no root needed)
where PATH is an empty tmpfs, and sees Spark itself at ``<dir>/spark-home`` (a bind mount of
pyspark's dir, which may lie under a hidden path such as the project's venv). Its drivers and
executors inherit that view: this is how the tests show that executors need neither the
checkout nor its venv (docs/operations.md, "What each host needs").

Process groups matter: the worker starts drivers and executors as its own children, so they
share the worker's process group. Killing only the worker JVM orphans a Python driver
(verified, see the platform notes), so :meth:`StandaloneCluster.stop` signals whole groups
and waits until no member is left. The master and the worker are each a
:class:`~devservices._service.LocalService`; the cluster composes them. Layout of a cluster
dir::

    <dir>/master.pid          pid (= process group id) of the master JVM while it runs
    <dir>/worker.pid          same for the worker JVM (drivers and executors share its group)
    <dir>/master.ports        master RPC, web UI and REST port of the current or last run
    <dir>/worker.ports        worker RPC and web UI port
    <dir>/master.out          master stdout+stderr (Spark's INFO log)
    <dir>/worker.out          worker stdout+stderr
    <dir>/master.properties   --properties-file of the master (REST server on)
    <dir>/conf/               SPARK_CONF_DIR: empty, so no stray spark-env.sh or defaults apply
    <dir>/worker/             worker work dir: <driver-id>/{stdout,stderr}, <app-id>/<n>/
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import os
import shlex
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from core.paths import VAR_DIR
from devservices._service import (
    HOST,
    LocalService,
    ServiceCli,
    ServiceError,
    StopOnExit,
    choose_ports,
    read_ports,
    stop_all,
    stopped_on_failure,
    wait_all_ready,
)
from devservices.kafka import SERVICE_JAVA_OPTS_ENV

log = logging.getLogger("uatu.standalone")


def _spark_home() -> Path:
    # Where pip put pyspark (its jars and bin/spark-class), found without importing it:
    # devservices imports no pyspark.
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        return Path("pyspark-is-not-installed")
    return Path(spec.origin).resolve().parent


DEFAULT_DIR = VAR_DIR / "standalone"
SPARK_HOME = _spark_home()
READY_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 20.0

_MASTER_CLASS = "org.apache.spark.deploy.master.Master"
_WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
_PROBE_TIMEOUT_S = 2.0
_MAX_WORKERS = 64  # a recorded cluster's workers are looked for up to this many
# The daemons' environment is inherited by every driver the worker starts; the caller's job
# settings must not leak into them (a driver gets exactly what its submission says).
_DROPPED_ENV_PREFIXES = ("UATU_", "PYSPARK_", "SPARK_")


class StandaloneError(ServiceError):
    """The master or worker failed to start or did not become ready in time."""


class SparkDaemon(LocalService):
    """The master or the worker JVM (``role``) of a :class:`StandaloneCluster`.

    Both share the cluster dir (``<role>.pid``, ``<role>.out``, ``<role>.ports``) and are
    ready when the cluster is (``cluster_ready``): the master can only tell whether the
    worker registered, and the worker is of no use before.
    """

    error = StandaloneError
    ready_timeout = READY_TIMEOUT_S
    stop_timeout = STOP_TIMEOUT_S
    poll_interval = 0.25

    def __init__(
        self, dir: Path, role: str, ports: Mapping[str, int], cluster_ready: Callable[[], bool]
    ) -> None:
        super().__init__(dir, role, ports=ports)
        self.cluster_ready = cluster_ready

    def ready(self) -> bool:
        return self.cluster_ready()


class StandaloneCluster(StopOnExit):
    """A master and its workers started by :func:`start_standalone`.

    The JVMs are not tied to this object's lifetime: they run until :meth:`stop` (or the end
    of a ``with`` block), which lets the CLI leave them in the background. ``ports`` holds
    ``master``, ``webui``, ``rest``, and ``<role>`` and ``<role>_webui`` for each worker
    (roles ``worker``, ``worker-2``, ...: `worker_roles`).
    """

    def __init__(
        self,
        dir: Path,
        ports: Mapping[str, int],
        cores: int | None = None,
        memory: str = "",
        workers: int = 1,
    ) -> None:
        self.cores = cores
        self.memory = memory
        master_ports = {"rpc": ports["master"], "webui": ports["webui"], "rest": ports["rest"]}
        self.master = SparkDaemon(dir, "master", master_ports, self.ready)
        self.workers = [
            SparkDaemon(
                dir, role, {"rpc": ports[role], "webui": ports[f"{role}_webui"]}, self.ready
            )
            for role in worker_roles(workers)
        ]
        self.dir = self.master.dir

    @property
    def worker(self) -> SparkDaemon:
        """The first worker."""
        return self.workers[0]

    @property
    def master_url(self) -> str:
        """What drivers and workers connect to, e.g. ``spark://127.0.0.1:7077``."""
        return f"spark://{HOST}:{self.master.ports['rpc']}"

    @property
    def rest_url(self) -> str:
        """The REST submission server, e.g. ``http://127.0.0.1:6066``."""
        return f"http://{HOST}:{self.master.ports['rest']}"

    @property
    def webui_url(self) -> str:
        return f"http://{HOST}:{self.master.ports['webui']}"

    @property
    def worker_dir(self) -> Path:
        """The workers' work dir: each driver writes ``<driver-id>/stdout`` and ``stderr``."""
        return self.dir / "worker"

    @property
    def daemons(self) -> list[SparkDaemon]:
        return [self.master, *self.workers]

    def ready(self) -> bool:
        """True if the REST server accepts submissions and the master lists every worker
        ALIVE (with :attr:`cores` cores, when known)."""
        return ready(self.rest_url, self.webui_url, self.cores, len(self.workers))

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> None:
        """Stop the worker with its drivers and executors, and the master; idempotent.

        SIGTERM to both process groups, SIGKILL to whatever is left of them after
        ``timeout`` seconds; returns once no member of either group is alive.
        """
        stop_all(self.daemons, timeout)


def start_standalone(
    work_dir: Path,
    *,
    cores: int = 4,
    memory: str = "4g",
    daemon_memory: str = "512m",
    spark_home: Path = SPARK_HOME,
    timeout: float = READY_TIMEOUT_S,
    workers: int = 1,
    hidden: Sequence[Path] = (),
) -> StandaloneCluster:
    """Start a master (REST server on) and ``workers`` workers of ``cores`` cores and
    ``memory`` each under ``work_dir``; wait until ready. The workers, and what they start,
    do not see the paths in ``hidden`` (`hidden_argv`).

    Ready means the REST server answers ``/v1/submissions/readyz`` with 200 and the master's
    ``/json/`` lists every worker ALIVE with ``cores`` cores, so a submission is scheduled at
    once. On failure, or after ``timeout`` seconds, stops what it started and raises
    :class:`StandaloneError` carrying the tail of the daemon's output.
    """
    live = running_pids(work_dir)
    if live:
        raise StandaloneError(f"a cluster from {work_dir} is already running (pids {live})")
    if not (spark_home / "bin" / "spark-class").exists():
        raise StandaloneError(f"no bin/spark-class under {spark_home}")
    roles = worker_roles(workers)
    names = ("master", "webui", "rest", *roles, *(f"{role}_webui" for role in roles))
    ports = choose_ports(dict.fromkeys(names, 0))
    cluster = StandaloneCluster(work_dir, ports, cores=cores, memory=memory, workers=workers)
    (cluster.dir / "conf").mkdir(parents=True, exist_ok=True)
    cluster.worker_dir.mkdir(exist_ok=True)
    properties = cluster.dir / "master.properties"
    properties.write_text(_master_properties(cluster))
    env = _daemon_env(os.environ, spark_home, cluster.dir / "conf", daemon_memory)
    spark_class = str(spark_home / "bin" / "spark-class")
    worker_env, worker_home = env, spark_home
    if hidden:
        worker_home = cluster.dir / "spark-home"
        worker_home.mkdir(exist_ok=True)
        worker_env = {**env, "SPARK_HOME": str(worker_home)}

    master = cluster.master.ports
    with stopped_on_failure(cluster):
        cluster.master.launch(
            [spark_class, _MASTER_CLASS, "--host", HOST, "--port", str(master["rpc"]),
             "--webui-port", str(master["webui"]), "--properties-file", str(properties)],
            env,
        )  # fmt: skip
        for worker in cluster.workers:
            argv = [
                str(worker_home / "bin" / "spark-class"), _WORKER_CLASS, "--host", HOST,
                "--port", str(worker.ports["rpc"]), "--webui-port", str(worker.ports["webui"]),
                "--cores", str(cores), "--memory", memory,
                "--work-dir", str(cluster.worker_dir), cluster.master_url,
            ]  # fmt: skip
            if hidden:
                argv = hidden_argv(argv, hidden, spark_home, worker_home)
            worker.launch(argv, worker_env)
        # The workers first: when time runs out, their output says why they did not register.
        took = wait_all_ready(
            [*cluster.workers, cluster.master],
            cluster.ready,
            timeout,
            f"offer {workers} ALIVE worker(s) with {cores} cores behind {cluster.rest_url}",
        )
    log.info(
        "spark standalone ready: master %s, REST %s, UI %s (took %.1f s)",
        cluster.master_url, cluster.rest_url, cluster.webui_url, took,
    )  # fmt: skip
    return cluster


def hidden_argv(
    argv: Sequence[str], hidden: Sequence[Path], spark_home: Path, bound_home: Path
) -> list[str]:
    """`argv` run in a new mount namespace where `spark_home` is also at `bound_home` and each
    path of `hidden` is an empty tmpfs (pure). The bind comes first, so Spark stays visible
    when it lies under a hidden path; the mounts are private to the namespace, and the user
    namespace (``--map-root-user``) lets an unprivileged user make them. `unshare` and ``sh``
    exec, so the pid that runs is `argv`'s."""
    steps = [
        f"mount --bind {shlex.quote(str(spark_home))} {shlex.quote(str(bound_home))}",
        *(f"mount -t tmpfs uatu-hidden {shlex.quote(str(path))}" for path in hidden),
        f"exec {shlex.join(argv)}",
    ]
    return ["unshare", "--map-root-user", "--mount", "sh", "-c", " && ".join(steps)]


def recorded_cluster(work_dir: Path) -> StandaloneCluster | None:
    """The cluster whose ports files are in ``work_dir`` (running or not), None if none."""
    master = read_ports(work_dir, "master")
    ports = (
        {"master": master["rpc"], "webui": master["webui"], "rest": master["rest"]}
        if master
        else {}
    )
    roles = []
    for role in worker_roles(_MAX_WORKERS):
        found = read_ports(work_dir, role)
        if not found:
            break
        roles.append(role)
        ports.update({role: found["rpc"], f"{role}_webui": found["webui"]})
    if not master or not roles:
        return None
    return StandaloneCluster(work_dir, ports, workers=len(roles))


def worker_roles(count: int) -> list[str]:
    """The workers' roles (file name prefixes): ``worker``, ``worker-2``, ..."""
    return ["worker", *(f"worker-{n}" for n in range(2, count + 1))]


def running_pids(work_dir: Path) -> list[int]:
    """Process groups (master's, then worker's) of ``work_dir``'s cluster that still hold
    processes of it, orphaned drivers of a dead worker included."""
    cluster = recorded_cluster(work_dir)
    daemons = cluster.daemons if cluster is not None else []
    return [pgid for d in daemons if (pgid := d.running_pid()) is not None]


def ready(rest_url: str, webui_url: str, cores: int | None = None, workers: int = 1) -> bool:
    """True if the REST server accepts submissions and the master has ``workers`` ALIVE
    workers; with ``cores``, each offering that many cores.
    """
    try:
        with urllib.request.urlopen(
            f"{rest_url}/v1/submissions/readyz", timeout=_PROBE_TIMEOUT_S
        ) as resp:
            if resp.status != 200:
                return False
        with urllib.request.urlopen(f"{webui_url}/json/", timeout=_PROBE_TIMEOUT_S) as resp:
            state = json.load(resp)
    except (OSError, ValueError):
        # URLError, HTTPError (503 while STANDBY) and timeouts are OSErrors; a half-written
        # body is a ValueError.
        return False
    alive = [
        w
        for w in state.get("workers", [])
        if w.get("state") == "ALIVE" and (cores is None or w.get("cores") == cores)
    ]
    return len(alive) >= workers


# --- internals -------------------------------------------------------------------------------


def _master_properties(cluster: StandaloneCluster) -> str:
    props = {
        # On by default since Spark 4.1; explicit, since the launcher depends on it.
        "spark.master.rest.enabled": "true",
        "spark.master.rest.host": HOST,
        "spark.master.rest.port": str(cluster.master.ports["rest"]),
    }
    return "".join(f"{k}={v}\n" for k, v in props.items())


def _daemon_env(
    base: Mapping[str, str], spark_home: Path, conf_dir: Path, daemon_memory: str
) -> dict[str, str]:
    env = {k: v for k, v in base.items() if not k.startswith(_DROPPED_ENV_PREFIXES)}
    env.update(
        SPARK_HOME=str(spark_home),
        SPARK_CONF_DIR=str(conf_dir),
        # Drivers and executors inherit it: everything binds to and advertises loopback.
        SPARK_LOCAL_IP=HOST,
        SPARK_DAEMON_MEMORY=daemon_memory,
        # The master's and workers' own JVMs, with the flags devservices adds to every
        # service it starts (the test suite's C1-only JIT).
        SPARK_DAEMON_JAVA_OPTS=base.get(SERVICE_JAVA_OPTS_ENV, ""),
    )
    return env


# --- CLI -------------------------------------------------------------------------------------


def _recorded(dir: Path) -> list[SparkDaemon]:
    cluster = recorded_cluster(dir)
    return cluster.daemons if cluster is not None else []


def _up_arguments(up: argparse.ArgumentParser) -> None:
    up.add_argument("--cores", type=int, default=4, help="cores the worker offers (default: 4)")
    up.add_argument("--memory", default="4g", help="memory the worker offers (default: 4g)")
    up.add_argument("--workers", type=int, default=1, help="workers to start (default: 1)")
    up.add_argument(
        "--hide",
        type=Path,
        action="append",
        default=[],
        metavar="PATH",
        help="a path the workers and their executors do not see (repeatable)",
    )
    up.add_argument(
        "--timeout", type=float, default=READY_TIMEOUT_S, help="seconds to wait for readiness"
    )


def _start(args: argparse.Namespace) -> list[SparkDaemon]:
    cluster = start_standalone(
        args.dir,
        cores=args.cores,
        memory=args.memory,
        timeout=args.timeout,
        workers=args.workers,
        hidden=[path.resolve() for path in args.hide],
    )
    print(json.dumps(_urls(cluster), indent=2))
    return cluster.daemons


def _urls(cluster: StandaloneCluster) -> dict[str, object]:
    return {
        "master_url": cluster.master_url,
        "rest_url": cluster.rest_url,
        "webui_url": cluster.webui_url,
        "worker_dir": str(cluster.worker_dir),
    }


main = ServiceCli(
    "devservices.spark_standalone", __doc__, DEFAULT_DIR, _recorded, _start, _up_arguments
).main


if __name__ == "__main__":
    sys.exit(main())
