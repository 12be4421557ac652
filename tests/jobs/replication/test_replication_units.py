"""The replication job's pure parts: JobGroup validation, planning, pacing, stamps, transforms."""

from __future__ import annotations

import dataclasses
import itertools
import json
from datetime import UTC, datetime
from pathlib import Path

import datasketches
import pytest
from chispa.schema_comparer import assert_schema_equality
from google.protobuf import json_format
from pyspark.sql import functions as F
from uber.data.kafka.datatransfer.job_group_pb2 import JobGroup

from core.config import load_settings
from core.errors import ConfigError, InvalidJobGroup, UnknownCluster
from core.provenance import STAMP, SourceOffset, latest_stamp, parse_stamp
from jobs.replication.continuous import EpochLayout, epoch_layout, progress_record, resolved_starts
from jobs.replication.preflight import (
    EARLIEST,
    LATEST,
    ReplicationPlan,
    build_plan,
    caps_apply_in_place,
    records_per_trigger,
)
from jobs.replication.progress_log import LoggedBatch, resume_offsets
from jobs.replication.ranges import SourceRange, batch_ranges
from jobs.replication.spec import ReplicationSpec, replication_spec
from jobs.replication.tables import LABELS, REPLICATION_STATS
from jobs.replication.transforms import audit_rows, stats_rows
from jobs.replication.writer import (
    SUMMARY_SCHEMA,
    DestinationConfig,
    JvmSketches,
    check_clients,
    copy_ranges,
)
from jobs.runtime.progress import JobIdentity, end_offsets, partition_statuses
from jobs.runtime.saved_rows import decode_rows, encode_values
from testing.conf import write_conf_dir

NOW_MS = 1_800_000_000_000


@pytest.fixture()
def settings(tmp_path: Path):
    conf = write_conf_dir(
        tmp_path / "conf",
        "127.0.0.1:9",
        tmp_path / "wh",
        tmp_path / "ck",
        more_clusters={
            "src": {"bootstrap_servers": "127.0.0.1:9"},
            "dst": {"bootstrap_servers": "127.0.0.1:10"},
        },
    )
    return load_settings(conf)


def group(**overrides) -> JobGroup:
    data: dict = {
        "jobGroupId": "copy",
        "type": "JOB_TYPE_KAFKA_REPLICATION",
        "kafkaConsumerTaskGroup": {"cluster": "src", "topic": "orders"},
        "kafkaDispatcherTaskGroup": {"cluster": "dst", "topic": "orders"},
    }
    for path, value in overrides.items():
        node = data
        *parents, leaf = path.split(".")
        for name in parents:
            node = node.setdefault(name, {})
        node[leaf] = value
    return json_format.ParseDict(data, JobGroup())


def spec(settings, **overrides) -> ReplicationSpec:
    return replication_spec(group(**overrides), settings, NOW_MS)


def ts(ms: int) -> str:
    from google.protobuf.timestamp_pb2 import Timestamp

    t = Timestamp()
    t.FromMilliseconds(ms)
    return t.ToJsonString()


# --- validation ---------------------------------------------------------------------------


def test_defaults(settings) -> None:
    s = spec(settings)
    assert (s.continuous, s.acks_all, s.modulo_partitions, s.source.starting_offsets) == (
        True,
        True,
        False,
        "earliest",
    )
    assert s.producer_config()["acks"] == "all"
    assert s.producer_config()["enable.idempotence"] == "true"
    assert s.output.table("replication_stats").endswith("/replication_stats")
    assert s.trigger_interval_seconds == 2


def test_a_destination_without_a_topic_keeps_the_source_name(settings) -> None:
    # MirrorMaker 2's IdentityReplicationPolicy (KAFKA-9726): no "src." prefix, no rename.
    copy = spec(settings, **{"kafkaDispatcherTaskGroup.topic": ""})
    assert (copy.destination_cluster.name, copy.destination_topic) == ("dst", "orders")
    renamed = spec(settings, **{"kafkaDispatcherTaskGroup.topic": "orders-dr"})
    assert renamed.destination_topic == "orders-dr"


def test_acks_one_turns_idempotence_off_and_keeps_order_with_one_request_in_flight(
    settings,
) -> None:
    config = spec(settings, **{"kafkaDispatcherTaskGroup.isAcksOne": True}).producer_config()
    assert (config["acks"], config["enable.idempotence"]) == ("1", "false")
    assert config["max.in.flight.requests.per.connection"] == "1"


@pytest.mark.parametrize(
    ("overrides", "field", "fragment"),
    [
        (
            {"kafkaDispatcherTaskGroup.cluster": "nowhere"},
            "kafka_dispatcher_task_group.cluster",
            "unknown",
        ),
        (
            {"kafkaDispatcherTaskGroup.topic": " ", "kafkaDispatcherTaskGroup.cluster": "src"},
            "kafka_dispatcher_task_group.topic",
            "onto itself",
        ),
        (
            {"kafkaDispatcherTaskGroup.cluster": "src"},
            "kafka_dispatcher_task_group.topic",
            "onto itself",
        ),
        (
            {
                "kafkaConsumerTaskGroup.startTimestamp": ts(NOW_MS - 1000),
                "kafkaConsumerTaskGroup.endTimestamp": ts(NOW_MS - 2000),
            },
            "kafka_consumer_task_group.end_timestamp",
            "before start_timestamp",
        ),
        (
            {"kafkaConsumerTaskGroup.endTimestamp": ts(NOW_MS + 60_000)},
            "kafka_consumer_task_group.end_timestamp",
            "in the future",
        ),
        (
            {
                "kafkaConsumerTaskGroup.partitionOffsetRanges": {
                    "partitionOffsetRange": [{"partition": 1, "startOffset": 9, "endOffset": 3}]
                }
            },
            "partition_offset_range[0].end_offset",
            "before its start_offset 9",
        ),
        (
            {
                "kafkaConsumerTaskGroup.partitionOffsetRanges": {
                    "partitionOffsetRange": [
                        {"partition": 1, "endOffset": 3},
                        {"partition": 1, "endOffset": 5},
                    ]
                }
            },
            "partition_offset_range[1].partition",
            "listed twice",
        ),
        (
            {
                "kafkaConsumerTaskGroup.endTimestamp": ts(NOW_MS - 1),
                "replicationTaskGroup.isContinuous": True,
            },
            "replication_task_group.is_continuous",
            "has no end",
        ),
        (
            {
                "extension": {
                    "@type": "type.googleapis.com/uatu.v1.JobOptions",
                    "replication": {"auditIntervalSeconds": -5},
                }
            },
            "extension.replication.audit_interval_seconds",
            "> 0",
        ),
        (
            {
                "replicationTaskGroup.isContinuous": False,
                "extension": {
                    "@type": "type.googleapis.com/uatu.v1.JobOptions",
                    "replication": {"lowLatency": True},
                },
            },
            "extension.replication.low_latency",
            "continuous copy only",
        ),
        (
            {
                "extension": {
                    "@type": "type.googleapis.com/uatu.v1.JobOptions",
                    "replication": {"epochSeconds": 5},
                }
            },
            "extension.replication.epoch_seconds",
            "low-latency copy only",
        ),
        (
            {
                "extension": {
                    "@type": "type.googleapis.com/uatu.v1.JobOptions",
                    "replication": {"lowLatency": True, "epochSeconds": -1},
                }
            },
            "extension.replication.epoch_seconds",
            "> 0",
        ),
    ],
)
def test_bad_input_names_field_and_value(settings, overrides, field, fragment) -> None:
    with pytest.raises(InvalidJobGroup) as error:
        spec(settings, **overrides)
    assert field in error.value.field
    assert fragment in str(error.value)


def test_low_latency_is_off_by_default_and_epochs_default_to_10_s(settings) -> None:
    assert (spec(settings).low_latency, spec(settings).epoch_seconds) == (False, 10)
    options = {"@type": "type.googleapis.com/uatu.v1.JobOptions"}
    fast = spec(settings, extension={**options, "replication": {"lowLatency": True}})
    assert (fast.low_latency, fast.epoch_seconds) == (True, 10)
    slow = {"lowLatency": True, "epochSeconds": 30}
    assert spec(settings, extension={**options, "replication": slow}).epoch_seconds == 30


def test_low_latency_starts_resolve_earliest_and_latest_to_the_watermarks() -> None:
    watermarks = {0: (5, 50), 1: (0, 10), 2: (3, 9)}
    assert resolved_starts({0: EARLIEST, 1: LATEST, 2: 7}, watermarks) == {0: 5, 1: 10, 2: 7}


def test_low_latency_resumes_after_the_last_logged_batch_else_where_it_began() -> None:
    last = LoggedBatch(3, {0: 10, 1: 20}, {0: 15, 1: 25}, committed=True)
    partitions = (0, 1, 2)
    planned, earliest = {0: 0, 1: 0, 2: 0}, {0: 0, 1: 0, 2: 4}
    # The log's ends; a partition the log does not know (the topic grew) from its earliest.
    assert resume_offsets(partitions, last, None, None, planned, earliest) == {0: 15, 1: 25, 2: 4}
    # No batch yet: the start the first run logged, then a micro-batch run's end, then the plan.
    assert resume_offsets(partitions, None, {0: 1, 1: 2, 2: 3}, {0: 9}, planned, earliest) == {
        0: 1,
        1: 2,
        2: 3,
    }
    assert resume_offsets(partitions, None, None, {0: 9, 1: 8}, planned, earliest) == {
        0: 9,
        1: 8,
        2: 4,
    }
    assert resume_offsets(partitions, None, None, None, planned, earliest) == planned


def test_low_latency_progress_record_gives_the_heartbeat_its_offsets_and_rates() -> None:
    record = progress_record("replication-copy", "orders", {0: 10, 1: 0}, {0: 30, 1: 5}, 2.0)
    assert end_offsets(record, "orders") == {0: 30, 1: 5}
    identity = JobIdentity(type=0, cluster="src", topic="orders")
    statuses = partition_statuses(record, None, identity, None, bytes_per_record=100.0)
    rates = [s.kafka_consumer_task_status.messages_per_sec for s in statuses]
    assert rates == [10.0, 2.5]


def test_unknown_destination_cluster_is_its_own_error(settings) -> None:
    with pytest.raises(UnknownCluster, match="nowhere"):
        spec(settings, **{"kafkaDispatcherTaskGroup.cluster": "nowhere"})


def test_same_topic_on_another_cluster_is_fine(settings) -> None:
    assert spec(settings).destination_topic == "orders"


def test_an_end_makes_a_group_without_replication_task_group_bounded(settings) -> None:
    assert (
        spec(settings, **{"kafkaConsumerTaskGroup.endTimestamp": ts(NOW_MS - 1)}).continuous
        is False
    )
    assert spec(settings, **{"replicationTaskGroup.isContinuous": False}).continuous is False


def test_encoded_format_becomes_headers(settings) -> None:
    s = spec(
        settings,
        **{
            "kafkaDispatcherTaskGroup.encodedFormatInfo": {
                "encodedFormatType": "ENCODED_FORMAT_TYPE_PROTOBUF",
                "schemaVersion": 7,
            }
        },
    )
    assert s.encoded_format == ("ENCODED_FORMAT_TYPE_PROTOBUF", 7)


# --- planning and flow control ------------------------------------------------------------


def test_plan_refuses_fewer_destination_partitions_unless_modulo(settings) -> None:
    with pytest.raises(InvalidJobGroup, match="fewer than the source's 4"):
        build_plan(spec(settings), source_count=4, destination_count=2)
    modulo = spec(
        settings,
        extension={
            "@type": "type.googleapis.com/uatu.v1.JobOptions",
            "replication": {"partitionMapping": "PARTITION_MAPPING_MODULO"},
        },
    )
    plan = build_plan(modulo, source_count=4, destination_count=3)
    assert [plan.destination_partition(p) for p in range(4)] == [0, 1, 2, 0]


def test_plan_for_offset_ranges_copies_only_those_partitions(settings) -> None:
    ranges = {
        "partitionOffsetRange": [
            {"partition": 2, "startOffset": 5, "endOffset": 9},
            {"partition": 0, "endOffset": 4},
        ]
    }
    s = spec(settings, **{"kafkaConsumerTaskGroup.partitionOffsetRanges": ranges})
    plan = build_plan(s, source_count=3, destination_count=3)
    assert plan.source_partitions == (0, 2)
    assert dict(plan.starting_offsets) == {0: 0, 2: 5}
    assert plan.end_offsets is not None and dict(plan.end_offsets) == {0: 4, 2: 9}
    assert plan.spark_assign("orders") == '{"orders": [0, 2]}'
    assert not plan.is_done({0: 4, 2: 8})
    assert plan.is_done({0: 4, 2: 9})


def test_plan_range_on_a_missing_partition_is_an_error(settings) -> None:
    ranges = {"partitionOffsetRange": [{"partition": 7, "endOffset": 4}]}
    s = spec(settings, **{"kafkaConsumerTaskGroup.partitionOffsetRanges": ranges})
    with pytest.raises(InvalidJobGroup, match="has 3 partitions"):
        build_plan(s, source_count=3, destination_count=3)


def test_plan_by_timestamps_uses_the_found_offsets_else_the_ends(settings) -> None:
    s = spec(
        settings,
        **{
            "kafkaConsumerTaskGroup.startTimestamp": ts(NOW_MS - 5000),
            "kafkaConsumerTaskGroup.endTimestamp": ts(NOW_MS - 1000),
        },
    )
    plan = build_plan(
        s,
        source_count=2,
        destination_count=2,
        starts_by_time={0: 10, 1: -1},
        ends_by_time={0: 20, 1: -1},
        high_watermarks={0: 30, 1: 40},
    )
    assert dict(plan.starting_offsets) == {0: 10, 1: LATEST}
    assert plan.end_offsets is not None and dict(plan.end_offsets) == {0: 20, 1: 40}


def test_plan_continuous_default_starts_earliest_and_never_ends(settings) -> None:
    plan = build_plan(spec(settings), source_count=2, destination_count=2)
    assert dict(plan.starting_offsets) == {0: EARLIEST, 1: EARLIEST}
    assert plan.end_offsets is None and not plan.is_done({0: 10**9, 1: 10**9})
    assert plan.spark_starting_offsets("orders") == '{"orders": {"0": -2, "1": -2}}'


def test_plan_starts_where_spark_json_says_and_new_partitions_at_the_earliest(settings) -> None:
    # A group going on alone where its copy in a pack ended (packs.alone_spec): the JSON's
    # offsets, EARLIEST/LATEST kept, a partition the JSON does not name (added since) and
    # another topic's entries ignored.
    plain = spec(settings)
    at = json.dumps({"orders": {"0": 7, "1": LATEST}, "other": {"2": 9}})
    going_on = dataclasses.replace(
        plain, source=dataclasses.replace(plain.source, starting_offsets=at)
    )
    plan = build_plan(going_on, source_count=3, destination_count=3)
    assert dict(plan.starting_offsets) == {0: 7, 1: LATEST, 2: EARLIEST}


def test_record_budget_from_both_caps(settings) -> None:
    def with_caps(msgs: float, nbytes: float) -> ReplicationSpec:
        flow = {"messagesPerSec": msgs, "bytesPerSec": nbytes}
        return spec(settings, flowControl=flow)

    assert records_per_trigger(with_caps(0, 0), 200.0) is None
    assert records_per_trigger(with_caps(1000, 0), None) == 10_000  # 10 s flow window
    assert records_per_trigger(with_caps(0, 100_000), 200.0) == 5000
    assert records_per_trigger(with_caps(1000, 100_000), 50.0) == 10_000  # messages bind
    assert records_per_trigger(with_caps(0, 100_000), None) == 976  # 1 KiB assumed


def test_new_caps_apply_in_place_while_a_planned_batch_lasts_a_trigger_interval() -> None:
    """A query planned at 1,000 msgs/s (10,000 records a batch: the 10 s flow window) with a
    2 s trigger: any lower cap applies in place, a higher one up to 10,000 / 2 s; a byte cap
    through the sampled record size; no budget, or no cap any more: restart."""
    plan = ReplicationPlan((0, 1), 2, False, max_offsets_per_trigger=10_000, mean_record_bytes=100)
    assert caps_apply_in_place(plan, 2, 500, 0)
    assert caps_apply_in_place(plan, 2, 5000, 0)
    assert not caps_apply_in_place(plan, 2, 5001, 0)
    assert caps_apply_in_place(plan, 2, 0, 500_000)  # 5,000 records/s of 100 bytes
    assert not caps_apply_in_place(plan, 2, 0, 500_100)
    assert caps_apply_in_place(plan, 2, 9000, 500_000)  # the lower of the two binds
    assert not caps_apply_in_place(plan, 2, 0, 0)  # no cap: the old budget would still bind
    unplanned = ReplicationPlan((0, 1), 2, False, mean_record_bytes=100)
    assert not caps_apply_in_place(unplanned, 2, 10, 0)  # batches unbounded: restart


def test_a_retune_paces_the_next_batches_copy_and_refuses_what_needs_a_restart(settings) -> None:
    """`ReplicationJob.retune`: caps that fit go to the copy's destination config (what the
    next batch's tasks pace at) and the spec; caps beyond the planned batches, bad caps, or
    a job without its micro-batch writer (not running yet, low latency) leave both as they
    were and ask for a restart."""
    from uber.data.kafka.datatransfer.job_pb2 import FlowControl

    from jobs.replication.job import ReplicationBatchWriter, ReplicationJob, destination_config

    job = ReplicationJob(spec(settings, flowControl={"messagesPerSec": 1000}))
    plan = ReplicationPlan((0,), 1, False, max_offsets_per_trigger=10_000, mean_record_bytes=100)
    assert not job.retune(FlowControl(messages_per_sec=500))  # no writer yet
    job._plan = plan
    job._writer = ReplicationBatchWriter(
        plan,
        destination_config(job.spec, plan),
        None,  # type: ignore[arg-type]
    )

    def caps() -> tuple[float, float, float]:
        assert job._writer is not None
        return (
            job._writer.destination.max_records_per_sec,
            job._writer.destination.max_bytes_per_sec,
            job.spec.max_messages_per_sec,
        )

    assert job.retune(FlowControl(messages_per_sec=250, bytes_per_sec=90_000))
    assert caps() == (250, 90_000, 250)
    assert not job.retune(FlowControl(messages_per_sec=6000))  # beyond 10,000 per 2 s
    assert not job.retune(FlowControl(messages_per_sec=-1))
    assert caps() == (250, 90_000, 250)
    job._low_latency_run = True
    assert not job.retune(FlowControl(messages_per_sec=100))


def _slots(limiter, sizes: list[int], asked_at_ns: list[int]) -> list[int]:
    """When the limiter lets each record (of `sizes` bytes, asked for at `asked_at_ns`) go."""
    return [limiter.reserve(size, at) for size, at in zip(sizes, asked_at_ns, strict=True)]


def _most_in_window(times_ns: list[int], weights: list[int], window_ns: int) -> int:
    """The largest total weight of records leaving within any window of `window_ns`."""
    most, low, total = 0, 0, 0
    for high, t in enumerate(times_ns):
        total += weights[high]
        while t - times_ns[low] >= window_ns:
            total -= weights[low]
            low += 1
        most = max(most, total)
    return most


def test_flow_limiter_paces_record_by_record_under_whichever_cap_binds(spark) -> None:
    """1,000 records/s and 10,000 bytes/s: 5-byte records go 1 ms apart (the record cap
    binds), 50-byte ones 5 ms apart (the byte cap). Asked for all at once, they still leave
    evenly: at most the caps' worth plus one record in any second."""
    limiter = spark.sparkContext._jvm.dev.uatu.replication.FlowLimiter.fixed(1000.0, 10_000.0)
    sizes = [5] * 3000 + [50] * 600
    starts = _slots(limiter, sizes, [0] * len(sizes))
    gaps = {b - a for a, b in itertools.pairwise(starts)}
    assert gaps == {1_000_000, 5_000_000}
    second = 1_000_000_000
    assert _most_in_window(starts, [1] * len(sizes), second) <= 1000 + 1
    assert _most_in_window(starts, sizes, second) <= 10_000 + 50


def test_flow_limiter_gives_no_credit_for_idle_time(spark) -> None:
    limiter = spark.sparkContext._jvm.dev.uatu.replication.FlowLimiter.fixed(100.0, 0.0)
    first = _slots(limiter, [1] * 10, [0] * 10)
    assert first[-1] == 90_000_000
    # Idle for 100 s: the next records are paced from their own time, not sent in a burst.
    later = 100_000_000_000
    assert _slots(limiter, [1] * 3, [later] * 3) == [later, later + 10**7, later + 2 * 10**7]
    unlimited = spark.sparkContext._jvm.dev.uatu.replication.FlowLimiter.fixed(0.0, 0.0)
    assert _slots(unlimited, [10**6] * 3, [5, 5, 5]) == [5, 5, 5]


# --- batch ranges -------------------------------------------------------------------------


def test_batch_ranges_are_the_planned_ranges_in_partition_order_without_empty_ones() -> None:
    planned = [SourceRange(2, 9, 12), SourceRange(1, 5, 5), SourceRange(0, 0, 4)]
    assert batch_ranges(planned, None) == [SourceRange(0, 0, 4), SourceRange(2, 9, 12)]


def test_a_partition_split_into_adjoining_ranges_is_one_task_again() -> None:
    planned = [SourceRange(0, 4, 9), SourceRange(0, 0, 4), SourceRange(1, 0, 3)]
    assert batch_ranges(planned, None) == [SourceRange(0, 0, 9), SourceRange(1, 0, 3)]
    with pytest.raises(ValueError, match=r"partition 0: planned ranges .* do not adjoin"):
        batch_ranges([SourceRange(0, 0, 4), SourceRange(0, 5, 9)], None)


def test_batch_ranges_stop_at_a_bounded_copys_end_offsets() -> None:
    planned = [SourceRange(0, 0, 10), SourceRange(1, 5, 10), SourceRange(2, 9, 10)]
    # Partition 0 ends inside the batch, 1 before it; 2 is not part of the copy.
    assert batch_ranges(planned, {0: 4, 1: 3}) == [SourceRange(0, 0, 4)]
    assert batch_ranges([SourceRange(0, 4, 10)], {0: 4}) == []


# --- transforms ---------------------------------------------------------------------------

SUMMARY_COLUMNS = [part.split()[0] for part in SUMMARY_SCHEMA.split(", ")]
# WindowSummaries' own columns; the copy task adds the two topics (PartitionCopy.rows).
WINDOW_COLUMNS = SUMMARY_COLUMNS[:-2]
SKETCH = "replication_latency_kll_sketch"
BATCH_TIME = datetime(2026, 1, 2, 3, 4, 5, 678_000, tzinfo=UTC)


def window_summaries(spark, partition: int, destination: int, interval_ms: int, records):
    """Summary rows as dicts, computed by the JVM sink's own `WindowSummaries`, from records
    (offset, timestamp_ms, value_bytes, key_bytes, replicated, read_ms, acked_ms)."""
    jvm = spark.sparkContext._jvm
    summaries = jvm.dev.uatu.replication.WindowSummaries(interval_ms)
    acked: list[int] = []
    for offset, ts, value_bytes, key_bytes, replicated, read_ms, acked_ms in records:
        summaries.add(offset, ts, read_ms, key_bytes, value_bytes, len(acked) if replicated else -1)
        if replicated:
            acked.append(acked_ms)
    ack_times = spark.sparkContext._gateway.new_array(jvm.long, len(acked))
    for i, t in enumerate(acked):
        ack_times[i] = t
    rows = []
    for row in summaries.rows(partition, destination, ack_times):
        values = [row.get(i) for i in range(len(WINDOW_COLUMNS))]
        rows.append(dict(zip(WINDOW_COLUMNS, values, strict=True)))
    return rows


def two_tasks_summaries(spark) -> list[dict]:
    """What two sink tasks return, built by the sink's own `WindowSummaries`.

    partition 0 (-> 0): three records, the first already in the destination (a crashed run
    wrote it); partition 1 (-> 1): two records, both written. Audit windows of 60 s.
    """
    p0 = [
        (10, 1_000, 4, 2, False, 1_500, None),
        (11, 61_000, 6, 2, True, 61_100, 61_300),
        (12, 62_000, 2, 1, True, 62_500, 62_600),
    ]
    p1 = [(3, 5_000, 10, 0, True, 5_020, 5_070), (4, 6_000, 10, 2, True, 6_000, 6_010)]
    rows = window_summaries(spark, 0, 0, 60_000, p0) + window_summaries(spark, 1, 1, 60_000, p1)
    topics = {"source_topic": "orders", "destination_topic": "main.orders"}
    return [row | topics for row in rows]


def sketch_answers(spark, images) -> list[tuple[int, int, int]]:
    """Spark's own reading of KLL bigint images: (n, min, max) of each."""
    frame = spark.createDataFrame([(bytearray(i),) for i in images], f"{SKETCH} binary")
    return [
        tuple(r)
        for r in frame.select(
            F.kll_sketch_get_n_bigint(SKETCH),
            F.kll_sketch_get_quantile_bigint(SKETCH, F.lit(0.0)),
            F.kll_sketch_get_quantile_bigint(SKETCH, F.lit(1.0)),
        ).collect()
    ]


def test_window_summaries_give_one_row_per_window_with_its_latencies_summed_and_sketched(
    spark,
) -> None:
    rows = [
        (10, 1_000, 4, 2, False, 1_500, None),
        (11, 61_000, 6, 2, True, 61_100, 61_300),
        (12, 2_000, 1, 0, True, 2_100, 2_600),  # out of timestamp order, back in window 0
        (13, 62_000, 2, 1, True, 62_500, 62_600),
        (14, -1, 3, 0, True, 900, 1_000),  # no source timestamp (-1): the window before 0
        (15, 3_000, 5, 0, False, 3_100, None),  # window 0 again, already present
    ]
    got = window_summaries(spark, 0, 3, 60_000, rows)
    sketches = [row.pop(SKETCH) for row in got]
    assert got == [
        {
            "partition": 0,
            "destination_partition": 3,
            "window_start_ms": -60_000,
            "records_read": 1,
            "records_replicated": 1,
            "records_already_present": 0,
            "bytes_replicated": 3,
            "record_bytes_replicated": 3,
            "first_offset": 14,
            "last_offset": 14,
            "record_age_ms_min": 901,
            "record_age_ms_sum": 901,
            "record_age_ms_max": 901,
            "replication_latency_ms_min": 1_001,
            "replication_latency_ms_sum": 1_001,
            "replication_latency_ms_max": 1_001,
        },
        {
            "partition": 0,
            "destination_partition": 3,
            "window_start_ms": 0,
            "records_read": 3,
            "records_replicated": 1,
            "records_already_present": 2,
            "bytes_replicated": 1,
            "record_bytes_replicated": 1,
            "first_offset": 10,
            "last_offset": 15,
            "record_age_ms_min": 100,
            "record_age_ms_sum": 700,
            "record_age_ms_max": 500,
            "replication_latency_ms_min": 600,
            "replication_latency_ms_sum": 600,
            "replication_latency_ms_max": 600,
        },
        {
            "partition": 0,
            "destination_partition": 3,
            "window_start_ms": 60_000,
            "records_read": 2,
            "records_replicated": 2,
            "records_already_present": 0,
            "bytes_replicated": 8,
            "record_bytes_replicated": 11,
            "first_offset": 11,
            "last_offset": 13,
            "record_age_ms_min": 100,
            "record_age_ms_sum": 600,
            "record_age_ms_max": 500,
            "replication_latency_ms_min": 300,
            "replication_latency_ms_sum": 900,
            "replication_latency_ms_max": 600,
        },
    ]
    # Each window's sketch holds exactly its written records' latencies, in Spark's form.
    assert sketch_answers(spark, sketches) == [(1, 1_001, 1_001), (1, 600, 600), (2, 300, 600)]


def test_a_partition_with_nothing_written_has_no_latency(spark) -> None:
    """All present already: nulls (MirrorMaker 2 reports no latency), never a zero."""
    got = window_summaries(spark, 0, 0, 60_000, [(1, 1_000, 4, 0, False, 1_200, None)])
    assert [
        (r["replication_latency_ms_min"], r["replication_latency_ms_max"], r[SKETCH]) for r in got
    ] == [(None, None, None)]
    topics = {"source_topic": "t", "destination_topic": "t"}
    (row,) = stats_rows([got[0] | topics], 1, BATCH_TIME, {}, JvmSketches(spark))
    latency = {k: v for k, v in row.items() if k.startswith("replication_latency")}
    assert latency == dict.fromkeys(
        (
            "replication_latency_ms_min",
            "replication_latency_ms_avg",
            "replication_latency_ms_max",
            "replication_latency_ms_p99",
            SKETCH,
        )
    )
    assert (row["records_read"], row["records_already_present"]) == (1, 1)


def test_replication_stats_follow_mirror_maker_definitions(spark) -> None:
    labels = {"job_group_id": "g"}
    summaries = two_tasks_summaries(spark)
    stats = stats_rows(summaries, 7, BATCH_TIME, labels, JvmSketches(spark))
    assert [(r["source_topic"], r["partition"]) for r in stats] == [("orders", 0), ("orders", 1)]
    sketches = [row.pop(SKETCH) for row in stats]
    assert stats[0] == {
        "job_group_id": "g",
        "batch_id": 7,
        "batch_time": BATCH_TIME,
        # The row's own topics, not a label's.
        "source_topic": "orders",
        "destination_topic": "main.orders",
        "partition": 0,
        "destination_partition": 0,
        "records_read": 3,
        "records_replicated": 2,
        "records_already_present": 1,
        "bytes_replicated": 8,
        "record_bytes_replicated": 11,
        "first_offset": 10,
        "last_offset": 12,
        "record_age_ms_min": 100,
        "record_age_ms_avg": pytest.approx((500 + 100 + 500) / 3),
        "record_age_ms_max": 500,
        "replication_latency_ms_min": 300,
        "replication_latency_ms_avg": 450.0,
        "replication_latency_ms_max": 600,
        "replication_latency_ms_p99": 600,
    }
    assert (stats[1]["replication_latency_ms_min"], stats[1]["replication_latency_ms_max"]) == (
        10,
        70,
    )
    assert stats[1]["replication_latency_ms_avg"] == 40.0
    assert sketch_answers(spark, sketches) == [(2, 300, 600), (2, 10, 70)]


def test_replication_p99_is_the_merged_window_sketches_answer_and_fits_the_table(spark) -> None:
    """Enough latencies, over four windows of one partition, that the sketches are
    approximate: the row's sketch holds all the windows' latencies and its p99 is that
    sketch's answer as Spark's kll_sketch_get_quantile_bigint reads it (so it agrees with any
    later merge; KLL merges compact at random, so two merges may differ), within the sketch's
    rank error of the exact p99; the saved rows read back as the declared table."""
    n = 20_000
    latencies = (
        spark.range(n)
        .select(
            (F.col("id") % 4).alias("window"), (((F.col("id") * 7_919) % n) + 1).alias("latency")
        )
        .groupBy("window")
        .agg(
            F.count("latency").alias("n"),
            F.min("latency").alias("min"),
            F.sum("latency").alias("sum"),
            F.max("latency").alias("max"),
            F.kll_sketch_agg_bigint("latency").alias(SKETCH),
        )
    )
    summaries = [
        dict.fromkeys(SUMMARY_COLUMNS, 0)
        | {
            "source_topic": "orders",
            "destination_topic": "orders",
            "window_start_ms": w["window"] * 60_000,
            "records_read": w["n"],
            "records_replicated": w["n"],
            "replication_latency_ms_min": w["min"],
            "replication_latency_ms_sum": w["sum"],
            "replication_latency_ms_max": w["max"],
            SKETCH: w[SKETCH],
        }
        for w in latencies.collect()
    ]
    labels = {name: "x" for name in LABELS if name not in ("source_topic", "destination_topic")}
    (row,) = stats_rows(summaries, 7, BATCH_TIME, labels, JvmSketches(spark))
    stored = spark.createDataFrame([(bytearray(row[SKETCH]),)], f"{SKETCH} binary")
    spark_p99 = stored.select(F.kll_sketch_get_quantile_bigint(SKETCH, F.lit(0.99))).first()
    assert spark_p99 is not None and row["replication_latency_ms_p99"] == spark_p99[0]
    assert sketch_answers(spark, [row[SKETCH]]) == [(n, 1, n)]
    assert (row["replication_latency_ms_min"], row["replication_latency_ms_max"]) == (1, n)
    assert row["replication_latency_ms_avg"] == (n + 1) / 2
    epsilon = datasketches.kll_doubles_sketch.get_normalized_rank_error(200, False)
    assert abs(row["replication_latency_ms_p99"] / n - 0.99) <= epsilon
    saved = json.loads(json.dumps(encode_values(REPLICATION_STATS.schema, [row])))
    restored = decode_rows(spark, saved)
    assert_schema_equality(restored.schema, REPLICATION_STATS.schema, ignore_nullable=True)
    back = restored.first().asDict()
    assert back["batch_time"].astimezone(UTC) == BATCH_TIME
    assert bytes(back[SKETCH]) == bytes(row[SKETCH])


def test_replication_audit_counts_per_window(spark) -> None:
    audit = audit_rows(two_tasks_summaries(spark), 60, 7, {"job_group_id": "g"})
    got = [
        (
            r["partition"],
            r["window_start"].timestamp(),
            r["window_end"].timestamp(),
            r["records_read"],
            r["records_written"],
            r["records_already_present"],
        )
        for r in audit
    ]
    assert got == [(0, 0.0, 60.0, 1, 0, 1), (0, 60.0, 120.0, 2, 2, 0), (1, 0.0, 60.0, 2, 2, 0)]
    assert {(r["job_group_id"], r["batch_id"], r["source_topic"]) for r in audit} == {
        ("g", 7, "orders")
    }


def test_sink_with_only_empty_input_writes_nothing_and_needs_no_broker(spark) -> None:
    nowhere = {"bootstrap.servers": "127.0.0.1:9"}
    config = DestinationConfig("c", "t", "dst", "d", nowhere, nowhere, nowhere, {0: 0})
    summaries = copy_ranges(spark, [], config)
    assert summaries.count() == 0
    assert summaries.columns == SUMMARY_COLUMNS


def test_a_setting_the_java_producer_refuses_is_a_config_error_naming_the_cluster(spark) -> None:
    nowhere = {"bootstrap.servers": "127.0.0.1:9"}
    # The Java producer needs delivery.timeout.ms >= linger.ms + request.timeout.ms.
    refused = {
        **nowhere,
        "linger.ms": "20",
        "request.timeout.ms": "30000",
        "delivery.timeout.ms": "1000",
    }
    config = DestinationConfig("c", "t", "dst", "d", refused, nowhere, nowhere, {0: 0})
    with pytest.raises(ConfigError, match=r"clusters\.dst\.properties.*delivery\.timeout\.ms"):
        check_clients(spark, config)


def test_a_setting_the_java_consumer_refuses_is_a_config_error_naming_the_source(spark) -> None:
    nowhere = {"bootstrap.servers": "127.0.0.1:9"}
    refused = {**nowhere, "isolation.level": "read_mostly"}
    config = DestinationConfig("src", "t", "dst", "d", nowhere, nowhere, refused, {0: 0})
    with pytest.raises(ConfigError, match=r"clusters\.src\.properties.*read_mostly"):
        check_clients(spark, config)


# --- provenance stamp -----------------------------------------------------------------------


def test_a_stamp_parses_from_the_right_so_a_cluster_may_contain_slashes() -> None:
    assert parse_stamp(b"eu/west/orders/3/42") == SourceOffset("eu/west", "orders", 3, 42)


@pytest.mark.parametrize("value", [b"orders/3/42", b"c/orders/x/42", b"c/orders/3/", b"/t/0/1"])
def test_a_value_that_is_not_a_stamp_is_an_error_naming_it(value: bytes) -> None:
    with pytest.raises(ValueError, match=STAMP + ".*" + value.decode()):
        parse_stamp(value)


def test_the_latest_hop_is_the_last_stamp() -> None:
    headers = [(STAMP, b"a/t/0/7"), ("trace", b"x"), (STAMP, b"b/t/2/9"), ("other", None)]
    assert latest_stamp(headers) == SourceOffset("b", "t", 2, 9)
    assert latest_stamp([("trace", b"x")]) is None
    assert latest_stamp(None) is None


def test_the_jvm_stamp_is_what_the_python_reader_parses_and_only_its_own_counts(spark) -> None:
    jvm = spark.sparkContext._jvm
    ours = jvm.dev.uatu.replication.Provenance("eu/west", "orders", 3)
    stamp = ours.stamp(9_876_543_210)
    assert stamp.key() == STAMP
    assert parse_stamp(bytes(stamp.value())) == SourceOffset("eu/west", "orders", 3, 9_876_543_210)

    def offset_in(*stamps: bytes) -> int:
        headers = jvm.org.apache.kafka.common.header.internals.RecordHeaders()
        headers.add("trace", b"x")
        for value in stamps:
            headers.add(STAMP, value)
        return ours.offsetIn(headers)

    assert offset_in(b"eu/west/orders/3/17") == 17
    assert offset_in(b"eu/west/orders/3/17", b"b/orders/3/5") == -1  # copied again since
    assert offset_in(b"b/orders/3/5", b"eu/west/orders/3/17") == 17
    assert offset_in(b"eu/west/orders/31/17") == -1  # another partition
    assert offset_in(b"west/orders/3/17") == -1  # another cluster
    assert offset_in(b"eu/west/orders/3/") == -1
    assert offset_in() == -1


@pytest.mark.parametrize(
    ("slots", "local", "layout"),
    [
        (2, True, EpochLayout(max_tasks=1, relay=False)),  # the default local[2]: no relay
        (3, True, EpochLayout(max_tasks=1, relay=True)),  # one task per epoch, two epochs
        (4, True, EpochLayout(max_tasks=1, relay=True)),
        (9, True, EpochLayout(max_tasks=4, relay=True)),  # local[2P+1] for 4 partitions
        (1, True, EpochLayout(max_tasks=1, relay=False)),
        (9, False, EpochLayout(max_tasks=8, relay=False)),  # a cluster: other JVMs
    ],
)
def test_epochs_relay_in_local_mode_with_slots_for_two_epochs_and_the_stats(
    slots: int, local: bool, layout: EpochLayout
) -> None:
    assert epoch_layout(slots, local) == layout
