"""The availability job's pure parts: offsets-topic decoding, topic health, the lag tracker,
JobGroup validation and the status rows."""

from __future__ import annotations

import random
import struct
from datetime import UTC, datetime

import pytest
from google.protobuf import json_format
from uatu.v1 import job_options_pb2  # noqa: F401  (registers JobOptions for `extension`)
from uber.data.kafka.datatransfer import job_pb2
from uber.data.kafka.datatransfer.job_group_pb2 import JobGroup

from core.config import load_settings
from core.errors import InvalidJobGroup, UnknownCluster
from jobs.availability.job import no_commit_rows, status_rows
from jobs.availability.lag.offsets_topic import (
    OffsetCommit,
    OffsetDeleted,
    UndecodableRecord,
    decode,
)
from jobs.availability.lag.rules import (
    Commit,
    evaluate_group,
    evaluate_partition,
    record_commit,
    window_rule,
)
from jobs.availability.lag.tracker import LagSettings, LagTracker, status_due, window_verdict
from jobs.availability.spec import KrpSettings, ProbeSettings, availability_spec
from jobs.availability.tables import CONSUMER_GROUP_STATUS, TOPIC_AVAILABILITY
from jobs.availability.topic_health import NO_LEADER, PartitionState, partition_availability
from testing.conf import write_conf_dir

# Recorded from Apache Kafka 3.9.2: group g1 committed offset 42 of t[1] (key v1, value v3).
KAFKA_KEY = b"\x00\x01\x00\x02g1\x00\x01t\x00\x00\x00\x01"
KAFKA_VALUE = (
    b"\x00\x03\x00\x00\x00\x00\x00\x00\x00*\xff\xff\xff\xff\x00\x00\x00\x00\x01\xa1\xfd\xdb\x93$"
)


def string(text: str) -> bytes:
    return struct.pack(">h", len(text)) + text.encode()


def test_decodes_a_commit_as_kafka_writes_it() -> None:
    assert decode(KAFKA_KEY, KAFKA_VALUE) == OffsetCommit("g1", "t", 1, 42, 1795260388132)


@pytest.mark.parametrize(
    "value",
    [
        struct.pack(">hq", 0, 7) + string("m") + struct.pack(">q", 1000),
        struct.pack(">hq", 1, 7) + string("m") + struct.pack(">qq", 1000, 9999),
        struct.pack(">hq", 2, 7) + string("") + struct.pack(">q", 1000),
        struct.pack(">hqi", 3, 7, 5) + struct.pack(">h", -1) + struct.pack(">q", 1000),
        # v4 is flexible: compact string (length + 1 as a varint), then tagged fields.
        struct.pack(">hqi", 4, 7, 5) + bytes([3]) + b"md" + struct.pack(">q", 1000) + b"\x00",
    ],
    ids=["v0", "v1", "v2", "v3-null-metadata", "v4"],
)
def test_decodes_every_value_version(value: bytes) -> None:
    key = struct.pack(">h", 0) + string("grp") + string("topic") + struct.pack(">i", 3)
    assert decode(key, value) == OffsetCommit("grp", "topic", 3, 7, 1000)


def test_group_metadata_is_not_a_commit_and_a_tombstone_deletes() -> None:
    assert decode(struct.pack(">h", 2) + string("g1"), b"\x00\x03anything") is None
    assert decode(KAFKA_KEY, None) == OffsetDeleted("g1", "t", 1)


@pytest.mark.parametrize(
    ("key", "value", "fragment"),
    [
        (None, KAFKA_VALUE, "without a key"),
        (struct.pack(">h", 9), KAFKA_VALUE, "key version 9"),
        (KAFKA_KEY, struct.pack(">h", 7), "value version 7"),
        (KAFKA_KEY, KAFKA_VALUE[:12], "end inside a field"),
        (KAFKA_KEY[:5], KAFKA_VALUE, "string runs past"),
    ],
)
def test_undecodable_records_say_why(key, value, fragment) -> None:
    with pytest.raises(UndecodableRecord, match=fragment):
        decode(key, value)


def test_partition_availability_flags_offline_and_under_replicated() -> None:
    states = [
        PartitionState("b", 0, 1, (1, 2, 3), (1, 2, 3)),
        PartitionState("a", 1, 2, (1, 2, 3), (2, 3)),
        PartitionState("a", 0, NO_LEADER, (1,), (1,)),
    ]
    rows = partition_availability(states, live_brokers=[2, 3])
    assert [(r["topic"], r["partition"]) for r in rows] == [("a", 0), ("a", 1), ("b", 0)]
    offline, under, healthy = rows
    assert offline["offline"] and not offline["has_leader"] and offline["leader"] is None
    assert offline["offline_replicas"] == [1] and not offline["under_replicated"]
    assert under["under_replicated"] and not under["offline"]
    assert (under["replication_factor"], under["isr_size"]) == (3, 2)
    assert healthy["offline_replicas"] == [1] and not healthy["under_replicated"]


# --- the lag tracker ------------------------------------------------------------------------


def tracked(settings: LagSettings | None = None) -> LagTracker:
    """Group g commits t[0] three times, 10 s apart, each 10 behind a head that moves."""
    tracker = LagTracker(settings or LagSettings(intervals=3))
    for i, offset in enumerate((100, 200, 300)):
        tracker.refresh_heads({("t", 0): offset + 10})
        tracker.record("g", "t", 0, offset, 10_000 * (i + 1), lag=10)
    return tracker


def test_lag_is_recomputed_from_new_heads_without_a_commit() -> None:
    tracker = tracked()
    assert tracker.current_lag(("g", "t", 0)) == 10
    tracker.refresh_heads({("t", 0): 1_000})
    (result,) = tracker.evaluate(now_ms=31_000)
    assert result.total_lag == 700  # Burrow would still say 10: it recomputes on commit only


def test_silence_longer_than_the_window_is_stop_and_the_group_err() -> None:
    tracker = tracked()
    for head in (400, 500, 600):  # production goes on; none of these heads was caught up
        tracker.refresh_heads({("t", 0): head})
    (result,) = tracker.evaluate(now_ms=30_000 + 20_001)  # window spans 20 s
    assert result.partitions[0].status.name == "STOP" and result.status.name == "ERR"
    (result,) = tracker.evaluate(now_ms=30_000 + 20_000)  # strictly greater, as Burrow
    assert result.partitions[0].status.name == "WARN"  # lag never went down


def test_a_caught_up_consumer_on_an_idle_tail_is_ok_unless_burrow_strict() -> None:
    for strict, expected in ((False, "OK"), (True, "STOP")):
        tracker = LagTracker(LagSettings(intervals=3, burrow_strict=strict))
        for i in range(3):
            # A transaction marker after offset 49 leaves lag 1 that no consumer can read.
            tracker.refresh_heads({("t", 0): 51})
            tracker.record("g", "t", 0, 50, 1_000 * (i + 1), lag=1)
        (result,) = tracker.evaluate(now_ms=600_000)
        assert result.partitions[0].status.name == expected, strict


def test_forget_unknown_groups_and_replay_without_lag() -> None:
    tracker = tracked()
    tracker.record("h", "t", 0, 5, 1_000, lag=None)  # replayed history: lag unknown
    assert tracker.current_lag(("h", "t", 0)) == 305  # from the head, not the stored None
    assert {r.group for r in tracker.evaluate(31_000)} == {"g", "h"}
    tracker.forget("h", "t", 0)
    assert [r.status.name for r in tracker.evaluate(31_000, groups=["h"])] == ["NOTFOUND"]
    assert tracker.topic_partitions() == {("t", 0)}


@pytest.mark.parametrize(
    "settings",
    [
        LagSettings(intervals=4, min_distance_ms=1_500, allowed_lag=2, expire_group_ms=60_000),
        LagSettings(intervals=3, burrow_strict=True),
        LagSettings(intervals=1),
    ],
    ids=["min-distance-allowed-expire", "burrow-strict", "one-slot"],
)
def test_the_tracker_evaluates_as_the_pure_rules_do_on_padded_windows(
    settings: LagSettings,
) -> None:
    """The tracker keeps stored commits per group, caches each window's verdict and hands
    back unchanged results (its fast path); the reference keeps each window as
    `record_commit` builds it and evaluates with `evaluate_partition`. A random stream of
    commits, tombstones, head refreshes and quiet spells, evaluated after every step (the
    cached results must follow heads, the clock and expiry), must give the same results."""
    rng = random.Random(7)
    tracker = LagTracker(settings)
    windows: dict[tuple[str, str, int], tuple] = {}
    heads: dict[tuple[str, int], list[int]] = {}
    now = 0

    def commit(group: str, tp: tuple[str, int], offset: int, lag: int | None) -> None:
        stored = tracker.record(group, *tp, offset, now, lag)
        windows[(group, *tp)] = record_commit(
            windows.get((group, *tp), ()),
            offset,
            now,
            None if lag is None else offset + lag,
            intervals=settings.intervals,
            min_distance_ms=settings.min_distance_ms,
        )
        assert stored == windows[(group, *tp)][-1]

    def reference_lag(key: tuple[str, str, int]) -> int:
        newest = windows[key][-1]
        ring = heads.get(key[1:])
        return max(ring[-1] - newest.offset, 0) if ring else newest.lag or 0

    def reference() -> list:
        return [
            evaluate_group(
                group,
                [
                    evaluate_partition(
                        windows[key],
                        reference_lag(key),
                        now,
                        topic=key[1],
                        partition=key[2],
                        broker_offsets=heads.get(key[1:], ()),
                        allowed_lag=settings.allowed_lag,
                        idle_caught_up_is_ok=not settings.burrow_strict,
                    )
                    for key in sorted(windows)
                    if key[0] == group
                ],
                now,
                expire_group_ms=settings.expire_group_ms,
            )
            for group in sorted({key[0] for key in windows})
        ]

    statuses = set()
    for step in range(3_000):
        now += rng.choice((0, rng.randrange(0, 2_000), rng.randrange(0, 40_000)))
        group, tp = f"g{rng.randrange(5)}", ("t", rng.randrange(3))
        roll = rng.random()
        if roll < 0.05:
            tracker.forget(group, *tp)
            windows.pop((group, *tp), None)
        elif roll < 0.3:
            ring = heads.get(tp, [])
            head = (ring[-1] if ring else 0) + rng.choice((0, rng.randrange(0, 50)))
            heads[tp] = [*ring, head][-settings.intervals :]
            tracker.refresh_heads({tp: head})
        elif roll < 0.4:
            pass  # only the clock moves
        else:
            offset = max(heads.get(tp, [0])[-1] - rng.randrange(0, 60), 0)
            commit(group, tp, offset, None if rng.random() < 0.1 else rng.randrange(0, 40))
        results = tracker.evaluate(now)
        assert results == reference(), step
        assert tracker.evaluate(now) == results  # again, from the cached results
        statuses |= {r.status.name for r in results}
        statuses |= {p.status.name for r in results for p in r.partitions}
    if settings.intervals > 1:
        assert statuses >= {"OK", "WARN", "ERR", "STOP", "REWIND"}, statuses
    if settings.expire_group_ms < 3_000 * 20_000:
        assert "NOTFOUND" in statuses

    commit("g0", ("t", 0), heads[("t", 0)][-1], 0)  # one caught up, for `lagging`
    assert len(tracker.evaluate(now)) == len({key[0] for key in windows})
    assert tracker.evaluate(now) == reference()
    assert tracker.committed() == {key: w[-1].offset for key, w in windows.items()}
    assert tracker.lagging() == {
        key: w[-1].offset for key, w in windows.items() if reference_lag(key) > 0
    }
    assert 0 < len(tracker.lagging()) < len(windows)
    assert tracker.topic_partitions() == {key[1:] for key in windows}


def test_the_window_verdict_is_the_window_rule() -> None:
    """`window_verdict`, the tracker's one-pass rules 3-7, against `rules.window_rule` on
    random windows: rewinds recovered or not, stalls, unmeasured lags, lags at the allowed."""
    rng = random.Random(11)
    for _ in range(20_000):
        offset, commits = rng.randrange(0, 100), []
        for i in range(rng.randrange(1, 11)):
            offset = max(offset + rng.choice((0, 0, 1, 5, 10, -3, -60, 60)), 0)
            lag = None if rng.random() < 0.15 else rng.choice((0, 1, 2, 3, rng.randrange(0, 40)))
            commits.append(Commit(offset, 1_000 * i, lag))
        for allowed in (0, 2):
            assert window_verdict(commits, allowed) == window_rule(commits, allowed_lag=allowed), (
                commits,
                allowed,
            )


def test_status_rows_carry_group_and_partition_verdicts() -> None:
    tracker = tracked()
    at = datetime(2026, 1, 1, tzinfo=UTC)
    (row,) = status_rows("c1", at, tracker.evaluate(31_000), {("g", "t", 0): 4_000})
    assert (row["cluster"], row["group"], row["status"], row["total_lag"]) == (
        "c1",
        "g",
        "WARN",
        10,
    )
    assert (row["max_lag_topic"], row["max_lag_partition"], row["max_time_lag_ms"]) == (
        "t",
        0,
        4_000,
    )
    (p,) = row["partitions"]
    assert (p["status"], p["start_offset"], p["end_offset"], p["complete"]) == (
        "WARN",
        100,
        300,
        1.0,
    )


def test_the_rows_the_job_appends_fill_their_declared_tables(spark) -> None:
    """Keys are the tables' columns exactly (a dict key the schema lacks would be dropped, a
    column no key fills would be null), and values land typed, nested ones included."""
    at = datetime(2026, 1, 1, tzinfo=UTC)
    status = status_rows("c1", at, tracked().evaluate(31_000), {("g", "t", 0): 4_000})
    assert set(status[0]) == set(CONSUMER_GROUP_STATUS.columns)
    partitions = CONSUMER_GROUP_STATUS.schema["partitions"].dataType.elementType
    assert set(status[0]["partitions"][0]) == set(partitions.fieldNames())
    silent = no_commit_rows("c1", at, {"quiet": "EMPTY"}, evaluated=set())
    assert set(silent[0]) == set(CONSUMER_GROUP_STATUS.columns)
    frame = spark.createDataFrame(status + silent, CONSUMER_GROUP_STATUS.schema)
    row = frame.where("group = 'g'").first()
    assert row is not None and row["partitions"][0]["end_offset"] == 300
    assert row["partitions"][0]["end_commit_time"] is not None
    assert row["partitions"][0]["rule"] == status[0]["partitions"][0]["rule"] is not None
    quiet = frame.where("group = 'quiet'").first()
    assert quiet is not None and quiet["partitions"] == [] and "EMPTY" in quiet["reason"]

    states = [PartitionState("a", 0, NO_LEADER, (1,), (1,)), PartitionState("a", 1, 2, (2,), (2,))]
    topics = [{"cluster": "c1", "sampled_at": at, **r} for r in partition_availability(states, [2])]
    assert set(topics[0]) == set(TOPIC_AVAILABILITY.columns)
    frame = spark.createDataFrame(topics, TOPIC_AVAILABILITY.schema)
    offline = frame.where("offline").select("partition", "offline_replicas", "leader").collect()
    assert [tuple(r) for r in offline] == [(0, [1], None)]


# --- JobGroup validation --------------------------------------------------------------------


@pytest.fixture()
def settings(tmp_path):
    return load_settings(write_conf_dir(tmp_path, "127.0.0.1:9", tmp_path / "wh", tmp_path / "ck"))


def group(trigger_seconds: int | None = None, **availability) -> JobGroup:
    data = {
        "jobGroupId": "avail",
        "type": "JOB_TYPE_KAFKA_AVAILABILITY",
        "kafkaConsumerTaskGroup": {"cluster": "local", "topic": "probe"},
        "availabilityTaskGroup": {"availabilityJobType": "AVAILABILITY_JOB_TYPE_NATIVE_PRODUCER"},
        "extension": {
            "@type": "type.googleapis.com/uatu.v1.JobOptions",
            "availability": availability,
            **({"trigger": {"intervalSeconds": trigger_seconds}} if trigger_seconds else {}),
        },
    }
    return json_format.ParseDict(data, JobGroup())


def test_defaults(settings) -> None:
    spec = availability_spec(group(), settings)
    assert spec.lag == LagSettings() and spec.lag.status_interval_ms == 1_000
    assert spec.topic_availability and spec.consumer_lag and spec.trigger_interval_seconds == 5
    assert spec.output.table("consumer_group_status").endswith("/consumer_group_status")
    assert spec.probes and spec.probe == ProbeSettings(1000, 10_000, 5000, 20_000, 1)
    assert (
        spec.output.table("availability_probes").endswith("/availability_probes")
        and spec.probe_topic == "probe"
    )


def test_statuses_are_evaluated_at_most_once_a_second_and_at_every_trigger(settings) -> None:
    assert availability_spec(group(trigger_seconds=2), settings).lag.status_interval_ms == 1_000
    # A 1 s trigger: batches start about 1 s apart, some a little early; all are evaluated.
    assert availability_spec(group(trigger_seconds=1), settings).lag.status_interval_ms == 500


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"lagWindowCommits": -1}, "extension.availability.lag_window_commits"),
        ({"lagWindowCommits": 5000}, "extension.availability.lag_window_commits"),
        ({"lagMinDistanceSeconds": -2}, "extension.availability.lag_min_distance_seconds"),
        ({"lagAllowedMessages": "-1"}, "extension.availability.lag_allowed_messages"),
        (
            {"skipTopicAvailability": True, "skipConsumerLag": True, "skipProbes": True},
            "extension.availability",
        ),
        ({"probeIntervalMs": 5}, "extension.availability.probe_interval_ms"),
        ({"probeWindowSeconds": -1}, "extension.availability.probe_window_seconds"),
        ({"probeAckSlaMs": 50}, "extension.availability.probe_ack_sla_ms"),
        (
            {"probeAckSlaMs": 8000, "probeRoundtripSlaMs": 6000},
            "extension.availability.probe_roundtrip_sla_ms",
        ),
        ({"probeReplicationFactor": -3}, "extension.availability.probe_replication_factor"),
    ],
)
def test_bad_options_name_the_field(settings, options, field) -> None:
    with pytest.raises(InvalidJobGroup) as e:
        availability_spec(group(**options), settings)
    assert e.value.field == field


def test_probes_need_a_topic_and_proxy_probes_a_proxy(settings, tmp_path) -> None:
    g = group()
    g.kafka_consumer_task_group.topic = ""
    with pytest.raises(InvalidJobGroup) as e:
        availability_spec(g, settings)
    assert e.value.field == "kafka_consumer_task_group.topic"
    assert not availability_spec(group(skipProbes=True), settings).probes
    g = group()
    g.availability_task_group.availability_job_type = job_pb2.AVAILABILITY_JOB_TYPE_PROXY_CONSUMER
    with pytest.raises(InvalidJobGroup, match=r"no proxy\.grpc_address"):
        availability_spec(g, settings)
    proxied = {"local": {"bootstrap_servers": "127.0.0.1:9", "proxy": {"grpc_address": "h:1"}}}
    conf = write_conf_dir(tmp_path / "p", "x", tmp_path, tmp_path, more_clusters=proxied)
    spec = availability_spec(g, load_settings(conf))
    assert spec.cluster.proxy_grpc_address == "h:1" and spec.cluster.proxy_cluster == "default"


def test_krp_reports_are_sent_by_proxy_producer_probes_only(tmp_path) -> None:
    """krp_audit_topic with its window (default 60 s) on PROXY_PRODUCER; refused, naming the
    field, wherever no KRP report would be sent, and on the probe topic itself."""
    proxied = {"local": {"bootstrap_servers": "127.0.0.1:9", "proxy": {"grpc_address": "h:1"}}}
    conf = write_conf_dir(tmp_path / "p", "x", tmp_path, tmp_path, more_clusters=proxied)
    settings = load_settings(conf)
    proxy_producer = job_pb2.AVAILABILITY_JOB_TYPE_PROXY_PRODUCER

    def spec_of(probe_type: int = proxy_producer, **options):
        g = group(**options)
        g.availability_task_group.availability_job_type = probe_type
        return availability_spec(g, settings)

    assert spec_of().krp is None
    assert spec_of(krpAuditTopic="krp").krp == KrpSettings("krp", 60)
    assert spec_of(krpAuditTopic="krp", krpAuditWindowSeconds=5).krp == KrpSettings("krp", 5)
    refused = [
        ({"krpAuditWindowSeconds": 5}, proxy_producer, "window_seconds", "only with"),
        ({"krpAuditTopic": "krp"}, job_pb2.AVAILABILITY_JOB_TYPE_NATIVE_PRODUCER, "topic", "only"),
        ({"krpAuditTopic": "krp"}, job_pb2.AVAILABILITY_JOB_TYPE_PROXY_CONSUMER, "topic", "only"),
        ({"krpAuditTopic": "krp", "skipProbes": True}, proxy_producer, "topic", "skip_probes"),
        ({"krpAuditTopic": "probe"}, proxy_producer, "topic", "is the probe topic"),
        ({"krpAuditTopic": "a b"}, proxy_producer, "topic", "not a Kafka topic name"),
        (
            {"krpAuditTopic": "krp", "krpAuditWindowSeconds": -1},
            proxy_producer,
            "window_seconds",
            "must be >= 1",
        ),
    ]
    for options, probe_type, field, why in refused:
        with pytest.raises(InvalidJobGroup, match=why) as e:
            spec_of(probe_type, **options)
        assert e.value.field == f"extension.availability.krp_audit_{field}", options


def test_probe_type_and_cluster_are_required(settings) -> None:
    g = group()
    g.availability_task_group.Clear()
    with pytest.raises(InvalidJobGroup, match="availability_job_type"):
        availability_spec(g, settings)
    g = group()
    g.kafka_consumer_task_group.cluster = "nowhere"
    with pytest.raises(UnknownCluster, match="nowhere"):
        availability_spec(g, settings)


def test_head_history_interpolates_between_samples_around_a_commit() -> None:
    from jobs.availability.lag.head_sampler import HeadHistory

    history = HeadHistory(keep_ms=10_000)
    tp = ("t", 0)
    history.add(1000, {tp: 100})
    history.add(2000, {tp: 200, ("t", 1): 7})
    assert history.at(tp, 999) is None  # before the first sample: unknown, as Burrow has it
    assert history.at(tp, 1000) == 100 and history.at(tp, 1250) == 125
    assert history.at(tp, 5000) == 200  # after the newest: the newest
    assert history.latest() == {tp: 200, ("t", 1): 7}
    history.add(20_000, {tp: 300})
    history.add(21_000, {tp: 400})
    assert history.at(tp, 1500) is None  # older samples dropped after keep_ms
    assert history.known() == {tp, ("t", 1)}


def test_head_history_answers_from_its_last_pair_as_the_search_does() -> None:
    """`at` keeps the pair of samples it last interpolated between; random samples (some
    partitions quiet, old ones dropped) and random lookups, mostly in time order as commits
    come, must get what a binary search over the samples kept gives."""
    import bisect

    from jobs.availability.lag.head_sampler import HeadHistory

    rng = random.Random(3)
    history = HeadHistory(keep_ms=5_000)
    kept: dict[tuple[str, int], list[tuple[int, int]]] = {}

    def searched(tp: tuple[str, int], at_ms: int) -> int | None:
        samples = kept.get(tp, [])
        i = bisect.bisect_right([t for t, _ in samples], at_ms)
        if i == 0:
            return None
        (t0, h0), later = samples[i - 1], samples[i:]
        if not later:
            return h0
        t1, h1 = later[0]
        return h0 + round((h1 - h0) * (at_ms - t0) / (t1 - t0))

    now, heads = 0, {("t", p): 0 for p in range(3)}
    for _ in range(300):
        now += rng.randrange(500, 1_500)
        sample = {tp: heads[tp] + rng.randrange(0, 100) for tp in heads if rng.random() < 0.8}
        heads.update(sample)
        history.add(now, sample)
        for tp, head in sample.items():
            samples = [*kept.get(tp, []), (now, head)]
            old = bisect.bisect_left([t for t, _ in samples], now - 5_000)
            kept[tp] = samples[min(old, len(samples) - 2) :]
        at_ms = now - rng.randrange(0, 8_000)
        for _ in range(20):
            at_ms += rng.choice((0, rng.randrange(0, 400), -rng.randrange(0, 3_000)))
            tp = ("t", rng.randrange(4))  # ("t", 3) never sampled
            assert history.at(tp, at_ms) == searched(tp, at_ms), (tp, at_ms)


def test_decode_takes_spark_bytearrays_and_forgets_keys_past_its_limit(monkeypatch) -> None:
    from jobs.availability.lag import offsets_topic

    assert decode(bytearray(KAFKA_KEY), bytearray(KAFKA_VALUE)) == decode(KAFKA_KEY, KAFKA_VALUE)
    monkeypatch.setattr(offsets_topic, "_KEYS", {})
    monkeypatch.setattr(offsets_topic, "_KEYS_KEPT", 2)
    keys = [
        struct.pack(">h", 1) + string(f"g{i}") + string("t") + struct.pack(">i", 0)
        for i in range(5)
    ]
    for _ in range(2):
        assert [decode(k, KAFKA_VALUE).group for k in keys] == [f"g{i}" for i in range(5)]
    assert len(offsets_topic._KEYS) <= 2
    # A v3 value with metadata is not the 24-byte shape: read through the general path.
    with_metadata = struct.pack(">hqi", 3, 7, 5) + string("md") + struct.pack(">q", 1000)
    assert decode(KAFKA_KEY, with_metadata) == OffsetCommit("g1", "t", 1, 7, 1000)


def test_status_is_due_once_per_interval_and_after_the_clock_goes_back() -> None:
    assert status_due(None, 5_000, 1_000)
    assert not status_due(5_000, 5_999, 1_000)
    assert status_due(5_000, 6_000, 1_000)
    assert status_due(5_000, 4_000, 1_000)  # the clock went back: evaluate, do not wait
    assert status_due(5_000, 5_000, 0)  # interval 0: every micro-batch


def test_the_micro_batch_path_writes_what_a_fresh_evaluation_gives() -> None:
    """The job's step 2 without I/O, batch after batch of random commits, tombstones and head
    samples: `record_commits`, then, when `status_due`, `evaluate` (cached results),
    `lagging_partitions` and `status_rows`. Every evaluated batch's rows must equal those of
    a tracker built afresh from the commit rows written so far and the same heads; batches
    closer than the interval to the last evaluated one evaluate nothing."""
    from jobs.availability.job import lagging_partitions, record_commits
    from jobs.availability.lag.head_sampler import HeadHistory

    rng = random.Random(5)
    settings = LagSettings(intervals=4, allowed_lag=1, expire_group_ms=30_000)
    tracker, history = LagTracker(settings), HeadHistory()
    written: list[dict] = []  # consumer_offset_commits
    rings: list[dict[tuple[str, int], int]] = []  # every refresh_heads, in order
    heads = {("t", p): 0 for p in range(3)}
    now, started, evaluated, evaluations = 10_000, 12_000, None, 0
    for batch in range(400):
        events: list = []
        for _ in range(rng.randrange(0, 12)):
            now += rng.randrange(0, 150)
            if rng.random() < 0.3:
                heads = {tp: h + rng.randrange(0, 30) for tp, h in heads.items()}
                history.add(now, heads)
            group, tp = f"g{rng.randrange(6)}", ("t", rng.randrange(3))
            if rng.random() < 0.04:
                events.append(OffsetDeleted(group, *tp))
            else:
                offset = max(heads[tp] - rng.randrange(0, 40), 0)
                events.append(OffsetCommit(group, *tp, offset, now - rng.randrange(0, 50)))
        now += rng.choice((0, rng.randrange(0, 700), rng.randrange(0, 20_000)))
        tracker.refresh_heads(history.latest())
        rings.append(history.latest())
        rows = record_commits(tracker, history, events, "c1", started)
        stored = iter(rows)
        for event in events:  # the commits' rows and the tombstones, in the stream's order
            if isinstance(event, OffsetDeleted):
                written.append({"forget": event})
                continue
            row = next(stored)
            head = history.at((event.topic, event.partition), event.commit_ms)
            known = head is not None and event.commit_ms >= started
            assert row["lag"] == (max(head - event.offset, 0) if known else None)
            assert (row["group"], row["offset"]) == (event.group, event.offset)
            written.append(row)
        assert next(stored, None) is None
        if not status_due(evaluated, now, settings.status_interval_ms):
            assert evaluated is not None and 0 <= now - evaluated < settings.status_interval_ms
            continue
        evaluated, evaluations = now, evaluations + 1
        results = tracker.evaluate(now)
        lagging = lagging_partitions(results)
        at = datetime.fromtimestamp(now / 1000, tz=UTC)
        fresh = LagTracker(settings)
        for ring in rings:
            fresh.refresh_heads(ring)
        for r in written:
            if "forget" in r:
                fresh.forget(*r["forget"])
            else:
                commit_ms = round(r["commit_time"].timestamp() * 1000)
                fresh.record(
                    r["group"], r["topic"], r["partition"], r["offset"], commit_ms, r["lag"]
                )
        expected = fresh.evaluate(now)
        assert results == expected, batch
        shown = {r.group for r in expected if r.partitions}  # not expired
        assert lagging == {k: o for k, o in fresh.lagging().items() if k[0] in shown}
        time_lags = {key: rng.randrange(0, 9_000) for key in lagging}
        assert status_rows("c1", at, results, time_lags) == status_rows(
            "c1", at, expected, time_lags
        )
    assert 50 < evaluations < 400


def test_a_replayed_batch_records_no_commit_its_windows_hold() -> None:
    """A batch run again after a failure reads the same commits. If its first attempt stored
    them, the start replayed them into the windows from the table (`load_windows`: the newest
    of each partition, no tombstones); if not, the windows lack them. Either way, recorded
    with `replayed=True`, the windows end as an uninterrupted run leaves them: no commit twice
    (a 3-commit window once counted 4, tests/jobs/availability/test_availability_faults.py),
    none lost, the tombstone applied."""
    from jobs.availability.job import record_commits
    from jobs.availability.lag.head_sampler import HeadHistory

    settings = LagSettings(intervals=4)
    history = HeadHistory()
    history.add(0, {("t", 0): 20, ("t", 1): 20})
    first = [OffsetCommit("g", "t", 0, o, 1000 * o) for o in (1, 2, 3)]
    first.append(OffsetCommit("g", "t", 1, 5, 1500))
    # More commits of t[0] than its window keeps, and t[1] deleted, then committed again.
    replayed = [OffsetCommit("g", "t", 0, o, 1000 * o) for o in range(4, 10)]
    replayed[2:2] = [OffsetDeleted("g", "t", 1), OffsetCommit("g", "t", 1, 2, 5500)]

    def tracker_of(rows: list[dict]) -> LagTracker:
        """A starting job's tracker: the newest stored commits of each partition replayed."""
        tracker = LagTracker(settings)
        tracker.refresh_heads(history.latest())
        newest: dict[tuple, list[dict]] = {}
        for r in sorted(rows, key=lambda r: r["commit_time"]):
            newest.setdefault((r["group"], r["topic"], r["partition"]), []).append(r)
        kept = [r for rs in newest.values() for r in rs[-settings.intervals :]]
        for r in sorted(kept, key=lambda r: r["commit_time"]):
            at_ms = round(r["commit_time"].timestamp() * 1000)
            tracker.record(r["group"], r["topic"], r["partition"], r["offset"], at_ms, r["lag"])
        return tracker

    uninterrupted = tracker_of([])
    stored = record_commits(uninterrupted, history, first, "c1", 0)
    rows = record_commits(uninterrupted, history, replayed, "c1", 0)
    for table in (stored + rows, stored):  # the first attempt stored its commits, or not
        tracker = tracker_of(table)
        again = record_commits(tracker, history, replayed, "c1", 0, replayed=True)
        assert tracker.evaluate(10_000) == uninterrupted.evaluate(10_000)
        if table == stored:  # the rows to append (stored already: the append is skipped)
            assert again == rows
    # Recorded as a new batch, the same commits would be stored twice.
    tracker = tracker_of(stored + rows)
    record_commits(tracker, history, replayed, "c1", 0)
    assert tracker.evaluate(10_000) != uninterrupted.evaluate(10_000)
