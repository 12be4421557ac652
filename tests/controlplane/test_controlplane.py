"""The control plane's admin API: domain rules, SQLite store, gRPC wire and CLI."""

from __future__ import annotations

import copy
import json
import re
import uuid
from pathlib import Path

import grpc
import pytest
from google.protobuf import json_format
from grpc_health.v1 import health_pb2, health_pb2_grpc
from uber.data.kafka.datatransfer import job_pb2
from uber.data.kafka.datatransfer import master_admin_service_pb2 as admin_pb2
from uber.data.kafka.datatransfer import master_admin_service_pb2_grpc as admin_grpc
from uber.data.kafka.datatransfer.job_group_pb2 import JobGroup, StoredJobGroup

from controlplane import cli
from controlplane.assembly import ServeOptions, assemble, kubernetes_config
from controlplane.errors import JobGroupExists, JobGroupNotFound, StaleWrite, grpc_status
from controlplane.http_sd import sd_groups
from controlplane.jobgroups import JobGroups, per_partition_jobs
from controlplane.launchers.base import LaunchRecord, launch_details
from controlplane.launchers.local import LocalLauncher
from controlplane.launchers.submit import build_launch, build_worker_launch, metrics_sd_dir
from controlplane.server import create_server
from controlplane.state.leadership import SoleLeader
from controlplane.state.sqlite import SqliteStore
from controlplane.workers import Workers
from core import kafka_admin
from core.config import load_settings
from core.errors import ConfigError, InvalidJobGroup, TopicNotFound
from testing.conf import write_conf_dir
from testing.jobgroups import minimal_group, parse

GROUP = {
    "jobGroupId": "orders-audit",
    "type": "JOB_TYPE_KAFKA_AUDIT",
    "flowControl": {"messagesPerSec": 300, "bytesPerSec": 3000},
    "kafkaConsumerTaskGroup": {
        "cluster": "local",
        "topic": "cp-orders",
        "consumerGroup": "cp",
        "auditMetadata": {
            "auditConfigs": [{"auditType": "AUDIT_TYPE_EXACT_UNIQ", "auditIntervalInSeconds": 60}]
        },
    },
}


def jobgroup(**changes) -> JobGroup:
    data = copy.deepcopy(GROUP)
    data.update(changes)
    return json_format.ParseDict(data, JobGroup())


def test_per_partition_jobs_split_flow_control_and_key_by_partition():
    jobs = per_partition_jobs(jobgroup(), job_pb2.JOB_STATE_RUNNING, 3, [7, 8, 9])
    assert [j.job.kafka_consumer_task.partition for j in jobs] == [0, 1, 2]
    assert [j.job.job_id for j in jobs] == [7, 8, 9]
    assert {j.job.flow_control.messages_per_sec for j in jobs} == {100.0}
    assert {j.job.flow_control.bytes_per_sec for j in jobs} == {1000.0}
    assert {j.job.kafka_consumer_task.start_offset for j in jobs} == {-1}
    assert {j.state for j in jobs} == {job_pb2.JOB_STATE_RUNNING}


def test_launch_argv_has_no_shell_and_passes_site_config(tmp_path):
    launch = build_launch(
        tmp_path / "g.json", once=True, conf_dir=tmp_path / "conf", spark_master="spark://m:7077",
        stop_file=tmp_path / "stop", script=Path("/opt/uatu/spark-submit.sh"),
    )  # fmt: skip
    assert launch.argv == ["/opt/uatu/spark-submit.sh", str(tmp_path / "g.json"), "--once"]
    assert launch.env == {
        "UATU_CONF_DIR": str(tmp_path / "conf"),
        "SPARK_MASTER": "spark://m:7077",
        "UATU_STOP_FILE": str(tmp_path / "stop"),
    }


def test_launched_applications_serve_metrics_and_name_them_where_sd_reads(tmp_path):
    """The local launcher's applications and workers: /metrics on a port of their own, named
    in the folder the control plane's /sd serves (controlplane/http_sd.py)."""
    sd = metrics_sd_dir(tmp_path / "apps")
    expected = {"UATU_METRICS_PORT": "0", "UATU_METRICS_SD_DIR": str(sd),
                "UATU_METRICS_HOST": "10.0.0.7"}  # fmt: skip
    here = {"metrics_sd_dir": sd, "metrics_host": "10.0.0.7"}
    assert build_launch(tmp_path / "g.json", **here).env == expected
    assert build_worker_launch(**here).env == expected
    assert "UATU_METRICS_PORT" not in build_launch(tmp_path / "g.json").env  # other launchers


def test_sd_answers_every_target_file_and_skips_a_broken_one(tmp_path):
    sd = tmp_path / "metrics-sd"
    assert sd_groups(sd) == []  # nothing launched yet
    sd.mkdir()
    worker = [{"targets": ["h:1"], "labels": {"worker": "1"}}]
    group = [
        {"targets": ["h:2"], "labels": {"job_group_id": "a"}},
        {"targets": ["h:3"], "labels": {"job_group_id": "a", "__metrics_path__": "/m"}},
    ]
    (sd / "a.json").write_text(json.dumps(group))
    (sd / "worker-1.json").write_text(json.dumps(worker))
    (sd / "b.json.partial").write_text("[")  # being written: not a target file yet
    (sd / "c.json").write_text('{"targets": ["h:4"]}')  # not a list of groups
    (sd / "d.json").write_text("[{")
    assert sd_groups(sd) == group + worker


def test_the_launch_command_has_once_only_when_asked(tmp_path):
    """The control plane keeps a group's stream running: its launches never pass --once; a
    bounded run asks for it."""
    assert "--once" not in build_launch(tmp_path / "g.json").argv
    assert build_launch(tmp_path / "g.json", once=True).argv.count("--once") == 1


def test_error_mapping_is_one_table():
    assert grpc_status(JobGroupExists("a")) == grpc.StatusCode.ALREADY_EXISTS
    assert grpc_status(JobGroupNotFound("a")) == grpc.StatusCode.NOT_FOUND
    assert grpc_status(TopicNotFound("f", "t", "c")) == grpc.StatusCode.INVALID_ARGUMENT
    assert grpc_status(StaleWrite("a", 1, 2)) == grpc.StatusCode.ABORTED
    assert grpc_status(RuntimeError()) == grpc.StatusCode.INTERNAL


def test_store_compare_and_swap(tmp_path):
    store = SqliteStore(tmp_path / "cp.sqlite")
    stored = StoredJobGroup(job_group=jobgroup())
    assert store.create(stored) == 1
    with pytest.raises(JobGroupExists):
        store.create(stored)
    assert store.replace(stored, expected_version=1) == 2
    with pytest.raises(StaleWrite, match="expected version 1, found 2"):
        store.replace(stored, expected_version=1)
    assert list(store.next_ids("job", 3)) == [1, 2, 3]
    assert list(store.next_ids("job", 2)) == [4, 5]
    store.delete("orders-audit")
    with pytest.raises(JobGroupNotFound):
        store.delete("orders-audit")
    assert store.get("orders-audit") is None


@pytest.fixture
def admin(kafka, tmp_path):
    """A real control plane on an ephemeral port, its store in tmp_path, the test broker."""
    topic = f"cp-orders-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(topic, partitions=3)
    conf = write_conf_dir(
        tmp_path / "conf", kafka.bootstrap_servers, tmp_path / "wh", tmp_path / "ck"
    )
    store = SqliteStore(tmp_path / "cp.sqlite")
    groups = JobGroups(store, load_settings(conf), kafka_admin.partition_count)
    leader = SoleLeader("127.0.0.1:0")
    server, port, _ = create_server("127.0.0.1:0", groups, Workers(store, leader), leader)
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield admin_grpc.MasterAdminServiceStub(channel), channel, f"127.0.0.1:{port}", topic
    finally:
        channel.close()
        server.stop(None).wait()
        store.close()


def add(stub, group: JobGroup, state=job_pb2.JOB_STATE_RUNNING):
    return stub.AddJobGroup(admin_pb2.AddJobGroupRequest(job_group=group, job_group_state=state))


def abort_of(call) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as raised:
        call()
    return raised.value


@pytest.mark.integration
def test_add_get_list_update_state_delete_over_grpc(admin):
    stub, _, _, topic = admin
    group = jobgroup(kafkaConsumerTaskGroup={**GROUP["kafkaConsumerTaskGroup"], "topic": topic})
    stored = add(stub, group).group
    assert stored.state == job_pb2.JOB_STATE_RUNNING
    assert [j.job.kafka_consumer_task.partition for j in stored.jobs] == [0, 1, 2]
    assert len({j.job.job_id for j in stored.jobs}) == 3

    error = abort_of(lambda: add(stub, group))
    assert error.code() == grpc.StatusCode.ALREADY_EXISTS

    got = stub.GetJobGroup(admin_pb2.GetJobGroupRequest(id="orders-audit")).group
    assert got == stored

    faster = copy.deepcopy(group)
    faster.flow_control.messages_per_sec = 900
    updated = stub.UpdateJobGroup(admin_pb2.UpdateJobGroupRequest(job_group=faster)).group
    assert [j.job.job_id for j in updated.jobs] == [j.job.job_id for j in stored.jobs]
    assert {j.job.flow_control.messages_per_sec for j in updated.jobs} == {300.0}
    moved = copy.deepcopy(group)
    moved.kafka_consumer_task_group.topic = "elsewhere"
    error = abort_of(lambda: stub.UpdateJobGroup(admin_pb2.UpdateJobGroupRequest(job_group=moved)))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "kafka_consumer_task_group.topic='elsewhere'" in error.details()

    canceled = stub.UpdateJobGroupState(
        admin_pb2.UpdateJobGroupStateRequest(id="orders-audit", state=job_pb2.JOB_STATE_CANCELED)
    ).group
    assert canceled.state == job_pb2.JOB_STATE_CANCELED
    assert {j.state for j in canceled.jobs} == {job_pb2.JOB_STATE_CANCELED}
    error = abort_of(lambda: stub.UpdateJobGroupState(
        admin_pb2.UpdateJobGroupStateRequest(id="orders-audit", state=job_pb2.JOB_STATE_FAILED)
    ))  # fmt: skip
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT

    stub.DeleteJobGroup(admin_pb2.DeleteJobGroupRequest(id="orders-audit"))
    for call in (
        lambda: stub.GetJobGroup(admin_pb2.GetJobGroupRequest(id="orders-audit")),
        lambda: stub.DeleteJobGroup(admin_pb2.DeleteJobGroupRequest(id="orders-audit")),
    ):
        assert abort_of(call).code() == grpc.StatusCode.NOT_FOUND


@pytest.mark.integration
def test_invalid_groups_are_refused_and_nothing_is_stored(admin):
    stub, _, _, topic = admin
    source = {**GROUP["kafkaConsumerTaskGroup"], "topic": topic}
    bad_interval = {
        **source,
        "auditMetadata": {
            "auditConfigs": [{"auditType": "AUDIT_TYPE_EXACT_UNIQ", "auditIntervalInSeconds": 0}]
        },
    }
    cases = [
        (jobgroup(kafkaConsumerTaskGroup=bad_interval), "audit_interval_in_seconds=0"),
        (jobgroup(kafkaConsumerTaskGroup={**source, "topic": "absent"}), "topic='absent'"),
        (jobgroup(kafkaConsumerTaskGroup={**source, "cluster": "mars"}), "cluster='mars'"),
        (jobgroup(kafkaConsumerTaskGroup=source, flowControl={"messagesPerSec": -1}), "-1.0"),
    ]
    for group, expected in cases:
        error = abort_of(lambda group=group: add(stub, group))
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error.details()
        assert expected in error.details()
    assert list(stub.GetAllJobGroups(admin_pb2.GetAllJobGroupsRequest())) == []


@pytest.mark.integration
def test_get_all_streams_one_response_per_group_and_scale_sums_running(admin):
    stub, _, _, topic = admin
    for i in range(25):
        group = jobgroup(
            jobGroupId=f"g{i:02d}",
            kafkaConsumerTaskGroup={**GROUP["kafkaConsumerTaskGroup"], "topic": topic},
        )
        state = job_pb2.JOB_STATE_CANCELED if i % 5 == 0 else job_pb2.JOB_STATE_RUNNING
        add(stub, group, state)
    responses = list(stub.GetAllJobGroups(admin_pb2.GetAllJobGroupsRequest()))
    assert [r.job_group.job_group_id for r in responses] == [f"g{i:02d}" for i in range(25)]
    scale = stub.GetClusterScaleStatus(admin_pb2.GetClusterScaleStatusRequest())
    assert scale.total_jobgroup_count == 20


@pytest.mark.integration
def test_health_and_cli(admin, tmp_path, capsys):
    _, channel, target, topic = admin
    health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=""))
    assert health.status == health_pb2.HealthCheckResponse.SERVING

    path = tmp_path / "group.json"
    data = {**GROUP, "kafkaConsumerTaskGroup": {**GROUP["kafkaConsumerTaskGroup"], "topic": topic}}
    path.write_text(json.dumps(data))
    assert cli.main(["add", str(path), "--target", target]) == 0
    assert cli.main(["list", "--target", target]) == 0
    assert cli.main(["set-state", "orders-audit", "JOB_STATE_CANCELED", "--target", target]) == 0
    lines = capsys.readouterr().out.splitlines()
    # Stored groups list their jobs (no heartbeat yet: no worker, offset -1 = resume).
    assert [line for line in lines if line.startswith("  ")][:3] == [
        f"  partition {p}  job {p + 1}  worker -  offset -1" for p in range(3)
    ]
    out = [line for line in lines if not line.startswith("  ")]
    assert (
        out[0] == f"orders-audit  JOB_TYPE_KAFKA_AUDIT  JOB_STATE_RUNNING  local/{topic}  3 job(s)"
    )
    assert out[1] == f"orders-audit  JOB_TYPE_KAFKA_AUDIT  JOB_STATE_RUNNING  local/{topic}"
    assert out[2].startswith("orders-audit  JOB_TYPE_KAFKA_AUDIT  JOB_STATE_CANCELED")

    assert cli.main(["scale", "--target", target]) == 0  # the one group is CANCELED now
    assert capsys.readouterr().out.startswith("total_jobgroup_count: 0, total_worker_count: 0")

    assert cli.main(["get", "nope", "--target", target]) == 1
    assert "NOT_FOUND: job group 'nope' not found" in capsys.readouterr().err
    assert cli.main(["get", "orders-audit", "--json", "--target", target]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["state"] == "JOB_STATE_CANCELED"


def test_domain_refuses_unrequestable_state(tmp_path):
    conf = write_conf_dir(tmp_path / "conf", "127.0.0.1:9", tmp_path / "wh", tmp_path / "ck")
    groups = JobGroups(SqliteStore(":memory:"), load_settings(conf), lambda *_: 3)
    with pytest.raises(InvalidJobGroup, match="job_group_state='JOB_STATE_FAILED'"):
        groups.add(jobgroup(), job_pb2.JOB_STATE_FAILED, None)
    stored = groups.add(jobgroup(), job_pb2.JOB_STATE_INVALID, None)
    assert stored.state == job_pb2.JOB_STATE_RUNNING  # unset means RUNNING, as in uForwarder


def test_an_availability_group_on_a_cluster_no_group_used_yet_makes_kafka_create_its_source(
    tmp_path,
):
    """Kafka creates __consumer_offsets on a cluster's first group lookup: AddJobGroup of an
    availability group makes that lookup and counts again; any other missing topic is still
    INVALID_ARGUMENT, with no lookup."""
    conf = write_conf_dir(tmp_path / "conf", "127.0.0.1:9", tmp_path / "wh", tmp_path / "ck")
    created: list[str] = []
    ensured: list[tuple[str, str]] = []

    def partition_count(cluster, topic, field):
        if topic not in created:
            raise TopicNotFound(field, topic, cluster.name)
        return 50

    def ensure(cluster, group_id):
        ensured.append((cluster.name, group_id))
        created.append("__consumer_offsets")

    groups = JobGroups(
        SqliteStore(":memory:"), load_settings(conf), partition_count, ensure_offsets_topic=ensure
    )
    probe = parse(minimal_group("availability", "probe"))
    stored = groups.add(probe, job_pb2.JOB_STATE_RUNNING, None)
    assert ensured == [("local", "uatu-controlplane-probe")]
    assert len(stored.jobs) == 50
    with pytest.raises(TopicNotFound, match="topic does not exist"):
        groups.add(parse(minimal_group("audit", "audit")), job_pb2.JOB_STATE_RUNNING, None)
    assert len(ensured) == 1


def test_serve_options_parse():
    args = cli.build_parser().parse_args(
        ["serve", "--apps-dir", "/x/apps", "--spark-master", "local[1]", "--no-reconcile"]
    )
    assert (str(args.apps_dir), args.spark_master, args.no_reconcile) == (
        "/x/apps",
        "local[1]",
        True,
    )


def test_serve_flags_become_the_options_of_the_same_name_and_the_renamed_ones():
    args = cli.build_parser().parse_args(
        ["serve", "--address", "127.0.0.1:9001", "--workers", "2", "--worker-capacity", "7",
         "--worker-messages-per-sec", "500", "--leader-ttl", "4", "--no-reconcile",
         "--max-workers", "5",
         "--lease-seconds", "0", "--max-groups", "9"]
    )  # fmt: skip
    options = cli.serve_options(args)
    assert (options.workers, options.worker_capacity, options.max_groups) == (2, 7, 9)
    assert options.max_workers == 5
    assert (options.worker_messages_per_sec, options.worker_bytes_per_sec) == (500.0, 0.0)
    assert (options.advertise, options.app_control_plane) == ("127.0.0.1:9001",) * 2
    assert (options.leader_ttl_seconds, options.reconcile, options.lease_seconds) == (
        4, False, None
    )  # fmt: skip
    assert options.metrics_host is None  # no --metrics-address: the applications serve none


def test_launched_applications_serve_metrics_only_with_metrics_address_on_its_interface(
    tmp_path,
):
    for address, host in (("127.0.0.1:9464", "127.0.0.1"), (":9464", "127.0.0.1"),
                          ("0.0.0.0:9464", "0.0.0.0")):  # fmt: skip
        args = cli.build_parser().parse_args(["serve", "--metrics-address", address])
        assert cli.serve_options(args).metrics_host == host, address
    assert LocalLauncher(tmp_path)._metrics() == {}
    assert LocalLauncher(tmp_path, metrics_host="127.0.0.1")._metrics() == {
        "metrics_sd_dir": metrics_sd_dir(tmp_path), "metrics_host": "127.0.0.1",
    }  # fmt: skip


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


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"launcher": "yarn"}, "--launcher: 'yarn' is not one of"),
        ({"launcher": "standalone"}, "needs --standalone-rest-url"),
        ({"launcher": "kubernetes"}, "needs --kubernetes-config"),
        ({"heartbeat_seconds": 0}, "--heartbeat-seconds: 0 <= 0"),
        ({"lease_seconds": 5}, "--lease-seconds: 5 must exceed --heartbeat-seconds 5"),
        ({"worker_bytes_per_sec": -1.0}, "--worker-bytes-per-sec: -1.0 < 0"),
        ({"workers": 3, "max_workers": 2}, "--max-workers: 2 is below --workers 3"),
    ],
)
def test_serve_options_name_the_bad_option(changes, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        serve_options(**changes)


def test_serve_assembles_the_embedded_default(tmp_path):
    conf = write_conf_dir(tmp_path / "conf", "127.0.0.1:9", tmp_path / "wh", tmp_path / "ck")
    plane = assemble(
        serve_options(store=str(tmp_path / "cp.sqlite"), app_control_plane="a:1,b:2"),
        load_settings(conf),
    )
    assert isinstance(plane.store, SqliteStore) and plane.leadership.is_leader()
    assert plane.reconciler is not None
    assert plane.reconciler.app_env["UATU_CONTROL_PLANE"] == "a:1,b:2"
    assert isinstance(plane.reconciler.launcher, LocalLauncher)
    plane.store.close()


def test_serve_keeps_a_worker_pool_on_the_standalone_launcher(tmp_path):
    from controlplane.launchers.standalone import StandaloneLauncher
    from controlplane.pool import WorkerPool

    conf = write_conf_dir(tmp_path / "conf", "127.0.0.1:9", tmp_path / "wh", tmp_path / "ck")
    options = serve_options(
        store=str(tmp_path / "cp.sqlite"), launcher="standalone", workers=2,
        standalone_rest_url="http://127.0.0.1:9", spark_master="spark://127.0.0.1:7077",
        worker_messages_per_sec=500.0, max_workers=4,
    )  # fmt: skip
    plane = assemble(options, load_settings(conf))
    assert plane.reconciler is not None
    pool = plane.reconciler.pool
    assert isinstance(pool, WorkerPool) and isinstance(pool.launcher, StandaloneLauncher)
    assert (pool.size, pool.max_size) == (2, 4)
    assert (pool.capacity.groups, pool.capacity.messages_per_sec) == (50, 500.0)
    plane.store.close()


def test_kubernetes_config_file_refuses_unknown_fields(tmp_path):
    path = tmp_path / "k8s.yaml"
    # Jars named in the file: the default (this checkout's var/jars) needs `make jars`.
    path.write_text(
        "namespace: audit\nimage: registry/uatu:1\nexecutor_instances: 2\n"
        "jars: [/opt/uatu/var/jars/spark/kafka.jar]\n"
    )
    config = kubernetes_config(path)
    assert (config.namespace, config.image, config.executor_instances) == (
        "audit",
        "registry/uatu:1",
        2,
    )
    path.write_text("namespace: audit\nimgae: typo\n")
    with pytest.raises(ConfigError, match=r"unknown field\(s\) \['imgae'\]"):
        kubernetes_config(path)


def test_adopted_pid_must_be_the_same_process(tmp_path):
    """A launch record names a process by pid and start time: a reused pid is not 'alive'."""
    import subprocess

    from core.processes import start_ticks

    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        launcher = LocalLauncher(tmp_path)  # a fresh control plane: adopts, did not start it
        started = start_ticks(sleeper.pid)
        assert started is not None

        def record(**details: int | None) -> LaunchRecord:
            return LaunchRecord(str(sleeper.pid), "d", 0.0, "log", launch_details(**details))

        assert launcher.alive(record(pid=sleeper.pid, pid_start=started))
        assert not launcher.alive(record(pid=sleeper.pid, pid_start=started + 1))
        assert launcher.alive(record(pid=sleeper.pid))  # records from before pid_start existed
    finally:
        sleeper.kill()
        sleeper.wait()
    assert not launcher.alive(record(pid=sleeper.pid, pid_start=started))


def _adopted_group_ignoring_sigterm(tmp_path):
    """A process group like a launched application's that ignores SIGTERM (only SIGKILL ends
    it), and its launch record as a control plane that did not start it sees it."""
    import subprocess

    from core.processes import start_ticks

    leader = subprocess.Popen(["sh", "-c", "trap '' TERM; sleep 60 & wait"], start_new_session=True)
    details = launch_details(
        pid=leader.pid, pid_start=start_ticks(leader.pid), stop_file=str(tmp_path / "stop")
    )
    return leader, LaunchRecord(str(leader.pid), "d", 0.0, "log", details)


def test_cancel_returns_only_once_every_process_of_the_application_is_gone(tmp_path, monkeypatch):
    """The relaunch after a cancel must never run beside the old application: a process dies
    some time after SIGKILL. The fault: the application's group still has a live member for
    the first three looks after the SIGKILL (a JVM giving back its memory); cancel returns
    only after the look that finds it empty."""
    from controlplane.launchers import local
    from core.processes import group_pids

    leader, record = _adopted_group_ignoring_sigterm(tmp_path)
    killed, looks_after_kill = [], []
    real_signal_group = local.signal_group

    def signal_group(pgid, sig):
        real_signal_group(pgid, sig)
        killed.append(sig)

    def dying_group_pids(pgid):
        if not killed:
            return group_pids(pgid)
        looks_after_kill.append(pgid)
        return [pgid] if len(looks_after_kill) <= 3 else group_pids(pgid)

    monkeypatch.setattr(local, "signal_group", signal_group)
    monkeypatch.setattr(local, "group_pids", dying_group_pids)
    try:
        LocalLauncher(tmp_path, grace_seconds=0.3).cancel(record)
        assert len(looks_after_kill) == 4  # three still dying, then gone
        leader.wait(timeout=10)
        assert group_pids(leader.pid) == []
    finally:
        leader.kill()
        leader.wait()


def test_a_cancel_whose_application_outlives_sigkill_fails_naming_its_pids(tmp_path, monkeypatch):
    from controlplane.errors import LaunchFailed
    from controlplane.launchers import local

    leader, record = _adopted_group_ignoring_sigterm(tmp_path)
    monkeypatch.setattr(local, "KILLED_EXIT_SECONDS", 0.3)
    monkeypatch.setattr(local, "group_pids", lambda pgid: [pgid, pgid + 1])  # never dies
    try:
        with pytest.raises(LaunchFailed, match=rf"cancel of {leader.pid} failed: pids \["):
            LocalLauncher(tmp_path, grace_seconds=0.3).cancel(record)
    finally:
        leader.kill()
        leader.wait()


def test_every_admin_write_wakes_the_reconciler(tmp_path):
    conf = write_conf_dir(tmp_path / "conf", "127.0.0.1:9", tmp_path / "wh", tmp_path / "ck")
    groups = JobGroups(SqliteStore(":memory:"), load_settings(conf), lambda *_: 2)
    woken: list[str] = []
    groups.subscribe(lambda: woken.append("x"))
    groups.add(jobgroup(), job_pb2.JOB_STATE_RUNNING, None)
    groups.update(jobgroup(flowControl={"messagesPerSec": 10}))
    groups.set_state("orders-audit", job_pb2.JOB_STATE_CANCELED)
    groups.delete("orders-audit")
    with pytest.raises(JobGroupNotFound):
        groups.delete("orders-audit")  # a failed write wakes nobody
    assert len(woken) == 4


def test_cli_target_defaults_to_the_first_address_the_jobs_are_given():
    assert cli.default_target({"UATU_CONTROL_PLANE": " a:1 , b:2"}) == "a:1"
    assert cli.default_target({"UATU_CONTROLPLANE": "old:1"}) == "127.0.0.1:8087"
    assert cli.default_target({}) == "127.0.0.1:8087"
