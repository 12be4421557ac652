"""Every JobType runs on a worker: one group of each kind, all at once, as the streaming
queries of one SparkSession, started by the worker's own GroupRuns and runner
(jobs/worker/runs.py, `_run_group` of jobs/worker/main.py) from RUN commands, against a real
broker. In this process, on the test session: what is under test is that the jobs share one
session side by side, not the worker's entry point (tests/controlplane/test_worker_pool.py
runs that).

The audit kind is two groups of two topics, which pack (jobs/worker/packer.py): one query
audits both, each group's rows of audit_counts hold what was sent to its own topic, and each
group's status reports its own topic's offsets."""

from __future__ import annotations

import time
import uuid

import pytest
from uber.data.kafka.datatransfer import job_pb2
from uber.data.kafka.datatransfer.job_group_pb2 import JobGroup

from core import worker_jobs
from core.config import load_settings
from jobs.prepare import build_job
from jobs.worker.events import QueryEvents
from jobs.worker.main import _committed_a_batch, _run_group, packer_on
from jobs.worker.runs import GroupRuns
from testing.conf import write_conf_dir
from testing.demo_data import audit_dataset, produce
from testing.dispatch_service import ScriptedService
from testing.jobgroups import MINIMAL_GROUPS, minimal_group, parse
from testing.polling import wait_for
from testing.topic_data import count_records

TRIGGER = {"@type": "type.googleapis.com/uatu.v1.JobOptions", "trigger": {"intervalSeconds": 3}}
EARLIEST = {"autoOffsetResetPolicy": "AUTO_OFFSET_RESET_POLICY_EARLIEST"}


def every_kind(suffix: str, sink: str) -> dict[str, dict]:
    """One group of each kind in MINIMAL_GROUPS, on this test's topics."""
    t, u, load = f"every-t-{suffix}", f"every-u-{suffix}", f"every-load-{suffix}"
    topics = {
        "audit": {"kafkaConsumerTaskGroup": {"topic": t, **EARLIEST}},
        "tier-audit": {"kafkaConsumerTaskGroup": {"topic": f"every-reports-{suffix}"}},
        "replication": {
            "kafkaConsumerTaskGroup": {"topic": t, **EARLIEST},
            "kafkaDispatcherTaskGroup": {"topic": u},
            "flowControl": {"messagesPerSec": 1000},
        },
        "availability": {"kafkaConsumerTaskGroup": {"topic": f"every-probe-{suffix}"}},
        "loadgen-produce": {
            "kafkaDispatcherTaskGroup": {"topic": load},
            "flowControl": {"messagesPerSec": 20},
        },
        "loadgen-consume": {"kafkaConsumerTaskGroup": {"topic": load, **EARLIEST}},
        "dispatch": {
            "kafkaConsumerTaskGroup": {"topic": t, **EARLIEST},
            "rpcDispatcherTaskGroup": {"uri": f"dns:///{sink}", "rpcTimeoutMs": 4000},
        },
    }
    assert set(topics) == set(MINIMAL_GROUPS)  # a new kind must be added here
    topics["audit-2"] = {"kafkaConsumerTaskGroup": {"topic": u, **EARLIEST}}
    # without flow control: a replication pack's (jobs/replication/packs.py), of one
    topics["replication-2"] = {
        "kafkaConsumerTaskGroup": {"topic": u, **EARLIEST},
        "kafkaDispatcherTaskGroup": {"topic": f"every-v-{suffix}"},
    }
    groups = {}
    for kind, sections in topics.items():
        data = minimal_group(kind.removesuffix("-2"), f"every-{kind}-{suffix}", **sections)
        data["extension"] = TRIGGER
        groups[kind] = data
    return groups


def retune_in_place(spark, runs: GroupRuns, group: JobGroup, query_name: str, kafka) -> None:
    """A flow-control UPDATE of the running replication: its query goes on (the same Spark
    run), the group reports the new definition, and the next batch's copy tasks pace at the
    new cap (the JVM's limiter for the group at 400 records/s)."""
    (query,) = [q for q in spark.streams.active if q.name == query_name]
    slower = JobGroup()
    slower.CopyFrom(group)
    slower.flow_control.messages_per_sec = 400
    runs.take([worker_jobs.command(worker_jobs.UPDATE, 3, slower, "d2", "r2")])
    reported = {
        job.job_group_id: job
        for s in runs.statuses()
        if (job := worker_jobs.worker_job_of(s.job)) is not None
    }[group.job_group_id]
    assert (reported.definition, reported.run, reported.query_run) == ("d2", "r2", str(query.runId))
    topic = group.kafka_consumer_task_group.topic
    produce(kafka.bootstrap_servers, topic, audit_dataset(20, 2, int(time.time() * 1000), seed=4))
    wait_for(
        lambda: f"{group.job_group_id}|400.0|0.0" in limiter_keys(spark),
        120,
        "a copy paced at the new cap",
    )
    assert query.isActive and [
        str(q.runId) for q in spark.streams.active if q.name == query_name
    ] == [str(query.runId)]


def leave_the_pack_for_flow_control(spark, runs, packer, groups, kafka, suffix) -> None:
    """A flow-control UPDATE of the packed replication: it leaves its pack and runs alone
    (`alone_spec`: a generation of its own, starting where its copy in the pack ends), not
    FAILED, and goes on copying u into v, each record once."""
    copy_2 = groups["replication-2"].job_group_id
    capped = JobGroup()
    capped.CopyFrom(groups["replication-2"])
    capped.flow_control.messages_per_sec = 1000
    runs.take([worker_jobs.command(worker_jobs.UPDATE, 8, capped, "d2", "r2")])
    alone = f"replication-{copy_2}"

    def running_alone() -> bool:
        failed = [s for s in runs.statuses() if s.state == job_pb2.JOB_STATE_FAILED]
        assert failed == [], failed
        active = [q for q in spark.streams.active if q.name == alone]
        return packer.pack_of(copy_2) is None and any(q.lastProgress for q in active)

    wait_for(running_alone, 180, "the capped replication's own query")
    produce(
        kafka.bootstrap_servers, f"every-t-{suffix}", audit_dataset(30, 2, int(time.time() * 1000))
    )
    count = {
        t: lambda t=t: count_records(kafka.bootstrap_servers, f"every-{t}-{suffix}", 2)
        for t in "tuv"
    }
    wait_for(
        lambda: count["t"]() == count["u"]() == count["v"](),
        120,
        "u copied into v alone, each record once",
    )


def audited(spark, table) -> dict[tuple[str, str], int]:
    """Records counted per (group, topic) in audit_counts."""
    if not (table / "_delta_log").exists():
        return {}
    rows = spark.read.format("delta").load(str(table)).groupBy("job_group_id", "topic").sum()
    return {(r["job_group_id"], r["topic"]): r["sum(message_count)"] for r in rows.collect()}


def limiter_keys(spark) -> set[str]:
    """The (JobGroup, caps) of every flow limiter the copies in this JVM joined."""
    jvm = spark.sparkContext._jvm
    limiter = jvm.py4j.reflection.ReflectionUtil.classForName("dev.uatu.replication.FlowLimiter")
    field = limiter.getDeclaredField("LIMITERS")
    field.setAccessible(True)
    return {str(key) for key in field.get(None).keySet()}


@pytest.mark.integration
def test_every_job_type_runs_side_by_side_in_one_worker_session(spark, kafka, tmp_path):
    suffix = uuid.uuid4().hex[:8]
    for topic in ("t", "u", "v", "load", "probe", "reports"):
        kafka.create_topic(f"every-{topic}-{suffix}", partitions=2)
    produce(
        kafka.bootstrap_servers, f"every-t-{suffix}", audit_dataset(60, 2, int(time.time() * 1000))
    )
    conf = write_conf_dir(
        tmp_path / "conf", kafka.bootstrap_servers, tmp_path / "wh", tmp_path / "ck"
    )
    settings = load_settings(conf)
    with ScriptedService() as sink:
        groups = {kind: parse(data) for kind, data in every_kind(suffix, sink.address).items()}
        names = {kind: build_job(g, settings).spec.query_name for kind, g in groups.items()}
        packer = packer_on(spark, settings)
        runs = GroupRuns(
            lambda job, stop_file: _run_group(
                spark, settings, job, stop_file, events, runs, packer
            ),
            traffic=lambda group_id: events.traffic(group_id),
        )
        events = QueryEvents(runs)
        spark.streams.addListener(events)
        try:
            runs.take(
                worker_jobs.command(worker_jobs.RUN, n, g, "d1", "r1")
                for n, g in enumerate(groups.values(), start=1)
            )

            def batches(kind: str) -> int:
                """Micro-batches the kind's queries have completed (0 before the first)."""
                done = [
                    (q.lastProgress or {}).get("batchId", -1) + 1
                    for q in spark.streams.active
                    if q.name == names[kind] or q.name.startswith(f"{names[kind]}-")
                ]
                return max(done, default=0)

            def all_ran() -> bool:
                failed = [s for s in runs.statuses() if s.state == job_pb2.JOB_STATE_FAILED]
                assert failed == [], failed  # fail fast, with the one line of each
                return all(batches(kind) >= 2 for kind in groups)

            audits = [groups["audit"].job_group_id, groups["audit-2"].job_group_id]
            wait_for(
                lambda: (
                    (p := packer.pack_of(audits[0])) is not None and p.members() == sorted(audits)
                ),
                120,
                "both audit groups in one pack",
            )
            pack = packer.pack_of(audits[0])
            assert pack is not None
            names["audit"] = names["audit-2"] = pack.query_name
            copy_2 = groups["replication-2"].job_group_id
            wait_for(lambda: packer.pack_of(copy_2) is not None, 120, "the replication's pack")
            copy_pack = packer.pack_of(copy_2)
            assert copy_pack is not None and copy_pack.members() == [copy_2]
            names["replication-2"] = copy_pack.query_name
            wait_for(all_ran, 300, "every kind's query to complete two micro-batches")
            assert sorted(runs.running()) == sorted(g.job_group_id for g in groups.values())
            assert [q.name for q in spark.streams.active].count(pack.query_name) == 1
            # what lets a pack fold (jobs/worker/packer.py): its query committed a batch
            assert _committed_a_batch(spark, pack.query_name)
            assert not _committed_a_batch(spark, f"{pack.query_name}-none")
            retune_in_place(spark, runs, groups["replication"], names["replication"], kafka)
            # the copy (from t) fills u: each audit's rows and status are its own topic's
            held = {
                audits[0]: f"every-t-{suffix}",
                audits[1]: f"every-u-{suffix}",
            }

            def truth() -> dict[tuple[str, str], int]:
                return {
                    (g, t): count_records(kafka.bootstrap_servers, t, 2) for g, t in held.items()
                }

            def reported() -> dict[str, int]:
                return {
                    job.job_group_id: s.kafka_consumer_task_status.read_offset
                    for s in runs.statuses()
                    if (job := worker_jobs.worker_job_of(s.job)) is not None
                    and job.job_group_id in held
                }

            wait_for(
                lambda: (
                    audited(spark, tmp_path / "wh" / "audit_counts") == truth()
                    and reported() == {g: n for (g, _), n in truth().items()}
                ),
                180,
                "each audit group's counts and status to be what its topic holds",
            )

            def copied() -> tuple[int, ...]:
                """Records in u (the copy of t) and in v (u's copy, by the packed
                replication), and the records each replication reports produced."""
                produced = {
                    job.job_group_id: s.kafka_dispatcher_task_status.num_records_produced
                    for s in runs.statuses()
                    if (job := worker_jobs.worker_job_of(s.job)) is not None
                }
                u, v = (
                    count_records(kafka.bootstrap_servers, f"every-{t}-{suffix}", 2) for t in "uv"
                )
                return u, v, produced[groups["replication"].job_group_id], produced[copy_2]

            wait_for(
                lambda: len(set(copied())) == 1,
                120,
                "the packed replication to copy u into v, and both to report what they produced",
            )
            leave_the_pack_for_flow_control(spark, runs, packer, groups, kafka, suffix)
        finally:
            runs.stop_all("the end of the test")
            stopped = runs.wait_stopped(120)
            spark.streams.removeListener(events)
    assert stopped
    states = {worker_jobs.worker_job_of(s.job).job_group_id: s.state for s in runs.statuses()}
    assert set(states.values()) == {job_pb2.JOB_STATE_CANCELED}, states
