"""A gRPC sink that answers every call at once (Go), and ghz, the gRPC load tool: the dispatcher
benchmark's service and the measure of its ceiling.

Both are built from source with Go, the way kafka-pixy is (devservices/kafka_pixy.py): modules
come from Go's configured module proxy (``go env GOPROXY``) and are checked against the Go
checksum database; ``go build -p 1`` keeps the 2-core machine usable.

    python -m devservices.grpc_sink install   # -> var/grpc-sink/bin/grpc-sink and .../ghz
    python -m devservices.grpc_sink run --port 50051 [--fail-every 20]

The sink's source is devservices/grpc_sink/ (main.go, go.mod, go.sum): any method, request =
raw bytes, response = zero bytes (google.protobuf.Empty), and every Nth call RESOURCE_EXHAUSTED
with ``--fail-every N``. ``GET /stats`` on its HTTP port gives calls, failures, bytes and the
first and last receive times. ghz is github.com/bojand/ghz (:data:`GHZ_VERSION`); it needs a
.proto for the method it calls (`bench_proto`).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from core.paths import ROOT, VAR_DIR
from core.processes import free_ports, terminate
from devservices._service import ServiceError, StopOnExit

log = logging.getLogger("uatu.grpc_sink")

SOURCE_DIR = ROOT / "devservices" / "grpc_sink"
BIN_DIR = VAR_DIR / "grpc-sink" / "bin"
SINK_BINARY = BIN_DIR / "grpc-sink"
GHZ_BINARY = BIN_DIR / "ghz"
GHZ_MODULE = "github.com/bojand/ghz"
GHZ_VERSION = "v0.120.0"
HOST = "127.0.0.1"
_BUILD_TIMEOUT_S = 1800.0
_GO_FALLBACK = Path("/usr/local/go/bin/go")


class GrpcSinkError(ServiceError):
    """The sink or ghz could not be built, or the sink did not start."""


# --- install ---------------------------------------------------------------------------------


def _go() -> str:
    found = shutil.which("go") or (str(_GO_FALLBACK) if _GO_FALLBACK.exists() else None)
    if not found:
        raise GrpcSinkError(f"Go not found (PATH or {_GO_FALLBACK}): needed to build the sink")
    return found


def _run(cmd: list[str], cwd: Path) -> str:
    try:
        done = subprocess.run(
            cmd, cwd=cwd, capture_output=True, text=True, timeout=_BUILD_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired as e:
        raise GrpcSinkError(f"`{' '.join(cmd)}` took more than {_BUILD_TIMEOUT_S:.0f} s") from e
    if done.returncode != 0:
        output = (done.stderr.strip() or done.stdout.strip())[-4000:]
        raise GrpcSinkError(f"`{' '.join(cmd)}` failed (exit {done.returncode}):\n{output}")
    return done.stdout


def _source_hash() -> str:
    digest = hashlib.sha256()
    for name in ("main.go", "go.mod", "go.sum"):
        digest.update((SOURCE_DIR / name).read_bytes())
    return digest.hexdigest()[:16]


def _stamp(binary: Path) -> Path:
    return binary.with_name(binary.name + ".version.json")


def _installed(binary: Path, version: str) -> bool:
    try:
        return binary.exists() and json.loads(_stamp(binary).read_text())["version"] == version
    except (OSError, ValueError, KeyError):
        return False


def _finish(partial: Path, binary: Path, version: str) -> None:
    partial.chmod(0o755)
    partial.replace(binary)  # last: an interrupted build never looks installed
    _stamp(binary).write_text(json.dumps({"version": version}) + "\n")


def install_sink() -> Path:
    """Build the sink from devservices/grpc_sink unless that source is built already."""
    version = _source_hash()
    if _installed(SINK_BINARY, version):
        return SINK_BINARY
    BIN_DIR.mkdir(parents=True, exist_ok=True)
    partial = SINK_BINARY.with_name("grpc-sink.partial")
    started = time.monotonic()
    log.info("building the gRPC sink (go build -p 1)")
    with tempfile.TemporaryDirectory(prefix="grpc-sink-") as tmp:
        src = Path(tmp) / "src"
        shutil.copytree(SOURCE_DIR, src)
        _run([_go(), "build", "-p", "1", "-trimpath", "-o", str(partial), "."], src)
    _finish(partial, SINK_BINARY, version)
    log.info("built %s in %.0f s", SINK_BINARY, time.monotonic() - started)
    return SINK_BINARY


def install_ghz() -> Path:
    """Build ghz :data:`GHZ_VERSION` from its module unless it is built already."""
    if _installed(GHZ_BINARY, GHZ_VERSION):
        return GHZ_BINARY
    BIN_DIR.mkdir(parents=True, exist_ok=True)
    go = _go()
    module = f"{GHZ_MODULE}@{GHZ_VERSION}"
    started = time.monotonic()
    log.info("downloading %s (go mod download) and building it: 3 to 5 minutes cold", module)
    with tempfile.TemporaryDirectory(prefix="ghz-build-") as tmp:
        work = Path(tmp)
        info = json.loads(_run([go, "mod", "download", "-json", module], work))
        src = work / "src"
        shutil.copytree(Path(info["Dir"]), src)
        for path in [src, *src.rglob("*")]:
            path.chmod(path.stat().st_mode | 0o200)  # the module cache is read-only
        partial = GHZ_BINARY.with_name("ghz.partial")
        _run([go, "build", "-p", "1", "-trimpath", "-o", str(partial), "./cmd/ghz"], src)
    _finish(partial, GHZ_BINARY, GHZ_VERSION)
    log.info("built %s in %.0f s", GHZ_BINARY, time.monotonic() - started)
    return GHZ_BINARY


def bench_proto(path: Path, consumer_group: str, topic: str) -> str:
    """Write a .proto whose one method is ``kafka.consumerproxy.<group>/<topic>`` taking a
    BytesValue, for ghz; returns the ``--call`` name. The sink ignores what it receives."""
    path.write_text(
        'syntax = "proto3";\n'
        f"package kafka.consumerproxy;\n"
        'import "google/protobuf/wrappers.proto";\n'
        'import "google/protobuf/empty.proto";\n'
        f"service {consumer_group} {{\n"
        f"  rpc {topic}(google.protobuf.BytesValue) returns (google.protobuf.Empty);\n"
        "}\n"
    )
    return f"kafka.consumerproxy.{consumer_group}.{topic}"


# --- run -------------------------------------------------------------------------------------


@dataclass
class GrpcSink(StopOnExit):
    port: int
    stats_port: int
    log_path: Path
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def address(self) -> str:
        return f"{HOST}:{self.port}"

    def stats(self) -> dict[str, int]:
        with urllib.request.urlopen(f"http://{HOST}:{self.stats_port}/stats", timeout=5) as r:
            return dict(json.load(r))

    def reset(self) -> None:
        request = urllib.request.Request(f"http://{HOST}:{self.stats_port}/reset", method="POST")
        urllib.request.urlopen(request, timeout=5).close()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            terminate(self.process, timeout=10)


def start_sink(run_dir: Path, fail_every: int = 0, binary: Path = SINK_BINARY) -> GrpcSink:
    """Start the sink on free loopback ports; returns once it answers /stats."""
    run_dir.mkdir(parents=True, exist_ok=True)
    port, stats_port = free_ports(2)
    log_path = run_dir / f"grpc-sink-{port}.log"
    process = subprocess.Popen(
        [
            str(binary),
            "-addr",
            f"{HOST}:{port}",
            "-stats-addr",
            f"{HOST}:{stats_port}",
            "-fail-every",
            str(fail_every),
        ],
        stdout=log_path.open("ab"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env={**os.environ, "GOMAXPROCS": os.environ.get("GOMAXPROCS", "2")},
    )
    sink = GrpcSink(port, stats_port, log_path, process)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise GrpcSinkError(f"the sink exited ({process.returncode}); see {log_path}")
        try:
            sink.stats()
            return sink
        except OSError:
            time.sleep(0.1)
    sink.stop()
    raise GrpcSinkError(f"the sink did not answer in 30 s; see {log_path}")


def _install(_args: argparse.Namespace) -> int:
    install_sink()
    install_ghz()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devservices.grpc_sink", description=__doc__)
    sub = parser.add_subparsers(required=True)
    p = sub.add_parser("install", help="build the sink and ghz into var/grpc-sink/bin")
    p.set_defaults(func=_install)
    p = sub.add_parser("run", help="run the sink in the foreground")
    p.add_argument("--port", type=int, default=50051)
    p.add_argument("--fail-every", type=int, default=0)
    p.set_defaults(
        func=lambda a: subprocess.call(
            [str(install_sink()), "-addr", f"{HOST}:{a.port}", "-fail-every", str(a.fail_every)]
        )
    )
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(message)s", datefmt="%H:%M:%S"
    )
    try:
        return int(args.func(args))
    except GrpcSinkError as e:
        log.error("%s", e)  # one line, exit 1
        return 1


if __name__ == "__main__":
    sys.exit(main())
