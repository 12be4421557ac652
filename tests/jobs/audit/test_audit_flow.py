"""The audit job's byte cap (`jobs/audit/flow.py`, `AuditSpec.max_offsets_per_trigger`),
without a JVM: the record budget of a batch, and the pacing measured over sliding 10 s windows
of a simulated run whose record sizes differ from the sampled mean."""

from __future__ import annotations

import dataclasses
import random

import pytest

from core.config import ClusterConfig
from core.spec import OutputSpec, SourceSpec
from jobs.audit.flow import BytePacer
from jobs.audit.spec import AuditSpec, AuditWindow, FieldRef

SPEC = AuditSpec(
    job_group_id="flow",
    source=SourceSpec(ClusterConfig("local", "127.0.0.1:9"), "t", "cg"),
    audited_cluster="local",
    audited_topic="t",
    windows=(AuditWindow("AUDIT_TYPE_APPROX_UNIQ", 60),),
    event_time=FieldRef("kafka_timestamp"),
    dedupe_key=FieldRef("key_and_value"),
    allowed_lateness_seconds=None,
    max_future_skew_seconds=86400,
    hll_lg_config_k=12,
    max_messages_per_sec=0,
    trigger_interval_seconds=2,
    output=OutputSpec("/c", {"audit_counts": "/w/c"}),
)


def test_record_budget_is_the_tighter_of_both_caps():
    assert SPEC.max_offsets_per_trigger() is None
    by_bytes = dataclasses.replace(SPEC, max_bytes_per_sec=100_000)
    assert by_bytes.max_offsets_per_trigger(200.0) == 1000  # 100 kB/s x 2 s / 200 B
    assert by_bytes.max_offsets_per_trigger(None) == 195  # unknown size: 1 KiB assumed
    both = dataclasses.replace(by_bytes, max_messages_per_sec=300)
    assert both.max_offsets_per_trigger(200.0) == 600
    assert both.max_offsets_per_trigger(1000.0) == 200
    assert by_bytes.max_offsets_per_trigger(10**9) == 1  # never 0: a batch always advances


def windowed_max(events: list[tuple[float, float, int]], window: float) -> float:
    """The most bytes read in any `window` seconds; events are (start, end, bytes) read evenly
    over [start, end]. The maximum of a sliding sum of such ramps starts at an event's start or
    ends at an event's end, so those are the windows checked."""

    def read_in(lo: float, hi: float) -> float:
        total = 0.0
        for start, end, n in events:
            if end <= start:
                total += n if lo <= start <= hi else 0
                continue
            overlap = max(0.0, min(hi, end) - max(lo, start))
            total += n * overlap / (end - start)
        return total

    starts = [s for s, _, _ in events] + [e - window for _, e, _ in events]
    return max(read_in(t, t + window) for t in starts)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_paced_batches_hold_the_cap_within_10_percent_over_every_10_s_window(seed):
    rng = random.Random(seed)
    cap = 50_000.0  # bytes/s
    spec = dataclasses.replace(SPEC, max_bytes_per_sec=cap, trigger_interval_seconds=1)
    sampled_mean = 100.0
    budget = spec.max_offsets_per_trigger(sampled_mean)
    assert budget == 500
    pacer = BytePacer(cap)
    now, events = 0.0, []
    for _ in range(120):
        # Records up to 1.5x the sampled mean, read at 5 to 50 times the cap.
        nbytes = sum(int(sampled_mean * rng.uniform(0.5, 1.5)) for _ in range(budget))
        started = now
        finished = started + nbytes / (cap * rng.uniform(5, 50))
        events.append((started, finished, nbytes))
        wait = pacer.delay(started, nbytes, finished)
        assert wait >= 0
        now = finished + wait + rng.uniform(0, 0.05)  # Spark's planning between batches
    assert windowed_max(events, 10.0) <= 1.1 * cap * 10
    total_time = events[-1][1] - events[0][0]
    assert sum(n for _, _, n in events) / total_time == pytest.approx(cap, rel=0.05)


def test_without_the_pacer_the_same_run_breaks_the_cap():
    """The check above can fail: records larger than sampled, read unpaced, overshoot."""
    cap, now, events = 50_000.0, 0.0, []
    for _ in range(60):
        nbytes = 500 * 150  # the budget of a 100-byte mean, at 150 bytes a record
        events.append((now, now + 0.2, nbytes))
        now += 1.0  # the trigger interval, no pacing
    assert windowed_max(events, 10.0) > 1.1 * cap * 10


def test_idle_time_builds_up_no_credit():
    pacer = BytePacer(1000.0)
    assert pacer.delay(0.0, 1000, 0.1) == pytest.approx(0.9)
    # An idle minute, then a batch of 2,000 bytes: it still takes its 2 s.
    assert pacer.delay(61.0, 2000, 61.5) == pytest.approx(1.5)
    assert pacer.delay(63.0, 0, 63.0) == 0
