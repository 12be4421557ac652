"""Pure parts of the load generators: batch plans and state, table rows, progress lines."""

from __future__ import annotations

import datetime as dt
import re

from datasketches import kll_doubles_sketch

from bench.kafka_perf import parse_producer_output
from core.paths import ROOT
from jobs.loadgen.plan import (
    MAX_CREDIT_US,
    UNBOUNDED,
    Bounds,
    ProduceState,
    after_batch,
    default_producer_tasks,
    is_done,
    plan_batch,
    task_plans,
)
from jobs.loadgen.transforms import (
    PendingStats,
    ProduceTotals,
    consume_line,
    produce_line,
    stats_rows,
)

NOW = 1_800_000_000_000_000  # epoch microseconds


def row(partition: int, first: int, records: int, **extra) -> dict:
    """A producer task row (ProduceTask.ROW_SCHEMA)."""
    base = {
        "partition": partition,
        "first_seq": first,
        "next_seq": first + records,
        "records": records,
        "duplicates": 0,
        "late": 0,
        "untimed": 0,
        "bytes": records * 100,
        "value_bytes": records * 100,
        "next_due_us": NOW,
        "first_send_us": NOW - 1_000_000,
        "last_send_us": NOW,
        "deadline_us": UNBOUNDED,
        "acks": records,
        "ack_ms_sum": 2.0 * records,
        "ack_ms_max": 9.0,
        "ack_ms_sketch": None,
    }
    return {**base, **extra}


def test_total_records_spread_over_partitions_and_counted_down():
    bounds = Bounds(partitions=3, batch_seconds=10, paced=False, total_records=10)
    assert [bounds.quota(p) for p in range(3)] == [4, 3, 3]
    state = ProduceState.new()
    plans = plan_batch(state, bounds, NOW)
    assert [(p.partition, p.next_seq, p.quota, p.due_us) for p in plans] == [
        (0, 0, 4, 0),
        (1, 0, 3, 0),
        (2, 0, 3, 0),
    ]
    state = after_batch(state, [row(0, 0, 4), row(1, 0, 2)], 0, paced=False)
    assert not is_done(state, bounds, NOW)
    plans = plan_batch(state, bounds, NOW)
    assert [(p.partition, p.next_seq, p.quota) for p in plans] == [(0, 4, 0), (1, 2, 1), (2, 0, 3)]
    state = after_batch(state, [row(1, 2, 1), row(2, 0, 3)], 1, paced=False)
    assert is_done(state, bounds, NOW)
    assert state.totals()["records"] == 10


def test_paced_schedule_continues_and_never_lags_more_than_the_credit():
    bounds = Bounds(partitions=1, batch_seconds=10, paced=True)
    state = after_batch(ProduceState.new(), [row(0, 0, 100, next_due_us=NOW - 200)], 0, paced=True)
    (plan,) = plan_batch(state, bounds, NOW)
    assert plan.due_us == NOW - 200  # the previous batch's schedule, continued
    (late,) = plan_batch(state, bounds, NOW + 60_000_000)
    assert late.due_us == NOW + 60_000_000 - MAX_CREDIT_US  # a stopped job buys no burst
    assert plan.deadline_us == UNBOUNDED and plan.quota == UNBOUNDED
    assert not is_done(state, bounds, NOW)


def test_duration_is_relative_until_the_first_batch_reports_the_deadline():
    bounds = Bounds(partitions=2, batch_seconds=10, paced=True, duration_seconds=30)
    first = plan_batch(ProduceState.new(), bounds, NOW)
    assert [p.deadline_us for p in first] == [-30_000_000, -30_000_000]
    deadline = NOW + 29_000_000
    rows = [row(p, 0, 10, deadline_us=deadline, next_due_us=NOW) for p in range(2)]
    state = after_batch(ProduceState.new(), rows, 0, paced=True)
    assert [p.deadline_us for p in plan_batch(state, bounds, NOW)] == [deadline, deadline]
    assert not is_done(state, bounds, NOW)
    rows = [row(p, 10, 10, deadline_us=deadline, next_due_us=deadline) for p in range(2)]
    state = after_batch(state, rows, 1, paced=True)
    assert is_done(state, bounds, NOW)


def test_state_round_trips_through_json():
    state = after_batch(ProduceState.new(), [row(0, 0, 5, duplicates=1, late=2)], 3, paced=True)
    again = ProduceState.from_json(state.to_json())
    assert again == state
    assert again.partition(0).duplicates == 1 and again.batch_id == 3


def test_partitions_grouped_into_tasks():
    plans = plan_batch(ProduceState.new(), Bounds(5, 10, paced=False), NOW)
    groups = task_plans(plans, 2)
    assert [[p.partition for p in g] for g in groups] == [[0, 2, 4], [1, 3]]


def test_one_producer_task_per_executor_at_most_one_per_partition():
    assert default_producer_tasks(partitions=4, executors=1) == 1  # local mode
    assert default_producer_tasks(partitions=4, executors=3) == 3
    assert default_producer_tasks(partitions=2, executors=8) == 2
    assert default_producer_tasks(partitions=4, executors=0) == 1  # none registered yet


def sketch_bytes(values: list[float]) -> bytes:
    sketch = kll_doubles_sketch()
    for v in values:
        sketch.update(v)
    return sketch.serialize()


def fold_row(**fields) -> dict:
    base = {
        "partition": 0,
        "window_start_ms": 1_800_000_000_000,
        "generator": "g/run/0",
        "records": 20,
        "bytes": 2 << 20,
        "first_seq": 0,
        "last_seq": 24,
        "duplicates": 1,
        "lost": 6,
        "missing": [3, 5, 10, 14],
        "duplicate_seqs": [7],
        "latency_ms_sketch": sketch_bytes([float(i) for i in range(1, 101)]),
        "latency_ms_p50": 50.0,
        "latency_ms_p95": 95.0,
        "latency_ms_p99": 99.0,
        "latency_ms_p999": 100.0,
        "latency_ms_max": 100.0,
        "first_fetch_us": 1_800_000_001_000_000,
        "last_fetch_us": 1_800_000_001_500_000,
    }
    return {**base, **fields}


def test_stats_rows_shape_the_fold_rows():
    (out,) = stats_rows(
        [fold_row()],
        labels=("job", "local", "topic"),
        batch_id=4,
        batch_time_ms=1_800_000_002_000,
        window_seconds=10,
        folded_us=1_800_000_002_250_000,
    )
    assert out[:9] == (
        "job",
        "local",
        "topic",
        4,
        dt.datetime(2027, 1, 15, 8, 0, 2),
        0,
        dt.datetime(2027, 1, 15, 8, 0),
        dt.datetime(2027, 1, 15, 8, 0, 10),
        "g/run/0",
    )
    records, nbytes, per_sec, mb_per_sec = out[9:13]
    assert (records, nbytes, per_sec, mb_per_sec) == (20, 2 << 20, 2.0, 0.2)
    assert out[17] == [(3, 5), (10, 14)] and out[18] == [7]
    assert out[-1] == 1250  # fetch to batch: first fetch 1.0 s, folded at 2.25 s


def test_consume_line_reads_like_the_consumer_perf_tool():
    line = consume_line(
        [fold_row(), fold_row(partition=1, duplicates=0, lost=0)], 7, 2.0, 1_800_000_002_000_000
    )
    assert ", batch 7, 4.0000 MB, 2.0000 MB.sec, 40 nMsg, 20.0 nMsg.sec" in line
    assert "fetch.time.ms 500" in line and "fetch.nMsg.sec 80.0" in line
    assert "lost +6, duplicated 1, fetch-to-batch ms 1000" in line
    assert "p50 50." in line or "p50 51." in line


def test_produce_summary_parses_as_producer_performance_output():
    totals = ProduceTotals()
    rows = [
        row(0, 0, 1000, ack_ms_sketch=sketch_bytes([float(i % 20) for i in range(1000)])),
        row(1, 0, 1000, first_send_us=NOW - 2_000_000),
    ]
    totals.add(rows)
    parsed = parse_producer_output(totals.summary())
    assert parsed.records == 2000
    assert parsed.records_per_s == 1000.0  # 2000 records sent over 2 s
    assert parsed.avg_latency_ms == 2.0 and parsed.max_latency_ms == 9.0
    assert parsed.p99_ms == 19
    line = produce_line(rows, 3, 2.0)
    assert line.startswith("2000 records sent, 1000.0 records/sec (0.10 MB/sec), 2.0 ms avg")


def test_pending_stats_keep_rows_until_flushed_and_survive_json():
    pending = PendingStats()
    assert pending.add(0, 1_800_000_002_000, 1_800_000_002_250_000, [fold_row()])
    assert pending.add(1, 1_800_000_003_000, 1_800_000_003_250_000, [fold_row(partition=1)])
    again = PendingStats.from_json(pending.to_json())
    assert again == pending
    rows = again.table_rows(("job", "local", "topic"), 10)
    assert [(r[3], r[5]) for r in rows] == [(0, 0), (1, 1)]  # (batch_id, partition)
    assert rows[0][24] == fold_row()["latency_ms_sketch"]  # the sketch bytes come back intact
    again.flushed()
    assert again.flushed_through == 1 and again.batches == []
    # A batch Spark replays after it reached the table is not kept twice.
    assert not again.add(1, 0, 0, [fold_row()]) and again.batches == []
    assert again.add(2, 0, 0, [fold_row()]) and again.last_batch == 2


def test_the_fold_package_imports_no_other_project_package():
    """dev.uatu.fold is shared by the jobs that fold ranges: it may not depend on any of them."""
    fold = ROOT / "jvm" / "src" / "main" / "java" / "dev" / "uatu" / "fold"
    sources = sorted(fold.glob("*.java"))
    assert len(sources) >= 10
    comments = re.compile(r"/\*.*?\*/|//[^\n]*", re.DOTALL)
    project_names = re.compile(r"\bdev\.uatu\.\w+")
    outside = {
        f"{source.name}: {name}"
        for source in sources
        for name in project_names.findall(comments.sub("", source.read_text()))
        if name != "dev.uatu.fold"
    }
    assert outside == set()


def test_the_micro_clock_follows_the_wall_clock_when_it_moves(spark):
    """The send and fetch times of LOAD_GEN records (dev.uatu.fold.MicroClock): sub-millisecond
    from the monotonic clock while it agrees with the wall clock, and the wall clock's again
    once it was stepped, slewed, or moved on over a host's suspension (the monotonic clock
    stood still), instead of an anchor taken when the JVM started."""
    clock = spark.sparkContext._jvm.dev.uatu.fold.MicroClock(1_000_000, 0)
    ms = 1_000_000  # nanoseconds
    assert clock.read(1_000_000, 0) == 1_000_000_000
    assert clock.read(1_000_005, 5 * ms + 123_000) == 1_000_005_123  # finer than the wall's ms
    # Suspended for 473 s: the wall clock moved on, the monotonic clock by 1 s only.
    assert clock.read(1_000_005 + 474_000, 1_005 * ms) == (1_000_005 + 474_000) * 1000
    assert clock.read(1_474_006, 1_006 * ms + 250_000) == 1_474_006_250  # from the new anchor
    # Slewed: 10 s of the monotonic clock are 10.002 s of the wall clock.
    assert clock.read(1_484_008, 11_006 * ms) == 1_484_008_000
    # Within the wall clock's millisecond and the tolerance: the monotonic reading stands.
    assert clock.read(1_484_009, 11_007 * ms + 999_000) == 1_484_009_999
