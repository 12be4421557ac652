"""The control plane under attack (issue 20): who may call it, how workers prove who they
are, conditional writes, and broker lookups kept off the threads that serve heartbeats.

Everything runs on 127.0.0.1 with a CA made in the test (testing/tls.py); no broker: the
partition count is a stand-in.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from google.protobuf import json_format
from grpc_health.v1 import health_pb2, health_pb2_grpc
from uber.data.kafka.datatransfer import job_pb2
from uber.data.kafka.datatransfer import master_admin_service_pb2 as admin_pb2
from uber.data.kafka.datatransfer import master_admin_service_pb2_grpc as admin_grpc
from uber.data.kafka.datatransfer import master_worker_service_pb2 as mw_pb2
from uber.data.kafka.datatransfer import master_worker_service_pb2_grpc as mw_grpc
from uber.data.kafka.datatransfer.job_group_pb2 import JobGroup
from uber.data.kafka.datatransfer.worker_pb2 import Node

from controlplane import cli
from controlplane.assembly import ServeOptions, application_env, is_loopback
from controlplane.auth import AuthPolicy, Principal, Role, parse_auth_file, required_role
from controlplane.errors import LookupsBusy, WorkerRefused
from controlplane.jobgroups import JobGroups
from controlplane.launchers.base import LaunchRecord
from controlplane.lookups import PartitionLookups
from controlplane.server import ServerSecurity, create_server
from controlplane.state.leadership import SoleLeader
from controlplane.state.sqlite import SqliteStore
from controlplane.workers import Workers, new_worker_secret
from core.channel import ClientSecurity, open_channel
from core.config import ClusterConfig, load_settings
from core.errors import ClusterUnreachable, ConfigError
from testing.conf import write_conf_dir
from testing.jobgroups import ORDERS_AUDIT, orders_audit
from testing.tls import TestCA

ADMIN_TOKEN = "a" * 40
READ_TOKEN = "r" * 40


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> TestCA:
    return TestCA.create(tmp_path_factory.mktemp("pki"))


@dataclass
class Plane:
    target: str
    store: SqliteStore
    ca: Path
    workers: Workers
    groups: JobGroups

    def channel(self, token: str | None = None, **files: Path) -> grpc.Channel:
        return open_channel(self.target, ClientSecurity(ca=self.ca, token=token, **files))

    def admin(self, channel: grpc.Channel) -> admin_grpc.MasterAdminServiceStub:
        return admin_grpc.MasterAdminServiceStub(channel)


@contextmanager
def serve_plane(tmp_path: Path, pki: TestCA, security: ServerSecurity, **workers_kw) -> Iterator:
    conf = write_conf_dir(tmp_path / "conf", "127.0.0.1:9", tmp_path / "wh", tmp_path / "ck")
    store = SqliteStore(tmp_path / "cp.sqlite")
    groups = JobGroups(store, load_settings(conf), lambda *_: 2)
    leader = SoleLeader("127.0.0.1:0")
    workers = Workers(store, leader, **workers_kw)
    server, port, _ = create_server("127.0.0.1:0", groups, workers, leader, security=security)
    server.start()
    leader.address = f"127.0.0.1:{port}"  # what the workers are redirected to
    try:
        yield Plane(f"127.0.0.1:{port}", store, pki.cert_pem, workers, groups)
    finally:
        server.stop(None).wait()
        store.close()


def tls_security(pki: TestCA, **changes) -> ServerSecurity:
    server = pki.issue("control-plane", hosts=("127.0.0.1", "localhost"))
    policy = parse_auth_file(
        f"admin ops token:{ADMIN_TOKEN}\nread dashboards token:{READ_TOKEN}\n"
        "admin deployer cert:deployer\n",
        "auth",
    )
    values = dict(
        tls_cert_chain=server.chain_pem.read_bytes(),
        tls_key=server.key_pem.read_bytes(),
        policy=policy,
    )
    values.update(changes)
    return ServerSecurity(**values)  # type: ignore[arg-type]


@pytest.fixture
def plane(tmp_path: Path, pki: TestCA) -> Iterator[Plane]:
    with serve_plane(tmp_path, pki, tls_security(pki)) as running:
        yield running


def code_of(call) -> grpc.StatusCode:
    with pytest.raises(grpc.RpcError) as raised:
        call()
    return raised.value.code()


def add_request(group: JobGroup | None = None) -> admin_pb2.AddJobGroupRequest:
    return admin_pb2.AddJobGroupRequest(job_group=group or orders_audit())


# --- 1. Authentication and transport ----------------------------------------------------------


def test_an_unauthenticated_add_is_refused_and_stores_nothing(plane: Plane) -> None:
    with plane.channel() as channel:  # TLS, but no token
        admin = plane.admin(channel)
        assert code_of(lambda: admin.AddJobGroup(add_request())) == (
            grpc.StatusCode.UNAUTHENTICATED
        )
        assert code_of(lambda: list(admin.GetAllJobGroups(admin_pb2.GetAllJobGroupsRequest()))) == (
            grpc.StatusCode.UNAUTHENTICATED
        )
    with plane.channel("x" * 40) as channel:  # a token nobody was given
        assert code_of(lambda: plane.admin(channel).AddJobGroup(add_request())) == (
            grpc.StatusCode.UNAUTHENTICATED
        )
    assert plane.store.count() == 0


def test_a_read_only_token_reads_but_may_not_write(plane: Plane) -> None:
    with plane.channel(ADMIN_TOKEN) as channel:
        plane.admin(channel).AddJobGroup(add_request())
    with plane.channel(READ_TOKEN) as channel:
        admin = plane.admin(channel)
        assert [r.job_group.job_group_id for r in admin.GetAllJobGroups(
            admin_pb2.GetAllJobGroupsRequest()
        )] == ["orders-audit"]  # fmt: skip
        admin.GetJobGroup(admin_pb2.GetJobGroupRequest(id="orders-audit"))
        for write in (
            lambda: admin.AddJobGroup(add_request(orders_audit(jobGroupId="other"))),
            lambda: admin.DeleteJobGroup(admin_pb2.DeleteJobGroupRequest(id="orders-audit")),
            lambda: admin.UpdateJobGroupState(
                admin_pb2.UpdateJobGroupStateRequest(
                    id="orders-audit", state=job_pb2.JOB_STATE_CANCELED
                )
            ),
        ):
            assert code_of(write) == grpc.StatusCode.PERMISSION_DENIED
    assert plane.store.count() == 1


def test_plaintext_clients_cannot_talk_to_a_tls_control_plane(plane: Plane) -> None:
    with grpc.insecure_channel(plane.target) as channel:
        stub = plane.admin(channel)
        call = lambda: stub.AddJobGroup(add_request(), timeout=5)  # noqa: E731
        assert code_of(call) == grpc.StatusCode.UNAVAILABLE


def test_health_is_open_and_reflection_is_off_by_default(plane: Plane) -> None:
    from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

    with plane.channel() as channel:
        health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
        assert health.status == health_pb2.HealthCheckResponse.SERVING
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        request = reflection_pb2.ServerReflectionRequest(list_services="")
        assert code_of(lambda: list(stub.ServerReflectionInfo(iter([request])))) == (
            grpc.StatusCode.UNIMPLEMENTED
        )


def test_mtls_identity_from_the_auth_file(tmp_path: Path, pki: TestCA) -> None:
    deployer = pki.issue("deployer", client=True)
    stranger = pki.issue("stranger", client=True)
    security = tls_security(pki, client_ca=pki.cert_pem.read_bytes())
    with serve_plane(tmp_path, pki, security) as plane:
        with plane.channel(cert=deployer.cert_pem, key=deployer.key_pem) as channel:
            plane.admin(channel).AddJobGroup(add_request())  # admin by its certificate
        with plane.channel(cert=stranger.cert_pem, key=stranger.key_pem) as channel:
            # Signed by the CA but not in the auth file: no role.
            assert code_of(lambda: plane.admin(channel).AddJobGroup(add_request())) == (
                grpc.StatusCode.UNAUTHENTICATED
            )
        with plane.channel(ADMIN_TOKEN) as channel:  # mTLS is required of every caller
            stub = plane.admin(channel)
            request = admin_pb2.GetAllJobGroupsRequest()
            assert code_of(lambda: list(stub.GetAllJobGroups(request, timeout=5))) == (
                grpc.StatusCode.UNAVAILABLE
            )


def test_the_cli_uses_ca_and_token_files(plane: Plane, tmp_path: Path, capsys) -> None:
    group_file = tmp_path / "group.json"
    group_file.write_text(json_format.MessageToJson(orders_audit()))
    token_file = tmp_path / "token"
    token_file.write_text(ADMIN_TOKEN + "\n")
    token_file.chmod(0o600)
    target = ["--target", plane.target, "--ca", str(plane.ca)]
    assert cli.main(["add", str(group_file), *target]) == 1
    assert "UNAUTHENTICATED" in capsys.readouterr().err
    assert cli.main(["add", str(group_file), *target, "--token-file", str(token_file)]) == 0
    assert cli.main(["get", "orders-audit", *target, "--token-file", str(token_file)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "version 1"


def test_auth_file_rules() -> None:
    with pytest.raises(ConfigError, match=r"auth:1.*shorter than 32"):
        parse_auth_file("admin ops token:short\n", "auth")
    with pytest.raises(ConfigError, match=r"auth:2.*role 'root'"):
        parse_auth_file(f"# comment\nroot ops token:{ADMIN_TOKEN}\n", "auth")
    with pytest.raises(ConfigError, match="admits nobody"):
        parse_auth_file("# nobody\n", "auth")
    import hashlib

    digest = hashlib.sha256(READ_TOKEN.encode()).hexdigest()
    policy = parse_auth_file(f"read grafana token-sha256:{digest}", "auth")
    assert policy.authenticate(READ_TOKEN, []) == Principal("grafana", Role.READ)
    assert policy.authenticate(ADMIN_TOKEN, []) is None
    assert AuthPolicy(any_certificate=Principal("c", Role.ADMIN)).authenticate(None, ["x"])
    svc = "/uber.data.kafka.datatransfer.MasterAdminService"
    assert required_role(f"{svc}/AddJobGroup") is Role.ADMIN
    assert required_role(f"{svc}/GetJobGroup") is Role.READ
    assert required_role("/some.Unknown/Method") is Role.ADMIN  # deny by default
    assert required_role("/grpc.health.v1.Health/Check") is None


def serve_options(**changes) -> ServeOptions:
    values = dict(
        address="127.0.0.1:8087", advertise="127.0.0.1:8087", app_control_plane="127.0.0.1:8087",
        store=":memory:", etcd_prefix="/uatu", leader_ttl_seconds=5, launcher="local",
        apps_dir=Path("/tmp/apps"), spark_master=None, standalone_rest_url=None,
        kubernetes_config=None, reconcile=True, reconcile_seconds=2, lease_seconds=60,
        startup_seconds=300, heartbeat_seconds=5, partition_refresh_seconds=60,
    )  # fmt: skip
    values.update(changes)
    return ServeOptions(**values)  # type: ignore[arg-type]


def test_a_non_loopback_address_needs_tls_and_auth_or_insecure() -> None:
    assert is_loopback("127.0.0.1:8087") and is_loopback("[::1]:1") and is_loopback("localhost:1")
    assert not is_loopback("0.0.0.0:8087") and not is_loopback("[::]:1")
    assert not is_loopback("cp.example:1") and not is_loopback(":8087")
    with pytest.raises(ConfigError, match=r"0\.0\.0\.0:8087 is not a loopback address"):
        serve_options(address="0.0.0.0:8087")
    with pytest.raises(ConfigError, match="not a loopback address"):  # TLS alone is not enough
        serve_options(address="0.0.0.0:8087", tls_cert=Path("c"), tls_key=Path("k"))
    serve_options(address="0.0.0.0:8087", insecure=True)
    serve_options(
        address="0.0.0.0:8087", tls_cert=Path("c"), tls_key=Path("k"), auth_token_file=Path("a")
    )
    with pytest.raises(ConfigError, match="--tls-cert and --tls-key go together"):
        serve_options(tls_cert=Path("c"))
    with pytest.raises(ConfigError, match="give --app-tls-cert"):
        serve_options(tls_cert=Path("c"), tls_key=Path("k"), tls_client_ca=Path("ca"))


def test_serve_refuses_an_exposed_address_in_one_line(tmp_path: Path, capsys) -> None:
    conf = write_conf_dir(tmp_path / "conf", "127.0.0.1:9", tmp_path / "wh", tmp_path / "ck")
    status = cli.main(
        ["serve", "--address", "0.0.0.0:0", "--store", str(tmp_path / "cp.sqlite"),
         "--conf-dir", str(conf), "--no-reconcile"]
    )  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(err) == 1 and "--address" in err[0]
    assert not (tmp_path / "cp.sqlite").exists()


def test_applications_are_told_how_to_reach_a_tls_control_plane(tmp_path: Path) -> None:
    env = application_env(serve_options(tls_cert=tmp_path / "c.pem", tls_key=tmp_path / "k.pem"))
    assert env["UATU_CONTROL_PLANE_CA"] == str((tmp_path / "c.pem").resolve())
    assert "UATU_CONTROL_PLANE_CERT" not in env


# --- 2. Workers prove who they are -------------------------------------------------------------


def launched(plane: Plane, job_group_id: str = "orders-audit") -> tuple[int, str]:
    """A stored group with a launch record, as the reconciler leaves it: (worker id, secret)."""
    plane.groups.add(orders_audit(jobGroupId=job_group_id), job_pb2.JOB_STATE_RUNNING, None)
    secret, digest = new_worker_secret()
    worker_id = 7_000_000_000_000 + len(job_group_id)
    record = LaunchRecord("1", "d", time.time(), "log", worker_id=worker_id)
    plane.store.put_launch(job_group_id, record.replace(worker_secret_sha256=digest))
    return worker_id, secret


def beat(plane: Plane, worker_id: int, secret: str | None, register: bool = False):
    metadata = (("uatu-worker-secret", secret),) if secret is not None else ()
    participants = mw_pb2.Participants(worker=Node(id=worker_id, host="h"))
    with plane.channel() as channel:
        stub = mw_grpc.MasterWorkerServiceStub(channel)
        if register:
            request = mw_pb2.RegisterWorkerRequest(participants=participants)
            return stub.RegisterWorker(request, metadata=metadata, timeout=5)
        request = mw_pb2.HeartbeatRequest(participants=participants)
        return stub.Heartbeat(request, metadata=metadata, timeout=5)


def test_a_forged_heartbeat_is_refused(plane: Plane) -> None:
    worker_id, secret = launched(plane)
    assert beat(plane, worker_id, secret, register=True).participants.worker.id == worker_id
    beat(plane, worker_id, secret)
    for forged in (None, "", "guess", secret[:-1] + "x"):
        assert code_of(lambda forged=forged: beat(plane, worker_id, forged)) == (
            grpc.StatusCode.UNAUTHENTICATED
        )
        assert code_of(lambda forged=forged: beat(plane, worker_id, forged, True)) == (
            grpc.StatusCode.UNAUTHENTICATED
        )
    # A registration nobody reserved is refused: no fresh id is handed out.
    assert code_of(lambda: beat(plane, 0, "anything", register=True)) == (
        grpc.StatusCode.UNAUTHENTICATED
    )
    assert code_of(lambda: beat(plane, 12345, "anything")) == grpc.StatusCode.UNAUTHENTICATED
    assert [w.node.id for w in plane.store.workers()] == [worker_id]


def test_worker_ids_are_random_and_secrets_never_stored(tmp_path: Path) -> None:
    from controlplane.launchers.base import launch_details
    from controlplane.reconciler import Reconciler

    seen: list[dict[str, str]] = []

    class Recording:
        def observes(self, record: LaunchRecord) -> bool:
            return True

        def launch(self, group, definition, env) -> LaunchRecord:
            seen.append(dict(env))
            return LaunchRecord("h", definition, time.time(), "log", launch_details())

        def alive(self, record: LaunchRecord) -> bool:
            return True

        def cancel(self, record: LaunchRecord) -> None:
            pass

    conf = write_conf_dir(tmp_path / "conf", "127.0.0.1:9", tmp_path / "wh", tmp_path / "ck")
    store = SqliteStore(tmp_path / "cp.sqlite")
    groups = JobGroups(store, load_settings(conf), lambda *_: 1)
    for name in ("a", "b"):
        groups.add(orders_audit(jobGroupId=name), job_pb2.JOB_STATE_RUNNING, None)
    Reconciler(store, Recording()).reconcile_once()
    ids = [int(env["UATU_WORKER_ID"]) for env in seen]
    assert len(set(ids)) == 2 and all(i > 2**32 for i in ids)  # not 1, 2, 3...
    raw = (tmp_path / "cp.sqlite").read_bytes() + (tmp_path / "cp.sqlite-wal").read_bytes()
    for env in seen:
        assert env["UATU_WORKER_SECRET"].encode() not in raw
    assert {r.worker_id for r in store.launches().values()} == set(ids)


def test_external_workers_only_when_allowed_and_then_bound_to_their_secret(
    tmp_path: Path, pki: TestCA
) -> None:
    with serve_plane(tmp_path, pki, tls_security(pki), allow_external=True) as plane:
        reply = beat(plane, 0, "my-own-secret", register=True)
        worker_id = reply.participants.worker.id
        assert worker_id > 2**32
        beat(plane, worker_id, "my-own-secret")
        assert code_of(lambda: beat(plane, worker_id, "another")) == (
            grpc.StatusCode.UNAUTHENTICATED
        )
        # It maps to no group: a launched group's worker id cannot be claimed this way.
        assert code_of(lambda: beat(plane, 0, "", register=True)) == (
            grpc.StatusCode.UNAUTHENTICATED
        )


def test_the_reporter_proves_itself_follows_only_listed_redirects_and_own_cancels(
    plane: Plane,
) -> None:
    from jobs.runtime.progress import JobIdentity
    from jobs.runtime.reporting import Heartbeater, ReporterConfig

    worker_id, secret = launched(plane)
    template = JobIdentity(job_pb2.JOB_TYPE_KAFKA_AUDIT, "local", "orders")

    class Listener:
        def __init__(self) -> None:
            self.identity = template

        def statuses(self):
            return [
                job_pb2_status(template, 0, 10),
            ]

    config = ReporterConfig.from_env(
        {
            "UATU_CONTROL_PLANE": plane.target,
            "UATU_WORKER_ID": str(worker_id),
            "UATU_WORKER_SECRET": secret,
            "UATU_CONTROL_PLANE_CA": str(plane.ca),
        }
    )
    assert config is not None
    reporter = Heartbeater(config, Listener())  # type: ignore[arg-type]
    reporter.beat_once()
    assert reporter.worker_id == worker_id
    assert plane.store.get_worker(worker_id) is not None
    assert list(plane.store.job_statuses()) != []

    # A redirect to an address not in UATU_CONTROL_PLANE is not followed.
    assert reporter.link._redirected(Node(host="attacker.example", port=8087))
    assert reporter.link._target == plane.target
    # CANCEL for somebody else's job is ignored; for its own, it stops.
    plane.groups.set_state("orders-audit", job_pb2.JOB_STATE_CANCELED)
    template_other = JobIdentity(job_pb2.JOB_TYPE_KAFKA_AUDIT, "local", "other")
    reporter.listener.identity = template_other  # type: ignore[misc]
    reporter.beat_once()
    assert not reporter.stop_requested.is_set()
    reporter.listener.identity = template  # type: ignore[misc]
    reporter.beat_once()
    assert reporter.stop_requested.is_set()


def job_pb2_status(template, partition: int, offset: int):
    from uber.data.kafka.datatransfer.job_status_pb2 import JobStatus, KafkaConsumerTaskStatus

    return JobStatus(
        job=template.job(partition),
        state=job_pb2.JOB_STATE_RUNNING,
        kafka_consumer_task_status=KafkaConsumerTaskStatus(commit_offset=offset),
    )


def test_workers_domain_refuses_unknown_and_mismatched() -> None:
    store = SqliteStore(":memory:")
    workers = Workers(store, SoleLeader("cp:1"))
    with pytest.raises(WorkerRefused, match="no launch"):
        workers.register(Node(id=0), "s")
    store.put_launch("g", LaunchRecord("1", "d", 0.0, "log", worker_id=5))  # no digest: old
    with pytest.raises(WorkerRefused, match="recorded no secret"):
        Workers(store, SoleLeader("cp:1")).register(Node(id=5), "s")


# --- 5. Conditional writes ---------------------------------------------------------------------


def test_a_stale_update_is_aborted_and_the_cli_says_so(
    plane: Plane, tmp_path: Path, capsys
) -> None:
    with plane.channel(ADMIN_TOKEN) as channel:
        admin = plane.admin(channel)
        admin.AddJobGroup(add_request())
        _, call = admin.GetJobGroup.with_call(admin_pb2.GetJobGroupRequest(id="orders-audit"))
        read = dict(call.trailing_metadata())["uatu-version"]
        faster = orders_audit(flowControl={"messagesPerSec": 10})
        request = admin_pb2.UpdateJobGroupRequest(job_group=faster)
        admin.UpdateJobGroup(request, metadata=(("uatu-expected-version", read),))
        # A second writer that read the same version loses: ABORTED, nothing written.
        slower = admin_pb2.UpdateJobGroupRequest(job_group=orders_audit())
        assert (
            code_of(
                lambda: admin.UpdateJobGroup(slower, metadata=(("uatu-expected-version", read),))
            )
            == grpc.StatusCode.ABORTED
        )
        got = admin.GetJobGroup(admin_pb2.GetJobGroupRequest(id="orders-audit")).group
        assert got.job_group.flow_control.messages_per_sec == 10
    token = tmp_path / "token"
    token.write_text(ADMIN_TOKEN)
    token.chmod(0o600)
    group_file = tmp_path / "g.json"
    group_file.write_text(json_format.MessageToJson(orders_audit()))
    args = ["--target", plane.target, "--ca", str(plane.ca), "--token-file", str(token)]
    assert cli.main(["update", str(group_file), "--expected-version", read, *args]) == 1
    assert "ABORTED" in capsys.readouterr().err
    assert cli.main(["update", str(group_file), *args]) == 0  # reads the version itself


# --- 4. Broker lookups off the heartbeat threads ----------------------------------------------


def cluster(name: str = "slow") -> ClusterConfig:
    return ClusterConfig(name, "127.0.0.1:9")


def test_lookups_time_out_refuse_when_busy_and_cache() -> None:
    release = threading.Event()
    calls: list[str] = []

    def lookup(c: ClusterConfig, topic: str, field: str, timeout_s: float) -> int:
        calls.append(topic)
        if topic == "hang":
            release.wait(10)
        return 3

    lookups = PartitionLookups(lookup, workers=1, timeout_s=0.3, failure_ttl_s=60)
    assert lookups(cluster(), "fast", "f") == 3
    assert lookups(cluster(), "fast", "f") == 3
    assert calls == ["fast"]  # cached
    started = time.monotonic()
    with pytest.raises(ClusterUnreachable, match=r"no answer in 0\.3 s"):
        lookups(cluster(), "hang", "f")
    assert time.monotonic() - started < 3
    with pytest.raises(ClusterUnreachable):  # the failure is cached too: no new lookup
        lookups(cluster(), "hang", "f")
    assert calls.count("hang") == 1

    busy = PartitionLookups(lookup, workers=1, timeout_s=5)
    waiter = threading.Thread(target=lambda: busy(cluster(), "hang", "f"))
    waiter.start()
    time.sleep(0.2)
    with pytest.raises(LookupsBusy):
        busy(cluster(), "other", "f")
    release.set()
    waiter.join()


def test_slow_broker_lookups_do_not_starve_heartbeats(tmp_path: Path, pki: TestCA) -> None:
    """Ten AddJobGroups against a cluster that hangs; heartbeats still answer at once."""
    release = threading.Event()

    def hanging(c: ClusterConfig, topic: str, field: str, timeout_s: float) -> int:
        release.wait(30)  # a cluster that ignores the client's own timeout
        return 1

    with serve_plane(tmp_path, pki, tls_security(pki)) as plane:
        worker_id, secret = launched(plane)  # added before the lookups are made slow
        plane.groups._keys._partition_count = PartitionLookups(hanging, timeout_s=2.0)
        beat(plane, worker_id, secret, register=True)
        results: list[grpc.StatusCode] = []

        def add(i: int) -> None:
            with plane.channel(ADMIN_TOKEN) as channel:
                request = add_request(orders_audit(jobGroupId=f"slow-{i}"))
                try:
                    plane.admin(channel).AddJobGroup(request, timeout=20)
                    results.append(grpc.StatusCode.OK)
                except grpc.RpcError as e:
                    results.append(e.code())

        adders = [threading.Thread(target=add, args=(i,)) for i in range(10)]
        for t in adders:
            t.start()
        time.sleep(0.5)
        started = time.monotonic()
        for _ in range(5):
            beat(plane, worker_id, secret)
        assert time.monotonic() - started < 2.0
        for t in adders:
            t.join()
        release.set()
        assert set(results) <= {grpc.StatusCode.UNAVAILABLE}
        assert results.count(grpc.StatusCode.UNAVAILABLE) == 10


def test_the_standalone_submission_file_keeps_no_worker_secret() -> None:
    from controlplane.launchers.standalone import redacted

    request = {"environmentVariables": {"UATU_WORKER_SECRET": "s3cr3t", "UATU_CONF_DIR": "/c"}}
    assert redacted(request)["environmentVariables"] == {
        "UATU_WORKER_SECRET": "<redacted>",
        "UATU_CONF_DIR": "/c",
    }
    assert request["environmentVariables"]["UATU_WORKER_SECRET"] == "s3cr3t"  # not modified


def test_paths_and_sizes_are_checked_over_grpc_too(plane: Plane) -> None:
    """The control plane refuses what --check refuses (items 3 and 4), as INVALID_ARGUMENT."""
    with plane.channel(ADMIN_TOKEN) as channel:
        admin = plane.admin(channel)
        options = {"@type": "type.googleapis.com/uatu.v1.JobOptions"}
        for output in ({"auditCountsPath": "/etc"}, {"checkpointPath": "other-group"}):
            group = orders_audit(extension={**options, "output": output})
            with pytest.raises(grpc.RpcError) as raised:
                admin.AddJobGroup(add_request(group))
            assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "extension.output." in raised.value.details()
        source = {**ORDERS_AUDIT["kafkaConsumerTaskGroup"], "consumerGroup": "g" * (3 << 20)}
        huge = orders_audit(jobGroupId="x", kafkaConsumerTaskGroup=source)
        assert code_of(lambda: admin.AddJobGroup(add_request(huge))) == (
            grpc.StatusCode.RESOURCE_EXHAUSTED
        )
        numbered = orders_audit()
        numbered.type = 77  # type: ignore[assignment]
        with pytest.raises(grpc.RpcError) as raised:
            admin.AddJobGroup(add_request(numbered))
        assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "type=77: not a value of JobType" in raised.value.details()
    assert plane.store.count() == 0


def test_no_more_applications_than_max_running(tmp_path: Path) -> None:
    from controlplane.launchers.base import launch_details
    from controlplane.reconcile import Action
    from controlplane.reconciler import Reconciler

    class Counting:
        launched: list[str] = []

        def observes(self, record: LaunchRecord) -> bool:
            return True

        def launch(self, group, definition, env) -> LaunchRecord:
            self.launched.append(group.job_group_id)
            return LaunchRecord("h", definition, time.time(), "log", launch_details())

        def alive(self, record: LaunchRecord) -> bool:
            return True

        def cancel(self, record: LaunchRecord) -> None:
            pass

    conf = write_conf_dir(tmp_path / "conf", "127.0.0.1:9", tmp_path / "wh", tmp_path / "ck")
    store = SqliteStore(tmp_path / "cp.sqlite")
    groups = JobGroups(store, load_settings(conf), lambda *_: 1, max_groups=3)
    for name in ("a", "b", "c"):
        groups.add(orders_audit(jobGroupId=name), job_pb2.JOB_STATE_RUNNING, None)
    from controlplane.errors import LimitReached

    with pytest.raises(LimitReached, match="stored JobGroups limit of 3"):
        groups.add(orders_audit(jobGroupId="d"), job_pb2.JOB_STATE_RUNNING, None)
    launcher = Counting()
    taken = Reconciler(store, launcher, max_running=2).reconcile_once()
    assert launcher.launched == ["a", "b"] and taken["c"] is Action.NONE
