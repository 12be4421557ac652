"""A real single-node etcd on 127.0.0.1, for the etcd store's tests and local HA experiments.

The binary comes from Debian's ``etcd-server`` package, unpacked into the repo instead of
installed system-wide (``make etcd`` runs ``install``)::

    python -m devservices.etcd install                       # -> var/etcd/bin/etcd
    python -m devservices.etcd up [--dir var/etcd/node] [--port 2379]
    python -m devservices.etcd status|down [--dir var/etcd/node]

Tests use :func:`start_etcd` (the ``etcd`` fixture). Layout of a server dir::

    <dir>/data/       etcd's --data-dir (the member's WAL and snapshots)
    <dir>/etcd.log    etcd's own log (zap, JSON lines) of the current run
    <dir>/etcd.pid    pid while it runs
    <dir>/etcd.ports  client and peer port of the current or last run
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import urllib.request
from pathlib import Path

from core.paths import VAR_DIR
from devservices._debian import DebPackageError, install_from_deb
from devservices._service import HOST, LocalService, Port, ServiceCli, ServiceError, read_ports

log = logging.getLogger("uatu.etcd")

DEFAULT_BINARY = VAR_DIR / "etcd" / "bin" / "etcd"
DEFAULT_DIR = VAR_DIR / "etcd" / "node"
READY_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0

_PACKAGE = "etcd-server"
_PROBE_TIMEOUT_S = 1.0


class EtcdServerError(ServiceError):
    """etcd could not be installed, did not start, or did not answer in time."""


class EtcdServer(LocalService):
    """One single-member etcd serving clients on ``client_port``; ready once healthy."""

    error = EtcdServerError
    ready_timeout = READY_TIMEOUT_S
    stop_timeout = STOP_TIMEOUT_S
    poll_interval = 0.1

    client_port = Port("client")
    peer_port = Port("peer")

    def __init__(self, dir: Path, client_port: int = 0, peer_port: int = 0) -> None:
        ports = {"client": client_port, "peer": peer_port}
        super().__init__(dir, "etcd", ports=ports, out_name="etcd.log")

    @property
    def endpoint(self) -> str:
        return f"http://{HOST}:{self.client_port}"

    def ready(self) -> bool:
        return healthy(self.endpoint)

    def describe(self) -> str:
        return self.endpoint

    def command(self, binary: Path) -> list[str]:
        """etcd's argv: one member named ``uatu``, data in ``<dir>/data``, loopback only."""
        peer = f"http://{HOST}:{self.peer_port}"
        return [
            str(binary),
            "--name=uatu",
            f"--data-dir={self.dir / 'data'}",
            f"--listen-client-urls={self.endpoint}",
            f"--advertise-client-urls={self.endpoint}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=uatu={peer}",
            "--initial-cluster-state=new",
            # 3.4's default capnslog logger is deprecated and prints a warning saying so.
            "--logger=zap",
            "--log-outputs=stderr",
        ]


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
    if not binary.exists():
        raise EtcdServerError(f"no etcd binary at {binary}; run `make etcd`")
    server = EtcdServer(data_dir, client_port, peer_port)
    return server.start(server.command(binary), timeout=timeout)


def healthy(endpoint: str, timeout: float = _PROBE_TIMEOUT_S) -> bool:
    """True if etcd at ``endpoint`` answers ``/health`` with ``"health": "true"``."""
    try:
        with urllib.request.urlopen(f"{endpoint}/health", timeout=timeout) as resp:
            return bool(json.load(resp).get("health") == "true")
    except (OSError, ValueError):
        # URLError and socket timeouts are OSErrors; a half-written body is a ValueError.
        return False


# --- CLI -------------------------------------------------------------------------------------


def _recorded(dir: Path) -> list[EtcdServer]:
    ports = read_ports(dir, "etcd")
    return [EtcdServer(dir, ports["client"], ports["peer"])] if ports else []


def _up_arguments(up: argparse.ArgumentParser) -> None:
    up.add_argument("--port", type=int, default=2379, help="client port (default: 2379)")
    up.add_argument(
        "--timeout", type=float, default=READY_TIMEOUT_S, help="seconds to wait for readiness"
    )


def _start(args: argparse.Namespace) -> list[EtcdServer]:
    return [start_etcd(args.dir, args.port, timeout=args.timeout)]


main = ServiceCli(
    "devservices.etcd", __doc__, DEFAULT_DIR, _recorded, _start, _up_arguments, install
).main


if __name__ == "__main__":
    sys.exit(main())
