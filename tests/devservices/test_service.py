"""devservices._service: the LocalService lifecycle and the up/down/status CLI, on tiny real
processes (a Python HTTP server, sleepers) instead of brokers: fast, no JVM or binaries."""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.paths import ROOT
from core.processes import (
    PORT_SLICE_ENV,
    free_ports,
    group_pids,
    listen_port_range,
    pid_alive,
    read_pid,
)
from devservices._service import (
    HOST,
    LocalService,
    Port,
    ServiceCli,
    ServiceError,
    choose_ports,
    read_ports,
    stop_all,
)

# An HTTP server that starts listening only after a delay, so "ready" comes later than
# "launched".
_SERVE = """
import http.server, sys, time
time.sleep(float(sys.argv[1]))
handler = http.server.SimpleHTTPRequestHandler
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[2])), handler).serve_forever()
"""

# Ignores SIGTERM, starts a child that ignores it too (same process group), records the
# child's pid, then waits: only SIGKILL to the whole group ends both.
_STUBBORN = """
import signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
child = subprocess.Popen([sys.executable, "-c",
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"])
open("child.pid", "w").write(str(child.pid))
time.sleep(600)
"""


class HttpServer(LocalService):
    """The service under test: ready once it answers GET /."""

    ready_timeout = 20.0
    stop_timeout = 5.0
    poll_interval = 0.05
    port = Port("http")

    def __init__(self, dir: Path, port: int = 0) -> None:
        super().__init__(dir, "http", ports={"http": port})

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(self.describe(), timeout=1.0) as resp:
                return bool(resp.status == 200)
        except OSError:
            return False

    def describe(self) -> str:
        return f"http://{HOST}:{self.port}/"

    def serve(self, delay: float = 0.0) -> list[str]:
        return [sys.executable, "-c", _SERVE, str(delay), str(self.port)]


def python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def group_gone(pgid: int, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while group_pids(pgid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.fixture
def started() -> Iterator[list[LocalService]]:
    """Services a test starts; whatever still runs at the end is stopped."""
    services: list[LocalService] = []
    yield services
    stop_all(services, timeout=1.0)


# --- ports -----------------------------------------------------------------------------------


def test_choose_ports_keeps_fixed_ports_and_picks_distinct_free_ones() -> None:
    ports = choose_ports({"a": 0, "fixed": 1234, "b": 0}, exclude=[4321])
    assert ports["fixed"] == 1234
    assert len({ports["a"], ports["b"], 1234, 4321}) == 4
    assert all(p > 0 for p in ports.values())


def test_free_ports_come_from_below_the_ephemeral_range_and_skip_taken_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Outgoing connections take their local port from the ephemeral range: a port picked
    # there can be held by a client before our server binds it (CI lost a broker that way).
    candidates = listen_port_range()
    if candidates is None:
        pytest.skip("no readable ephemeral port range here")
    ephemeral_low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    assert candidates.stop <= ephemeral_low
    assert all(port in candidates for port in free_ports(20, HOST))

    (first,) = free_ports(1, HOST)
    three = range(first, first + 3)
    monkeypatch.setattr("core.processes.listen_port_range", lambda: three)
    with socket.socket() as held:
        held.bind((HOST, first))
        held.listen()
        assert sorted(free_ports(2, HOST)) == [first + 1, first + 2]
        with pytest.raises(OSError, match="only 2 of 3 free ports"):
            free_ports(3, HOST)


def test_a_port_slice_keeps_parallel_pickers_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PORT_SLICE_ENV, raising=False)
    whole = listen_port_range()
    if whole is None:
        pytest.skip("no readable ephemeral port range here")
    slices = []
    for index in range(3):
        monkeypatch.setenv(PORT_SLICE_ENV, f"{index}/3")
        part = listen_port_range()
        assert part is not None and len(part) == len(whole) // 3
        assert all(port in part for port in free_ports(10, HOST))
        slices.append(set(part))
    assert not (slices[0] & slices[1] or slices[1] & slices[2] or slices[0] & slices[2])
    for wrong in ("3/3", "1", "a/b"):
        monkeypatch.setenv(PORT_SLICE_ENV, wrong)
        with pytest.raises(ValueError, match=PORT_SLICE_ENV):
            listen_port_range()


def test_launch_refuses_a_port_that_is_taken(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        sock.listen()
        server = HttpServer(tmp_path / "http", sock.getsockname()[1])
        with pytest.raises(ServiceError, match="already in use"):
            server.launch(server.serve())
    assert server.process is None
    assert not server.pid_path.exists()


# --- start and readiness ---------------------------------------------------------------------


def test_start_waits_until_ready_and_records_pid_and_ports(tmp_path, started) -> None:
    server = HttpServer(tmp_path / "http")
    started.append(server)
    began = time.monotonic()
    server.start(server.serve(delay=1.0))

    assert time.monotonic() - began >= 1.0  # it waited for the listener, not only the launch
    assert server.ready()
    assert server.pid is not None
    assert read_pid(server.pid_path) == server.pid
    assert json.loads(server.ports_path.read_text()) == {"http": server.port}
    assert read_ports(server.dir, "http") == {"http": server.port}
    assert server.status().ok


def test_a_process_that_exits_before_ready_fails_fast_with_its_log_tail(tmp_path) -> None:
    server = HttpServer(tmp_path / "http")
    crash = python("import sys; print('no config at all', flush=True); sys.exit(3)")
    began = time.monotonic()
    with pytest.raises(ServiceError) as failure:
        server.start(crash, timeout=60.0)

    assert time.monotonic() - began < 10.0  # not at the 60 s deadline
    assert "exited with code 3" in str(failure.value)
    assert "no config at all" in str(failure.value)
    assert str(server.out_path) in str(failure.value)
    assert not server.pid_path.exists()


def test_a_process_never_ready_fails_at_the_deadline_and_is_stopped(tmp_path) -> None:
    server = HttpServer(tmp_path / "http")  # nothing will listen on its port
    with pytest.raises(ServiceError, match="did not become ready within 1 s"):
        server.start(python("import time; time.sleep(600)"), timeout=1.0)

    assert server.pid is not None
    assert group_gone(server.pid)
    assert not server.pid_path.exists()


def test_a_subclass_error_type_is_what_it_raises(tmp_path) -> None:
    class StubbornError(ServiceError):
        pass

    class Failing(HttpServer):
        error = StubbornError

    with pytest.raises(StubbornError):
        Failing(tmp_path / "x").start(python("raise SystemExit(1)"))


# --- stop ------------------------------------------------------------------------------------


def test_stop_kills_the_whole_group_even_when_sigterm_is_ignored(tmp_path) -> None:
    sleeper = HttpServer(tmp_path / "stubborn")
    child_pid_file = sleeper.dir / "child.pid"
    sleeper.launch(python(_STUBBORN))
    sleeper.wait_ready(until=lambda: child_pid_file.exists() and child_pid_file.read_text() != "")
    pgid = sleeper.pid
    child = int(child_pid_file.read_text())
    assert pgid is not None and child in group_pids(pgid)

    began = time.monotonic()
    sleeper.stop(timeout=0.5)

    assert time.monotonic() - began < 10.0
    assert group_pids(pgid) == []
    assert not pid_alive(child)
    assert not sleeper.is_running()
    assert not sleeper.pid_path.exists()
    sleeper.stop()  # idempotent
    assert sleeper.status().pid is None


def test_with_block_stops_the_service(tmp_path) -> None:
    unstarted = HttpServer(tmp_path / "http")
    with unstarted.start(unstarted.serve()) as server:
        pid = server.pid
        assert pid is not None and server.ready()
    assert group_gone(pid)
    assert not server.pid_path.exists()
    assert json.loads(server.ports_path.read_text()) == {"http": server.port}  # kept: last run


def test_another_object_stops_it_through_the_pid_file(tmp_path, started) -> None:
    first = HttpServer(tmp_path / "http")
    started.append(first)
    first.start(first.serve())
    later = HttpServer(tmp_path / "http", first.port)  # what `down` in another process builds

    assert later.running_pid() == first.pid
    with pytest.raises(ServiceError, match="already running"):
        later.launch(later.serve())
    later.stop()

    assert first.process is not None and first.process.wait(timeout=5) == -signal.SIGTERM
    assert not first.pid_path.exists()


def test_a_pid_file_naming_a_process_of_elsewhere_is_ignored(tmp_path) -> None:
    # A stale pid file whose pid now belongs to an unrelated program: never signal that.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    stranger = subprocess.Popen(
        python("import time; time.sleep(600)"), cwd=elsewhere, start_new_session=True
    )
    try:
        server = HttpServer(tmp_path / "http")
        server.dir.mkdir()
        server.pid_path.write_text(f"{stranger.pid}\n")

        assert server.running_pid() is None
        server.stop()

        assert stranger.poll() is None
        assert not server.pid_path.exists()
    finally:
        os.killpg(stranger.pid, signal.SIGKILL)
        stranger.wait()


def test_kill_sigkills_at_once_and_refuses_when_not_running(tmp_path, started) -> None:
    server = HttpServer(tmp_path / "http")
    started.append(server)
    server.start(server.serve())
    server.kill()

    assert server.process is not None and server.process.returncode == -signal.SIGKILL
    assert not server.pid_path.exists()
    with pytest.raises(ServiceError, match="not running"):
        server.kill()


# --- the command line ------------------------------------------------------------------------


def _cli(tmp_path: Path, started: list[LocalService]) -> ServiceCli:
    def recorded(dir: Path) -> list[HttpServer]:
        ports = read_ports(dir, "http")
        return [HttpServer(dir, ports["http"])] if ports else []

    def up_arguments(up: argparse.ArgumentParser) -> None:
        up.add_argument("--port", type=int, default=0)

    def start(args: argparse.Namespace) -> list[HttpServer]:
        server = HttpServer(args.dir, args.port)
        started.append(server)  # only so the test cleans up; `down` finds it by its files
        return [server.start(server.serve())]

    return ServiceCli(__name__, __doc__, tmp_path / "default", recorded, start, up_arguments)


def test_cli_up_status_down(tmp_path, started, capsys) -> None:
    cli = _cli(tmp_path, started)
    dir = str(tmp_path / "svc")

    assert cli.main(["status", "--dir", dir]) == 1
    assert "nothing set up" in capsys.readouterr().out

    assert cli.main(["up", "--dir", dir]) == 0
    pid = read_pid(Path(dir) / "http.pid")
    port = read_ports(Path(dir), "http")["http"]
    assert pid is not None
    with urllib.request.urlopen(f"http://{HOST}:{port}/", timeout=5) as resp:
        assert resp.status == 200

    assert cli.main(["status", "--dir", dir]) == 0
    assert f"running (pid {pid}), ready" in capsys.readouterr().out

    # Up again: the running one is reported, not a second one started.
    assert cli.main(["up", "--dir", dir]) == 0
    assert read_pid(Path(dir) / "http.pid") == pid
    assert len(started) == 1
    # ...unless it was asked for another port.
    other = choose_ports({"other": 0}, exclude=[port])["other"]
    assert cli.main(["up", "--dir", dir, "--port", str(other)]) == 1

    assert cli.main(["down", "--dir", dir]) == 0
    assert group_gone(pid)
    assert not (Path(dir) / "http.pid").exists()

    assert cli.main(["status", "--dir", dir]) == 1
    assert "stopped" in capsys.readouterr().out
    assert cli.main(["down", "--dir", dir]) == 0  # nothing to stop is fine


def test_cli_reports_a_service_error_as_exit_status_1(tmp_path, started, caplog) -> None:
    cli = _cli(tmp_path, started)
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        sock.listen()
        taken = sock.getsockname()[1]
        assert cli.main(["up", "--dir", str(tmp_path / "svc"), "--port", str(taken)]) == 1
    assert "already in use" in caplog.text


@pytest.mark.parametrize(
    "module",
    [
        "kafka",
        "zookeeper",
        "etcd",
        "kafka_pixy",
        "burrow",
        "mirror_maker",
        "spark_standalone",
        "prometheus",
    ],
)
def test_every_service_module_has_the_same_cli(module: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", f"devservices.{module}", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert f"python -m devservices.{module}" in done.stdout
    assert all(command in done.stdout for command in ("up", "down", "status"))
