"""The benches' entry points (`python -m bench.<module> --help`) and their pure parts: the audit
bench's JobGroup and summary, the availability bench's reading of Burrow."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest
from uber.data.kafka.datatransfer.job_pb2 import JobType

from bench.audit_bench import TOPIC, AuditRun, read_job_log, summarize, write_job
from bench.availability_bench import (
    Recording,
    against_burrow,
    burrow_behind,
    burrow_log_times,
    last_commits,
    offset_commit_record,
    replay,
)
from bench.fleet_bench import Truth, compare
from bench.kafka_perf import parse_consumer_output
from bench.startup_bench import (
    COMMITTED_JOBS,
    JOB_TYPES,
    cds_for_run,
    committed_group,
    first_commit_at,
    seconds_after,
    start_up_phases,
    startup_medians,
)
from core.paths import ROOT
from jobs.availability.lag.head_sampler import HeadHistory
from jobs.availability.lag.offsets_topic import OffsetCommit, decode
from jobs.runtime import template
from testing.jobgroups import parse


@pytest.mark.parametrize(
    "module",
    [
        "audit_bench",
        "audit_clients_bench",
        "audit_tiers_bench",
        "availability_bench",
        "controlplane_bench",
        "fleet_bench",
        "fleet_pool",
        "loadgen_bench",
        "pack_merge",
        "replication_bench",
        "startup_bench",
    ],
)
def test_each_bench_answers_help_as_its_make_target_runs_it(module: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", f"bench.{module}", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"usage: python -m bench.{module}")
    assert "--quick" in done.stdout


def test_audit_jobgroup_reads_from_the_earliest_offset_with_the_default_trigger(
    tmp_path: Path,
) -> None:
    conf = write_job("AUDIT_TYPE_EXACT_UNIQ", "127.0.0.1:9", tmp_path / "exact", 1_000_000)
    assert (conf / "clusters.yaml").exists()
    group = json.loads((tmp_path / "exact" / "jobgroup.json").read_text())
    assert group["jobGroupId"] == "bench-exact"
    assert group["type"] == "JOB_TYPE_KAFKA_AUDIT"
    # 1M records per batch over the job's default 10 s trigger: no JobOptions extension.
    assert group["flowControl"] == {"messagesPerSec": 100_000}
    assert "extension" not in group
    source = group["kafkaConsumerTaskGroup"]
    assert source["topic"] == TOPIC
    assert source["consumerGroup"] == "bench-exact"
    assert source["autoOffsetResetPolicy"] == "AUTO_OFFSET_RESET_POLICY_EARLIEST"
    assert source["auditMetadata"]["auditConfigs"] == [
        {"auditType": "AUDIT_TYPE_EXACT_UNIQ", "auditIntervalInSeconds": 60}
    ]
    unlimited = write_job("AUDIT_TYPE_APPROX_UNIQ", "127.0.0.1:9", tmp_path / "approx", 0)
    assert unlimited.is_dir()
    assert "flowControl" not in json.loads((tmp_path / "approx" / "jobgroup.json").read_text())


def test_audit_summary_judges_the_batch_rate_against_the_best_raw_consumer_run(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # A ConsumerPerformance summary: 1M records fetched at 1M records/s, 100 MB/s, after a
    # 1 s group join (500k records/s over the whole run): the bench compares with the fetch.
    raw = parse_consumer_output(
        "start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, "
        "rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec\n"
        "2026-11-21 09:30:17:501, 2026-11-21 09:30:19:501, 100.0, 50.0, 1000000, 500000.0, "
        "1000, 1000, 100.0, 1000000.0\n"
    )
    # EXACT: 1M records in 4 s from the query's start to the counts written = 250k/s = 0.25x
    # raw, under its 0.35x target.
    exact = AuditRun("AUDIT_TYPE_EXACT_UNIQ", 0, 10.0, folded=[500_000, 500_000])
    exact.first_folded_s, exact.written_s = 2.0, 4.0
    exact.message_count, exact.bytes = 1_000_000, 150_000_000
    # APPROX: 1M records in 1.5 s = 667k/s = 0.67x raw, over its 0.5x target; after the first
    # fold (at 1 s) 500k in 0.5 s = 1M/s.
    approx = AuditRun("AUDIT_TYPE_APPROX_UNIQ", 0, 5.0, folded=[500_000, 500_000])
    approx.first_folded_s, approx.written_s = 1.0, 1.5
    approx.message_count, approx.bytes = 1_000_000, 150_000_000
    result = summarize(1_000_000, raw, {"cold": 500_000.0}, [exact, approx])
    assert result["raw"]["fetch_records_per_s"] == 1_000_000.0
    e, a = result["audits"]["AUDIT_TYPE_EXACT_UNIQ"], result["audits"]["AUDIT_TYPE_APPROX_UNIQ"]
    assert e["batch_records_per_s"] == pytest.approx(250_000)
    assert e["e2e_records_per_s"] == pytest.approx(100_000)
    assert e["target_met"] is False
    assert a["batch_records_per_s"] == pytest.approx(666_666.67)
    assert a["steady_records_per_s"] == pytest.approx(1_000_000)
    assert a["target_met"] is True
    table = capsys.readouterr().out
    assert "raw consumer (ConsumerPerformance, fetch)" in table and "1,000,000" in table
    assert "EXACT_UNIQ all batches" in table and "NOT MET" in table


def test_the_audit_bench_times_a_run_from_the_query_start_to_the_counts_written() -> None:
    """The job's own lines (jobs/runtime/runner.py, jobs/audit/job.py): the counts MERGEs run
    after the batches, so the run is timed to the "holds every batch" line."""
    log = (
        "2026-11-25 10:00:10,000 INFO uatu.runner: started query audit-x (id 1), checkpoint c, "
        "bounded run (AvailableNow)\n"
        "2026-11-25 10:00:12,500 INFO uatu.audit: batch 0 folded: 1000 records, 9 bytes; fold "
        "1.0 s, save 0.1 s\n"
        "2026-11-25 10:00:13,000 INFO uatu.runner: audit-x batch 0: 1000 records in 2.9 s (345 "
        "records/s): latest offsets 0.1 s, offset log 0.0 s, planning 0.2 s, the batch 2.6 s, "
        "commit 0.0 s\n"
        "2026-11-25 10:00:14,000 INFO uatu.audit: batch 1 folded: 500 records, 4 bytes; fold "
        "0.5 s, save 0.1 s\n"
        "2026-11-25 10:00:16,250 INFO uatu.audit: audit_counts holds every batch of the run "
        "(through batch 1; the last writes took 1.0 s after the query ended)\n"
    )
    run = AuditRun("AUDIT_TYPE_APPROX_UNIQ", 0)
    read_job_log(run, log)
    assert run.folded == [1000, 500]
    assert run.batches == [(1000, 2.9)]
    assert (run.first_folded_s, run.written_s) == (2.5, 6.25)
    assert run.batch_rate() == pytest.approx(1500 / 6.25)
    assert run.steady_rate() == pytest.approx(500 / 3.75)
    unfinished = AuditRun("AUDIT_TYPE_APPROX_UNIQ", 1)
    read_job_log(unfinished, log.rsplit("\n", 2)[0])  # no "holds every batch" line
    assert unfinished.written_s is None and unfinished.batch_rate() is None


def test_the_startup_bench_reads_the_start_up_line_the_job_writes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level("INFO", logger="uatu.template"):
        template._log_start_up("100.0", 103.5, 104.0, 110.25, (110.5, 110.75, 111.0))
    assert start_up_phases("x INFO uatu.template: " + caplog.messages[0]) == {
        "to_run": 3.5,
        "checks": 0.5,
        "session": 6.25,
        "tables": 0.75,
    }
    assert caplog.messages[0].endswith(
        "(client checks 0.25 s, tables 0.25 s, before the query 0.25 s)"
    )
    caplog.clear()
    with caplog.at_level("INFO", logger="uatu.template"):
        template._log_start_up("", 0.0, 1.0, 2.0, (2.0, 2.0, 3.0))
    assert start_up_phases(caplog.messages[0]) == {"checks": 1.0, "session": 1.0, "tables": 1.0}
    assert start_up_phases("no such line") == {}


def test_the_startup_bench_alternates_cds_on_off_off_on_and_summarizes_each_side() -> None:
    assert [cds_for_run("both", i) for i in range(6)] == [True, False, False, True, True, False]
    assert {cds_for_run("on", i) for i in range(4)} == {True}
    assert {cds_for_run("off", i) for i in range(4)} == {False}
    runs = [
        {"first_record_s": 9.0, "session": 3.0, "to_run": 2.0},
        {"first_record_s": 11.0, "session": 5.0},
        {"session": 4.0},  # no record arrived: the run counts in its phases only
    ]
    assert startup_medians(runs) == {
        "launch_to_first_record_s_median": 10.0,
        "to_run_s_median": 2.0,
        "checks_s_median": None,
        "session_s_median": 4.0,
        "tables_s_median": None,
    }


def test_the_startup_bench_times_an_audit_run_by_its_log_lines() -> None:
    log = (
        "2026-11-25 10:00:05,250 INFO uatu.audit: batch 0 folded: 20 records, 9 bytes; fold "
        "0.3 s, save 0.1 s\n"
        "2026-11-25 10:00:07,000 INFO uatu.audit: audit_counts: batch 0 written in 1.5 s (MERGE)\n"
    )
    launched = datetime(2026, 11, 25, 10, 0, 0).timestamp()
    assert seconds_after(log, "uatu.audit: batch 0 folded", launched) == 5.25
    assert seconds_after(log, "audit_counts: batch 0 written", launched) == 7.0
    assert seconds_after(log, "audit_counts: batch 1 written", launched) is None
    runs = [{"first_batch_s": 5.0, "first_counts_s": 7.0}, {"first_batch_s": 6.0}]
    medians = startup_medians(runs)
    assert (
        medians["launch_to_first_batch_s_median"],
        medians["launch_to_first_counts_s_median"],
    ) == (5.5, 7.0)
    assert "launch_to_first_record_s_median" not in medians


def test_the_replication_bench_counts_the_busiest_window_of_append_times() -> None:
    import numpy as np

    from bench.replication_bench import most_in_window

    appended = np.array([0, 500, 999, 1000, 1999, 5000, 5001], dtype=np.int64)
    assert most_in_window(appended, 1000) == 3  # (0, 1000]: 500, 999, 1000
    assert most_in_window(appended, 10_000) == 7
    assert most_in_window(np.empty(0, dtype=np.int64), 1000) == 0


def test_the_replication_bench_alternates_the_tools_order_from_round_to_round() -> None:
    from bench.replication_bench import round_order, round_source_topic

    assert [round_order(r) for r in (1, 2, 3, 4)] == [
        ("spark", "mm2"),
        ("mm2", "spark"),
        ("spark", "mm2"),
        ("mm2", "spark"),
    ]
    with pytest.raises(ValueError, match="from 1"):
        round_order(0)
    # Every round copies a topic of its own (MM2 would resume a copied one and find nothing).
    topics = [round_source_topic(r) for r in (1, 2, 3)]
    assert topics == ["bench-src", "bench-src-r2", "bench-src-r3"]


def test_the_replication_bench_gives_mm2_the_jobs_producer_and_fetch_settings() -> None:
    from bench.replication_bench import MM2_EXTRA, mm2_client_settings
    from jobs.runtime.kafka_source import RANGE_FETCH_CONFIG

    props = mm2_client_settings({"acks": "all"}, {"max.poll.records": "7"})
    # MM2's cluster aliases are "source" and "target" (devservices.mirror_maker).
    assert props == {
        "target.producer.acks": "all",
        "target.producer.max.in.flight.requests.per.connection": "5",
        "source.consumer.max.poll.records": "7",
    }
    assert RANGE_FETCH_CONFIG  # the bench's MM2 gets every fetch setting the job uses
    for key, value in RANGE_FETCH_CONFIG.items():
        assert MM2_EXTRA[f"source.consumer.{key}"] == value


def test_the_replication_bench_fails_an_mm2_run_whose_consumers_logged_other_settings() -> None:
    from bench.replication_bench import fetch_settings_error, logged_fetch_settings

    wanted = {"max.poll.records": "10000", "fetch.max.bytes": "33554432"}
    good = {"max.poll.records": "10000", "fetch.max.bytes": "33554432", "client.id": "a"}
    logged = logged_fetch_settings([good, {**good, "client.id": "b"}], wanted)
    assert logged == {"max.poll.records": ["10000"], "fetch.max.bytes": ["33554432"]}
    assert fetch_settings_error(logged, wanted) == ""
    mixed = logged_fetch_settings([good, {**good, "max.poll.records": "500"}], wanted)
    assert mixed["max.poll.records"] == ["10000", "500"]
    assert "max.poll.records" in fetch_settings_error(mixed, wanted)
    # No consumer config in the log at all is no proof either.
    assert fetch_settings_error(logged_fetch_settings([], wanted), wanted)


def test_the_replication_bench_takes_the_median_per_tool_and_the_ratio_of_the_medians() -> None:
    from bench.replication_bench import CopyRun, CopyTiming, median_ratios, round_medians

    def run(tool: str, rate: float, appended: float | None, done: float, exit_s: float | None):
        return CopyRun(
            tool,
            "t",
            1_000_000,
            timing=CopyTiming(records_per_s=rate, launch_to_copied_s=done),
            append_records_per_s=appended,
            launch_to_exit_s=exit_s,
        )

    runs = [
        run("spark", 300_000, 310_000, 16.0, 18.0),
        run("mm2", 200_000, None, 6.0, None),
        run("mm2", 260_000, 250_000, 7.0, None),
        run("spark", 500_000, 330_000, 14.0, 17.0),
        run("spark", 400_000, 320_000, 15.0, 20.0),
    ]
    medians = round_medians(runs)
    assert medians["spark"] == {
        "records_per_s": 400_000,
        "append_records_per_s": 320_000,
        "launch_to_copied_s": 15.0,
        "launch_to_exit_s": 18.0,
        "runs": 3,
    }
    # An even count: the mean of the middle two; a figure no run measured is left out.
    assert medians["mm2"] == {
        "records_per_s": 230_000,
        "append_records_per_s": 250_000,
        "launch_to_copied_s": 6.5,
        "launch_to_exit_s": None,
        "runs": 2,
    }
    ratios = median_ratios(medians)
    assert ratios["polled"] == pytest.approx(400_000 / 230_000)
    assert ratios["by_append"] == pytest.approx(320_000 / 250_000)
    assert ratios["launch_to_done"] == pytest.approx(15.0 / 6.5)
    assert median_ratios({"spark": medians["spark"]}) == {
        "polled": None,
        "by_append": None,
        "launch_to_done": None,
    }


def test_each_mm2_run_of_the_replication_bench_gets_its_own_worker_group_and_topics() -> None:
    from bench.replication_bench import mm2_own_state

    first, second = mm2_own_state("bench-src"), mm2_own_state("bench-src-r2")
    # Connect's worker settings of the flow come from the target cluster's properties.
    assert set(first) == {
        "target.group.id",
        "target.offset.storage.topic",
        "target.config.storage.topic",
        "target.status.storage.topic",
    }
    assert not set(first.values()) & set(second.values())
    assert len(set(first.values())) == 4


def test_the_replication_bench_starts_mm2_with_the_jobs_heap_collector_and_settings(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from bench import replication_bench as rb
    from devservices.kafka import G1_GC

    calls: list[dict[str, object]] = []
    monkeypatch.setattr(rb, "start_mirror_maker", lambda *a, **kw: calls.append(kw))
    cluster = type("Cluster", (), {"bootstrap_servers": "127.0.0.1:9"})()
    bench = rb.Bench(tmp_path, cluster, cluster, 4, 200)  # type: ignore[arg-type]
    rb.mirror_maker(bench, "bench-src")
    (kw,) = calls
    assert kw["heap"] == rb.JOB_HEAP == "2g"  # spark_job's driver memory
    assert kw["gc"] == G1_GC
    assert kw["tasks"] == 4
    assert kw["log_consumer_configs"] is True
    extra = kw["extra"]
    assert isinstance(extra, dict)
    assert extra["source.consumer.max.poll.records"] == "10000"
    assert extra["target.group.id"] == "mm2-bench-src"


def test_the_replication_bench_times_a_copy_from_the_first_records_and_from_the_start() -> None:
    import time

    from bench.replication_bench import watch_copy

    class Counter:
        """The destination as polled: empty twice, then half the records, then all."""

        def __init__(self, counts: list[int]) -> None:
            self.counts = counts

        def count(self) -> int:
            return self.counts.pop(0) if len(self.counts) > 1 else self.counts[0]

    # 10 records were there before (a warm backlog's steady records): they do not count.
    launched = time.monotonic()
    timing = watch_copy(Counter([10, 10, 60, 110]), 100, launched, lambda: True, 60, already=10)  # type: ignore[arg-type]
    assert timing.error == ""
    assert timing.first_count == 50
    assert timing.launch_to_first_s is not None and timing.launch_to_copied_s is not None
    assert 0 < timing.launch_to_first_s < timing.launch_to_copied_s
    span = timing.launch_to_copied_s - timing.launch_to_first_s
    assert timing.records_per_s == pytest.approx(50 / span)
    # From the start: all 100 over the whole wait, the empty polls included.
    assert timing.from_start_records_per_s == pytest.approx(100 / timing.launch_to_copied_s)
    assert timing.from_start_records_per_s < timing.records_per_s


def test_the_replication_summary_gives_each_round_the_medians_and_the_warm_resume_ratio(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from bench.replication_bench import CopyRun, CopyTiming, summarize

    def run(tool: str, rnd: int, pos: int, rate: float, done: float) -> CopyRun:
        timing = CopyTiming(
            records_per_s=rate, launch_to_copied_s=done, from_start_records_per_s=100 / done
        )
        return CopyRun(tool, "t", 100, timing=timing, round=rnd, position=pos, load_1m=2.5)

    backlog = [
        run("spark", 1, 1, 300.0, 20.0),
        run("mm2", 1, 2, 200.0, 8.0),
        run("mm2", 2, 1, 100.0, 10.0),
        run("spark", 2, 2, 500.0, 30.0),
    ]
    # Warm: the job copies faster once it starts (polled) but starts later (from the resume).
    warm = [run("spark", 0, 0, 900.0, 5.0), run("mm2", 0, 0, 300.0, 1.0)]
    ceiling = {"consumer": {"fetch_records_per_s": 1000.0}, "producer": {"records_per_s": 800.0}}
    summarize(ceiling, backlog, [], warm, [], {})
    out = capsys.readouterr().out
    assert "Spark replication job, cold r1 (1st)" in out
    assert "MirrorMaker 2, cold r2 (1st)" in out
    assert "Spark replication job, cold r2 (2nd)" in out
    # Medians: job 400/s and 25 s, MM2 150/s and 9 s.
    assert "Spark / MM2, cold backlog (ratio of the medians): 2.67x polled" in out
    assert "launch->done 2.78x" in out
    assert "warm backlog: 0.20x from the resume, 3.00x polled" in out
    assert "Spark (median, cold) / ceiling: 0.50x" in out


def _commit(group: str, topic: str, partition: int, offset: int, ms: int) -> tuple:
    return (*offset_commit_record(group, topic, partition, offset, ms), ms)


def test_the_bench_writes_commit_records_as_the_broker_does() -> None:
    key, value = offset_commit_record("g", "t", 3, 42, 1_000)
    assert decode(key, value) == OffsetCommit("g", "t", 3, 42, 1_000)
    assert key == b"\x00\x01" + b"\x00\x01g" + b"\x00\x01t" + struct.pack(">i", 3)


def test_the_last_commits_of_a_stream_are_each_partitions_newest_and_tombstones_remove_them() -> (
    None
):
    g2_key = _commit("g2", "t", 0, 0, 0)[0]
    records = [
        _commit("g1", "t", 0, 5, 1000),
        _commit("g1", "t", 1, 7, 1001),
        _commit("g2", "t", 0, 3, 1002),
        _commit("g1", "t", 0, 4, 1003),  # a commit back: still the newest
        (g2_key, None, 1004),  # g2's offset deleted: g2 has nothing left
        _commit("g3", "u", 2, 9, 1005),
    ]
    rec = Recording(records, len(records) - 1, {}, [], {})
    assert last_commits(rec) == {
        "g1": {("t", 0): (4, 1003), ("t", 1): (7, 1001)},
        "g3": {("u", 2): (9, 1005)},
    }


def test_the_job_replay_evaluates_when_the_job_would_and_records_every_commit() -> None:
    """Mode "job" in batches of 2: every commit recorded; the groups evaluated in the first
    batch and then in the first batch at least `status_interval_ms` (1 s) of commit time after
    the last evaluated one, as `job._evaluate_groups` does."""
    times = [0, 100, 400, 900, 1_000, 1_100, 1_500, 2_100, 2_200, 2_300]
    records = [_commit(f"g{i % 3}", "t", i % 2, 10 * i, ms) for i, ms in enumerate(times)]
    last = {(f"g{i % 3}", "t", i % 2): 10 * i for i in range(len(times))}
    rec = Recording(records, len(records), last, [(0, {("t", 0): 100, ("t", 1): 100})], {})
    history = HeadHistory()
    history.add(0, {("t", 0): 100, ("t", 1): 100})
    _, tracker, batches, evaluated, evaluations = replay(rec, history, 2, "job")
    assert tracker.committed() == last and (batches, evaluations) == (5, 3)
    # Batches end at 100, 900, 1_100, 2_100, 2_300 ms: evaluated at 100, 1_100 and 2_100, with
    # 2, 3 and 3 groups.
    assert evaluated == 2 + 3 + 3


def _ring(*commits: tuple[int, int] | None) -> dict:
    return {
        "offsets": [
            None if c is None else {"offset": c[0], "timestamp": c[1], "lag": 0} for c in commits
        ],
        "owner": "",
    }


def test_burrow_is_behind_on_a_partition_until_its_newest_commit_is_the_last_one_made() -> None:
    expected = {
        ("t", 0): (10, 1000),
        ("t", 1): (20, 2000),
        ("t", 2): (30, 3000),
        ("u", 0): (5, 500),
    }
    topics = {
        "t": [
            _ring(None, (9, 900), (10, 1000)),  # newest = the last commit: caught up
            _ring((20, 1999), None),  # same offset, an earlier commit (a stalled group)
            _ring((30, 3000), (29, 2900)),  # the last commit is not the newest one
        ],
        "u": [_ring(None, None)],  # no commit stored yet
    }
    assert burrow_behind(topics, expected) == [("t", 1), ("t", 2), ("u", 0)]
    topics["t"][1] = _ring((19, 1900), (20, 2000))
    topics["t"][2] = _ring((29, 2900), (30, 3000))
    topics["u"][0] = _ring((5, 500))
    assert burrow_behind(topics, expected) == []
    # A group Burrow has not stored, or a partition it does not list yet.
    assert burrow_behind(None, expected) == sorted(expected)
    assert burrow_behind({"t": topics["t"][:1]}, expected) == [("t", 1), ("t", 2), ("u", 0)]


def test_the_bench_reads_burrows_start_and_its_consumer_start_from_its_log() -> None:
    log = "\n".join(
        [
            "Reading configuration from /x",
            '{"level":"info","ts":100.5,"msg":"Started Burrow"}',
            '{"level":"info","ts":101.0,"msg":"starting","type":"module"}',
            '{"level":"info","ts":102.25,"msg":"starting consumers","count":50}',
            '{"level":"info","ts":103.0,"msg":"starting consumers","count":50}',
            "Burrow failed at ...",
        ]
    )
    assert burrow_log_times(log) == {"first_line": 100.5, "starting_consumers": 102.25}
    assert burrow_log_times('{"ts":1.0,"msg":"Started Burrow"}') == {"first_line": 1.0}


def test_the_lag_evaluators_ratios_use_burrows_figures_of_the_same_run() -> None:
    rows = [{"median_commits_per_s": 30_000.0}, {"median_commits_per_s": 5_000.0}]
    against_burrow(rows, {"commits_per_s": 20_000.0, "commits_per_s_warm": 50_000.0})
    assert [(r["x_burrow"], r["x_burrow_warm"]) for r in rows] == [(1.5, 0.6), (0.25, 0.1)]
    # Not measured (--replay) or never caught up: no ratio, not one against a constant.
    against_burrow(rows, None)
    assert [(r["x_burrow"], r["x_burrow_warm"]) for r in rows] == [(None, None), (None, None)]
    against_burrow(rows, {"commits_per_s": 20_000.0, "commits_per_s_warm": None})
    assert [r["x_burrow_warm"] for r in rows] == [None, None]


@pytest.mark.parametrize("job", COMMITTED_JOBS)
def test_the_startup_bench_builds_a_jobgroup_of_each_committed_type(job: str) -> None:
    group = parse(committed_group(job, f"startup-{job}-0", "127.0.0.1:5000"))
    assert JobType.Name(group.type) == f"JOB_TYPE_{JOB_TYPES[job]}"
    assert group.job_group_id == f"startup-{job}-0"


def test_the_startup_bench_times_a_run_to_the_oldest_first_commit_of_its_queries(
    tmp_path: Path,
) -> None:
    assert first_commit_at(tmp_path) is None
    for query, mtime in (("topics/a", 200.0), ("topics/b", 150.0)):
        commits = tmp_path / query / "commits"
        commits.mkdir(parents=True)
        (commits / "1").touch()  # a later batch never counts
        os.utime(commits / "1", (100.0, 100.0))
        (commits / "0").touch()
        os.utime(commits / "0", (mtime, mtime))
    assert first_commit_at(tmp_path) == 150.0


def test_the_fleet_bench_compares_every_window_with_what_it_sent() -> None:
    """Counts and EXACT distinct counts must be equal, APPROX within 3 standard errors; a
    window the table lacks, or miscounts, is named."""
    truth = Truth()
    truth.sent[("t", 0, 60)] = 1000
    truth.repeats[("t", 0, 60)] = 100
    truth.sent[("t", 1, 60)] = 10
    at = datetime.fromtimestamp(60)

    def row(audit_type, partition, count, unique):
        return {
            "job_group_id": "g",
            "topic": "t",
            "partition": partition,
            "audit_type": audit_type,
            "window_start": at,
            "message_count": count,
            "unique_count": unique,
        }

    exact, approx = "AUDIT_TYPE_EXACT_UNIQ", "AUDIT_TYPE_APPROX_UNIQ"
    right = [row(exact, 0, 1000, 900), row(approx, 0, 1000, 930), row(exact, 1, 10, 10)]
    right.append(row(approx, 1, 10, 10))
    assert compare([*right, {**right[0], "job_group_id": "other"}], truth, "g") == {
        "windows_compared": 4,
        "windows_wrong": 0,
        "first_wrong": [],
        "rows_not_sent": 0,
        "approx_outside_3_sigma": 0,
    }
    wrong = [row(exact, 0, 1000, 901), row(approx, 0, 1000, 1100), row(exact, 1, 9, 9)]
    stray = {**wrong[0], "window_start": datetime.fromtimestamp(120)}
    result = compare([*wrong, stray], truth, "g")
    assert result["rows_not_sent"] == 1
    assert result["windows_wrong"] == 3  # EXACT distinct, the short count, the missing APPROX
    assert result["approx_outside_3_sigma"] == 1


def test_the_pool_bench_finds_a_dispatcher_that_skipped_or_repeated_records() -> None:
    from bench.fleet_dispatch import dispatched, gaps, once_or_redelivered, sent_to

    sent = sent_to(
        ["pool.d000"], {("pool.d000", 0, 60): 3, ("pool.d000", 0, 120): 2, ("pool.a000", 0, 60): 9}
    )
    assert sent == {"pool.d000": {0: 5}}
    row = {"job_group_id": "d-pool.d000", "topic": "pool.d000", "tier": "main", "partition": 0}
    rows = [
        {
            **row,
            "records": 3,
            "redelivered": 0,
            "committed": 3,
            "first_offset": 0,
            "last_offset": 2,
        },
        {
            **row,
            "records": 3,
            "redelivered": 2,
            "committed": 3,
            "first_offset": 2,
            "last_offset": 4,
        },
        {
            **row,
            "tier": "retry-1",
            "records": 7,
            "redelivered": 0,
            "committed": 7,
            "first_offset": 0,
            "last_offset": 6,
        },
        {
            **row,
            "job_group_id": "d-other",
            "records": 1,
            "redelivered": 0,
            "committed": 1,
            "first_offset": 9,
            "last_offset": 9,
        },
    ]
    got = dispatched(rows, "d-pool.d000", "pool.d000")
    assert (got["records"], got["redelivered"], got["committed"]) == (6, 2, 6)
    assert gaps(got["ranges"][0], 5) == 0
    assert gaps([(0, 1), (3, 4)], 5) == 1  # offset 2 never dispatched
    assert gaps([(0, 2)], 5) == 2
    # A batch cut short by a crash: recorded again as redelivered, with or without the rows
    # its first attempt wrote; more than that, or fewer than sent, or one not OK, is wrong.
    assert once_or_redelivered({"records": 5, "redelivered": 2, "committed": 5}, 5)
    assert once_or_redelivered({"records": 7, "redelivered": 2, "committed": 7}, 5)
    assert not once_or_redelivered({"records": 8, "redelivered": 2, "committed": 8}, 5)
    assert not once_or_redelivered({"records": 4, "redelivered": 0, "committed": 4}, 5)
    assert not once_or_redelivered({"records": 5, "redelivered": 0, "committed": 4}, 5)
