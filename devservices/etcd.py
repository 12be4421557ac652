"""A real single-node etcd on 127.0.0.1, for the etcd store's tests and local HA experiments.

The binary comes from Debian's ``etcd-server`` package, unpacked into the repo instead of
installed system-wide (``make etcd`` runs ``install``)::

    python -m devservices.etcd install                       # -> var/etcd/bin/etcd
    python -m devservices.etcd up [--dir var/etcd/node] [--port 2379]
    python -m devservices.etcd down [--dir var/etcd/node]

Tests use :func:`start_etcd`. Layout of a server dir::

    <dir>/data/       etcd's --data-dir (the member's WAL and snapshots)
    <dir>/etcd.log    etcd's own log (zap, JSON lines) of the current run
    <dir>/etcd.pid    pid while it runs
    <dir>/endpoint    client URL of the current run, e.g. http://127.0.0.1:2379
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from core.paths import VAR_DIR
from core.processes import StopOnExit, free_ports, pid_alive, read_pid, signal_pid, wait_gone
from devservices import _cli as cli
from devservices._debian import DebPackageError, install_from_deb

log = logging.getLogger("uatu.etcd")

DEFAULT_BINARY = VAR_DIR / "etcd" / "bin" / "etcd"
DEFAULT_DIR = VAR_DIR / "etcd" / "node"
HOST = "127.0.0.1"
READY_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0

_PACKAGE = "etcd-server"
_POLL_INTERVAL_S = 0.1
_PROBE_TIMEOUT_S = 1.0


class EtcdServerError(RuntimeError):
    """etcd could not be installed, did not start, or did not answer in time."""


@dataclass
class EtcdServer(StopOnExit):
    """One etcd process started by :func:`start_etcd`; it runs until :meth:`stop`."""

    dir: Path
    client_port: int
    peer_port: int
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def endpoint(self) -> str:
        return f"http://{HOST}:{self.client_port}"

    @property
    def log_path(self) -> Path:
        return self.dir / "etcd.log"

    @property
    def pid_path(self) -> Path:
        return self.dir / "etcd.pid"

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> None:
        """SIGTERM etcd, SIGKILL it after ``timeout`` seconds; idempotent."""
        proc = self.process
        if proc is not None and proc.poll() is None:
            signal_pid(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                log.warning("etcd pid %d ignored SIGTERM for %.0f s; killing it", proc.pid, timeout)
                signal_pid(proc.pid, signal.SIGKILL)
                proc.wait()
        self.pid_path.unlink(missing_ok=True)
        (self.dir / "endpoint").unlink(missing_ok=True)


def install(binary: Path = DEFAULT_BINARY) -> Path:
    """Put Debian's etcd binary at ``binary`` unless it is already there; return its path.

    Downloads the ``etcd-server`` .deb with ``apt-get download`` (no root needed, nothing is
    installed system-wide) and unpacks it with ``dpkg-deb -x`` (``devservices._debian``).
    """
    try:
        return install_from_deb(_PACKAGE, "usr/bin/etcd", binary)
    except DebPackageError as e:
        raise EtcdServerError(str(e)) from e


def start_etcd(
    data_dir: Path,
    client_port: int = 0,
    peer_port: int = 0,
    binary: Path = DEFAULT_BINARY,
    timeout: float = READY_TIMEOUT_S,
) -> EtcdServer:
    """Start a single-member etcd in ``data_dir`` and return once it reports healthy.

    Port 0 means a free port chosen now. An existing ``data_dir/data`` is reused (the member
    keeps its keys). Raises :class:`EtcdServerError` with the tail of the log if etcd exits,
    or is not healthy within ``timeout`` seconds; the process is stopped in that case.
    """
    data_dir = data_dir.resolve()
    if not binary.exists():
        raise EtcdServerError(f"no etcd binary at {binary}; run `make etcd`")
    live = running_pid(data_dir)
    if live is not None:
        raise EtcdServerError(f"etcd from {data_dir} is already running (pid {live})")
    picked = iter(free_ports(2))
    server = EtcdServer(data_dir, client_port or next(picked), peer_port or next(picked))
    data_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with server.log_path.open("wb") as out:
        server.process = subprocess.Popen(
            _command(binary, server),
            cwd=data_dir,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            # Own session: Ctrl-C in the terminal that ran `up` does not reach etcd.
            start_new_session=True,
        )
    server.pid_path.write_text(f"{server.process.pid}\n")
    (data_dir / "endpoint").write_text(server.endpoint + "\n")
    try:
        _wait_healthy(server, timeout)
    except BaseException:
        server.stop()
        raise
    log.info("etcd ready on %s (took %.1f s)", server.endpoint, time.monotonic() - started)
    return server


def healthy(endpoint: str, timeout: float = _PROBE_TIMEOUT_S) -> bool:
    """True if etcd at ``endpoint`` answers ``/health`` with ``"health": "true"``."""
    try:
        with urllib.request.urlopen(f"{endpoint}/health", timeout=timeout) as resp:
            return bool(json.load(resp).get("health") == "true")
    except (OSError, ValueError):
        # URLError and socket timeouts are OSErrors; a half-written body is a ValueError.
        return False


def running_pid(data_dir: Path) -> int | None:
    """The pid of the etcd serving ``data_dir``, None if none runs (stale pid files ignored)."""
    pid = read_pid(data_dir / "etcd.pid")
    return pid if pid is not None and _is_our_etcd(pid, data_dir) else None


def stop_from_pidfile(data_dir: Path, timeout: float = STOP_TIMEOUT_S) -> int | None:
    """Stop the etcd that a previous process started in ``data_dir``; return its pid."""
    data_dir = data_dir.resolve()
    pid = running_pid(data_dir)
    if pid is not None:
        signal_pid(pid, signal.SIGTERM)
        if wait_gone([pid], timeout):
            log.warning("etcd pid %d ignored SIGTERM for %.0f s; killing it", pid, timeout)
            signal_pid(pid, signal.SIGKILL)
            wait_gone([pid], 5.0)
    (data_dir / "etcd.pid").unlink(missing_ok=True)
    (data_dir / "endpoint").unlink(missing_ok=True)
    return pid


def _command(binary: Path, server: EtcdServer) -> list[str]:
    peer = f"http://{HOST}:{server.peer_port}"
    return [
        str(binary),
        "--name=uatu",
        f"--data-dir={server.dir / 'data'}",
        f"--listen-client-urls={server.endpoint}",
        f"--advertise-client-urls={server.endpoint}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=uatu={peer}",
        "--initial-cluster-state=new",
        # 3.4's default capnslog logger is deprecated and prints a warning saying so.
        "--logger=zap",
        "--log-outputs=stderr",
    ]


def _wait_healthy(server: EtcdServer, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        assert server.process is not None
        if server.process.poll() is not None:
            raise EtcdServerError(
                f"etcd exited with code {server.process.returncode} while starting; "
                f"tail of {server.log_path}:\n{_tail(server.log_path)}"
            )
        if healthy(server.endpoint):
            return
        if time.monotonic() >= deadline:
            raise EtcdServerError(
                f"etcd on {server.endpoint} not healthy within {timeout:.0f} s; "
                f"tail of {server.log_path}:\n{_tail(server.log_path)}"
            )
        time.sleep(_POLL_INTERVAL_S)


def _is_our_etcd(pid: int, data_dir: Path) -> bool:
    # Pids get reused: only trust a pid file if the process is etcd serving this data dir.
    if not pid_alive(pid):
        return False
    if not Path("/proc/self").exists():
        return True  # no procfs (macOS): liveness is all we can check
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return f"--data-dir={data_dir.resolve() / 'data'}".encode() in cmdline


def _tail(path: Path, lines: int = 30) -> str:
    try:
        text = path.read_bytes()[-16384:].decode(errors="replace")
    except OSError as e:
        return f"(cannot read: {e})"
    return "\n".join(text.splitlines()[-lines:]) or "(empty)"


# --- CLI -------------------------------------------------------------------------------------


def _cmd_install(args: argparse.Namespace) -> int:
    binary = install(args.binary)
    version = subprocess.run(
        [str(binary), "--version"], capture_output=True, text=True, check=False
    ).stdout.splitlines()
    log.info("%s: %s", binary, version[0] if version else "(no --version output)")
    return 0


def _cmd_up(args: argparse.Namespace) -> int:
    data_dir: Path = args.dir.resolve()
    pid = running_pid(data_dir)
    if pid is not None:
        endpoint_file = data_dir / "endpoint"
        endpoint = endpoint_file.read_text().strip() if endpoint_file.exists() else "(unknown)"
        if endpoint != f"http://{HOST}:{args.port}":
            log.error("etcd from %s already runs on %s; run `down` first", data_dir, endpoint)
            return 1
        log.info("etcd from %s already running (pid %d) on %s", data_dir, pid, endpoint)
        return 0 if healthy(endpoint) else 1
    server = start_etcd(data_dir, client_port=args.port, binary=args.binary, timeout=args.timeout)
    log.info("etcd up: endpoint=%s (log %s)", server.endpoint, server.log_path)
    return 0


def _cmd_down(args: argparse.Namespace) -> int:
    data_dir: Path = args.dir.resolve()
    pid = stop_from_pidfile(data_dir)
    if pid is None:
        log.info("no etcd running from %s", data_dir)
    else:
        log.info("stopped etcd pid %d from %s", pid, data_dir)
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m devservices.etcd",
        description="Install Debian's etcd into var/etcd and run a local single-node etcd.",
    )
    parser.add_argument("--binary", type=Path, default=DEFAULT_BINARY, help=argparse.SUPPRESS)
    commands = parser.add_subparsers(dest="command", required=True)
    dir_help = "server dir: data, log and pid file (default: var/etcd/node in the repo)"

    inst = commands.add_parser("install", help="unpack Debian's etcd-server into var/etcd/bin")
    inst.set_defaults(func=_cmd_install)

    up = commands.add_parser("up", help="start etcd in the background and wait until healthy")
    up.add_argument("--dir", type=Path, default=DEFAULT_DIR, help=dir_help)
    up.add_argument("--port", type=int, default=2379, help="client port (default: 2379)")
    up.add_argument(
        "--timeout", type=float, default=READY_TIMEOUT_S, help="seconds to wait for readiness"
    )
    up.set_defaults(func=_cmd_up)

    down = commands.add_parser("down", help="stop the etcd started from the server dir")
    down.add_argument("--dir", type=Path, default=DEFAULT_DIR, help=dir_help)
    down.set_defaults(func=_cmd_down)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return cli.run(_parser(), argv, EtcdServerError)


if __name__ == "__main__":
    sys.exit(main())
