"""The probes' pure parts: the ledger's outcomes, probe-topic coverage, probe values, the
per-window statistics (on small batch frames, with chispa); and the native sender's close
(librdkafka, no broker)."""

from __future__ import annotations

from types import MappingProxyType

import pytest
from chispa import assert_df_equality
from chispa.schema_comparer import assert_schema_equality

from core.config import ClusterConfig
from jobs.availability.probes.ledger import ProbeLedger, ProbeTarget
from jobs.availability.probes.probers import (
    NativeSender,
    parse_probe,
    probe_value,
    sendable_targets,
)
from jobs.availability.probes.stats import PROBE_OUTCOME_DDL, probe_window_stats
from jobs.availability.probes.topic import probe_targets, replica_lists, uncovered_brokers
from jobs.availability.tables import AVAILABILITY_PROBES

B1 = ProbeTarget(partition=0, broker=1, zone="a")
B2 = ProbeTarget(partition=1, broker=2, zone="b")


def ledger() -> ProbeLedger:
    return ProbeLedger("me", window_ms=10_000, ack_sla_ms=5000, roundtrip_sla_ms=20_000)


def test_outcomes_are_final_only_when_known_and_the_window_is_over() -> None:
    book = ledger()
    fine, lost, failed, silent = (book.send(B1, t) for t in (1000, 2000, 3000, 4000))
    book.acked(fine, 1010)
    book.acked(lost, 2020)
    book.failed(failed, "Local: Message timed out")
    book.received("me", fine, 1100)
    book.received("me", fine, 1150)  # a duplicate
    book.received("someone-else", fine, 1200)
    # Window [0, 10 s) is over at 10 s, but `lost` may still arrive until 22 s.
    assert book.take_final(9999) == [] and book.take_final(21_999) == []
    rows = {r["seq"]: r for r in book.take_final(22_000)}
    assert rows[fine]["produced"] and rows[fine]["copies"] == 2
    assert rows[fine]["ack_latency_ms"] == 10.0 and rows[fine]["e2e_latency_ms"] == 100.0
    assert rows[lost]["produced"] and rows[lost]["copies"] == 0
    assert rows[lost]["e2e_latency_ms"] is None
    assert not rows[failed]["produced"] and rows[failed]["error"] == "Local: Message timed out"
    assert not rows[silent]["produced"]
    assert rows[silent]["error"] == "no acknowledgement within the ack SLA"
    assert {r["window_start_ms"] for r in rows.values()} == {0}
    assert book.open_count() == 0 and book.foreign_copies == 1
    book.received("me", fine, 30_000)
    assert book.late_copies == 1


def test_a_broker_whose_probes_all_failed_is_final_before_the_roundtrip_sla() -> None:
    book = ledger()
    healthy = book.send(B1, 1000)
    dead = book.send(B2, 1000)
    book.acked(healthy, 1005)
    book.failed(dead, "Local: Message timed out")
    # At 10 s the healthy probe may still be read back; the dead broker's group is complete.
    assert [r["broker"] for r in book.take_final(10_000)] == [2]
    book.received("me", healthy, 10_001)
    assert [r["broker"] for r in book.take_final(10_002)] == [1]


def test_probe_topic_coverage() -> None:
    assert uncovered_brokers([1, 1, 3], [1, 2, 3, 4]) == [2, 4]
    assert replica_lists([2, 4], [1, 2, 3, 4], rf=3) == [[2, 3, 4], [4, 1, 2]]
    assert replica_lists([1], [1], rf=3) == [[1]]
    assert probe_targets({1: [2, 1], 0: [1, 2]}, {1: "a"}) == [
        ProbeTarget(0, 1, "a"),
        ProbeTarget(1, 2, None),
    ]


def test_a_partition_added_later_is_probed_only_once_the_receiver_reads_it() -> None:
    """A probe sent to a live broker's partition before the receiver reads it would count as
    lost; a down broker's partition is probed unread, so its failed produces show."""
    b3 = ProbeTarget(partition=2, broker=3, zone="c")
    targets = [B1, B2, b3]
    # The receiver reads partition 0 only; broker 2 is down, broker 3 is up.
    assert sendable_targets(targets, {0}, frozenset({2})) == [B1, B2]
    # The receiver has assigned partition 2 too: it is probed from now on.
    assert sendable_targets(targets, {0, 2}, frozenset({2})) == [B1, B2, b3]
    assert sendable_targets(targets, {0, 1, 2}, frozenset()) == targets
    assert sendable_targets([b3], set(), frozenset()) == []


def test_probe_values_round_trip_and_strangers_are_not_probes() -> None:
    assert parse_probe(probe_value("host-1-ab", 42, 1700)) == ("host-1-ab", 42)
    for value in (None, b"", b"not json", b'{"seq": 1}', b'{"instance": "x", "seq": "y"}'):
        assert parse_probe(value) is None


def outcome(broker, zone, seq, produced=True, ack=None, copies=1, e2e=None, error=None):
    return (0, 10_000, broker, zone, broker, seq, 0, produced, error, ack, copies, e2e)


@pytest.mark.parametrize("zone_isolated", [False, True])
def test_window_stats_per_broker_and_rolled_up(spark, zone_isolated) -> None:
    outcomes = spark.createDataFrame(
        [
            outcome(1, "a", 0, ack=10.0, e2e=20.0),
            outcome(1, "a", 1, ack=20.0, e2e=40.0, copies=2),
            outcome(1, "a", 2, ack=30.0, copies=0),  # lost
            outcome(2, "b", 3, produced=False, copies=0, error="timed out"),
            outcome(2, "b", 4, ack=5.0, e2e=7.0),
        ],
        PROBE_OUTCOME_DDL,
    )
    stats = probe_window_stats(
        outcomes, "c1", "AVAILABILITY_JOB_TYPE_NATIVE_PRODUCER", zone_isolated
    )
    columns = [
        "broker",
        "zone",
        "probes",
        "produced",
        "produce_failed",
        "produce_success_ratio",
        "consumed",
        "consume_success_ratio",
        "lost",
        "duplicated",
        "sample_error",
        "ack_latency_p50_ms",
        "ack_latency_p999_ms",
        "e2e_latency_p50_ms",
        "e2e_latency_p99_ms",
    ]
    brokers = [
        (1, "a", 3, 3, 0, 1.0, 2, 2 / 3, 1, 1, None, 20.0, 30.0, 20.0, 40.0),
        (2, "b", 2, 1, 1, 0.5, 1, 1.0, 0, 0, "timed out", 5.0, 5.0, 7.0, 7.0),
    ]
    if zone_isolated:
        rollups = [(None, *row[1:]) for row in brokers]  # one broker per zone here
    else:
        rollups = [(None, None, 5, 4, 1, 0.8, 3, 0.75, 1, 1, "timed out", 10.0, 30.0, 20.0, 40.0)]
    expected = spark.createDataFrame(brokers + rollups, stats.select(columns).schema)
    assert_df_equality(stats.select(columns), expected, ignore_row_order=True, ignore_nullable=True)
    first = stats.where("broker = 1").first()
    assert first is not None and first["cluster"] == "c1" and first["partitions"] == [1]
    assert first["ack_latency_kll"] is not None
    # The rows are what the table declares, column for column: append_once takes them as is.
    assert_schema_equality(stats.schema, AVAILABILITY_PROBES.schema, ignore_nullable=True)


def test_a_closed_native_sender_fails_what_is_in_flight_and_stops_its_producer() -> None:
    """No broker listens on the address: the probe stays in flight until `close`, which fails
    it (its `done` gets an error) and closes the producer instead of leaving librdkafka's
    threads reconnecting for as long as the sender is referenced."""
    nowhere = ClusterConfig("local", "127.0.0.1:1", MappingProxyType({}))
    sender = NativeSender(nowhere, "probes", ack_sla_ms=60_000)
    sender.known_partitions = {0}  # no metadata request to a broker that is not there
    outcomes: list[str | None] = []
    sender.send(ProbeTarget(0, 1, None), b"probe", 0, outcomes.append)

    sender.close(flush_timeout_s=0.1)

    assert len(outcomes) == 1 and outcomes[0] is not None, outcomes
    with pytest.raises(RuntimeError, match="closed"):
        sender.producer.produce("probes", b"after close")
