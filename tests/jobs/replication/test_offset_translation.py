"""Offset translation on real brokers: a group's source commits, translated through a copy the
replication job made (with another writer's records in the replica), committed to the
destination group, and the group resumes at the right record."""

from __future__ import annotations

import time
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition
from google.protobuf import json_format
from uber.data.kafka.datatransfer.job_group_pb2 import JobGroup

from core.config import load_settings
from core.errors import EXIT_OK
from jobs.replication import job as replication
from jobs.replication.offsets import main as offsets_main
from jobs.replication.spec import replication_spec_now
from testing.conf import write_conf_dir
from testing.polling import wait_for
from testing.topic_data import (
    Record,
    commit_offsets,
    committed_offsets,
    produce_records,
    read_partitions,
)

SOURCE, COPY, GROUP = "orders-xlate", "orders-xlate-copy", "billing"
PER_PARTITION = 40
T0_MS = (int(time.time()) - 600) * 1000


def test_a_group_fails_over_to_the_replica_at_the_translated_offsets(
    spark, kafka, kafka_dest, tmp_path: Path, capsys
) -> None:
    kafka.create_topic(SOURCE, 2, 1)
    kafka_dest.create_topic(COPY, 2, 1)
    # Another writer got to the replica first: 3 unstamped records per partition.
    produce_records(
        kafka_dest.bootstrap_servers,
        COPY,
        [Record(p, None, f"other-{p}-{i}".encode(), T0_MS) for p in (0, 1) for i in range(3)],
    )
    source = [
        Record(p, f"k{i}".encode(), f"v-{p}-{i}".encode(), T0_MS + i)
        for p in (0, 1)
        for i in range(PER_PARTITION)
    ]
    produce_records(kafka.bootstrap_servers, SOURCE, source)
    conf = write_conf_dir(
        tmp_path / "conf",
        kafka.bootstrap_servers,
        tmp_path / "wh",
        tmp_path / "ck",
        more_clusters={
            "src": {"bootstrap_servers": kafka.bootstrap_servers},
            "dst": {"bootstrap_servers": kafka_dest.bootstrap_servers},
        },
    )
    group = {
        "jobGroupId": "xlate",
        "type": "JOB_TYPE_KAFKA_REPLICATION",
        "kafkaConsumerTaskGroup": {"cluster": "src", "topic": SOURCE, "consumerGroup": "xl"},
        "kafkaDispatcherTaskGroup": {"cluster": "dst", "topic": COPY},
        "replicationTaskGroup": {"isContinuous": False},
    }
    spec = replication_spec_now(json_format.ParseDict(group, JobGroup()), load_settings(conf))
    assert replication.ReplicationJob(spec).run(once=False) == EXIT_OK

    # The group read 17 records of partition 0 and all of partition 1 on the source.
    commit_offsets(kafka.bootstrap_servers, GROUP, SOURCE, {0: 17, 1: PER_PARTITION})
    status = offsets_main(
        ["--conf-dir", str(conf), "--source-cluster", "src", "--topic", SOURCE,
         "--dest-cluster", "dst", "--dest-topic", COPY, "--group", GROUP, "--apply"]
    )  # fmt: skip
    assert status == EXIT_OK

    # Truth from the replica itself: where source record 17 of partition 0 landed.
    replica = read_partitions(kafka_dest.bootstrap_servers, COPY, 2)
    landed = next(r.offset for r in replica[0] if r.value == b"v-0-17")
    end_1 = len(replica[1])
    assert (landed, end_1) == (3 + 17, 3 + PER_PARTITION)  # after the other writer's three
    assert committed_offsets(kafka_dest.bootstrap_servers, GROUP, COPY, 2) == {0: landed, 1: end_1}
    printed = capsys.readouterr().out
    assert f"{GROUP:<24} {0:>9} {17:>12} {landed:>12}" in printed

    # The failed-over group resumes exactly at the first record it had not read.
    consumer = Consumer(
        {"bootstrap.servers": kafka_dest.bootstrap_servers, "group.id": GROUP,
         "enable.auto.commit": False}
    )  # fmt: skip
    try:
        consumer.assign([TopicPartition(COPY, 0)])  # committed offset, no explicit position

        def next_record():
            message = consumer.poll(1)
            return message if message is not None and not message.error() else None

        first = wait_for(next_record, 60, "the first record after failover")
        assert first.value() == b"v-0-17"
    finally:
        consumer.close()


def test_unknown_cluster_is_bad_input(tmp_path: Path, kafka, capsys) -> None:
    conf = write_conf_dir(
        tmp_path / "conf", kafka.bootstrap_servers, tmp_path / "wh", tmp_path / "ck"
    )
    status = offsets_main(
        ["--conf-dir", str(conf), "--source-cluster", "nope", "--topic", "t",
         "--dest-cluster", "local", "--group", "g"]
    )  # fmt: skip
    assert status == 2
    assert "--source-cluster: unknown cluster 'nope'" in capsys.readouterr().err
