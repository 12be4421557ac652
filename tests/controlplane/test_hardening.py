"""The control plane's defaults hold under misuse (issue 42, part 6): `make controlplane` serves
authenticated, /metrics on `:PORT` stays on loopback, --max-groups holds under concurrent
adds, an unknown id is never echoed whole, and the CLI gives up at its deadline.

Real parts throughout: `serve` processes, gRPC servers on 127.0.0.1, SQLite files and (for the
cap) the session's etcd; no broker: the partition count is a stand-in.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
import threading
import urllib.request
import uuid
from collections.abc import Iterator
from concurrent import futures
from contextlib import contextmanager
from pathlib import Path

import grpc
import pytest
from uber.data.kafka.datatransfer import job_pb2
from uber.data.kafka.datatransfer import master_admin_service_pb2 as admin_pb2
from uber.data.kafka.datatransfer import master_admin_service_pb2_grpc as admin_grpc

from controlplane import cli
from controlplane.assembly import token_file_line
from controlplane.auth import MIN_TOKEN_CHARS, ensure_token_file
from controlplane.jobgroups import JobGroups
from controlplane.metrics import metrics_bind
from controlplane.server import create_server
from controlplane.state.base import Store
from controlplane.state.etcd_store import EtcdStore
from controlplane.state.leadership import SoleLeader
from controlplane.state.sqlite import SqliteStore
from controlplane.workers import Workers
from core import channel as channel_module
from core import faults
from core.channel import ClientSecurity, default_token_file, open_channel
from core.config import load_settings
from core.errors import ConfigError
from core.paths import ROOT
from core.processes import free_ports
from testing.conf import write_conf_dir
from testing.jobgroups import orders_audit
from tests.controlplane.test_controlplane_e2e import control_plane_process


def conf_dir(tmp_path: Path) -> Path:
    return write_conf_dir(tmp_path / "conf", "127.0.0.1:9", tmp_path / "wh", tmp_path / "ck")


# --- make controlplane: authenticated by default ---------------------------------------------


def makefile_serve_options(target: str = "controlplane") -> list[str]:
    """The options after `serve` in the Makefile target's recipe (its one command)."""
    lines = (ROOT / "Makefile").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"{target}:"))
    argv = shlex.split(lines[start + 1])
    assert argv[:4] == ["$(PY)", "-m", "controlplane", "serve"], argv
    return argv[4:]


def option(options: list[str], name: str) -> str | None:
    return options[options.index(name) + 1] if name in options else None


@pytest.mark.integration
def test_make_controlplane_serves_with_a_token_it_creates(tmp_path: Path, monkeypatch) -> None:
    """The Makefile's own serve command (its address and token file moved under tmp_path):
    the token file is created 0600 and named in one line; a call without it is refused."""
    options = makefile_serve_options()
    assert option(options, "--address") == "127.0.0.1:8087"
    made = option(options, "--admin-token-file")
    assert made is not None and ROOT / made == channel_module.DEFAULT_TOKEN_FILE
    token_file = tmp_path / "var" / "controlplane" / "admin.token"
    moved = {"--admin-token-file": str(token_file)}
    extra: list[str] = []
    for name, value in zip(options[::2], options[1::2], strict=True):
        if name != "--address":
            extra += [name, moved.get(name, value)]
    address = f"127.0.0.1:{free_ports(1)[0]}"
    log = tmp_path / "cp.log"
    with control_plane_process(
        address, str(tmp_path / "cp.sqlite"), conf_dir(tmp_path), tmp_path / "apps", log,
        "--no-reconcile", *extra,
    ):  # fmt: skip
        said = [line for line in log.read_text().splitlines() if "admin token" in line]
        assert len(said) == 1 and said[0].endswith(token_file_line(token_file, created=True))
        assert token_file.stat().st_mode & 0o777 == 0o600
        token = token_file.read_text().strip()
        assert len(token) >= MIN_TOKEN_CHARS

        request = admin_pb2.GetAllJobGroupsRequest()
        with open_channel(address) as anonymous, pytest.raises(grpc.RpcError) as refused:
            list(admin_grpc.MasterAdminServiceStub(anonymous).GetAllJobGroups(request))
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
        with open_channel(address, ClientSecurity(token=token)) as known:
            assert list(admin_grpc.MasterAdminServiceStub(known).GetAllJobGroups(request)) == []

        # The CLI on this host finds the token where `make controlplane` puts it.
        monkeypatch.delenv("UATU_CONTROL_PLANE_TOKEN_FILE", raising=False)
        monkeypatch.setattr(channel_module, "DEFAULT_TOKEN_FILE", tmp_path / "absent.token")
        assert cli.main(["list", "--target", address]) == 1  # no token: UNAUTHENTICATED
        monkeypatch.setattr(channel_module, "DEFAULT_TOKEN_FILE", token_file)
        assert cli.main(["list", "--target", address]) == 0


def test_the_token_file_is_made_once_and_must_hold_a_token(tmp_path: Path) -> None:
    path = tmp_path / "new" / "admin.token"
    token, created = ensure_token_file(path)
    assert created and len(token) >= MIN_TOKEN_CHARS
    assert path.stat().st_mode & 0o777 == 0o600 and path.parent.stat().st_mode & 0o777 == 0o700
    assert ensure_token_file(path) == (token, False)  # a restart keeps the token
    short = tmp_path / "short.token"
    short.write_text("abc\n")
    with pytest.raises(ConfigError, match=r"--admin-token-file.*short\.token"):
        ensure_token_file(short)


def test_the_default_token_goes_only_to_this_host(tmp_path: Path, monkeypatch) -> None:
    token_file = tmp_path / "admin.token"
    monkeypatch.setattr(channel_module, "DEFAULT_TOKEN_FILE", token_file)
    assert default_token_file("127.0.0.1:8087") is None  # not made yet
    token_file.write_text("t" * 40)
    assert default_token_file("127.0.0.1:8087") == token_file
    assert default_token_file("localhost:8087") == token_file
    assert default_token_file("cp.example:8087") is None
    assert default_token_file("10.0.0.5:8087") is None


# --- /metrics on :PORT binds loopback -----------------------------------------------------


def listening_addresses(port: int) -> set[str]:
    """Local IPv4 addresses listening on `port`, from /proc/net/tcp (state 0A = LISTEN)."""
    found = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        address, hex_port = fields[1].split(":")
        if fields[3] == "0A" and int(hex_port, 16) == port:
            found.add(".".join(str(int(address[i : i + 2], 16)) for i in (6, 4, 2, 0)))
    return found


@pytest.mark.integration
def test_metrics_on_a_bare_port_listen_on_loopback_only(tmp_path: Path) -> None:
    address, metrics_port = (f"127.0.0.1:{port}" for port in free_ports(2))
    port = int(metrics_port.rpartition(":")[2])
    with control_plane_process(
        address, str(tmp_path / "cp.sqlite"), conf_dir(tmp_path), tmp_path / "apps",
        tmp_path / "cp.log", "--no-reconcile", "--metrics-address", f":{port}",
    ):  # fmt: skip
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
            assert "uatu_controlplane_is_leader 1.0" in reply.read().decode()
        assert listening_addresses(port) == {"127.0.0.1"}


def test_metrics_address_rules() -> None:
    assert metrics_bind(":9464") == ("127.0.0.1", 9464)
    assert metrics_bind("0.0.0.0:9464") == ("0.0.0.0", 9464)
    assert metrics_bind("[::]:9464") == ("::", 9464)
    assert metrics_bind("10.1.2.3:0") == ("10.1.2.3", 0)
    for bad in ("9464", ":", "host:port"):
        with pytest.raises(ConfigError, match="--metrics-address"):
            metrics_bind(bad)


# --- --max-groups under concurrent adds ----------------------------------------------------


@contextmanager
def admin_server(store: Store, conf: Path, max_groups: int | None = None) -> Iterator:
    """A real gRPC server on `store` (8 threads), no auth; yields its admin stub."""
    leader = SoleLeader("127.0.0.1:0")
    groups = JobGroups(store, load_settings(conf), lambda *_: 2, max_groups=max_groups)
    server, port, _ = create_server("127.0.0.1:0", groups, Workers(store, leader), leader)
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield admin_grpc.MasterAdminServiceStub(channel)
    finally:
        channel.close()
        server.stop(None).wait()


@pytest.fixture(params=["sqlite", pytest.param("etcd", marks=pytest.mark.integration)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    impl: Store
    if request.param == "sqlite":
        impl = SqliteStore(tmp_path / "cp.sqlite")
    else:
        server = request.getfixturevalue("etcd")
        impl = EtcdStore(server.endpoint, prefix=f"/test/{uuid.uuid4().hex}")
    try:
        yield impl
    finally:
        impl.close()


# Where the cap could break: between the domain's count and the store's insert (SQLite), and
# inside the etcd store, between its count and its txn. The first add to get there waits
# while the others fill the store.
RACE = {
    SqliteStore: "controlplane.group_limit_checked@1:pause=1500",
    EtcdStore: "controlplane.etcd_groups_counted@1:pause=1500",
}


def test_max_groups_holds_under_concurrent_adds(store: Store, tmp_path, monkeypatch) -> None:
    cap, adds = 5, 24
    monkeypatch.setenv(faults.ENV, RACE[type(store)])
    faults.reset()
    with admin_server(store, conf_dir(tmp_path), max_groups=cap) as admin:

        def add(index: int) -> str:
            request = admin_pb2.AddJobGroupRequest(
                job_group=orders_audit(jobGroupId=f"g{index:02d}")
            )
            try:
                admin.AddJobGroup(request, timeout=60)
                return "OK"
            except grpc.RpcError as e:
                return e.code().name

        with futures.ThreadPoolExecutor(max_workers=adds) as pool:
            codes = list(pool.map(add, range(adds)))
        stored = list(admin.GetAllJobGroups(admin_pb2.GetAllJobGroupsRequest(), timeout=30))
    faults.reset()
    assert sorted(codes) == ["OK"] * cap + ["RESOURCE_EXHAUSTED"] * (adds - cap)
    assert len(stored) == store.count() == cap


# --- unknown ids are not echoed whole ------------------------------------------------------


@pytest.mark.parametrize(
    "job_group_id",
    ["x" * 100_000, "evil\nLOG LINE forged\r\x1b[31m"],
    ids=["100KB", "control-characters"],
)
def test_an_unknown_id_comes_back_cut_and_escaped(tmp_path: Path, job_group_id: str) -> None:
    store = SqliteStore(tmp_path / "cp.sqlite")
    calls = {
        "GetJobGroup": lambda a: a.GetJobGroup(admin_pb2.GetJobGroupRequest(id=job_group_id)),
        "UpdateJobGroupState": lambda a: a.UpdateJobGroupState(
            admin_pb2.UpdateJobGroupStateRequest(id=job_group_id, state=job_pb2.JOB_STATE_CANCELED)
        ),
        "DeleteJobGroup": lambda a: a.DeleteJobGroup(
            admin_pb2.DeleteJobGroupRequest(id=job_group_id)
        ),
        "UpdateJobGroup": lambda a: a.UpdateJobGroup(
            admin_pb2.UpdateJobGroupRequest(job_group=orders_audit(jobGroupId=job_group_id))
        ),
    }
    expected_start = f"job group {repr(job_group_id)[:40]}"
    try:
        with admin_server(store, conf_dir(tmp_path)) as admin:
            for name, call in calls.items():
                with pytest.raises(grpc.RpcError) as raised:
                    call(admin)
                details = raised.value.details()
                assert raised.value.code() == grpc.StatusCode.NOT_FOUND, (name, details[:300])
                assert details.startswith(expected_start) and details.endswith(" not found")
                assert len(details) < 300 and details.isprintable(), (name, details[:300])
    finally:
        store.close()


# --- the CLI's deadline --------------------------------------------------------------------


class Silent(admin_grpc.MasterAdminServiceServicer):
    """Answers nothing until released: a hung control plane."""

    def __init__(self, release: threading.Event) -> None:
        self.release = release

    def GetJobGroup(self, request, context):
        self.release.wait()
        return admin_pb2.GetJobGroupResponse()

    def GetAllJobGroups(self, request, context):
        self.release.wait()
        return iter(())


@pytest.fixture
def hung_control_plane() -> Iterator[str]:
    release = threading.Event()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    admin_grpc.add_MasterAdminServiceServicer_to_server(Silent(release), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        release.set()
        server.stop(None).wait()


@pytest.mark.parametrize("command", [["get", "orders-audit"], ["list"]])
def test_the_cli_gives_up_at_its_deadline_in_one_line(hung_control_plane, command) -> None:
    cli_run = subprocess.run(
        [sys.executable, "-m", "controlplane", *command,
         "--target", hung_control_plane, "--timeout", "1"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert cli_run.returncode == 1, cli_run.stderr[-2000:]
    assert cli_run.stderr.splitlines() == [
        f"error: DEADLINE_EXCEEDED: no answer from {hung_control_plane} within 1 s "
        "(--timeout SECONDS allows more)"
    ]


def test_a_timeout_that_is_not_positive_is_refused_in_one_line(capsys) -> None:
    assert cli.main(["list", "--timeout", "0"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "error: --timeout: 0 is not a positive number of seconds"
    ]
