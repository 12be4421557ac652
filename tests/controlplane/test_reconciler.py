"""Expected vs actual: the command matrix (pure) and the reconciler launching real jobs."""

from __future__ import annotations

import json
import os
import signal
import time
import uuid

import pytest
from uber.data.kafka.datatransfer import job_pb2
from uber.data.kafka.datatransfer.job_group_pb2 import JobGroup

from controlplane.jobgroups import JobGroups
from controlplane.launchers.local import LocalLauncher
from controlplane.reconcile import Action, decide, definition_of
from controlplane.reconciler import Reconciler
from controlplane.state.sqlite import SqliteStore
from core import kafka_admin
from core.config import load_settings
from core.errors import ClusterUnreachable
from testing.conf import write_conf_dir
from testing.demo_data import audit_dataset, produce
from testing.jobgroups import audit_group
from testing.polling import wait_for

RUNNING, CANCELED = job_pb2.JOB_STATE_RUNNING, job_pb2.JOB_STATE_CANCELED


@pytest.mark.parametrize(
    ("expected_state", "expected_def", "actual_def", "alive", "action"),
    [
        (RUNNING, "a", None, False, Action.RUN),  # nothing runs
        (RUNNING, "a", "a", False, Action.RUN),  # it died
        (RUNNING, "a", "a", True, Action.NONE),
        (RUNNING, "b", "a", True, Action.UPDATE),  # definition changed
        (CANCELED, "a", "a", True, Action.CANCEL),
        (CANCELED, "a", None, False, Action.NONE),
        (None, None, "a", True, Action.CANCEL),  # deleted while running
        (None, None, "a", False, Action.NONE),
        (job_pb2.JOB_STATE_FAILED, "a", "a", True, Action.CANCEL),
    ],
)
def test_command_matrix(expected_state, expected_def, actual_def, alive, action):
    assert decide(expected_state, expected_def, actual_def, alive) is action


def test_definition_changes_with_mutable_fields_only_when_they_change():
    group = JobGroup(job_group_id="g", type=job_pb2.JOB_TYPE_KAFKA_AUDIT)
    same = JobGroup()
    same.CopyFrom(group)
    assert definition_of(group) == definition_of(same)
    same.flow_control.messages_per_sec = 10
    assert definition_of(group) != definition_of(same)


def _leaf_paths(descriptor, prefix=(), depth=0):
    """Every field path of a message type down to its scalars, enums and lists (messages
    recursively, to a depth that covers the JobGroup's)."""
    for field in descriptor.fields:
        path = (*prefix, field)
        if field.message_type is not None and not field.is_repeated and depth < 4:
            if field.message_type.full_name in ("google.protobuf.Any",):
                yield path  # the extension: its bytes
                continue
            yield from _leaf_paths(field.message_type, path, depth + 1)
        else:
            yield path


def _changed(group: JobGroup, path) -> JobGroup:
    """A copy of `group` with the field at `path` set to a value it did not have."""
    from google.protobuf.descriptor import FieldDescriptor

    copy = JobGroup()
    copy.CopyFrom(group)
    message = copy
    for field in path[:-1]:
        message = getattr(message, field.name)
    field = path[-1]
    if field.is_repeated:
        item = getattr(message, field.name).add() if field.message_type else None
        if item is None:
            value = 7 if field.type != FieldDescriptor.TYPE_STRING else "x"
            getattr(message, field.name).append(value)
        else:
            item.SetInParent()
        return copy
    if field.message_type is not None:  # an Any
        getattr(message, field.name).type_url = "type.googleapis.com/x.Changed"
        return copy
    current = getattr(message, field.name)
    if field.type == FieldDescriptor.TYPE_ENUM:
        values = [v.number for v in field.enum_type.values if v.number != current]
        setattr(message, field.name, values[0])
    elif field.type == FieldDescriptor.TYPE_BOOL:
        setattr(message, field.name, not current)
    elif field.type in (FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_BYTES):
        setattr(message, field.name, current + ("x" if isinstance(current, str) else b"x"))
    else:
        setattr(message, field.name, current + 1)
    return copy


_PATHS = list(_leaf_paths(JobGroup.DESCRIPTOR))


@pytest.mark.parametrize("path", _PATHS, ids=[".".join(f.name for f in p) for p in _PATHS])
def test_every_part_of_a_definition_is_in_its_fingerprint(path):
    """A running group whose stored definition changed anywhere (not only its flow control)
    is UPDATEd: relaunched on its checkpoint with the new definition."""
    base = audit_group("fingerprint", "orders", rate=10)
    changed = _changed(base, path)
    assert changed != base
    assert definition_of(changed) != definition_of(base)
    assert decide(RUNNING, definition_of(changed), definition_of(base), True) is Action.UPDATE


@pytest.mark.integration
def test_reconciler_runs_updates_relaunches_and_cancels_real_jobs(kafka, tmp_path, monkeypatch):
    topic = f"rc-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(topic, partitions=2)
    produce(kafka.bootstrap_servers, topic, audit_dataset(200, 2, int(time.time() * 1000)))
    conf = write_conf_dir(
        tmp_path / "conf", kafka.bootstrap_servers, tmp_path / "wh", tmp_path / "ck"
    )
    monkeypatch.delenv("UATU_WAREHOUSE", raising=False)
    store = SqliteStore(tmp_path / "cp.sqlite")
    groups = JobGroups(store, load_settings(conf), kafka_admin.partition_count)
    launcher = LocalLauncher(tmp_path / "apps", conf_dir=conf, grace_seconds=10)
    reconciler = Reconciler(store, launcher, backoff_seconds=0, max_failures=1)
    counts_log = tmp_path / "wh" / "audit_counts" / "_delta_log"

    groups.add(audit_group("rc", topic, rate=100), RUNNING, None)
    assert reconciler.reconcile_once() == {"rc": Action.RUN}
    first = store.launches()["rc"]
    assert launcher.alive(first)
    # The application really audits: its table gets commits.
    wait_for(lambda: len(list(counts_log.glob("*.json"))) >= 2, 240, "the first audit commit")
    assert reconciler.reconcile_once() == {"rc": Action.NONE}

    # A flow-control change restarts it on the same checkpoint.
    groups.update(audit_group("rc", topic, rate=500))
    assert reconciler.reconcile_once() == {"rc": Action.UPDATE}
    second = store.launches()["rc"]
    assert second.detail("pid") != first.detail("pid") and not launcher.alive(first)
    assert json.loads((tmp_path / "apps" / "rc" / "jobgroup.json").read_text())["flowControl"] == {
        "messagesPerSec": 500.0
    }

    # CANCELED stops it gracefully: the job itself stops on the stop file, inside the
    # launcher's 10 s grace (no SIGKILL was needed; see the log lines below).
    groups.set_state("rc", CANCELED)
    assert reconciler.reconcile_once() == {"rc": Action.CANCEL}
    assert not launcher.alive(second)
    assert store.launches() == {}
    app_log = (tmp_path / "apps" / "rc" / "app.log").read_text()
    assert "received stop file" in app_log and "stopping query audit-rc" in app_log

    # RUNNING again; killed with SIGKILL it is relaunched once (max_failures=1), then the
    # next death is reported and not retried in a loop.
    groups.set_state("rc", RUNNING)
    assert reconciler.reconcile_once() == {"rc": Action.RUN}
    third = store.launches()["rc"]
    os.killpg(third.detail("pid"), signal.SIGKILL)
    wait_for(lambda: not launcher.alive(third), 30, "the killed application to be gone")
    assert reconciler.reconcile_once() == {"rc": Action.RUN}
    fourth = store.launches()["rc"]
    assert fourth.failures == 1 and launcher.alive(fourth)
    os.killpg(fourth.detail("pid"), signal.SIGKILL)
    wait_for(lambda: not launcher.alive(fourth), 30, "the killed application to be gone")
    assert reconciler.reconcile_once() == {"rc": Action.NONE}
    assert store.launches()["rc"].gave_up is True
    assert reconciler.reconcile_once() == {"rc": Action.NONE}  # still not relaunched

    groups.set_state("rc", CANCELED)
    assert reconciler.reconcile_once() == {"rc": Action.NONE}
    assert store.launches() == {}
    groups.delete("rc")
    assert reconciler.reconcile_once() == {}
    store.close()


def test_one_partition_refresh_lists_each_cluster_once_for_all_its_groups(tmp_path):
    """A thousand groups on one cluster cost one metadata request per refresh, not one lookup
    each: every RUNNING group's count comes from its cluster's one listing; a topic the
    listing lacks (created since) is looked up alone; a cluster that does not answer is
    listed once and its groups keep what is stored; a CANCELED group is not refreshed."""
    conf = write_conf_dir(
        tmp_path / "conf", "127.0.0.1:1", tmp_path / "w", tmp_path / "c",
        more_clusters={"down": {"bootstrap_servers": "127.0.0.1:2"}},
    )  # fmt: skip
    partitions = {"a": 2, "b": 1, "idle": 1, "late": 1, "far": 1}
    listings: list[str] = []
    lookups: list[str] = []

    def topic_partitions(cluster):
        listings.append(cluster.name)
        if cluster.name == "down":
            raise ClusterUnreachable(cluster.name, "127.0.0.1:2", "no answer")
        return {t: n for t, n in partitions.items() if t != "late"}

    def partition_count(cluster, topic, field):
        lookups.append(topic)
        return partitions[topic]

    groups = JobGroups(
        SqliteStore(":memory:"), load_settings(conf), partition_count,
        topic_partitions=topic_partitions,
    )  # fmt: skip
    for topic in ("a", "b", "idle", "late"):
        groups.add(audit_group(topic, topic), RUNNING, None)
    far = audit_group("far", "far")
    far.kafka_consumer_task_group.cluster = "down"
    groups.add(far, RUNNING, None)
    groups.set_state("idle", CANCELED)
    partitions.update(a=4, idle=3, late=2, far=5)  # every topic grew but b
    lookups.clear()

    assert groups.refresh_all_partitions() == ["a", "late"]
    assert sorted(listings) == ["down", "local"]
    assert lookups == ["late"]
    jobs = {g.job_group.job_group_id: len(g.jobs) for g in groups.all()}
    assert jobs == {"a": 4, "b": 1, "idle": 1, "late": 2, "far": 1}


def test_the_housekeeping_refreshes_on_its_cadence_only(tmp_path):
    """Records expire and partitions are refreshed once per `partition_refresh_seconds`."""
    refreshed: list[float] = []
    now = [1_000.0]
    reconciler = Reconciler(
        SqliteStore(":memory:"), LocalLauncher(tmp_path), clock=lambda: now[0],
        refresh_partitions=lambda: refreshed.append(now[0]) or [],
        partition_refresh_seconds=60,
    )  # fmt: skip
    for at in (1_000.0, 1_030.0, 1_059.0, 1_060.0, 1_100.0, 1_120.0):
        now[0] = at
        reconciler.housekeeping.once()
    assert refreshed == [1_000.0, 1_060.0, 1_120.0]
