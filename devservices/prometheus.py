"""A real Prometheus (Debian's ``prometheus`` package, 2.42) on 127.0.0.1, for the metrics tests.

The binary is unpacked into the repo, not installed system-wide (``make prometheus`` runs
``install``)::

    python -m devservices.prometheus install        # -> var/prometheus/bin/prometheus, promtool
    python -m devservices.prometheus up|status|down [--dir var/prometheus/run] [--port 9090]

Tests use :func:`start_prometheus` with the scrape configs they need::

    with start_prometheus(tmp_path / "prom", [{"job_name": "cp", "static_configs": [
            {"targets": ["127.0.0.1:9464"]}]}]) as prom:
        prom.query('grpc_server_handled_total{grpc_method="Heartbeat"}')  # /api/v1/query
        prom.targets()                                                    # /api/v1/targets

Layout of a Prometheus dir: ``prometheus.yml`` (written on every start), ``data/`` (its TSDB),
``prometheus.log``, ``prometheus.pid`` (while it runs), ``prometheus.ports``. The scrape and
evaluation interval defaults to 1 s here (15 s in Prometheus) so a test sees a series within
seconds.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from core.paths import VAR_DIR
from devservices._debian import DebPackageError, install_files_from_deb
from devservices._service import HOST, LocalService, Port, ServiceCli, ServiceError, read_ports

log = logging.getLogger("uatu.prometheus")

DEFAULT_BINARY = VAR_DIR / "prometheus" / "bin" / "prometheus"
PROMTOOL = DEFAULT_BINARY.with_name("promtool")  # `promtool test rules` holds the alert rules
DEFAULT_DIR = VAR_DIR / "prometheus" / "run"
READY_TIMEOUT_S = 30.0
_PACKAGE = "prometheus"
_HTTP_TIMEOUT_S = 5.0


class PrometheusError(ServiceError):
    """Prometheus could not be installed, did not start, or answered with an error."""


def install(binary: Path = DEFAULT_BINARY) -> Path:
    """Put Debian's Prometheus at ``binary`` and its promtool beside it unless they are there
    (``apt-get download`` + ``dpkg-deb -x``, see ``devservices._debian``); return the
    server's path."""
    members = {"usr/bin/prometheus": binary, "usr/bin/promtool": binary.with_name("promtool")}
    try:
        install_files_from_deb(_PACKAGE, members)
        return binary
    except DebPackageError as e:
        raise PrometheusError(str(e)) from e


class Prometheus(LocalService):
    """One Prometheus serving its HTTP API on ``port``; ready once ``/-/ready`` answers 200."""

    error = PrometheusError
    ready_timeout = READY_TIMEOUT_S
    port = Port("http")

    def __init__(self, dir: Path, port: int = 0) -> None:
        super().__init__(dir, "prometheus", ports={"http": port}, out_name="prometheus.log")

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as resp:
                return bool(resp.status == 200)
        except OSError:
            return False

    def describe(self) -> str:
        return self.url

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


# The name the metrics tests use.
PrometheusServer = Prometheus


def start_prometheus(
    directory: Path,
    scrape_configs: Sequence[Mapping[str, Any]],
    *,
    interval: str = "1s",
    binary: Path = DEFAULT_BINARY,
    timeout: float = READY_TIMEOUT_S,
    port: int = 0,
) -> Prometheus:
    """Start Prometheus on ``port`` (0: a free one) with `scrape_configs`; return once ready.

    Raises :class:`PrometheusError` with its log tail if it exits or is not ready in time.
    """
    if not binary.exists():
        raise PrometheusError(f"no prometheus binary at {binary}; run `make prometheus`")
    server = Prometheus(directory, port)
    server.dir.mkdir(parents=True, exist_ok=True)
    config = {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "scrape_configs": [dict(c) for c in scrape_configs],
    }
    config_file = server.dir / "prometheus.yml"
    config_file.write_text(yaml.safe_dump(config, sort_keys=False))
    argv = [
        str(binary),
        f"--config.file={config_file}",
        f"--storage.tsdb.path={server.dir / 'data'}",
        f"--web.listen-address={HOST}:{server.port}",
        "--web.enable-lifecycle",
    ]
    return server.start(argv, timeout=timeout)


# --- CLI -------------------------------------------------------------------------------------


def _recorded(dir: Path) -> list[Prometheus]:
    ports = read_ports(dir, "prometheus")
    return [Prometheus(dir, ports["http"])] if ports else []


def _up_arguments(up: argparse.ArgumentParser) -> None:
    up.add_argument("--port", type=int, default=9090, help="HTTP port (default: 9090)")


def _start(args: argparse.Namespace) -> list[Prometheus]:
    # By hand there is nothing to scrape yet but Prometheus itself.
    itself = [{"job_name": "prometheus", "static_configs": [{"targets": [f"{HOST}:{args.port}"]}]}]
    return [start_prometheus(args.dir, itself, port=args.port)]


main = ServiceCli(
    "devservices.prometheus", __doc__, DEFAULT_DIR, _recorded, _start, _up_arguments, install
).main


if __name__ == "__main__":
    sys.exit(main())
