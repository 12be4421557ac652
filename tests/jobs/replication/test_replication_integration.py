"""The replication job end to end between two real single-broker clusters.

Every expectation is computed in plain Python from the records the test produced; the
destination is read back with a plain Kafka consumer.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import ConfigResource
from google.protobuf import json_format
from pyspark.sql import functions as F
from uber.data.kafka.datatransfer.job_group_pb2 import JobGroup

from core.config import load_settings
from core.errors import EXIT_FAILED, EXIT_OK, InvalidJobGroup, TopicNotFound
from core.provenance import STAMP, SourceOffset, latest_stamp
from jobs import main as job_main
from jobs.replication import job as replication
from jobs.replication.preflight import preflight
from jobs.replication.spec import replication_spec_now
from testing.conf import write_conf_dir
from testing.polling import wait_for
from testing.topic_data import Record, count_records, produce_records, read_partitions

pytestmark = pytest.mark.integration

PARTITIONS = 4
# Source timestamps: an hour ago (recent enough for the broker's 7-day retention, which would
# delete older records under the test's feet), 1 s apart per record of a partition.
T0_MS = (int(time.time()) - 3600) * 1000


def dataset(n: int, topic_tag: str = "") -> list[Record]:
    """`n` records over 4 partitions; every third carries a header of its own."""
    records = []
    for i in range(n):
        p = i % PARTITIONS
        headers = (("trace", f"t{i}".encode()),) if i % 3 == 0 else ()
        key = None if i % 7 == 0 else f"k{topic_tag}{i}".encode()
        records.append(
            Record(p, key, f"value-{i}".encode(), T0_MS + (i // PARTITIONS) * 1000, headers)
        )
    return records


def by_partition(records: list[Record]) -> dict[int, list[Record]]:
    out: dict[int, list[Record]] = {p: [] for p in range(PARTITIONS)}
    for r in records:
        out[r.partition].append(r)
    return out


def assert_exact_copy(
    expected: dict[int, list[Record]], copied: dict[int, list[Record]], source_topic: str
) -> None:
    """Each destination partition holds exactly its source records, in order, stamped."""
    for p, records in expected.items():
        got = copied.get(p, [])
        assert len(got) == len(records), f"partition {p}: {len(got)} records, want {len(records)}"
        for want, have in zip(records, got, strict=True):
            assert (have.key, have.value, have.timestamp_ms) == (
                want.key,
                want.value,
                want.timestamp_ms,
            )
            own = tuple(h for h in have.headers if not h[0].startswith("uatu."))
            assert own == want.headers
            assert [name for name, _ in have.headers].count(STAMP) == 1, have.headers
        stamps = [latest_stamp(h.headers) for h in got]
        offsets = [s.offset for s in stamps if s is not None]
        assert stamps == [SourceOffset("src", source_topic, p, o) for o in offsets]
        assert offsets == sorted(set(offsets)), f"partition {p}: stamped offsets {offsets}"


def two_cluster_conf(tmp_path: Path, source: str, destination: str) -> Path:
    """Clusters `src` and `dst`; a short delivery timeout so a failing acks=all run ends soon."""
    return write_conf_dir(
        tmp_path / "conf",
        source,
        tmp_path / "wh",
        tmp_path / "ck",
        more_clusters={
            "src": {"bootstrap_servers": source},
            "dst": {
                "bootstrap_servers": destination,
                # The Java producer wants delivery.timeout.ms >= linger.ms + request.timeout.ms.
                "properties": {"delivery.timeout.ms": "8000", "request.timeout.ms": "5000"},
            },
        },
    )


@pytest.fixture()
def conf_dir(tmp_path: Path, kafka, kafka_dest) -> Path:
    return two_cluster_conf(tmp_path, kafka.bootstrap_servers, kafka_dest.bootstrap_servers)


def group_json(
    group_id: str, source: str, destination: str, *, continuous: bool | None = None, **extra
) -> dict:
    data: dict = {
        "jobGroupId": group_id,
        "type": "JOB_TYPE_KAFKA_REPLICATION",
        "kafkaConsumerTaskGroup": {
            "cluster": "src",
            "topic": source,
            "consumerGroup": f"{group_id}-cg",
        },
        "kafkaDispatcherTaskGroup": {"cluster": "dst", "topic": destination},
        "extension": {
            "@type": "type.googleapis.com/uatu.v1.JobOptions",
            "trigger": {"intervalSeconds": 1},
            **extra.pop("extension", {}),
        },
    }
    if continuous is not None:
        data["replicationTaskGroup"] = {"isContinuous": continuous}
    for key, value in extra.items():
        section, _, field = key.partition("__")
        if field:
            data.setdefault(section, {})[field] = value
        else:
            data[section] = value
    return data


def spec_of(data: dict, conf_dir: Path):
    group = json_format.ParseDict(data, JobGroup())
    return replication_spec_now(group, load_settings(conf_dir))


def run_once(data: dict, conf_dir: Path) -> int:
    return replication.ReplicationJob(spec_of(data, conf_dir)).run(once=False)


def test_bounded_copy_keeps_records_headers_timestamps_and_order(
    spark, kafka, kafka_dest, conf_dir, tmp_path
) -> None:
    kafka.create_topic("rep-bounded", PARTITIONS, 1)
    kafka_dest.create_topic("rep-bounded-copy", PARTITIONS, 1)
    records = dataset(400)
    produce_records(kafka.bootstrap_servers, "rep-bounded", records)

    status = run_once(
        group_json("bounded", "rep-bounded", "rep-bounded-copy", continuous=False), conf_dir
    )

    assert status == EXIT_OK
    copied = read_partitions(kafka_dest.bootstrap_servers, "rep-bounded-copy", PARTITIONS)
    assert_exact_copy(by_partition(records), copied, "rep-bounded")
    stats = spark.read.format("delta").load(str(tmp_path / "wh" / "replication_stats"))
    totals = stats.groupBy("partition").agg(
        F.sum("records_replicated").alias("n"), F.sum("bytes_replicated").alias("b")
    )
    expected = {
        p: (len(rs), sum(len(r.value or b"") for r in rs))
        for p, rs in by_partition(records).items()
    }
    assert {r["partition"]: (r["n"], r["b"]) for r in totals.collect()} == expected
    latency = stats.agg(F.min("replication_latency_ms_min"), F.min("record_age_ms_min")).first()
    # Source timestamps are fixed in the past, so both ages are at least "now - T0".
    assert latency[0] > 0 and latency[1] > 0
    audit = spark.read.format("delta").load(str(tmp_path / "wh" / "replication_audit"))
    by_window = audit.agg(F.sum("records_read"), F.sum("records_written")).first()
    assert (by_window[0], by_window[1]) == (400, 400)
    # The copied offsets are committed to the JobGroup's consumer group, for lag monitors.
    assert committed(kafka.bootstrap_servers, "bounded-cg", "rep-bounded") == {
        p: 100 for p in range(PARTITIONS)
    }


def committed(bootstrap: str, group_id: str, topic: str) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group_id})
    try:
        offsets = consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], 10)
        return {tp.partition: tp.offset for tp in offsets}
    finally:
        consumer.close()


def test_bounded_copy_by_offset_ranges(spark, kafka, kafka_dest, conf_dir) -> None:
    kafka.create_topic("rep-ranges", PARTITIONS, 1)
    kafka_dest.create_topic("rep-ranges-copy", PARTITIONS, 1)
    records = dataset(200)
    produce_records(kafka.bootstrap_servers, "rep-ranges", records)
    ranges = [
        {"partition": 0, "startOffset": 5, "endOffset": 25},
        {"partition": 2, "startOffset": 0, "endOffset": 3},
    ]
    data = group_json(
        "ranges",
        "rep-ranges",
        "rep-ranges-copy",
        continuous=False,
        kafkaConsumerTaskGroup__partitionOffsetRanges={"partitionOffsetRange": ranges},
    )

    assert run_once(data, conf_dir) == EXIT_OK

    source = by_partition(records)
    expected = {0: source[0][5:25], 1: [], 2: source[2][0:3], 3: []}
    assert_exact_copy(
        expected, read_partitions(kafka_dest.bootstrap_servers, "rep-ranges-copy", 4), "rep-ranges"
    )


def produce_transaction(bootstrap: str, topic: str, records: list[Record], commit: bool) -> None:
    """`records` in one transaction, committed or aborted."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{topic}-txn"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for r in records:
        producer.produce(
            topic,
            r.value,
            r.key,
            r.partition,
            timestamp=r.timestamp_ms,
            headers=list(r.headers) or None,
        )
    if commit:
        producer.commit_transaction(30)
    else:
        producer.flush(30)  # the aborted records are in the log, then marked aborted
        producer.abort_transaction(30)


def test_isolation_level_decides_whether_aborted_records_are_copied(
    spark, kafka, kafka_dest, conf_dir
) -> None:
    kafka.create_topic("rep-txn", PARTITIONS, 1)
    for name in ("rep-txn-committed", "rep-txn-uncommitted"):
        kafka_dest.create_topic(name, PARTITIONS, 1)
    aborted, kept = dataset(40, "aborted"), dataset(40, "kept")
    produce_transaction(kafka.bootstrap_servers, "rep-txn", aborted, commit=False)
    produce_transaction(kafka.bootstrap_servers, "rep-txn", kept, commit=True)

    read_committed = group_json(
        "txn-committed",
        "rep-txn",
        "rep-txn-committed",
        continuous=False,
        kafkaConsumerTaskGroup__isolationLevel="ISOLATION_LEVEL_READ_COMMITTED",
    )
    read_uncommitted = group_json(
        "txn-uncommitted", "rep-txn", "rep-txn-uncommitted", continuous=False
    )
    assert run_once(read_committed, conf_dir) == EXIT_OK
    assert run_once(read_uncommitted, conf_dir) == EXIT_OK

    dest = kafka_dest.bootstrap_servers
    assert_exact_copy(
        by_partition(kept), read_partitions(dest, "rep-txn-committed", PARTITIONS), "rep-txn"
    )
    assert_exact_copy(
        by_partition(aborted + kept),
        read_partitions(dest, "rep-txn-uncommitted", PARTITIONS),
        "rep-txn",
    )


def test_bounded_copy_by_timestamps(spark, kafka, kafka_dest, conf_dir) -> None:
    kafka.create_topic("rep-times", PARTITIONS, 1)
    kafka_dest.create_topic("rep-times-copy", PARTITIONS, 1)
    records = dataset(200)
    produce_records(kafka.bootstrap_servers, "rep-times", records)
    start_ms, end_ms = T0_MS + 10_000, T0_MS + 20_000  # [start, end): 10 records per partition
    data = group_json(
        "times",
        "rep-times",
        "rep-times-copy",
        continuous=False,
        kafkaConsumerTaskGroup__startTimestamp=_rfc3339(start_ms),
        kafkaConsumerTaskGroup__endTimestamp=_rfc3339(end_ms),
    )

    assert run_once(data, conf_dir) == EXIT_OK

    expected = {
        p: [r for r in rs if start_ms <= r.timestamp_ms < end_ms]
        for p, rs in by_partition(records).items()
    }
    assert all(len(rs) == 10 for rs in expected.values())
    assert_exact_copy(
        expected, read_partitions(kafka_dest.bootstrap_servers, "rep-times-copy", 4), "rep-times"
    )


def _rfc3339(ms: int) -> str:
    from google.protobuf.timestamp_pb2 import Timestamp

    ts = Timestamp()
    ts.FromMilliseconds(ms)
    return ts.ToJsonString()


def test_acks_all_is_honoured_and_acks_one_is_not_all(spark, kafka, tmp_path) -> None:
    """Destination topic with replication factor 3 and min.insync.replicas=3, one of its three
    brokers down: acks=all cannot be satisfied (the job fails, nothing is written), acks=1 can.
    It holds devservices.kafka's three-broker cluster to its contract too: brokers default to
    min.insync.replicas=2, a killed broker leaves the ISRs, and restarted it rejoins them.
    """
    from devservices.kafka import start_cluster

    kafka.create_topic("rep-acks", PARTITIONS, 1)
    records = dataset(40)
    produce_records(kafka.bootstrap_servers, "rep-acks", records)
    with start_cluster(tmp_path / "three-brokers", n_brokers=3) as trio:
        # devservices.kafka's three-broker default: a write needs two replicas in sync.
        broker = ConfigResource(ConfigResource.Type.BROKER, "0")
        admin = trio.admin()  # held: a dropped AdminClient fails its futures

        def min_insync_replicas() -> str | None:
            try:
                configs = admin.describe_configs([broker], request_timeout=10)[broker].result(15)
            except TimeoutError:  # a request lost with a new cluster's connection: ask again
                return None
            return str(configs["min.insync.replicas"].value)

        assert wait_for(min_insync_replicas, 90, "broker 0's configs") == "2"
        for name in ("rep-acks-all", "rep-acks-one"):
            trio.create_topic(name, PARTITIONS, 3, config={"min.insync.replicas": "3"})
        trio.kill_broker(2)
        survivor = trio.brokers[0].address

        def isr_shrunk() -> bool:
            # Once the controller fences the dead broker, it leaves every ISR: acks=all then
            # fails at once (NOT_ENOUGH_REPLICAS) and acks=1 records become visible.
            topics = trio.admin().list_topics(timeout=10).topics
            return all(
                len(p.isrs) == 2
                for name in ("rep-acks-all", "rep-acks-one")
                for p in topics[name].partitions.values()
            )

        wait_for(isr_shrunk, 60, "broker 2 to leave the ISRs")
        conf = two_cluster_conf(tmp_path, kafka.bootstrap_servers, survivor)
        all_status = run_once(
            group_json("acks-all", "rep-acks", "rep-acks-all", continuous=False), conf
        )
        one = group_json(
            "acks-one",
            "rep-acks",
            "rep-acks-one",
            continuous=False,
            kafkaDispatcherTaskGroup__isAcksOne=True,
        )
        one_status = run_once(one, conf)

        assert all_status == EXIT_FAILED
        assert count_records(survivor, "rep-acks-all", PARTITIONS) == 0
        assert one_status == EXIT_OK
        # acks=1 was acknowledged by the leaders alone. Kafka 3.9 moves a partition's high
        # watermark only while its ISR is at least min.insync.replicas, so consumers see the
        # records once the third broker is back.
        trio.restart_broker(2)
        wait_for(
            lambda: count_records(survivor, "rep-acks-one", PARTITIONS) == 40, 90, "40 records"
        )
        assert_exact_copy(
            by_partition(records), read_partitions(survivor, "rep-acks-one", 4), "rep-acks"
        )


def test_destination_checks_before_any_record_moves(kafka, kafka_dest, conf_dir) -> None:
    kafka.create_topic("rep-checks", PARTITIONS, 1)
    kafka_dest.create_topic("rep-checks-small", 2, 1)
    produce_records(kafka.bootstrap_servers, "rep-checks", dataset(20))

    with pytest.raises(TopicNotFound, match="rep-checks-missing"):
        preflight(spec_of(group_json("c1", "rep-checks", "rep-checks-missing"), conf_dir))
    with pytest.raises(InvalidJobGroup, match="fewer than the source's 4"):
        preflight(spec_of(group_json("c2", "rep-checks", "rep-checks-small"), conf_dir))
    assert count_records(kafka_dest.bootstrap_servers, "rep-checks-small", 2) == 0

    created = group_json(
        "c3",
        "rep-checks",
        "rep-checks-created",
        extension={"replication": {"createDestinationTopic": True}},
    )
    plan = preflight(spec_of(created, conf_dir))
    assert plan.destination_partitions == PARTITIONS
    modulo = group_json(
        "c4",
        "rep-checks",
        "rep-checks-small",
        extension={"replication": {"partitionMapping": "PARTITION_MAPPING_MODULO"}},
    )
    plan = preflight(spec_of(modulo, conf_dir))
    assert [plan.destination_partition(p) for p in range(4)] == [0, 1, 0, 1]


def test_a_second_name_for_the_source_cluster_is_no_way_to_copy_a_topic_onto_itself(
    kafka, tmp_path, capsys
) -> None:
    """`alias` reaches the source's broker under another name and address: the brokers'
    cluster id, not the name, tells that the copy would land on its own source."""
    kafka.create_topic("rep-self", 1, 1)
    port = kafka.bootstrap_servers.rpartition(":")[2]
    conf = write_conf_dir(
        tmp_path / "conf",
        kafka.bootstrap_servers,
        tmp_path / "wh",
        tmp_path / "ck",
        more_clusters={"alias": {"bootstrap_servers": f"localhost:{port}"}},
    )
    data = group_json("self-copy", "rep-self", "")
    data["kafkaConsumerTaskGroup"]["cluster"] = "local"
    data["kafkaDispatcherTaskGroup"]["cluster"] = "alias"
    path = tmp_path / "self-copy.json"
    path.write_text(json.dumps(data))
    status = job_main.main([str(path), "--check", "--conf-dir", str(conf)])
    err = capsys.readouterr().err.strip()
    assert status == 2, err
    assert err.splitlines() == [err]
    assert "kafka_dispatcher_task_group.cluster='alias': reaches the same Kafka cluster" in err


def _most_in_window(landed: list[tuple[int, int]], window_ms: int) -> tuple[int, int]:
    """(records, bytes): the most that landed within any `window_ms` of broker append time;
    `landed` is (append time ms, key + value bytes) per record."""
    landed = sorted(landed)
    most_records = most_bytes = low = total = 0
    for high, (t, size) in enumerate(landed):
        total += size
        while t - landed[low][0] >= window_ms:
            total -= landed[low][1]
            low += 1
        most_records = max(most_records, high - low + 1)
        most_bytes = max(most_bytes, total)
    return most_records, most_bytes


def test_flow_control_holds_both_caps_over_every_10_s_window_at_log_append_time(
    spark, kafka, kafka_dest, conf_dir
) -> None:
    """200 records/s and 20,000 bytes/s: 2,000 records of 20 bytes (the record cap binds) then
    500 of 500 bytes (the byte cap binds) take about 22.5 s; the destination stamps each
    record with its append time, and no 10 s window of those holds more than 10% over a cap.
    Either cap alone would be broken without pacing: there are more records and bytes than
    1.1 x 10 s of either cap."""
    kafka.create_topic("rep-paced", PARTITIONS, 1)
    kafka_dest.create_topic(
        "rep-paced-copy", PARTITIONS, 1, config={"message.timestamp.type": "LogAppendTime"}
    )
    records = [
        Record(i % PARTITIONS, b"k%07d" % i, b"v" * (12 if i < 2000 else 492), T0_MS, ())
        for i in range(2500)
    ]
    produce_records(kafka.bootstrap_servers, "rep-paced", records)
    data = group_json(
        "paced",
        "rep-paced",
        "rep-paced-copy",
        continuous=False,
        flowControl={"messagesPerSec": 200, "bytesPerSec": 20_000},
    )

    assert run_once(data, conf_dir) == EXIT_OK

    copied = read_partitions(kafka_dest.bootstrap_servers, "rep-paced-copy", PARTITIONS)
    landed = [
        (r.timestamp_ms, len(r.key or b"") + len(r.value or b""))
        for rs in copied.values()
        for r in rs
    ]
    assert len(landed) == len(records)
    most_records, most_bytes = _most_in_window(landed, 10_000)
    assert most_records <= 1.1 * 200 * 10, most_records
    assert most_bytes <= 1.1 * 20_000 * 10, most_bytes
    print("most in 1 s (records, bytes):", _most_in_window(landed, 1000))
