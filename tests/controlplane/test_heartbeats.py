"""MasterWorkerService: the driver-side reporter's pure parts, the master's Workers domain,
the read-side overlay of heartbeats, and leader-only admin calls over real gRPC."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status
from uatu.v1.job_options_pb2 import JobOptions
from uber.data.kafka.datatransfer import job_pb2
from uber.data.kafka.datatransfer import master_admin_service_pb2 as admin_pb2
from uber.data.kafka.datatransfer import master_admin_service_pb2_grpc as admin_grpc
from uber.data.kafka.datatransfer import master_worker_service_pb2 as mw_pb2
from uber.data.kafka.datatransfer import master_worker_service_pb2_grpc as mw_grpc
from uber.data.kafka.datatransfer.job_group_pb2 import JobGroup, StoredJobGroup
from uber.data.kafka.datatransfer.job_status_pb2 import JobStatus
from uber.data.kafka.datatransfer.worker_pb2 import WORKER_STATE_WORKING, Node

from controlplane.errors import NotLeader, WorkerNotFound, WorkerRefused
from controlplane.jobgroups import (
    JobGroups,
    WorkerQuota,
    per_partition_jobs,
    scale_of,
    with_actuals,
)
from controlplane.launchers.base import LaunchRecord
from controlplane.server import create_server
from controlplane.state.leadership import SoleLeader
from controlplane.state.sqlite import SqliteStore
from controlplane.workers import Workers, new_worker_id, new_worker_secret
from core.config import load_settings
from core.errors import ConfigError
from jobs.runtime.progress import JobIdentity, end_offsets, partition_statuses
from jobs.runtime.reporting import ReporterConfig
from testing.conf import write_conf_dir
from testing.jobgroups import audit_group
from testing.polling import wait_for

TEMPLATE = JobIdentity(type=job_pb2.JOB_TYPE_KAFKA_AUDIT, cluster="local", topic="orders")


def progress(ts: str, start: dict, end: dict, duration_ms=2000, records=0, size=0) -> dict:
    """A progress record shaped like Spark's (offsets as JSON strings, as Kafka sources give)."""
    import json

    return {
        "name": "audit-x",
        "timestamp": ts,
        "batchDuration": duration_ms,
        "sources": [
            {
                "description": "KafkaV2[Subscribe[orders]]",
                "startOffset": json.dumps({"orders": start}),
                "endOffset": json.dumps({"orders": end}),
            }
        ],
        "observedMetrics": {"uatu_source": {"records": records, "bytes": size}},
    }


def test_end_offsets_reads_only_the_named_topic():
    record = progress("2026-11-21T10:00:00.000Z", {"0": 0}, {"0": 5, "1": 7})
    record["sources"].append({"endOffset": {"other": {"0": 99}}})
    assert end_offsets(record, "orders") == {0: 5, 1: 7}
    assert end_offsets(record, "other") == {0: 99}
    assert end_offsets({"sources": [{"endOffset": None}]}, "orders") == {}


def test_partition_statuses_rates_from_offsets_and_bytes_from_observed_size():
    first = progress(
        "2026-11-21T10:00:00.000Z", {"0": 0, "1": 0}, {"0": 100, "1": 300}, 2000, 400, 40_000
    )
    statuses = partition_statuses(first, None, TEMPLATE, None)
    # First record: advance over the batch's own duration (2 s); 100 bytes per record.
    assert [s.job.kafka_consumer_task.partition for s in statuses] == [0, 1]
    assert [s.kafka_consumer_task_status.messages_per_sec for s in statuses] == [50.0, 150.0]
    assert [s.kafka_consumer_task_status.bytes_per_sec for s in statuses] == [5000.0, 15000.0]
    assert [s.kafka_consumer_task_status.commit_offset for s in statuses] == [100, 300]
    assert {s.state for s in statuses} == {job_pb2.JOB_STATE_RUNNING}
    assert statuses[0].job.kafka_consumer_task.topic == "orders"

    second = progress("2026-11-21T10:00:10.000Z", {"0": 100, "1": 300}, {"0": 150, "1": 300})
    later = partition_statuses(second, first, TEMPLATE, 10.0)
    assert [s.kafka_consumer_task_status.messages_per_sec for s in later] == [5.0, 0.0]
    assert [s.kafka_consumer_task_status.read_offset for s in later] == [150, 300]
    # No records in the batch: no size known, so no byte rate is invented.
    assert [s.kafka_consumer_task_status.bytes_per_sec for s in later] == [0.0, 0.0]


def test_a_given_record_size_sets_the_byte_rates_of_a_query_without_observed_metrics():
    # The replication job never reads its batches' rows: no observed metric, the writer knows.
    record = progress("2026-11-21T10:00:00.000Z", {"0": 0}, {"0": 100}, 2000)
    del record["observedMetrics"]
    assert [
        s.kafka_consumer_task_status.bytes_per_sec
        for s in partition_statuses(record, None, TEMPLATE, None, bytes_per_record=200.0)
    ] == [10_000.0]
    assert [
        s.kafka_consumer_task_status.bytes_per_sec
        for s in partition_statuses(record, None, TEMPLATE, None)
    ] == [0.0]


def test_reporter_config_from_env():
    assert ReporterConfig.from_env({}) is None
    config = ReporterConfig.from_env(
        {"UATU_CONTROL_PLANE": "a:1, b:2", "UATU_WORKER_ID": "7", "UATU_HEARTBEAT_SECONDS": "1"}
    )
    assert config is not None and len(config.secret) >= 32  # made up when none was given
    assert config == ReporterConfig(
        addresses=("a:1", "b:2"), worker_id=7, interval_seconds=1.0, secret=config.secret
    )
    given = ReporterConfig.from_env({"UATU_CONTROL_PLANE": "a:1", "UATU_WORKER_SECRET": "s3"})
    assert given is not None and given.secret == "s3" and "s3" not in repr(given)
    with pytest.raises(ConfigError, match=r"UATU_CONTROL_PLANE_CA.*not a readable file"):
        ReporterConfig.from_env({"UATU_CONTROL_PLANE": "a:1", "UATU_CONTROL_PLANE_CA": "/nope"})
    with pytest.raises(ConfigError, match=r"UATU_CONTROL_PLANE.*'nohost' is not host:port"):
        ReporterConfig.from_env({"UATU_CONTROL_PLANE": "nohost"})
    with pytest.raises(ConfigError, match=r"UATU_WORKER_ID.*'x' is not a number"):
        ReporterConfig.from_env({"UATU_CONTROL_PLANE": "a:1", "UATU_WORKER_ID": "x"})
    with pytest.raises(ConfigError, match=r"UATU_HEARTBEAT_SECONDS.*'0' must be at least"):
        ReporterConfig.from_env({"UATU_CONTROL_PLANE": "a:1", "UATU_HEARTBEAT_SECONDS": "0"})


class Follower:
    """A replica that does not lead (the Leadership contract, as seen by a follower)."""

    def __init__(self, leader: str | None) -> None:
        self._leader = leader

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def is_leader(self) -> bool:
        return False

    def leader(self) -> str | None:
        return self._leader


def status(partition: int, commit: int, rate: float) -> JobStatus:
    found = partition_statuses(
        progress("2026-11-21T10:00:00.000Z", {str(partition): 0}, {str(partition): commit}),
        None,
        TEMPLATE,
        None,
    )[0]
    found.kafka_consumer_task_status.messages_per_sec = rate
    return found


def stored_group(job_group_id: str, state=job_pb2.JOB_STATE_RUNNING) -> StoredJobGroup:
    group = JobGroup(job_group_id=job_group_id, type=job_pb2.JOB_TYPE_KAFKA_AUDIT)
    group.kafka_consumer_task_group.topic = "orders"
    return StoredJobGroup(
        job_group=group, state=state, jobs=per_partition_jobs(group, state, 2, [11, 12])
    )


def launched(worker_id: int, digest: str) -> LaunchRecord:
    """The record a launch leaves: the reserved worker id and its secret's digest."""
    record = LaunchRecord("1", "def", 0.0, "app.log", worker_id=worker_id)
    return record.replace(worker_secret_sha256=digest)


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_workers_map_heartbeats_to_jobs_through_the_launch_record():
    store = SqliteStore(":memory:")
    clock = Clock(1_000.0)
    workers = Workers(store, SoleLeader("cp:1"), clock=clock)
    store.create(stored_group("g"))
    reserved, (secret, digest) = new_worker_id(), new_worker_secret()
    store.put_launch("g", launched(reserved, digest))

    registered = workers.register(Node(id=reserved, host="driver", port=4040), secret)
    assert registered.worker == Node(id=reserved, host="driver", port=4040)
    assert registered.master == Node(host="cp", port=1)
    with pytest.raises(WorkerRefused):  # not launched by us, and external workers are off
        workers.register(Node(id=0, host="other"), "s")

    reply = workers.heartbeat(registered.worker, [status(0, 40, 5.0), status(1, 60, 7.0)], secret)
    assert reply.commands == []
    statuses = store.job_statuses()
    assert sorted(statuses) == [11, 12]
    assert statuses[12].job_status.kafka_consumer_task_status.commit_offset == 60
    assert statuses[12].worker_id == reserved
    worker = store.get_worker(reserved)
    assert worker is not None and worker.state == WORKER_STATE_WORKING
    assert worker.last_updated.seconds == 1_000

    with pytest.raises(WorkerRefused):
        workers.heartbeat(Node(id=999), [], secret)
    store.delete_worker(reserved)  # expired: registering again is the remedy
    with pytest.raises(WorkerNotFound):
        workers.heartbeat(registered.worker, [], secret)
    workers.register(registered.worker, secret)

    # The group is no longer RUNNING: every reported job gets CANCEL.
    found = store.get("g")
    assert found is not None
    found.group.state = job_pb2.JOB_STATE_CANCELED
    store.replace(found.group, found.version)
    reply = workers.heartbeat(registered.worker, [status(0, 41, 5.0)], secret)
    assert [(c.type, c.job.kafka_consumer_task.partition) for c in reply.commands] == [
        (mw_pb2.COMMAND_TYPE_CANCEL_JOB, 0)
    ]


def test_a_selections_heartbeats_go_to_the_job_of_their_topic_partition():
    """Two topics with a partition 0 each: a status is filed under the job of its (topic,
    partition), not of its partition alone."""
    store = SqliteStore(":memory:")
    workers = Workers(store, SoleLeader("cp:1"), clock=Clock(1_000.0))
    group = JobGroup(job_group_id="sel", type=job_pb2.JOB_TYPE_KAFKA_AUDIT)
    state = job_pb2.JOB_STATE_RUNNING
    jobs = per_partition_jobs(group, state, [("a", 0), ("b", 0)], [21, 22])
    store.create(StoredJobGroup(job_group=group, state=state, jobs=jobs))
    reserved, (secret, digest) = new_worker_id(), new_worker_secret()
    store.put_launch("sel", launched(reserved, digest))
    workers.register(Node(id=reserved), secret)
    selection = JobIdentity(type=job_pb2.JOB_TYPE_KAFKA_AUDIT, cluster="local", topic="")
    statuses = partition_statuses(
        progress("2026-11-21T10:00:00.000Z", {}, {})
        | {"sources": [{"startOffset": '{"a": {"0": 0}}', "endOffset": '{"a": {"0": 9}}'}]},
        None,
        selection,
        None,
    )
    workers.heartbeat(Node(id=reserved), statuses, secret)
    stored = store.job_statuses()
    assert sorted(stored) == [21]
    assert stored[21].job_status.kafka_consumer_task_status.commit_offset == 9


def test_a_follower_redirects_workers_to_the_leader_and_stores_nothing():
    store = SqliteStore(":memory:")
    workers = Workers(store, Follower("leader:8087"))
    reply = workers.register(Node(id=0, host="driver"), None)
    assert reply.master == Node(host="leader", port=8087)
    assert store.workers() == []
    with pytest.raises(NotLeader, match="no leader is elected"):
        Workers(store, Follower(None)).heartbeat(Node(id=1), [], None)


def test_reads_fold_in_the_latest_heartbeats():
    store = SqliteStore(":memory:")
    clock = Clock(1_000.0)
    workers = Workers(store, SoleLeader("cp:1"), clock=clock)
    group = stored_group("g")
    store.create(group)
    secret, digest = new_worker_secret()
    store.put_launch("g", launched(5, digest))
    assert workers.register(Node(id=5), secret).worker.id == 5
    workers.heartbeat(Node(id=5), [status(0, 40, 5.0), status(1, 60, 7.0)], secret)

    shown = with_actuals(group, store.job_statuses(), fresh_after=900.0)
    assert [j.job.kafka_consumer_task.start_offset for j in shown.jobs] == [40, 60]
    assert [j.worker_id for j in shown.jobs] == [5, 5]
    assert shown.scale_status.total_messages_per_sec == 12.0
    assert [j.job.kafka_consumer_task.start_offset for j in group.jobs] == [-1, -1]  # unchanged
    stale = with_actuals(group, store.job_statuses(), fresh_after=1_001.0)
    assert stale.scale_status.total_messages_per_sec == 0.0  # offsets yes, rates no
    assert stale.scale_status.scale == group.scale_status.scale  # the stored hint stays
    assert [j.job.kafka_consumer_task.start_offset for j in stale.jobs] == [40, 60]
    # scale: workers' worth of traffic, the larger ratio; each job an even share.
    quota = WorkerQuota(messages_per_sec=24.0, bytes_per_sec=1e9)
    scaled = with_actuals(group, store.job_statuses(), fresh_after=900.0, quota=quota)
    assert scaled.scale_status.scale == 0.5
    assert [j.scale for j in scaled.jobs] == [0.25, 0.25]


@pytest.mark.parametrize(
    ("messages", "bytes_", "scale"),
    [
        (2000.0, 0.0, 0.5),  # half a worker's messages
        (100.0, 32 * 1024 * 1024, 2.0),  # bytes weigh more: two workers' worth
        (0.0, 0.0, 0.0),  # idle (uForwarder: hibernating)
    ],
)
def test_scale_is_the_larger_ratio_to_one_workers_quota(messages, bytes_, scale):
    assert scale_of(messages, bytes_, WorkerQuota()) == scale


def test_cluster_scale_sums_what_running_groups_allow_beside_what_they_use(tmp_path):
    """GetClusterScaleStatus's allowed rates: the flow control of the RUNNING groups only."""
    conf = write_conf_dir(tmp_path / "conf", "127.0.0.1:1", tmp_path / "wh", tmp_path / "ck")
    store = SqliteStore(tmp_path / "cp.sqlite")
    groups = JobGroups(store, load_settings(conf), lambda *_: 1)
    limited = audit_group("limited", "orders", rate=100)
    limited.flow_control.bytes_per_sec = 5_000
    groups.add(limited, job_pb2.JOB_STATE_RUNNING, None)
    groups.add(audit_group("open", "orders"), job_pb2.JOB_STATE_RUNNING, None)
    groups.add(audit_group("stopped", "orders", rate=40), job_pb2.JOB_STATE_CANCELED, None)
    scale = groups.cluster_scale()
    assert scale.running_groups == 2
    assert (scale.allowed_messages_per_sec, scale.allowed_bytes_per_sec) == (100.0, 5_000.0)
    store.close()


def test_followers_refuse_admin_calls_naming_the_leader_but_answer_scale(tmp_path):
    conf = write_conf_dir(tmp_path / "conf", "127.0.0.1:1", tmp_path / "wh", tmp_path / "ck")
    store = SqliteStore(tmp_path / "cp.sqlite")
    follower = Follower("10.0.0.7:8087")
    groups = JobGroups(store, load_settings(conf), lambda *_: 1)
    server, port, _ = create_server("127.0.0.1:0", groups, Workers(store, follower), follower)
    server.start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            admin = admin_grpc.MasterAdminServiceStub(channel)
            with pytest.raises(grpc.RpcError) as raised:
                admin.GetJobGroup(admin_pb2.GetJobGroupRequest(id="g"))
            error = raised.value
            assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
            assert "the leader is 10.0.0.7:8087" in error.details()
            detail = error_details_pb2.PreconditionFailure()
            rich = rpc_status.from_call(error)
            assert rich is not None and rich.details[0].Unpack(detail)
            assert (detail.violations[0].type, detail.violations[0].description) == (
                "not-leader",
                "10.0.0.7:8087",
            )
            with pytest.raises(grpc.RpcError) as raised:
                list(admin.GetAllJobGroups(admin_pb2.GetAllJobGroupsRequest()))
            assert raised.value.code() == grpc.StatusCode.FAILED_PRECONDITION
            scale = admin.GetClusterScaleStatus(admin_pb2.GetClusterScaleStatusRequest())
            assert scale.total_jobgroup_count == 0
            worker = mw_grpc.MasterWorkerServiceStub(channel).RegisterWorker(
                mw_pb2.RegisterWorkerRequest()
            )
            assert (worker.participants.master.host, worker.participants.master.port) == (
                "10.0.0.7",
                8087,
            )
    finally:
        server.stop(None).wait()
        store.close()


def test_committed_offsets_come_from_the_last_committed_batch(spark, tmp_path):
    """Spark's offset-log layout, as a real audit checkpoint has it; batch 1 is uncommitted."""
    from jobs.runtime.checkpoint_files import read_offset_log
    from jobs.runtime.progress import ProgressListener

    checkpoint = tmp_path / "ck"
    assert read_offset_log(spark, str(checkpoint)).committed_progress() is None
    (checkpoint / "offsets").mkdir(parents=True)
    (checkpoint / "commits").mkdir()
    for batch, offsets in ((0, '{"orders":{"0":180,"1":150}}'), (1, '{"orders":{"0":190}}')):
        (checkpoint / "offsets" / str(batch)).write_text(
            f'v1\n{{"batchWatermarkMs":0,"batchTimestampMs":1}}\n{offsets}\n'
        )
    (checkpoint / "commits" / "0").write_text('v1\n{"nextBatchWatermarkMs":0}\n')

    offset_log = read_offset_log(spark, str(checkpoint))
    assert offset_log.replay_batch == 1 and offset_log.committed_offsets("orders") == {
        0: 180,
        1: 150,
    }
    committed = offset_log.committed_progress()
    assert committed is not None and end_offsets(committed, "orders") == {0: 180, 1: 150}
    seeded = ProgressListener("audit-x", TEMPLATE, committed).statuses()
    assert [
        (s.kafka_consumer_task_status.commit_offset, s.kafka_consumer_task_status.messages_per_sec)
        for s in seeded
    ] == [(180, 0.0), (150, 0.0)]


def test_reconciler_expires_workers_and_statuses_after_the_ttl():
    from controlplane.launchers.local import LocalLauncher
    from controlplane.reconciler import Reconciler

    store = SqliteStore(":memory:")
    clock = Clock(1_000.0)
    workers = Workers(store, SoleLeader("cp:1"), clock=clock, allow_external=True)
    store.create(stored_group("g"))
    secret, digest = new_worker_secret()
    store.put_launch("g", launched(5, digest))
    workers.register(Node(id=5), secret)
    workers.heartbeat(Node(id=5), [status(0, 40, 5.0)], secret)
    clock.now = 2_000.0
    workers.register(Node(id=0, host="fresh"), "an external worker's own secret")
    reconciler = Reconciler(
        store, LocalLauncher(Path("/nonexistent")), record_ttl_seconds=600, clock=clock
    )
    # worker 5 and job 11, heard at 1000
    assert reconciler.housekeeping.expire_records(2_000.0) == (1, 1)
    assert [w.node.host for w in store.workers()] == ["fresh"]
    assert store.job_statuses() == {}
    assert reconciler.housekeeping.expire_records(2_000.0) == (0, 0)


@pytest.mark.integration
def test_refresh_adds_jobs_for_new_partitions_only_when_the_topic_grows(kafka, tmp_path):
    import uuid

    from confluent_kafka.admin import NewPartitions

    from core import kafka_admin
    from testing.jobgroups import audit_group

    topic = f"grow-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(topic, partitions=2)
    conf = write_conf_dir(
        tmp_path / "conf", kafka.bootstrap_servers, tmp_path / "w", tmp_path / "c"
    )
    store = SqliteStore(":memory:")
    groups = JobGroups(store, load_settings(conf), kafka_admin.partition_count)
    before = groups.add(audit_group("grow", topic, rate=40), job_pb2.JOB_STATE_RUNNING, None)
    assert groups.refresh_partitions("grow") is False

    kafka_admin.create_partitions(kafka.admin(), NewPartitions(topic, 4), timeout_s=30)
    assert groups.refresh_partitions("grow") is True
    after = groups.get("grow")
    assert [j.job.kafka_consumer_task.partition for j in after.jobs] == [0, 1, 2, 3]
    old_ids = [j.job.job_id for j in before.jobs]
    assert [j.job.job_id for j in after.jobs][:2] == old_ids  # kept
    assert len({j.job.job_id for j in after.jobs}) == 4
    assert {j.job.flow_control.messages_per_sec for j in after.jobs} == {10.0}  # 40 / 4
    assert groups.refresh_partitions("grow") is False


@pytest.mark.integration
def test_a_topic_selection_has_a_job_per_matching_topic_partition_that_follows_the_topics(
    kafka, tmp_path
):
    """A pattern audit's view: one job per partition of each matching topic, keyed by (topic,
    partition); the refresh adds a new matching topic's jobs (old ids kept) and drops a
    deleted topic's. A non-matching topic has none."""
    import uuid

    from confluent_kafka.admin import AdminClient

    from core import kafka_admin
    from testing.jobgroups import audit_group

    prefix = f"sel{uuid.uuid4().hex[:8]}"
    for name, partitions in (("a", 2), ("b", 3)):
        kafka.create_topic(f"{prefix}-{name}", partitions=partitions)
    kafka.create_topic(f"x{prefix}-a", partitions=1)  # not a whole-name match
    conf = write_conf_dir(
        tmp_path / "conf", kafka.bootstrap_servers, tmp_path / "w", tmp_path / "c"
    )
    groups = JobGroups(SqliteStore(":memory:"), load_settings(conf), kafka_admin.partition_count)
    group = audit_group("sel", "", rate=60)
    group.extension.Unpack(options := JobOptions())
    options.topics.pattern = f"{prefix}-.*"
    group.extension.Pack(options)

    def keys(stored) -> list[tuple[str, int]]:
        tasks = [j.job.kafka_consumer_task for j in stored.jobs]
        return [(t.topic, t.partition) for t in tasks]

    before = groups.add(group, job_pb2.JOB_STATE_RUNNING, None)
    a, b, c = (f"{prefix}-{n}" for n in "abc")
    assert keys(before) == [(a, 0), (a, 1), (b, 0), (b, 1), (b, 2)]
    assert {j.job.flow_control.messages_per_sec for j in before.jobs} == {12.0}  # 60 / 5
    assert groups.refresh_partitions("sel") is False

    kafka.create_topic(c, partitions=1)
    assert groups.refresh_partitions("sel") is True
    grown = groups.get("sel")
    assert keys(grown) == [*keys(before), (c, 0)]
    assert [j.job.job_id for j in grown.jobs][:5] == [j.job.job_id for j in before.jobs]

    admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers})
    for future in admin.delete_topics([a]).values():
        future.result(30)
    wait_for(lambda: groups.refresh_partitions("sel"), 60, "the deleted topic's jobs dropped")
    assert keys(groups.get("sel")) == [(b, 0), (b, 1), (b, 2), (c, 0)]


def test_settle_replaces_the_statuses_with_a_checkpoints_offsets():
    """A stopped run's last word (the dispatcher's runner): the committed offsets, rates 0,
    even when no progress event was delivered; another topic's offsets change nothing."""
    from jobs.runtime.progress import ProgressListener

    listener = ProgressListener("q", TEMPLATE)
    assert listener.statuses() == []
    listener.settle({"sources": [{"endOffset": '{"orders":{"0":25,"1":30}}'}]})
    listener.settle({"sources": [{"endOffset": '{"other":{"0":5}}'}]})
    assert [
        (s.job.kafka_consumer_task.partition, s.kafka_consumer_task_status.commit_offset)
        for s in listener.statuses()
    ] == [(0, 25), (1, 30)]
    assert all(s.kafka_consumer_task_status.messages_per_sec == 0 for s in listener.statuses())
