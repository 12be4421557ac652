"""The availability job's samplers against real brokers: topic availability while brokers die,
and Burrow's group statuses for consumer groups whose commits the test makes itself."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from delta.tables import DeltaTable
from google.protobuf import json_format
from pyspark.sql import functions as F
from uatu.v1 import job_options_pb2  # noqa: F401  (registers JobOptions for `extension`)
from uber.data.kafka.datatransfer.job_group_pb2 import JobGroup

from jobs.availability import job as availability
from jobs.common.errors import EXIT_OK
from jobs.common.settings import load_settings, write_conf_dir
from tests.support import wait_for
from tools.topic_data import Record, produce_records

pytestmark = pytest.mark.integration


def spec_for(tmp_path: Path, bootstrap: str, group_id: str, **availability_options):
    conf = write_conf_dir(tmp_path / "conf", bootstrap, tmp_path / "wh", tmp_path / "ck")
    data = {
        "jobGroupId": group_id,
        "type": "JOB_TYPE_KAFKA_AVAILABILITY",
        "kafkaConsumerTaskGroup": {"cluster": "local", "topic": "probe"},
        "availabilityTaskGroup": {"availabilityJobType": "AVAILABILITY_JOB_TYPE_NATIVE_PRODUCER"},
        "extension": {
            "@type": "type.googleapis.com/uatu.v1.JobOptions",
            "trigger": {"intervalSeconds": 1},
            "availability": availability_options,
        },
    }
    spec = availability.prepare(json_format.ParseDict(data, JobGroup()), load_settings(conf))
    availability.ensure_source(spec)
    return spec


@contextmanager
def running(spec, stop_file: Path) -> Iterator[Callable[[], int | None]]:
    """Run the job in a thread until the block ends; yields its exit status (None: running)."""
    status: list[int] = []
    thread = threading.Thread(
        target=lambda: status.append(availability.run(spec, once=False, stop_file=str(stop_file)))
    )
    thread.start()
    try:
        yield lambda: status[0] if status else None
    finally:
        stop_file.touch()
        thread.join(180)
        stop_file.unlink(missing_ok=True)
    assert not thread.is_alive(), "the job did not stop"
    assert status == [EXIT_OK]


def test_topic_availability_shows_under_replicated_then_offline(spark, tmp_path) -> None:
    from tools.kafka_broker import start_cluster

    with start_cluster(tmp_path / "kafka", n_brokers=3) as cluster:
        cluster.create_topic("replicated", 3, 3)
        cluster.create_topic("single", 3, 1)  # one replica each: one per broker
        spec = spec_for(tmp_path, cluster.bootstrap_servers, "avail-topics", skipConsumerLag=True)
        table = spec.topic_availability_path

        def samples_after(t: float):
            if not DeltaTable.isDeltaTable(spark, table):
                return None
            rows = (
                spark.read.format("delta")
                .load(table)
                .where(F.col("sampled_at") > F.lit(t).cast("timestamp"))
                .where(F.col("topic").isin("replicated", "single"))
                .collect()
            )
            return rows if len({r["sampled_at"] for r in rows}) >= 2 else None

        with running(spec, tmp_path / "stop"):
            healthy = wait_for(lambda: samples_after(0), 120, "two samples")
            assert not any(r["offline"] or r["under_replicated"] for r in healthy)
            victim = 2
            led = {
                r["partition"] for r in healthy if r["topic"] == "single" and r["leader"] == victim
            }
            cluster.kill_broker(victim)
            killed_at = time.time()

            def flagged():
                rows = samples_after(killed_at)
                if not rows:
                    return None
                latest = max(r["sampled_at"] for r in rows)
                last = [r for r in rows if r["sampled_at"] == latest]
                offline = {r["partition"] for r in last if r["topic"] == "single" and r["offline"]}
                under = [r for r in last if r["topic"] == "replicated" and r["under_replicated"]]
                return (offline, under) if offline == led and len(under) == 3 else None

            _, under = wait_for(flagged, 60, "the dead broker's partitions flagged")
        assert led, f"broker {victim} led none of the single-replica partitions"
        assert all(r["isr_size"] == 2 and victim in r["offline_replicas"] for r in under)


# --- consumer groups --------------------------------------------------------------------------


class Committer:
    """Commits offsets for one group the way a consumer would, without joining the group."""

    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        self.topic = topic
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})

    def commit(self, offset: int) -> None:
        self.consumer.commit(offsets=[TopicPartition(self.topic, 0, offset)], asynchronous=False)

    def close(self) -> None:
        self.consumer.close()


def test_group_statuses_follow_burrow_and_survive_a_restart(spark, kafka, tmp_path) -> None:
    """healthy: keeps committing the head of an idle topic -> OK; lagging: falls further
    behind -> WARN; stalled: commits one offset -> STALL; rewound: jumps back -> REWIND;
    stopped: three commits, then silence -> STOP. The lag in time of `stopped` is now - the
    timestamp the test gave the record at its committed offset."""
    bootstrap = kafka.bootstrap_servers
    t0_ms = (int(time.time()) - 600) * 1000  # ten minutes ago, 1 s per offset
    scenarios = ("healthy", "lagging", "stalled", "rewound", "stopped")
    for name in scenarios:
        kafka.create_topic(f"lag-{name}", 1, 1)
        records = [Record(0, None, b"x", t0_ms + i * 1000) for i in range(20)]
        produce_records(bootstrap, f"lag-{name}", records)
    committers = {name: Committer(bootstrap, f"g-{name}", f"lag-{name}") for name in scenarios}
    spec = spec_for(tmp_path, bootstrap, "avail-lag", skipTopicAvailability=True)
    committers["stopped"].commit(1)
    committers["stopped"].commit(2)
    committers["stopped"].commit(3)
    committers["rewound"].commit(12)
    head = {"lagging": 20}
    state = {"lagging": 5}
    stop = threading.Event()

    def keep_committing() -> None:
        tick = 0
        while not stop.wait(1.0):
            tick += 1
            now_ms = int(time.time() * 1000)
            produce_records(bootstrap, "lag-lagging", [Record(0, None, b"x", now_ms)] * 3)
            head["lagging"] += 3
            committers["healthy"].commit(20)
            state["lagging"] += 1
            committers["lagging"].commit(state["lagging"])
            committers["stalled"].commit(7)
            if tick % 3 == 0:  # slowly, so the rewind stays in the 10-commit window for 30 s
                committers["rewound"].commit(6)

    def statuses() -> dict[str, set[str]]:
        if not DeltaTable.isDeltaTable(spark, spec.status_path):
            return {}
        rows = (
            spark.read.format("delta")
            .load(spec.status_path)
            .select("group", "status", F.col("partitions")[0]["status"].alias("partition_status"))
        )
        seen: dict[str, set[str]] = {}
        for r in rows.collect():
            seen.setdefault(r["group"], set()).add(f"{r['status']}/{r['partition_status']}")
        return seen

    expected = {
        "g-lagging": "WARN/WARN",
        "g-stalled": "ERR/STALL",
        "g-rewound": "ERR/REWIND",
        "g-stopped": "ERR/STOP",
    }
    committer = threading.Thread(target=keep_committing)
    try:
        with running(spec, tmp_path / "stop"):
            # Commits start once the job is up, so none of them waits through Spark's start.
            wait_for(statuses, 120, "a first evaluation")
            committer.start()
            seen = wait_for(
                lambda: (
                    (s := statuses())
                    and all(want in s.get(g, set()) for g, want in expected.items())
                    and s
                ),
                180,
                f"statuses {expected}",
            )
    finally:
        stop.set()
        if committer.is_alive():
            committer.join()
        for c in committers.values():
            c.close()
    assert seen["g-healthy"] == {"OK/OK"}

    last = (
        spark.read.format("delta")
        .load(spec.status_path)
        .where(F.col("group") == "g-stopped")
        .orderBy(F.desc("evaluated_at"))
        .first()
    )
    truth_ms = last["evaluated_at"].timestamp() * 1000 - (t0_ms + 3 * 1000)
    assert last["total_lag"] == 17
    assert abs(last["max_time_lag_ms"] - truth_ms) < 2_000

    # A restart reads __consumer_offsets from its checkpoint, so no old commit comes back
    # from Kafka: the window the first evaluation sees is the one stored in Delta.
    restarted = time.time()
    with running(spec, tmp_path / "stop"):
        first = wait_for(
            lambda: (
                spark.read.format("delta")
                .load(spec.status_path)
                .where(F.col("evaluated_at") > F.lit(restarted).cast("timestamp"))
                .where(F.col("group") == "g-stopped")
                .first()
            ),
            120,
            "an evaluation after the restart",
        )
    (partition,) = first["partitions"]
    assert (partition["start_offset"], partition["end_offset"]) == (1, 3)
    assert partition["status"] == "STOP"
