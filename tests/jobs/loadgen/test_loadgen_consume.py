"""LOAD_GEN_CONSUME against records the test writes itself, with sequence gaps and duplicates
injected on purpose: the job must find exactly those, within a batch and across batches."""

from __future__ import annotations

import time
from collections import Counter, defaultdict

import pytest
from confluent_kafka import Consumer, TopicPartition
from datasketches import kll_doubles_sketch
from pyspark.sql import functions as F

from core.errors import EXIT_OK
from testing.topic_data import Record, produce_records
from tests.jobs.loadgen.conftest import consume_group, encode_header, run_once

pytestmark = pytest.mark.integration

TOPIC = "lg-consume-exact"


def generator_records(
    partition: int, generator: str, seqs: list[int], send_us: int
) -> list[Record]:
    return [
        Record(
            partition,
            f"key-{seq}".encode(),
            f"{generator}:{seq}:".encode() + b"x" * (seq % 7),
            send_us // 1000,
            ((("loadgen", encode_header(seq, send_us + i, generator))),),
        )
        for i, seq in enumerate(seqs)
    ]


def interleave(*streams: list[Record]) -> list[Record]:
    out: list[Record] = []
    for i in range(max(len(s) for s in streams)):
        out.extend(s[i] for s in streams if i < len(s))
    return out


def committed(bootstrap: str, group_id: str) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group_id})
    try:
        offsets = consumer.committed([TopicPartition(TOPIC, p) for p in range(2)], 10)
        return {tp.partition: tp.offset for tp in offsets}
    finally:
        consumer.close()


def table_by_generator(spark, path: str, batch_id: int | None = None) -> dict:
    table = spark.read.format("delta").load(path)
    if batch_id is not None:
        table = table.where(F.col("batch_id") == batch_id)
    out: dict = defaultdict(
        lambda: {"records": 0, "bytes": 0, "duplicates": 0, "lost": 0, "missing": [], "dups": []}
    )
    for r in table.collect():
        g = out[r["generator"]]
        g["records"] += r["records"]
        g["bytes"] += r["bytes"]
        g["duplicates"] += r["duplicates"]
        g["lost"] += r["lost"]
        g["missing"] += [(m["from_seq"], m["until_seq"]) for m in r["missing_ranges"] or []]
        g["dups"] += list(r["duplicate_seqs"] or [])
        g.setdefault("sketches", []).append(r["latency_kll_sketch"])
    return out


def test_exact_gaps_and_duplicates_within_and_across_batches(spark, kafka, conf_dir, tmp_path):
    kafka.create_topic(TOPIC, 2, 1)
    now_us = time.time_ns() // 1000
    # Generator A (partition 0): 0..49 without 5 and 17..19; 10 sent twice more, 30 once more.
    a_seqs = [s for s in range(50) if s not in {5, 17, 18, 19}]
    a_seqs[12:12] = [10, 10]
    a_seqs.append(30)
    # Generator B (partition 0, interleaved with A): 100..139 complete, 120 duplicated.
    b_seqs = [*range(100, 140), 120]
    # Generator C (partition 1): first seen at 2 (what came before it is not counted), 12..14 lost.
    c_seqs = [s for s in range(2, 30) if s not in {12, 13, 14}]
    foreign = [
        Record(0, None, b"no header", now_us // 1000),
        Record(1, b"k", b"short header", now_us // 1000, (("loadgen", b"\x00\x01"),)),
    ]
    first = [
        *interleave(
            generator_records(0, "A", a_seqs, now_us - 50_000),
            generator_records(0, "B", b_seqs, now_us - 40_000),
        ),
        *generator_records(1, "C", c_seqs, now_us - 30_000),
        *foreign,
    ]
    produced_at_us = time.time_ns() // 1000
    produce_records(kafka.bootstrap_servers, TOPIC, first)
    group = consume_group("lg-exact", TOPIC)

    assert run_once(group, conf_dir) == EXIT_OK
    finished_at_us = time.time_ns() // 1000

    stats = str(tmp_path / "wh" / "loadgen_stats")
    got = table_by_generator(spark, stats)
    assert got["A"]["duplicates"] == 3 and sorted(got["A"]["dups"]) == [10, 10, 30]
    assert got["A"]["lost"] == 4 and sorted(got["A"]["missing"]) == [(5, 6), (17, 20)]
    assert got["B"]["duplicates"] == 1 and got["B"]["dups"] == [120]
    assert got["B"]["lost"] == 0 and got["B"]["missing"] == []
    assert got["C"]["lost"] == 3 and got["C"]["missing"] == [(12, 15)]
    assert got["C"]["duplicates"] == 0
    counts = Counter(
        r.headers[0][1][16:].decode() if r.headers and len(r.headers[0][1]) > 16 else None
        for r in first
    )
    assert {g: v["records"] for g, v in got.items()} == dict(counts)
    assert got[None]["records"] == 2
    assert sum(v["bytes"] for v in got.values()) == sum(
        len(r.key or b"") + len(r.value or b"") for r in first
    )
    # The latency sketches are DataSketches KLL doubles sketches, one value per headed record.
    for name in ("A", "B", "C"):
        sketches = [kll_doubles_sketch.deserialize(bytes(s)) for s in got[name]["sketches"] if s]
        assert sum(s.n for s in sketches) == counts[name]
        assert min(s.get_min_value() for s in sketches) >= 0
    # Latency is fetch time - the header's send time, in ms: every record was fetched after the
    # test began producing and before the run ended. Slack: 20 ms, for the JVM's clock (epoch
    # millis at its start plus nanoTime) against Python's.
    sends = {"A": (now_us - 50_000, a_seqs), "B": (now_us - 40_000, b_seqs)}
    sends["C"] = (now_us - 30_000, c_seqs)
    for name, (send_us, seqs) in sends.items():
        sketches = [kll_doubles_sketch.deserialize(bytes(s)) for s in got[name]["sketches"] if s]
        lowest = (produced_at_us - (send_us + len(seqs) - 1)) / 1000 - 20
        highest = (finished_at_us - send_us) / 1000 + 20
        assert lowest <= min(s.get_min_value() for s in sketches), name
        assert max(s.get_max_value() for s in sketches) <= highest, name
    # Per row: a 10 s window of fetch time (the default stats window, epoch-aligned) in which
    # the batch ran, rates over that window, quantiles in order, fetch-to-batch within the run.
    window_s = 10
    for r in spark.read.format("delta").load(stats).collect():
        assert (r["window_end"] - r["window_start"]).total_seconds() == window_s
        start_s = r["window_start"].timestamp()
        assert start_s % window_s == 0
        assert produced_at_us // 1_000_000 - window_s < start_s <= finished_at_us / 1_000_000
        assert r["records_per_sec"] == pytest.approx(r["records"] / window_s)
        assert r["mb_per_sec"] == pytest.approx(r["bytes"] / 2**20 / window_s)
        assert 0 <= r["fetch_to_batch_ms"] <= (finished_at_us - produced_at_us) / 1000
        if r["generator"] is not None:
            quantiles = [r[f"latency_ms_{q}"] for q in ("p50", "p95", "p99", "p999", "max")]
            assert quantiles == sorted(quantiles)
    # The read offsets are committed to the consumer group, for lag monitors.
    assert committed(kafka.bootstrap_servers, "lg-exact-cg") == dict(
        Counter(r.partition for r in first)
    )

    # Second batch, same checkpoint: a late fill of A's seq 5, re-sends of A 2 and C 20 (seen in
    # the first batch), a new gap in B (140..141 missing), and C going on.
    second = [
        *generator_records(0, "A", [5, 2, 50], now_us),
        *generator_records(0, "B", [142, 143], now_us),
        *generator_records(1, "C", [20, 30, 31], now_us),
    ]
    produce_records(kafka.bootstrap_servers, TOPIC, second)

    assert run_once(group, conf_dir) == EXIT_OK

    later = table_by_generator(spark, stats, batch_id=1)
    assert later["A"]["lost"] == -1 and later["A"]["missing"] == []  # seq 5 arrived late
    assert later["A"]["dups"] == [2] and later["A"]["duplicates"] == 1
    assert later["B"]["lost"] == 2 and later["B"]["missing"] == [(140, 142)]
    assert later["C"]["dups"] == [20] and later["C"]["lost"] == 0
    total = table_by_generator(spark, stats)
    assert {g: total[g]["lost"] for g in "ABC"} == {"A": 3, "B": 2, "C": 3}
    assert {g: total[g]["duplicates"] for g in "ABC"} == {"A": 4, "B": 1, "C": 1}
