"""A real kafka-pixy (mailgun's gRPC/HTTP proxy for Kafka) on 127.0.0.1, for the PROXY_* probes.

kafka-pixy has no packages we can use, so :func:`install` builds it from source with Go
(``make kafka-pixy`` runs ``install``)::

    python -m devservices.kafka_pixy install        # -> var/kafka-pixy/bin/kafka-pixy
    python -m devservices.kafka_pixy run --bootstrap 127.0.0.1:9092 --zookeeper 127.0.0.1:2181

``install`` fetches the module with ``go mod download`` (from Go's configured module proxy,
``go env GOPROXY``, checked against the Go checksum database) and builds it with
``go build -p 1``: 1 to 2 minutes with a cold Go cache on 2 cores. It records the version
in ``kafka-pixy.version.json`` next to the binary and rebuilds when :data:`VERSION` changes.
``go install ...@VERSION`` cannot be used: it asks the proxy for the module's version list,
which the public module proxy refuses (403) for this module.

kafka-pixy keeps consumer-group membership in ZooKeeper (devservices/zookeeper.py), and speaks
Kafka through Sarama 1.23, told to assume Kafka 2.3.0 (the newest version it knows). Tests use
:func:`start_kafka_pixy`::

    with start_kafka_pixy(tmp_path / "pixy", kafka.bootstrap_servers, zk.connect) as pixy:
        pixy.grpc_address    # "127.0.0.1:<port>", see jobs/availability/probes/proxy_client.py

Layout of a run dir: ``kafka-pixy.yaml`` (the config written here), ``kafka-pixy.log``.
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
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from core.paths import VAR_DIR
from core.processes import StopOnExit, free_ports, terminate
from devservices import _cli as cli

log = logging.getLogger("uatu.kafka_pixy")

MODULE = "github.com/mailgun/kafka-pixy"
# The newest tag the module proxy serves (v0.18.1, v0.19.0, v1.0.0 ... answer 403, not published).
VERSION = "v0.18.0"
DEFAULT_BINARY = VAR_DIR / "kafka-pixy" / "bin" / "kafka-pixy"
DEFAULT_DIR = VAR_DIR / "kafka-pixy" / "run"
HOST = "127.0.0.1"
# The newest Kafka version Sarama 1.23 (and so kafka-pixy's config) accepts.
KAFKA_VERSION = "2.3.0"
READY_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0
# A ConsumeNAck on a drained topic blocks this long, then fails with NOT_FOUND.
LONG_POLLING_TIMEOUT_S = 1.0

_GO_FALLBACK = Path("/usr/local/go/bin/go")
_BUILD_TIMEOUT_S = 1200.0
_POLL_INTERVAL_S = 0.2
_PROBE_TIMEOUT_S = 1.0


class KafkaPixyError(RuntimeError):
    """kafka-pixy could not be built, did not start, or did not answer in time."""


@dataclass
class KafkaPixy(StopOnExit):
    """One kafka-pixy process started by :func:`start_kafka_pixy`; it runs until :meth:`stop`."""

    dir: Path
    grpc_port: int
    http_port: int
    cluster: str
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def grpc_address(self) -> str:
        return f"{HOST}:{self.grpc_port}"

    @property
    def http_url(self) -> str:
        return f"http://{HOST}:{self.http_port}"

    @property
    def config_path(self) -> Path:
        return self.dir / "kafka-pixy.yaml"

    @property
    def log_path(self) -> Path:
        return self.dir / "kafka-pixy.log"

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> None:
        """SIGTERM kafka-pixy (it commits offsets and leaves its groups), SIGKILL it after
        ``timeout`` seconds; idempotent."""
        proc = self.process
        if proc is not None and proc.poll() is None:
            # terminate() SIGKILLs the process group (its own, see start_new_session) if
            # kafka-pixy lingers.
            terminate(proc, timeout=timeout)


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
) -> KafkaPixy:
    """Start kafka-pixy on free loopback ports and return once both its APIs answer.

    ``cluster`` is the name clients pass in requests (it is also the default cluster).
    Raises :class:`KafkaPixyError` with the tail of the log if it exits or does not answer
    within ``timeout`` seconds; the process is stopped in that case.
    """
    run_dir = run_dir.resolve()
    if not binary.exists():
        raise KafkaPixyError(f"no kafka-pixy binary at {binary}; run `make kafka-pixy`")
    run_dir.mkdir(parents=True, exist_ok=True)
    grpc_port, http_port = free_ports(2)
    pixy = KafkaPixy(run_dir, grpc_port, http_port, cluster)
    config = pixy_config(
        grpc_port, http_port, bootstrap_servers, zookeeper_connect, cluster, long_polling_timeout_s
    )
    pixy.config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    started = time.monotonic()
    with pixy.log_path.open("wb") as out:
        pixy.process = subprocess.Popen(
            [str(binary), "-config", str(pixy.config_path)],
            cwd=run_dir,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            # Own process group: a Ctrl-C meant for the caller does not reach it.
            start_new_session=True,
        )
    try:
        _wait_ready(pixy, timeout)
        log.info(
            "kafka-pixy ready: grpc %s, http %s (took %.1f s)",
            pixy.grpc_address,
            pixy.http_url,
            time.monotonic() - started,
        )
    except BaseException:
        # Ctrl-C included: never leave a kafka-pixy behind that nobody holds.
        pixy.stop()
        raise
    return pixy


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


def _wait_ready(pixy: KafkaPixy, timeout: float) -> None:
    # kafka-pixy connects to Kafka and ZooKeeper before it opens its listeners, so once both
    # answer it is serving.
    deadline = time.monotonic() + timeout
    while True:
        assert pixy.process is not None
        if pixy.process.poll() is not None:
            raise KafkaPixyError(
                f"kafka-pixy exited with code {pixy.process.returncode} while starting; "
                f"tail of {pixy.log_path}:\n{_tail(pixy.log_path)}"
            )
        if pings(pixy.http_url) and _accepts(pixy.grpc_port):
            return
        if time.monotonic() >= deadline:
            raise KafkaPixyError(
                f"kafka-pixy (grpc {pixy.grpc_address}) did not answer within {timeout:.0f} s; "
                f"tail of {pixy.log_path}:\n{_tail(pixy.log_path)}"
            )
        time.sleep(_POLL_INTERVAL_S)


def _tail(path: Path, lines: int = 30) -> str:
    try:
        text = path.read_bytes()[-16384:].decode(errors="replace")
    except OSError as e:
        return f"(cannot read: {e})"
    return "\n".join(text.splitlines()[-lines:]) or "(empty)"


# --- CLI -------------------------------------------------------------------------------------


def _cmd_install(args: argparse.Namespace) -> int:
    binary = install(args.binary)
    log.info("%s: %s %s", binary, MODULE, installed_version(binary))
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    try:
        with start_kafka_pixy(
            args.dir, args.bootstrap, args.zookeeper, args.cluster, binary=args.binary
        ) as pixy:
            log.info(
                "grpc %s, http %s, cluster %r; Ctrl-C stops it",
                pixy.grpc_address,
                pixy.http_url,
                pixy.cluster,
            )
            assert pixy.process is not None
            code = pixy.process.wait()
    except KeyboardInterrupt:
        return 0  # the `with` stopped kafka-pixy
    log.error("kafka-pixy exited with code %d; see %s", code, pixy.log_path)
    return 1


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m devservices.kafka_pixy",
        description=f"Build kafka-pixy {VERSION} into var/kafka-pixy and run it on loopback.",
    )
    parser.add_argument("--binary", type=Path, default=DEFAULT_BINARY, help=argparse.SUPPRESS)
    commands = parser.add_subparsers(dest="command", required=True)

    inst = commands.add_parser(
        "install", help=f"build {MODULE}@{VERSION} into var/kafka-pixy/bin (needs Go)"
    )
    inst.set_defaults(func=_cmd_install)

    run = commands.add_parser("run", help="run kafka-pixy in the foreground until Ctrl-C")
    run.add_argument("--bootstrap", required=True, help="Kafka bootstrap servers, host:port,...")
    run.add_argument("--zookeeper", required=True, help="ZooKeeper connect string, host:port,...")
    run.add_argument("--cluster", default="default", help="cluster name in requests")
    run.add_argument(
        "--dir", type=Path, default=DEFAULT_DIR, help="run dir: config and log (var/kafka-pixy/run)"
    )
    run.set_defaults(func=_cmd_run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return cli.run(_parser(), argv, KafkaPixyError)


if __name__ == "__main__":
    sys.exit(main())
