"""A real kafka-pixy (mailgun's gRPC/HTTP proxy for Kafka) on 127.0.0.1, for the PROXY_* probes.

kafka-pixy has no packages we can use, so :func:`install` builds it from source with Go
(``make kafka-pixy`` runs ``install``)::

    python -m devservices.kafka_pixy install        # -> var/kafka-pixy/bin/kafka-pixy
    python -m devservices.kafka_pixy up --bootstrap 127.0.0.1:9092 --zookeeper 127.0.0.1:2181
    python -m devservices.kafka_pixy status|down    # [--dir var/kafka-pixy/run]

``install`` fetches the module with ``go mod download`` (from Go's configured module proxy,
``go env GOPROXY``, checked against the Go checksum database) and builds it with
``go build -p 1``: 1 to 2 minutes with a cold Go cache on 2 cores. It records the version
in ``kafka-pixy.version.json`` next to the binary and rebuilds when :data:`VERSION` changes.
``go install ...@VERSION`` cannot be used: it asks the proxy for the module's version list,
which the public module proxy refuses (403) for this module.

kafka-pixy keeps consumer-group membership in ZooKeeper (devservices/zookeeper.py), and speaks
Kafka through Sarama 1.23, told to assume Kafka 2.3.0 (the newest version it knows). Tests use
:func:`start_kafka_pixy` (the ``kafka_pixy`` fixture)::

    with start_kafka_pixy(tmp_path / "pixy", kafka.bootstrap_servers, zk.connect) as pixy:
        pixy.grpc_address    # "127.0.0.1:<port>", see jobs/availability/probes/proxy_client.py

Layout of a run dir: ``kafka-pixy.yaml`` (the config written here), ``kafka-pixy.log`` (its
output), ``kafka-pixy.pid`` (while it runs), ``kafka-pixy.ports`` (gRPC and HTTP port).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import yaml

from core.paths import VAR_DIR
from devservices._service import HOST, LocalService, Port, ServiceCli, ServiceError, read_ports

log = logging.getLogger("uatu.kafka_pixy")

MODULE = "github.com/mailgun/kafka-pixy"
# The newest tag the module proxy serves (v0.18.1, v0.19.0, v1.0.0 ... answer 403, not published).
VERSION = "v0.18.0"
DEFAULT_BINARY = VAR_DIR / "kafka-pixy" / "bin" / "kafka-pixy"
DEFAULT_DIR = VAR_DIR / "kafka-pixy" / "run"
# The newest Kafka version Sarama 1.23 (and so kafka-pixy's config) accepts.
KAFKA_VERSION = "2.3.0"
READY_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0
# A ConsumeNAck on a drained topic blocks this long, then fails with NOT_FOUND.
LONG_POLLING_TIMEOUT_S = 1.0

_GO_FALLBACK = Path("/usr/local/go/bin/go")
_BUILD_TIMEOUT_S = 1200.0
_PROBE_TIMEOUT_S = 1.0


class KafkaPixyError(ServiceError):
    """kafka-pixy could not be built, did not start, or did not answer in time."""


class KafkaPixy(LocalService):
    """One kafka-pixy process; ready once both its APIs answer.

    ``cluster`` is the name clients pass in requests (also its default cluster).
    """

    error = KafkaPixyError
    ready_timeout = READY_TIMEOUT_S
    stop_timeout = STOP_TIMEOUT_S  # on SIGTERM it commits offsets and leaves its groups
    grpc_port = Port("grpc")
    http_port = Port("http")

    def __init__(
        self, dir: Path, grpc_port: int = 0, http_port: int = 0, cluster: str = "default"
    ) -> None:
        ports = {"grpc": grpc_port, "http": http_port}
        super().__init__(dir, "kafka-pixy", ports=ports, out_name="kafka-pixy.log")
        self.cluster = cluster

    @property
    def grpc_address(self) -> str:
        return f"{HOST}:{self.grpc_port}"

    @property
    def http_url(self) -> str:
        return f"http://{HOST}:{self.http_port}"

    @property
    def config_path(self) -> Path:
        return self.dir / "kafka-pixy.yaml"

    def ready(self) -> bool:
        # kafka-pixy connects to Kafka and ZooKeeper before it opens its listeners, so once
        # both answer it is serving.
        return pings(self.http_url) and _accepts(self.grpc_port)

    def describe(self) -> str:
        return f"grpc {self.grpc_address}, http {self.http_url}"


# --- install ---------------------------------------------------------------------------------


def installed_version(binary: Path = DEFAULT_BINARY) -> str | None:
    """The version recorded next to ``binary`` by :func:`install`, None if not installed."""
    stamp = _stamp_path(binary)
    if not binary.exists() or not stamp.exists():
        return None
    try:
        return str(json.loads(stamp.read_text())["version"])
    except (OSError, ValueError, KeyError):
        return None


def install(binary: Path = DEFAULT_BINARY, version: str = VERSION) -> Path:
    """Build kafka-pixy ``version`` into ``binary`` unless that version is already there.

    Needs Go (``go`` on PATH or /usr/local/go/bin/go) and access to its configured module
    proxy (``go env GOPROXY``). Raises :class:`KafkaPixyError` naming the failed command.
    """
    if installed_version(binary) == version:
        return binary
    go = _find_go()
    env = dict(os.environ)
    module = f"{MODULE}@{version}"
    started = time.monotonic()
    log.info("downloading %s with %s mod download (GOPROXY=%s)", module, go, _goproxy(go, env))
    with tempfile.TemporaryDirectory(prefix="kafka-pixy-build-") as tmp:
        work = Path(tmp)
        # Outside any module, so `go mod download` only fetches and verifies the zip.
        out = _go([go, "mod", "download", "-json", module], work, env, version)
        try:
            info = json.loads(out)
            source = Path(info["Dir"])
        except (ValueError, KeyError) as e:
            raise KafkaPixyError(f"go mod download -json {module} printed no Dir: {out!r}") from e
        # The module cache is read-only; build in a writable copy.
        src = work / "src"
        shutil.copytree(source, src)
        for path in [src, *src.rglob("*")]:
            path.chmod(path.stat().st_mode | 0o200)
        binary.parent.mkdir(parents=True, exist_ok=True)
        partial = binary.with_name(binary.name + ".partial")
        log.info("building %s (go build -p 1: 1 to 2 minutes with a cold Go build cache)", module)
        _go([go, "build", "-p", "1", "-trimpath", "-o", str(partial), "."], src, env, version)
        partial.chmod(0o755)
        # Rename last: an interrupted build never looks installed.
        partial.replace(binary)
        _stamp_path(binary).write_text(
            json.dumps({"module": MODULE, "version": version, "sum": info.get("Sum")}) + "\n"
        )
    log.info("installed %s %s in %.0f s", binary, version, time.monotonic() - started)
    return binary


def _stamp_path(binary: Path) -> Path:
    return binary.with_name(binary.name + ".version.json")


def _find_go() -> str:
    found = shutil.which("go")
    if found:
        return found
    if _GO_FALLBACK.exists():
        return str(_GO_FALLBACK)
    raise KafkaPixyError(
        f"Go not found (PATH or {_GO_FALLBACK}): it is needed to build {MODULE}@{VERSION}"
    )


def _goproxy(go: str, env: dict[str, str]) -> str:
    """The module proxy list Go uses here (its own configuration, never one we pick)."""
    try:
        done = subprocess.run(
            [go, "env", "GOPROXY"], env=env, capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return "(go env GOPROXY failed)"
    return done.stdout.strip() or "(unset)"


def _go(cmd: list[str], cwd: Path, env: dict[str, str], version: str) -> str:
    try:
        proc = subprocess.run(
            cmd,
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=_BUILD_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as e:
        raise KafkaPixyError(f"`{' '.join(cmd)}` took more than {_BUILD_TIMEOUT_S:.0f} s") from e
    if proc.returncode != 0:
        proxy = _goproxy(cmd[0], env).split(",")[0]
        # `go mod download -json` reports its error in the JSON on stdout.
        output = (proc.stderr.strip() or proc.stdout.strip())[-4000:]
        raise KafkaPixyError(
            f"`{' '.join(cmd)}` failed (exit {proc.returncode}; module from "
            f"{proxy}/{MODULE}/@v/{version}.zip):\n{output}"
        )
    return proc.stdout


# --- run -------------------------------------------------------------------------------------


def pixy_config(
    grpc_port: int,
    http_port: int,
    bootstrap_servers: str,
    zookeeper_connect: str,
    cluster: str = "default",
    long_polling_timeout_s: float = LONG_POLLING_TIMEOUT_S,
) -> dict:
    """kafka-pixy's YAML config (as a dict): loopback listeners, one cluster, probe timings.

    Differences from kafka-pixy's defaults, all for probes:

    * producer: flush every message at once (defaults: 500 ms or 1 MiB, so a synchronous
      Produce would take up to 500 ms), 3 retries 500 ms apart instead of 6 x 10 s;
    * consumer: ``long_polling_timeout`` bounds a ConsumeNAck on a drained topic (default
      3 s); an un-acked message comes back after 10 s (default 5 m); a group/topic with no
      consume request for 60 s is left (default 15 s, shorter than many probe intervals, and
      every leave and join rebalances).
    """
    return {
        "grpc_addr": f"{HOST}:{grpc_port}",
        "tcp_addr": f"{HOST}:{http_port}",
        "proxies": {
            cluster: {
                "kafka": {
                    "seed_peers": [p.strip() for p in bootstrap_servers.split(",") if p.strip()],
                    "version": KAFKA_VERSION,
                },
                "zoo_keeper": {
                    "seed_peers": [p.strip() for p in zookeeper_connect.split(",") if p.strip()],
                    "session_timeout": "15s",
                },
                "net": {"dial_timeout": "5s", "read_timeout": "10s", "write_timeout": "10s"},
                "producer": {
                    "flush_frequency": "0s",
                    "flush_bytes": 0,
                    "required_acks": "wait_for_all",
                    "retry_max": 3,
                    "retry_backoff": "500ms",
                    "timeout": "5s",
                    "shutdown_timeout": "5s",
                    "partitioner": "hash",
                },
                "consumer": {
                    "long_polling_timeout": f"{int(long_polling_timeout_s * 1000)}ms",
                    "ack_timeout": "10s",
                    "subscription_timeout": "60s",
                    "offsets_commit_interval": "500ms",
                    "fetch_max_wait": "100ms",
                    "retry_backoff": "500ms",
                },
            }
        },
        "default_cluster": cluster,
        "logging": [{"name": "console", "severity": "info"}],
    }


def start_kafka_pixy(
    run_dir: Path,
    bootstrap_servers: str,
    zookeeper_connect: str,
    cluster: str = "default",
    binary: Path = DEFAULT_BINARY,
    timeout: float = READY_TIMEOUT_S,
    long_polling_timeout_s: float = LONG_POLLING_TIMEOUT_S,
    grpc_port: int = 0,
    http_port: int = 0,
) -> KafkaPixy:
    """Start kafka-pixy on loopback (port 0: a free one) and return once both its APIs answer.

    ``cluster`` is the name clients pass in requests (it is also the default cluster).
    Raises :class:`KafkaPixyError` with the tail of the log if it exits or does not answer
    within ``timeout`` seconds; the process is stopped in that case.
    """
    if not binary.exists():
        raise KafkaPixyError(f"no kafka-pixy binary at {binary}; run `make kafka-pixy`")
    pixy = KafkaPixy(run_dir, grpc_port, http_port, cluster)
    config = pixy_config(
        pixy.grpc_port,
        pixy.http_port,
        bootstrap_servers,
        zookeeper_connect,
        cluster,
        long_polling_timeout_s,
    )
    pixy.dir.mkdir(parents=True, exist_ok=True)
    pixy.config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    return pixy.start([str(binary), "-config", str(pixy.config_path)], timeout=timeout)


def pings(http_url: str, timeout: float = _PROBE_TIMEOUT_S) -> bool:
    """True if kafka-pixy's HTTP API at ``http_url`` answers ``GET /_ping``."""
    try:
        with urllib.request.urlopen(f"{http_url}/_ping", timeout=timeout) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=_PROBE_TIMEOUT_S):
            return True
    except OSError:
        return False


# --- CLI -------------------------------------------------------------------------------------


def _recorded(dir: Path) -> list[KafkaPixy]:
    ports = read_ports(dir, "kafka-pixy")
    return [KafkaPixy(dir, ports["grpc"], ports["http"])] if ports else []


def _up_arguments(up: argparse.ArgumentParser) -> None:
    up.add_argument("--bootstrap", required=True, help="Kafka bootstrap servers, host:port,...")
    up.add_argument("--zookeeper", required=True, help="ZooKeeper connect string, host:port,...")
    up.add_argument("--cluster", default="default", help="cluster name in requests")
    up.add_argument("--grpc-port", type=int, default=0, help="gRPC port (default: a free one)")
    up.add_argument("--http-port", type=int, default=0, help="HTTP port (default: a free one)")


def _start(args: argparse.Namespace) -> list[KafkaPixy]:
    pixy = start_kafka_pixy(
        args.dir,
        args.bootstrap,
        args.zookeeper,
        args.cluster,
        grpc_port=args.grpc_port,
        http_port=args.http_port,
    )
    return [pixy]


main = ServiceCli(
    "devservices.kafka_pixy", __doc__, DEFAULT_DIR, _recorded, _start, _up_arguments, install
).main


if __name__ == "__main__":
    sys.exit(main())
