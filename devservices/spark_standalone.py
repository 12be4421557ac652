"""A real Spark standalone cluster (one master, one worker) on 127.0.0.1, from pyspark's jars.

Used by the standalone launcher's integration test (:func:`start_standalone`) and by hand
through the CLI at the bottom::

    python -m devservices.spark_standalone up [--dir var/standalone] [--cores 4] [--memory 4g]
    python -m devservices.spark_standalone status [--dir var/standalone]
    python -m devservices.spark_standalone down [--dir var/standalone]

The master runs its REST submission server (``spark.master.rest.enabled=true``), which is
what ``controlplane/launchers/standalone.py`` talks to. All ports (master RPC, master web UI, REST,
worker RPC, worker web UI) are free ports picked at start. The worker may declare more cores
and memory than the machine has: the daemons only book-keep them, and the apps here are small.

Process groups matter: the worker starts drivers and executors as its own children, so they
share the worker's process group. Killing only the worker JVM orphans a Python driver
(verified, see the platform notes), so :meth:`StandaloneCluster.stop` signals whole groups
and waits until no member is left. Layout of a cluster dir::

    <dir>/cluster.json        ports and URLs of the current run
    <dir>/master.pid          pid (= process group id) of the master JVM while it runs
    <dir>/worker.pid          same for the worker JVM (drivers and executors share its group)
    <dir>/master.out          master stdout+stderr (Spark's INFO log)
    <dir>/worker.out          worker stdout+stderr
    <dir>/master.properties   --properties-file of the master (REST server on)
    <dir>/conf/               SPARK_CONF_DIR: empty, so no stray spark-env.sh or defaults apply
    <dir>/worker/             worker work dir: <driver-id>/{stdout,stderr}, <app-id>/<n>/
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pyspark

from core.paths import VAR_DIR
from core.processes import StopOnExit, free_ports, group_pids, pid_alive, read_pid, signal_group
from devservices import _cli as cli

log = logging.getLogger("uatu.standalone")

DEFAULT_DIR = VAR_DIR / "standalone"
SPARK_HOME = Path(pyspark.__file__).resolve().parent
HOST = "127.0.0.1"
READY_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 20.0

_MASTER_CLASS = "org.apache.spark.deploy.master.Master"
_WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
_POLL_INTERVAL_S = 0.25
_PROBE_TIMEOUT_S = 2.0
# The daemons' environment is inherited by every driver the worker starts; the caller's job
# settings must not leak into them (a driver gets exactly what its submission says).
_DROPPED_ENV_PREFIXES = ("UATU_", "PYSPARK_", "SPARK_")


class StandaloneError(RuntimeError):
    """The master or worker failed to start or did not become ready in time."""


@dataclass
class StandaloneCluster(StopOnExit):
    """A master and one worker started by :func:`start_standalone`.

    The JVMs are not tied to this object's lifetime: they run until :meth:`stop` (or the end
    of a ``with`` block), which lets the CLI leave them in the background.
    """

    dir: Path
    master_port: int
    webui_port: int
    rest_port: int
    worker_port: int
    worker_webui_port: int
    cores: int
    memory: str
    master: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    worker: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def master_url(self) -> str:
        """What drivers and workers connect to, e.g. ``spark://127.0.0.1:7077``."""
        return f"spark://{HOST}:{self.master_port}"

    @property
    def rest_url(self) -> str:
        """The REST submission server, e.g. ``http://127.0.0.1:6066``."""
        return f"http://{HOST}:{self.rest_port}"

    @property
    def webui_url(self) -> str:
        return f"http://{HOST}:{self.webui_port}"

    @property
    def worker_dir(self) -> Path:
        """The worker's work dir: each driver writes ``<driver-id>/stdout`` and ``stderr``."""
        return self.dir / "worker"

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> None:
        """Stop the worker with its drivers and executors, and the master; idempotent.

        SIGTERM to both process groups, SIGKILL to whatever is left of them after
        ``timeout`` seconds; returns once no member of either group is alive.
        """
        pgids = [p.pid for p in (self.worker, self.master) if p is not None]
        _stop_groups(pgids, timeout)
        for proc in (self.worker, self.master):
            if proc is not None:
                proc.wait()
        for name in ("master.pid", "worker.pid", "cluster.json"):
            (self.dir / name).unlink(missing_ok=True)


def start_standalone(
    work_dir: Path,
    *,
    cores: int = 4,
    memory: str = "4g",
    daemon_memory: str = "512m",
    spark_home: Path = SPARK_HOME,
    timeout: float = READY_TIMEOUT_S,
) -> StandaloneCluster:
    """Start a master (REST server on) and one worker under ``work_dir``; wait until ready.

    Ready means the REST server answers ``/v1/submissions/readyz`` with 200 and the master's
    ``/json/`` lists the worker ALIVE with ``cores`` cores, so a submission is scheduled at
    once. On failure, or after ``timeout`` seconds, stops what it started and raises
    :class:`StandaloneError` carrying the tail of the daemon's output.
    """
    work_dir = work_dir.resolve()
    live = running_pids(work_dir)
    if live:
        raise StandaloneError(f"a cluster from {work_dir} is already running (pids {live})")
    if not (spark_home / "bin" / "spark-class").exists():
        raise StandaloneError(f"no bin/spark-class under {spark_home}")
    master_port, webui_port, rest_port, worker_port, worker_webui_port = free_ports(5)
    cluster = StandaloneCluster(
        work_dir, master_port, webui_port, rest_port, worker_port, worker_webui_port,
        cores=cores, memory=memory,
    )  # fmt: skip
    (work_dir / "conf").mkdir(parents=True, exist_ok=True)
    cluster.worker_dir.mkdir(exist_ok=True)
    (work_dir / "master.properties").write_text(_master_properties(cluster))
    env = _daemon_env(os.environ, spark_home, work_dir / "conf", daemon_memory)
    spark_class = str(spark_home / "bin" / "spark-class")

    started = time.monotonic()
    try:
        cluster.master = _launch(
            work_dir / "master.out",
            env,
            [spark_class, _MASTER_CLASS, "--host", HOST, "--port", str(cluster.master_port),
             "--webui-port", str(cluster.webui_port),
             "--properties-file", str(work_dir / "master.properties")],
        )  # fmt: skip
        (work_dir / "master.pid").write_text(f"{cluster.master.pid}\n")
        cluster.worker = _launch(
            work_dir / "worker.out",
            env,
            [spark_class, _WORKER_CLASS, "--host", HOST, "--port", str(cluster.worker_port),
             "--webui-port", str(cluster.worker_webui_port), "--cores", str(cores),
             "--memory", memory, "--work-dir", str(cluster.worker_dir), cluster.master_url],
        )  # fmt: skip
        (work_dir / "worker.pid").write_text(f"{cluster.worker.pid}\n")
        (work_dir / "cluster.json").write_text(json.dumps(_describe(cluster), indent=2) + "\n")
        _wait_ready(cluster, timeout)
    except BaseException:
        # Half a cluster holds ports and confuses the next attempt.
        cluster.stop()
        raise
    log.info(
        "spark standalone ready: master %s, REST %s, UI %s (took %.1f s)",
        cluster.master_url, cluster.rest_url, cluster.webui_url, time.monotonic() - started,
    )  # fmt: skip
    return cluster


def stop_from_pidfiles(work_dir: Path, timeout: float = STOP_TIMEOUT_S) -> list[int]:
    """Stop a cluster a previous process started in ``work_dir``; return the groups signaled.

    Each pid file names a process group; it is signaled while any member still belongs to
    this cluster (see :func:`running_pids`), including drivers orphaned by a dead worker.
    Removes the pid files and cluster.json. Safe when nothing runs.
    """
    work_dir = work_dir.resolve()
    pgids = running_pids(work_dir)
    _stop_groups(pgids, timeout)
    for name in ("master.pid", "worker.pid", "cluster.json"):
        (work_dir / name).unlink(missing_ok=True)
    return pgids


def running_pids(work_dir: Path) -> list[int]:
    """Process groups from ``work_dir``'s pid files that still hold this cluster's processes."""
    pgids = []
    for name in ("master.pid", "worker.pid"):
        pgid = read_pid(work_dir / name)
        if pgid is not None and any(_belongs(pid, work_dir) for pid in group_pids(pgid)):
            pgids.append(pgid)
    return pgids


def ready(rest_url: str, webui_url: str, cores: int | None = None) -> bool:
    """True if the REST server accepts submissions and the master has an ALIVE worker.

    With ``cores``, that worker must also offer that many cores.
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
    return any(
        w.get("state") == "ALIVE" and (cores is None or w.get("cores") == cores)
        for w in state.get("workers", [])
    )


# --- internals -------------------------------------------------------------------------------


def _master_properties(cluster: StandaloneCluster) -> str:
    props = {
        # On by default since Spark 4.1; explicit, since the launcher depends on it.
        "spark.master.rest.enabled": "true",
        "spark.master.rest.host": HOST,
        "spark.master.rest.port": str(cluster.rest_port),
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
    )
    return env


def _launch(out_path: Path, env: Mapping[str, str], cmd: list[str]) -> subprocess.Popen[bytes]:
    with out_path.open("wb") as out:
        return subprocess.Popen(
            cmd,
            cwd=out_path.parent,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            # Own process group (spark-class execs into the JVM, so pid = pgid): Ctrl-C in the
            # terminal that ran `up` does not reach it, and stop() can signal the whole group.
            start_new_session=True,
        )


def _wait_ready(cluster: StandaloneCluster, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        for name, proc in (("master", cluster.master), ("worker", cluster.worker)):
            if proc is None or proc.poll() is not None:
                code = proc.returncode if proc else None
                out = cluster.dir / f"{name}.out"
                raise StandaloneError(
                    f"{name} exited with code {code} while starting; tail of {out}:\n{_tail(out)}"
                )
        if ready(cluster.rest_url, cluster.webui_url, cluster.cores):
            return
        if time.monotonic() >= deadline:
            raise StandaloneError(
                f"no ALIVE worker with {cluster.cores} cores behind {cluster.rest_url} within "
                f"{timeout:.0f} s; tail of {cluster.dir / 'worker.out'}:\n"
                f"{_tail(cluster.dir / 'worker.out')}"
            )
        time.sleep(_POLL_INTERVAL_S)


def _stop_groups(pgids: Sequence[int], timeout: float) -> None:
    # Signal all first and wait after: the shutdowns overlap instead of adding up.
    for pgid in pgids:
        signal_group(pgid, signal.SIGTERM)
    if _wait_groups_gone(pgids, timeout):
        log.warning("process groups %s ignored SIGTERM for %.0f s; killing them", pgids, timeout)
        for pgid in pgids:
            signal_group(pgid, signal.SIGKILL)
        left = _wait_groups_gone(pgids, 10.0)
        if left:
            log.error("processes %s survived SIGKILL", left)


def _wait_groups_gone(pgids: Sequence[int], timeout: float) -> list[int]:
    """Poll until no member of ``pgids`` is alive; return the members alive at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        left = [pid for pgid in pgids for pid in group_pids(pgid)]
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(_POLL_INTERVAL_S)


def _belongs(pid: int, work_dir: Path) -> bool:
    # Pids and group ids get reused: a process is this cluster's if its command line names the
    # cluster dir (master, worker) or it runs inside it (drivers and executors run in the
    # worker's work dir, orphaned Python drivers included).
    if not pid_alive(pid):
        return False
    if not Path("/proc/self").exists():
        return True  # no procfs (macOS): liveness is all we can check
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        cwd = Path(os.readlink(f"/proc/{pid}/cwd"))
    except OSError:
        return False
    return str(work_dir).encode() in cmdline or cwd.is_relative_to(work_dir)


def _describe(cluster: StandaloneCluster) -> dict[str, object]:
    return {
        "master_url": cluster.master_url,
        "rest_url": cluster.rest_url,
        "webui_url": cluster.webui_url,
        "worker_dir": str(cluster.worker_dir),
        "cores": cluster.cores,
        "memory": cluster.memory,
    }


def _tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_bytes()[-16384:].decode(errors="replace")
    except OSError as e:
        return f"(cannot read: {e})"
    return "\n".join(text.splitlines()[-lines:]) or "(empty)"


# --- CLI -------------------------------------------------------------------------------------


def _cmd_up(args: argparse.Namespace) -> int:
    work_dir: Path = args.dir.resolve()
    if running_pids(work_dir):
        described = json.loads((work_dir / "cluster.json").read_text())
        log.info("cluster from %s already running: %s", work_dir, described)
        return 0 if ready(described["rest_url"], described["webui_url"]) else 1
    cluster = start_standalone(work_dir, cores=args.cores, memory=args.memory, timeout=args.timeout)
    print(json.dumps(_describe(cluster), indent=2))
    return 0


def _cmd_status(args: argparse.Namespace) -> int:
    """Print cluster.json; exit 0 only if the cluster runs and accepts submissions."""
    work_dir: Path = args.dir.resolve()
    if not running_pids(work_dir):
        print(f"no cluster running from {work_dir}")
        return 1
    described = json.loads((work_dir / "cluster.json").read_text())
    is_ready = ready(described["rest_url"], described["webui_url"])
    print(json.dumps({**described, "ready": is_ready}, indent=2))
    return 0 if is_ready else 1


def _cmd_down(args: argparse.Namespace) -> int:
    work_dir: Path = args.dir.resolve()
    pgids = stop_from_pidfiles(work_dir)
    if pgids:
        log.info("stopped process groups %s from %s", pgids, work_dir)
    else:
        log.info("no cluster running from %s", work_dir)
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m devservices.spark_standalone",
        description="Run a local Spark standalone master and worker (pyspark's jars) in the "
        "background, with the master's REST submission server on.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    dir_help = "cluster dir: logs, pid files, worker work dir (default: var/standalone)"

    up = commands.add_parser("up", help="start master and worker and wait until ready")
    up.add_argument("--dir", type=Path, default=DEFAULT_DIR, help=dir_help)
    up.add_argument("--cores", type=int, default=4, help="cores the worker offers (default: 4)")
    up.add_argument("--memory", default="4g", help="memory the worker offers (default: 4g)")
    up.add_argument(
        "--timeout", type=float, default=READY_TIMEOUT_S, help="seconds to wait for readiness"
    )
    up.set_defaults(func=_cmd_up)

    status = commands.add_parser("status", help="show URLs and whether submissions work")
    status.add_argument("--dir", type=Path, default=DEFAULT_DIR, help=dir_help)
    status.set_defaults(func=_cmd_status)

    down = commands.add_parser("down", help="stop master, worker and their drivers")
    down.add_argument("--dir", type=Path, default=DEFAULT_DIR, help=dir_help)
    down.set_defaults(func=_cmd_down)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return cli.run(_parser(), argv, StandaloneError)


if __name__ == "__main__":
    sys.exit(main())
