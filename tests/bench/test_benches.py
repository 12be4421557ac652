"""The benches' entry points (`python -m bench.<module> --help`) and their pure parts: the audit
bench's JobGroup and summary, the availability bench's reading of Burrow."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from bench.audit_bench import TOPIC, AuditRun, summarize, write_job
from bench.availability_bench import (
    Recording,
    against_burrow,
    burrow_behind,
    burrow_log_times,
    last_commits,
    offset_commit_record,
)
from bench.kafka_perf import parse_consumer_output
from bench.startup_bench import start_up_phases
from core.paths import ROOT
from jobs.availability.lag.offsets_topic import OffsetCommit, decode
from jobs.runtime import template


@pytest.mark.parametrize(
    "module",
    [
        "audit_bench",
        "audit_clients_bench",
        "availability_bench",
        "controlplane_bench",
        "loadgen_bench",
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
    # EXACT: 1M records in 2 + 2 s = 250k/s = 0.25x raw, under its 0.35x target.
    exact = AuditRun("AUDIT_TYPE_EXACT_UNIQ", 0, 10.0, [(500_000, 2.0), (500_000, 2.0)])
    exact.message_count, exact.bytes = 1_000_000, 150_000_000
    # APPROX: 1M records in 1 + 0.5 s = 667k/s = 0.67x raw, over its 0.5x target; after the
    # first batch 500k in 0.5 s = 1M/s.
    approx = AuditRun("AUDIT_TYPE_APPROX_UNIQ", 0, 5.0, [(500_000, 1.0), (500_000, 0.5)])
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


def test_the_startup_bench_reads_the_start_up_line_the_job_writes(
    monkeypatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv(template.LAUNCHED_AT, "100.0")
    with caplog.at_level("INFO", logger="uatu.template"):
        template._log_start_up(103.5, 104.0, 110.25, 111.0)
    assert start_up_phases("x INFO uatu.template: " + caplog.messages[0]) == {
        "to_run": 3.5,
        "checks": 0.5,
        "session": 6.25,
        "tables": 0.75,
    }
    monkeypatch.delenv(template.LAUNCHED_AT)
    caplog.clear()
    with caplog.at_level("INFO", logger="uatu.template"):
        template._log_start_up(0.0, 1.0, 2.0, 3.0)
    assert start_up_phases(caplog.messages[0]) == {"checks": 1.0, "session": 1.0, "tables": 1.0}
    assert start_up_phases("no such line") == {}


def test_the_replication_bench_counts_the_busiest_window_of_append_times() -> None:
    import numpy as np

    from bench.replication_bench import most_in_window

    appended = np.array([0, 500, 999, 1000, 1999, 5000, 5001], dtype=np.int64)
    assert most_in_window(appended, 1000) == 3  # (0, 1000]: 500, 999, 1000
    assert most_in_window(appended, 10_000) == 7
    assert most_in_window(np.empty(0, dtype=np.int64), 1000) == 0


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
