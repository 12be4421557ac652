"""A real Prometheus (Debian's ``prometheus`` package, 2.42) on 127.0.0.1, for the metrics tests.

The binary is unpacked into the repo, not installed system-wide (``make prometheus`` runs
``install``)::

    python -m devservices.prometheus install        # -> var/prometheus/bin/prometheus

Tests use :func:`start_prometheus` with the scrape configs they need::

    with start_prometheus(tmp_path / "prom", [{"job_name": "cp", "static_configs": [
            {"targets": ["127.0.0.1:9464"]}]}]) as prom:
        prom.query('grpc_server_handled_total{grpc_method="Heartbeat"}')  # /api/v1/query
        prom.targets()                                                    # /api/v1/targets

Layout of a Prometheus dir: ``prometheus.yml`` (written on every start), ``data/`` (its TSDB),
``prometheus.log``. The scrape and evaluation interval defaults to 1 s here (15 s in Prometheus)
so a test sees a series within seconds.
"""

from __future__ import annotations

import argparse
import json
import logging
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from core.paths import VAR_DIR
from core.processes import StopOnExit, free_ports, terminate
from devservices import _cli as cli
from devservices._debian import DebPackageError, install_from_deb

log = logging.getLogger("uatu.prometheus")

DEFAULT_BINARY = VAR_DIR / "prometheus" / "bin" / "prometheus"
HOST = "127.0.0.1"
READY_TIMEOUT_S = 30.0
_PACKAGE = "prometheus"
_HTTP_TIMEOUT_S = 5.0


class PrometheusError(RuntimeError):
    """Prometheus could not be installed, did not start, or answered with an error."""


def install(binary: Path = DEFAULT_BINARY) -> Path:
    """Put Debian's Prometheus at ``binary`` unless it is there (``apt-get download`` +
    ``dpkg-deb -x``, see ``devservices._debian``); return its path."""
    try:
        return install_from_deb(_PACKAGE, "usr/bin/prometheus", binary)
    except DebPackageError as e:
        raise PrometheusError(str(e)) from e


@dataclass
class PrometheusServer(StopOnExit):
    """One Prometheus process started by :func:`start_prometheus`."""

    dir: Path
    port: int
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def api(self, path: str, **params: str) -> Any:
        """GET /api/v1/<path>; the `data` of a success, PrometheusError otherwise."""
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        try:
            with urllib.request.urlopen(
                f"{self.url}/api/v1/{path}{query}", timeout=_HTTP_TIMEOUT_S
            ) as resp:
                body = json.load(resp)
        except urllib.error.HTTPError as e:
            raise PrometheusError(f"{path}: HTTP {e.code}: {e.read()[:500]!r}") from e
        if body.get("status") != "success":
            raise PrometheusError(f"{path}: {body}")
        return body["data"]

    def query(self, promql: str) -> list[dict[str, Any]]:
        """An instant query's result vector: [{"metric": {labels}, "value": [t, "v"]}, ...]."""
        data = self.api("query", query=promql)
        return list(data["result"])

    def targets(self) -> list[dict[str, Any]]:
        """The active scrape targets with their health and last error."""
        return list(self.api("targets")["activeTargets"])

    def stop(self) -> None:
        if self.process is not None:
            terminate(self.process, timeout=10)


def start_prometheus(
    directory: Path,
    scrape_configs: Sequence[Mapping[str, Any]],
    *,
    interval: str = "1s",
    binary: Path = DEFAULT_BINARY,
    timeout: float = READY_TIMEOUT_S,
) -> PrometheusServer:
    """Start Prometheus on a free loopback port with `scrape_configs`; return once ready."""
    if not binary.exists():
        raise PrometheusError(f"no prometheus binary at {binary}; run `make prometheus`")
    directory = directory.resolve()
    directory.mkdir(parents=True, exist_ok=True)
    config = {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "scrape_configs": [dict(c) for c in scrape_configs],
    }
    (directory / "prometheus.yml").write_text(yaml.safe_dump(config, sort_keys=False))
    server = PrometheusServer(directory, free_ports(1)[0])
    with (directory / "prometheus.log").open("wb") as out:
        server.process = subprocess.Popen(
            [
                str(binary),
                f"--config.file={directory / 'prometheus.yml'}",
                f"--storage.tsdb.path={directory / 'data'}",
                f"--web.listen-address={HOST}:{server.port}",
                "--web.enable-lifecycle",
            ],
            cwd=directory,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    deadline = time.monotonic() + timeout
    while True:
        if server.process.poll() is not None:
            raise PrometheusError(
                f"prometheus exited with {server.process.returncode}; see "
                f"{directory / 'prometheus.log'}:\n{_tail(directory / 'prometheus.log')}"
            )
        try:
            with urllib.request.urlopen(f"{server.url}/-/ready", timeout=1) as resp:
                if resp.status == 200:
                    break
        except OSError:
            pass
        if time.monotonic() > deadline:
            server.stop()
            raise PrometheusError(f"prometheus not ready within {timeout:.0f} s")
        time.sleep(0.2)
    log.info("prometheus ready on %s", server.url)
    return server


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError as e:
        return f"(cannot read: {e})"


def _cmd_install(args: argparse.Namespace) -> int:
    binary = install(args.binary)
    version = subprocess.run(
        [str(binary), "--version"], capture_output=True, text=True, check=False
    ).stdout.splitlines()
    log.info("%s: %s", binary, version[0] if version else "(no --version output)")
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m devservices.prometheus",
        description="Install Debian's Prometheus into var/prometheus (tests start it).",
    )
    parser.add_argument("--binary", type=Path, default=DEFAULT_BINARY, help=argparse.SUPPRESS)
    commands = parser.add_subparsers(dest="command", required=True)
    inst = commands.add_parser("install", help="unpack Debian's prometheus into var/prometheus")
    inst.set_defaults(func=_cmd_install)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return cli.run(_parser(), argv, PrometheusError)


if __name__ == "__main__":
    sys.exit(main())
