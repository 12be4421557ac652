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
