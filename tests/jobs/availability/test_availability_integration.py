"""The availability job's samplers against real brokers: topic availability while brokers die,
and Burrow's group statuses for consumer groups whose commits the test makes itself."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Callable
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from pathlib import Path

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition
from delta.tables import DeltaTable
from google.protobuf import json_format
from pyspark.sql import functions as F
from uatu.v1 import job_options_pb2  # noqa: F401  (registers JobOptions for `extension`)
from uber.data.kafka.datatransfer.job_group_pb2 import JobGroup

from core import faults
from core.config import load_settings
from jobs.availability import job as availability
from jobs.availability.probes.proxy_client import key_for_partition
from jobs.availability.spec import availability_spec
from testing.conf import write_conf_dir
from testing.jobrun import running_in_thread
from testing.polling import wait_for
from testing.topic_data import Record, produce_records

pytestmark = pytest.mark.integration


def spec_for(
    tmp_path: Path,
    bootstrap: str,
    group_id: str,
    probe_type: str = "NATIVE_PRODUCER",
    zone_isolated: bool = False,
    probe_topic: str = "probe",
    proxy: dict | None = None,
    **availability_options,
):
    local = {"local": {"bootstrap_servers": bootstrap, "proxy": proxy}} if proxy else None
    conf = write_conf_dir(
        tmp_path / "conf", bootstrap, tmp_path / "wh", tmp_path / "ck", more_clusters=local
    )
    data = {
        "jobGroupId": group_id,
        "type": "JOB_TYPE_KAFKA_AVAILABILITY",
        "kafkaConsumerTaskGroup": {"cluster": "local", "topic": probe_topic},
        "availabilityTaskGroup": {
            "availabilityJobType": f"AVAILABILITY_JOB_TYPE_{probe_type}",
            "zoneIsolated": zone_isolated,
        },
        "extension": {
            "@type": "type.googleapis.com/uatu.v1.JobOptions",
            "trigger": {"intervalSeconds": 1},
            "availability": availability_options,
        },
    }
    spec = availability_spec(json_format.ParseDict(data, JobGroup()), load_settings(conf))
    availability.ensure_source(spec)
    return spec


def running(spec, stop_file: Path) -> AbstractContextManager[Callable[[], int | None]]:
    """The availability job of `spec` in a thread until the block ends (`running_in_thread`)."""
    return running_in_thread(availability.AvailabilityJob(spec), stop_file)


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
    spec = spec_for(tmp_path, bootstrap, "avail-lag", skipTopicAvailability=True, skipProbes=True)
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
        if not DeltaTable.isDeltaTable(spark, spec.output.table("consumer_group_status")):
            return {}
        rows = (
            spark.read.format("delta")
            .load(spec.output.table("consumer_group_status"))
            # get(): a NO_COMMITS row has no partitions (an index would fail under ANSI mode).
            .select("group", "status", F.get("partitions", 0)["status"].alias("partition_status"))
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
    # Before its first commit is read, the coordinator's group is listed as NO_COMMITS.
    assert seen["g-healthy"] - {"NO_COMMITS/None"} == {"OK/OK"}

    last = (
        spark.read.format("delta")
        .load(spec.output.table("consumer_group_status"))
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
                .load(spec.output.table("consumer_group_status"))
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


# --- probes -----------------------------------------------------------------------------------


def test_each_groups_committed_offset_is_dated_on_a_shared_partition(kafka) -> None:
    """Two groups lag on one partition at different offsets: each one's time lag comes from
    the record at its own offset (it once came from whichever group the lookup kept)."""
    topic = f"dating-{time.monotonic_ns()}"
    kafka.create_topic(topic, 2, 1)
    base_ms = int(time.time() * 1000) - 600_000
    produce_records(
        kafka.bootstrap_servers,
        topic,
        [Record(p, None, b"x", base_ms + 1000 * (10 * p + i)) for p in (0, 1) for i in range(10)],
    )
    consumer = Consumer({"bootstrap.servers": kafka.bootstrap_servers, "group.id": "dating"})
    try:
        wanted = [(topic, 0, 2), (topic, 0, 7), (topic, 0, 2), (topic, 1, 0), (topic, 1, 9)]
        dated = availability.next_record_times(consumer, wanted, timeout_s=10)
    finally:
        consumer.close()
    assert dated == {
        (topic, 0, 2): base_ms + 2000,
        (topic, 0, 7): base_ms + 7000,
        (topic, 1, 0): base_ms + 10_000,
        (topic, 1, 9): base_ms + 19_000,
    }


def probe_records_per_window(bootstrap: str, topic: str, window_ms: int) -> Counter:
    """(partition, window start) -> distinct probes on the topic, read independently."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "probe-reader", "enable.auto.commit": False}
    )
    metadata = consumer.list_topics(topic, timeout=10).topics[topic]
    ends = {}
    for p in metadata.partitions:
        ends[p] = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
    consumer.assign([TopicPartition(topic, p, 0) for p in ends])
    seen: set[tuple[int, str, int]] = set()
    counts: Counter = Counter()
    done = {p for p, end in ends.items() if end == 0}
    deadline = time.monotonic() + 30
    while len(done) < len(ends) and time.monotonic() < deadline:
        for m in consumer.consume(500, timeout=1):
            if m.error() is not None:
                continue
            probe = json.loads(m.value())
            key = (m.partition(), probe["instance"], probe["seq"])
            if key not in seen:
                seen.add(key)
                counts[(m.partition(), probe["sent_ms"] - probe["sent_ms"] % window_ms)] += 1
            if m.offset() + 1 >= ends[m.partition()]:
                done.add(m.partition())
    consumer.close()
    return counts


def test_native_probes_and_topic_availability_see_a_broker_die(
    spark, tmp_path, monkeypatch
) -> None:
    """Three brokers in zones a, b, c; the probe topic starts with one partition, led by
    broker 0, so the job must add partitions for brokers 1 and 2. While all are up every
    window shows every probe produced and read back, matching the probe records on the topic,
    and topic_availability shows no partition offline or under-replicated. After broker 2 is
    killed its windows show failed produces while 0 and 1 stay at 100 %, and
    topic_availability flags the single-replica partitions it led offline and every partition
    of a three-replica topic under-replicated (ISR 2, broker 2 offline); started again, its
    probes succeed again in the same run, which then stops cleanly.

    Through the fault hook, the receiver fails to look up one partition's end at start and
    its retry waits 5 s (two and a half windows): a probe sent to that partition meanwhile
    would never be read back and would count as lost (a fresh-clone run once saw one, when
    the receiver's metadata did not know the added partitions yet)."""
    from devservices.kafka import start_cluster

    monkeypatch.setenv(
        faults.ENV,
        "availability.probe_end_offset@2:fail-first-attempt,"
        "availability.probe_partitions_new@2:pause=5000",
    )
    faults.reset()

    with start_cluster(tmp_path / "kafka", n_brokers=3, racks=["a", "b", "c"]) as cluster:
        cluster.create_topic("probe", 1, replica_assignment=[[0]])
        cluster.create_topic("replicated", 3, 3)
        cluster.create_topic("single", 3, 1)  # one replica each: one per broker
        spec = spec_for(
            tmp_path,
            cluster.bootstrap_servers,
            "avail-probes",
            zone_isolated=True,
            skipConsumerLag=True,
            probeIntervalMs=200,
            probeWindowSeconds=2,
            probeAckSlaMs=1000,
            # Generous: on a loaded 2-core machine a healthy broker's probe can take seconds
            # to be read back, and a probe read back after its SLA counts as lost.
            probeRoundtripSlaMs=10000,
        )
        window_ms = 2000

        def rows(where: str):
            if not DeltaTable.isDeltaTable(spark, spec.output.table("availability_probes")):
                return []
            return (
                spark.read.format("delta")
                .load(spec.output.table("availability_probes"))
                .where(where)
                .collect()
            )

        def healthy_windows():
            found = rows("broker IS NOT NULL AND produce_success_ratio = 1")
            by_window: dict = {}
            for r in found:
                by_window.setdefault(r["window_start"], []).append(r)
            full = [by_window[start] for start in sorted(by_window) if len(by_window[start]) == 3]
            # The first window is partial: the prober started in the middle of it.
            return full[1:] if len(full) >= 3 else None

        def topic_samples_after(t: float):
            """topic_availability's rows of the two topics sampled after `t`, once there
            are two samples."""
            table = spec.output.table("topic_availability")
            if not DeltaTable.isDeltaTable(spark, table):
                return None
            found = (
                spark.read.format("delta")
                .load(table)
                .where(F.col("sampled_at") > F.lit(t).cast("timestamp"))
                .where(F.col("topic").isin("replicated", "single"))
                .collect()
            )
            return found if len({r["sampled_at"] for r in found}) >= 2 else None

        with running(spec, tmp_path / "stop"):
            windows = wait_for(healthy_windows, 120, "two windows with all three brokers healthy")
            assignment = {
                p.id: p.replicas
                for p in cluster.admin().list_topics("probe").topics["probe"].partitions.values()
            }
            assert sorted(r[0] for r in assignment.values()) == [0, 1, 2], assignment
            on_topic = probe_records_per_window(cluster.bootstrap_servers, "probe", window_ms)
            for window in windows:
                for r in window:
                    assert r["zone"] == "abc"[r["broker"]] and r["lost"] == 0
                    assert r["consumed"] == r["produced"] == r["probes"]
                    assert 8 <= r["probes"] <= 12, r  # one per 200 ms in 2 s
                    start_ms = int(r["window_start"].timestamp() * 1000)
                    on_disk = sum(on_topic[(p, start_ms)] for p in r["partitions"])
                    assert on_disk == r["probes"], (r, on_topic)
                    assert r["ack_latency_p50_ms"] <= r["e2e_latency_p99_ms"]
                zones = rows(f"broker IS NULL AND window_start = '{window[0]['window_start']}'")
                assert sorted((z["zone"], z["probes"]) for z in zones) == sorted(
                    (r["zone"], r["probes"]) for r in window
                )

            healthy = wait_for(lambda: topic_samples_after(0), 60, "two topic samples")
            assert not any(r["offline"] or r["under_replicated"] for r in healthy)
            led = {r["partition"] for r in healthy if r["topic"] == "single" and r["leader"] == 2}
            assert led, "broker 2 led none of the single-replica partitions"

            killed_at = time.time()
            cluster.kill_broker(2)

            def flagged():
                rows = topic_samples_after(killed_at)
                if not rows:
                    return None
                latest = max(r["sampled_at"] for r in rows)
                last = [r for r in rows if r["sampled_at"] == latest]
                offline = {r["partition"] for r in last if r["topic"] == "single" and r["offline"]}
                under = [r for r in last if r["topic"] == "replicated" and r["under_replicated"]]
                return (offline, under) if offline == led and len(under) == 3 else None

            # The controller notices the death after the broker session timeout, and every
            # batch here also writes the probe windows (a Delta append, and a coverage check
            # that may wait on the dead broker): on a loaded machine two samples take a while.
            _, under = wait_for(flagged, 180, "the dead broker's partitions flagged")
            assert all(r["isr_size"] == 2 and 2 in r["offline_replicas"] for r in under)

            def dead_window():
                after = f"window_start >= '{datetime.fromtimestamp(killed_at, UTC).isoformat()}'"
                dead = rows(f"broker = 2 AND produce_success_ratio = 0 AND {after}")
                return dead or None

            dead = wait_for(dead_window, 60, "a window where broker 2 produced nothing")
            assert dead[0]["zone"] == "c" and dead[0]["sample_error"]
            later = dead[0]["window_start"]
            survivors = rows(f"broker IN (0, 1) AND window_start = '{later}'")
            assert len(survivors) == 2
            assert all(r["produce_success_ratio"] == 1.0 for r in survivors), survivors

            # The same run rides out the restart: broker 2's probes succeed again.
            cluster.restart_broker(2)
            back_at = datetime.fromtimestamp(time.time(), UTC).isoformat()

            def back_window():
                back = rows(
                    f"broker = 2 AND produce_success_ratio = 1 AND window_start > '{back_at}'"
                )
                return [r for r in back if r["consumed"] == r["produced"] > 0] or None

            back = wait_for(back_window, 90, "a window where broker 2 is healthy again")
            assert back[0]["lost"] == 0 and back[0]["zone"] == "c"

            # No probe the live brokers acknowledged before the kill went unread, from the
            # prober's first window on: the partition whose end the receiver got late
            # included. By now every such window is final (past the round-trip SLA).
            ended = datetime.fromtimestamp(killed_at - window_ms / 1000, UTC).isoformat()
            before_kill = rows(f"broker IN (0, 1) AND window_start < '{ended}'")
            assert len({r["window_start"] for r in before_kill}) >= 3, before_kill
            assert [r for r in before_kill if r["lost"]] == []


@pytest.mark.parametrize("probe_type", ["PROXY_PRODUCER", "PROXY_CONSUMER"])
def test_proxy_probes_go_through_kafka_pixy(spark, kafka, kafka_pixy, tmp_path, probe_type):
    """PROXY_PRODUCER sends through kafka-pixy's Produce (the records carry the keys that
    steer its hash partitioner; native probes have none) and reads back natively;
    PROXY_CONSUMER sends natively and reads back with ConsumeNAck + Ack, which commits the
    prober's group offsets in Kafka. Either way every probe of a window comes back."""
    topic = f"probe-{probe_type.lower().replace('_', '-')}"
    kafka.create_topic(topic, 2, 1)
    spec = spec_for(
        tmp_path,
        kafka.bootstrap_servers,
        f"avail-{topic}",
        probe_type=probe_type,
        probe_topic=topic,
        proxy={"grpc_address": kafka_pixy.grpc_address, "cluster": "local"},
        skipConsumerLag=True,
        skipTopicAvailability=True,
        probeIntervalMs=250,
        probeWindowSeconds=2,
    )

    def complete_windows():
        if not DeltaTable.isDeltaTable(spark, spec.output.table("availability_probes")):
            return None
        found = (
            spark.read.format("delta")
            .load(spec.output.table("availability_probes"))
            .where("broker IS NULL AND consume_success_ratio = 1 AND produce_success_ratio = 1")
            .collect()
        )
        # The first window is partial: the prober started in the middle of it.
        return sorted(found, key=lambda w: w["window_start"])[1:] if len(found) >= 3 else None

    with running(spec, tmp_path / "stop"):
        windows = wait_for(complete_windows, 120, "two full windows with every probe back")
    assert all(w["probe_type"] == f"AVAILABILITY_JOB_TYPE_{probe_type}" for w in windows)
    assert all(w["lost"] == 0 and w["partitions"] == [0, 1] for w in windows)
    # 2 partitions x 8 rounds a window. The sender keeps a fixed rate and catches up after a
    # stall shorter than a second, so on a loaded machine a stall moves up to 4 rounds from
    # one window into the next; the rate holds over the windows.
    probes = [w["probes"] for w in windows]
    assert 12 * len(probes) <= sum(probes) <= 20 * len(probes), probes
    assert all(8 <= n <= 24 for n in probes), probes
    consumer = Consumer({"bootstrap.servers": kafka.bootstrap_servers, "group.id": "check"})
    consumer.assign([TopicPartition(topic, p, 0) for p in (0, 1)])
    keys: set = set()
    deadline = time.monotonic() + 20
    while len({p for p, _ in keys}) < 2 and time.monotonic() < deadline:
        keys |= {(m.partition(), m.key()) for m in consumer.consume(500, timeout=1)}
    consumer.close()
    if probe_type == "PROXY_PRODUCER":
        assert keys == {(p, key_for_partition(p, 2)) for p in (0, 1)}
    else:
        assert {key for _, key in keys} == {None}
        admin = kafka.admin()  # kept: a collected client fails its pending requests
        groups = admin.list_consumer_groups().result().valid
        probers = [g.group_id for g in groups if g.group_id.startswith("uatu-probe-")]
        assert len(probers) == 1, probers
        (committed,) = admin.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(probers[0])]
        ).values()
        offsets = [tp.offset for tp in committed.result().topic_partitions if tp.topic == topic]
        assert sum(offsets) >= sum(w["consumed"] for w in windows), offsets
