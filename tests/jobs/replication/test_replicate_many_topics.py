"""A replication of many topics end to end, as MirrorMaker 2 users run it: a pattern, the
source-alias prefix naming (`src.<topic>`), source and destination on the same broker (so the
copies match the pattern too, and a cycle is possible).

One job history, shared by the tests below:

1. three topics with their own partition counts and configs exist before the run;
2. a first run (spark-submit) is killed by the fault hook after 300 records of its first batch
   were acknowledged, before the batch's stats were committed;
3. a second run (in this process, same checkpoint) finishes the copy; meanwhile a fourth topic
   is created and one of the first three gains a partition, and both are copied too.

Every expectation comes from the source topics, read back with a plain consumer.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, NewPartitions
from google.protobuf import json_format
from pyspark.sql import functions as F
from uber.data.kafka.datatransfer.job_group_pb2 import JobGroup

from core.config import load_settings
from core.errors import EXIT_OK
from core.provenance import latest_stamp
from jobs.replication.job import ReplicationJob
from jobs.replication.offsets import main as offsets_main
from jobs.replication.spec import replication_spec_now
from jobs.replication.topics import synced_configs
from testing.jobrun import committed_batch, run_job, running_in_thread
from testing.polling import wait_for
from testing.topic_data import (
    Record,
    commit_offsets,
    committed_offsets,
    count_records,
    produce_records,
    read_partitions,
)
from tests.jobs.replication.test_replication_integration import assert_exact_copy, two_cluster_conf

pytestmark = pytest.mark.integration

ALIAS = "src"  # the source cluster's name: the default alias
CRASH_AT = 300
T0_MS = (int(time.time()) - 3600) * 1000
# Topic suffix -> (partitions, records, configs set on the source topic)
BEFORE = {
    "a": (
        4,
        1200,
        {
            "retention.ms": "86400000",
            "cleanup.policy": "delete",
            "max.message.bytes": "2000000",
            "segment.bytes": "1048576",
            "compression.type": "lz4",
            "min.compaction.lag.ms": "1000",
            "min.insync.replicas": "1",  # MirrorMaker 2 leaves it to the destination
        },
    ),
    "b": (2, 600, {"retention.ms": "172800000"}),
    "c": (3, 900, {}),
}
LATER = ("d", 2, 500, {"retention.ms": "7200000", "max.message.bytes": "1500000"})
GROWN = ("b", 3, 150)  # b grows to 3 partitions mid-run; 150 more records, some in the new one


def records(n: int, partitions: int, tag: str) -> list[Record]:
    out = []
    for i in range(n):
        headers = (("trace", f"{tag}{i}".encode()),) if i % 3 == 0 else ()
        key = None if i % 7 == 0 else f"{tag}-k{i}".encode()
        ts = T0_MS + i * 10
        out.append(Record(i % partitions, key, f"{tag}-v{i}".encode(), ts, headers))
    return out


@dataclass(frozen=True)
class History:
    bootstrap: str
    topics: dict[str, int]  # source topic -> partitions at the end
    crash_status: int
    crash_log: str
    present_after_crash: int
    workdir: Path
    conf: Path
    group_id: str


def group_json(group_id: str, tag: str) -> dict:
    return {
        "jobGroupId": group_id,
        "type": "JOB_TYPE_KAFKA_REPLICATION",
        "kafkaConsumerTaskGroup": {"cluster": "src", "consumerGroup": f"{group_id}-cg"},
        "kafkaDispatcherTaskGroup": {"cluster": "dst"},
        "extension": {
            "@type": "type.googleapis.com/uatu.v1.JobOptions",
            "trigger": {"intervalSeconds": 1},
            # Matches the copies (src.<tag>-a, src.src.<tag>-a, ...) as well as the sources.
            "topics": {"pattern": f".*{tag}-.*"},
            "replication": {"topicNaming": "TOPIC_NAMING_SOURCE_PREFIX"},
        },
    }


def copied(bootstrap: str, topics: dict[str, int]) -> int:
    return sum(count_records(bootstrap, f"{ALIAS}.{t}", n) for t, n in topics.items())


def source_records(bootstrap: str, topics: dict[str, int]) -> int:
    return sum(count_records(bootstrap, t, n) for t, n in topics.items())


def destination_exists(admin: AdminClient, topic: str) -> bool:
    return topic in admin.list_topics(timeout=10).topics


@pytest.fixture(scope="module")
def history(spark, kafka, tmp_path_factory) -> History:
    bootstrap = kafka.bootstrap_servers
    tag = f"mt{time.monotonic_ns()}"
    workdir = tmp_path_factory.mktemp("many-topics")
    conf = two_cluster_conf(workdir, bootstrap, bootstrap)  # src and dst: the same broker
    topics: dict[str, int] = {}
    for suffix, (partitions, n, config) in BEFORE.items():
        topic = f"{tag}-{suffix}"
        kafka.create_topic(topic, partitions, 1, config=config)
        produce_records(bootstrap, topic, records(n, partitions, suffix))
        topics[topic] = partitions
    group = group_json("many-topics", tag)

    status, log = run_job(
        group, workdir, conf, env={"UATU_FAULT": f"replication.record_acked@{CRASH_AT}"}
    )
    present = copied(bootstrap, topics)

    spec = replication_spec_now(json_format.ParseDict(group, JobGroup()), load_settings(conf))
    admin = AdminClient({"bootstrap.servers": bootstrap})
    with running_in_thread(ReplicationJob(spec), workdir / "stop") as status_now:
        total = source_records(bootstrap, topics)
        wait_for(lambda: copied(bootstrap, topics) >= total, 300, f"{total} records copied")
        later, partitions, n, config = LATER
        topic = f"{tag}-{later}"
        kafka.create_topic(topic, partitions, 1, config=config)
        produce_records(bootstrap, topic, records(n, partitions, later))
        topics[topic] = partitions
        grown, partitions, n = GROWN
        topic = f"{tag}-{grown}"
        admin.create_partitions([NewPartitions(topic, partitions)])[topic].result(30)
        wait_for(
            lambda: (
                len(admin.list_topics(topic, timeout=10).topics[topic].partitions) == partitions
            ),
            30,
            f"partition {partitions - 1} of {topic}",
        )
        produce_records(bootstrap, topic, records(n, partitions, f"{grown}2"))
        topics[topic] = partitions
        total = source_records(bootstrap, topics)
        wait_for(
            lambda: (
                all(destination_exists(admin, f"{ALIAS}.{t}") for t in topics)
                and copied(bootstrap, topics) >= total
            ),
            300,
            f"{total} records copied, the new topic and partition included",
        )
        assert status_now() is None  # still running: the copy is continuous
    return History(bootstrap, topics, status, log, present, workdir, conf, group["jobGroupId"])


def test_a_crash_mid_copy_then_a_restart_copies_each_record_once_in_order(history) -> None:
    assert history.crash_status == -9, history.crash_log
    assert f"crash at replication.record_acked (hit {CRASH_AT})" in history.crash_log
    total_before = sum(n for _, n, _ in BEFORE.values())
    assert CRASH_AT <= history.present_after_crash < total_before
    for topic, partitions in history.topics.items():
        truth = read_partitions(history.bootstrap, topic, partitions)
        copy = read_partitions(history.bootstrap, f"{ALIAS}.{topic}", partitions)
        assert_exact_copy(truth, copy, topic)


def test_destinations_are_created_with_the_sources_partitions_and_synced_configs(
    history,
) -> None:
    admin = AdminClient({"bootstrap.servers": history.bootstrap})
    listed = admin.list_topics(timeout=10).topics
    for topic, partitions in history.topics.items():
        assert len(listed[f"{ALIAS}.{topic}"].partitions) == partitions, topic
    resources = [ConfigResource(ConfigResource.Type.TOPIC, t) for t in history.topics]
    resources += [ConfigResource(ConfigResource.Type.TOPIC, f"{ALIAS}.{t}") for t in history.topics]
    described = {
        r.name: {
            k: (e.value, ConfigSource(e.source) == ConfigSource.DYNAMIC_TOPIC_CONFIG)
            for k, e in f.result(30).items()
        }
        for r, f in admin.describe_configs(resources).items()
    }
    for topic in history.topics:
        source, copy = described[topic], described[f"{ALIAS}.{topic}"]
        wanted = synced_configs(source)
        assert {k: copy[k][0] for k in wanted} == wanted, topic
        # Independent of synced_configs: what the test set on the source, less the exclusion.
        set_here = dict(BEFORE.get(topic.rsplit("-", 1)[1], (0, 0, LATER[3]))[2])
        set_here.pop("min.insync.replicas", None)
        assert {k: copy[k][0] for k in set_here} == set_here, topic
        assert source["min.insync.replicas"][1] == (topic.endswith("-a")), topic
        assert not copy["min.insync.replicas"][1], "an excluded config is the destination's own"


def test_copies_are_never_copied_again(spark, history) -> None:
    admin = AdminClient({"bootstrap.servers": history.bootstrap})
    tag = next(iter(history.topics)).rsplit("-", 1)[0]
    ours = sorted(t for t in admin.list_topics(timeout=10).topics if tag in t)
    assert ours == sorted([*history.topics, *(f"{ALIAS}.{t}" for t in history.topics)])
    stats = spark.read.format("delta").load(str(history.workdir / "wh" / "replication_stats"))
    topics = {(r[0], r[1]) for r in stats.select("source_topic", "destination_topic").collect()}
    assert topics == {(t, f"{ALIAS}.{t}") for t in history.topics}


def test_stats_count_every_record_per_topic_once(spark, history) -> None:
    stats = spark.read.format("delta").load(str(history.workdir / "wh" / "replication_stats"))
    per_topic = {
        r["source_topic"]: (r["read"], r["held"])
        for r in stats.groupBy("source_topic")
        .agg(
            F.sum("records_read").alias("read"),
            F.sum(F.col("records_replicated") + F.col("records_already_present")).alias("held"),
        )
        .collect()
    }
    truth = {t: count_records(history.bootstrap, t, n) for t, n in history.topics.items()}
    assert per_topic == {t: (n, n) for t, n in truth.items()}
    present = stats.agg(F.sum("records_already_present")).first()
    assert present is not None and present[0] == history.present_after_crash
    audit = spark.read.format("delta").load(str(history.workdir / "wh" / "replication_audit"))
    audited = {
        r[0]: r[1] for r in audit.groupBy("source_topic").agg(F.sum("records_read")).collect()
    }
    assert audited == truth
    assert committed_batch(history.workdir / "wh" / "replication_stats") is not None


def test_group_offsets_are_committed_and_translated_per_topic(history, capsys) -> None:
    """The job's consumer group stands at the end of every topic it copied (lag monitors see
    it as any consumer); a group of the source fails over to one topic's copy by the stamps."""
    for topic, partitions in history.topics.items():
        ends = {
            p: len(rs) for p, rs in read_partitions(history.bootstrap, topic, partitions).items()
        }
        assert (
            committed_offsets(history.bootstrap, f"{history.group_id}-cg", topic, partitions)
            == ends
        )
    topic = next(t for t in history.topics if t.endswith("-a"))
    copy = f"{ALIAS}.{topic}"
    commit_offsets(history.bootstrap, "failover", topic, {0: 17})
    status = offsets_main(
        ["--conf-dir", str(history.conf), "--source-cluster", "src", "--topic", topic,
         "--dest-cluster", "dst", "--dest-topic", copy, "--group", "failover", "--apply"]
    )  # fmt: skip
    assert status == EXIT_OK, capsys.readouterr().err
    replica = read_partitions(history.bootstrap, copy, 1)[0]
    landed = next(r.offset for r in replica if (s := latest_stamp(r.headers)) and s.offset == 17)
    assert committed_offsets(history.bootstrap, "failover", copy, 1) == {0: landed}
