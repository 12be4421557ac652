"""bench._common: the statistics, the result files and the run plumbing every bench shares.

All fast and local: no broker, no JVM, no Spark. The git tests build a throwaway repository.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pytest

from bench._common import (
    Commit,
    bench_parser,
    clean_env,
    current_commit,
    jobs_zip_is_stale,
    latency_quantiles,
    latency_timeline,
    median,
    median_or_none,
    parse_args,
    percentiles,
    result_file_name,
    seconds_text,
    spark_submit_env,
    work_dir,
    write_latest,
    write_result,
)

FAKE_SHA = "0123456789abcdef0123456789abcdef01234567"
AT = datetime(2026, 11, 21, 7, 8, 12, tzinfo=UTC)

# --- statistics ------------------------------------------------------------------------------


def test_median_of_odd_and_even_counts() -> None:
    assert median([3.0, 1.0, 2.0]) == 2.0
    assert median([4.0, 1.0, 3.0, 2.0]) == 2.5  # mean of the two middle values
    assert median(x for x in (7.0,)) == 7.0  # any iterable, as the benches pass generators
    with pytest.raises(statistics.StatisticsError):
        median([])


def test_median_or_none_says_none_for_no_values() -> None:
    assert median_or_none([]) is None
    assert median_or_none([5.0, 1.0]) == 3.0


def test_percentiles_interpolate_between_ranks() -> None:
    # Sorted 1, 2, 3, 4: percentile q sits at rank 3 * q / 100.
    # q=50 -> rank 1.5 -> 2 + 0.5 * (3 - 2) = 2.5; q=99 -> rank 2.97 -> 3 + 0.97 = 3.97.
    got = percentiles([4.0, 1.0, 3.0, 2.0], [0, 50, 99, 100])
    assert got == pytest.approx([1.0, 2.5, 3.97, 4.0])
    # 10, 20: q=25 -> rank 0.25 -> 10 + 0.25 * 10 = 12.5.
    assert percentiles([20, 10], [25]) == pytest.approx([12.5])
    with pytest.raises(ValueError):
        percentiles([], [50])


def test_latency_quantiles_of_one_to_a_hundred() -> None:
    # Ranks 0..99: p50 at 49.5 -> 50.5; p99 at 98.01 -> 99 + 0.01 = 99.01.
    got = latency_quantiles(np.arange(1, 101, dtype=np.int64))
    assert got == pytest.approx({"p50": 50.5, "p99": 99.01, "max": 100.0})
    assert latency_quantiles(np.empty(0, dtype=np.int64)) is None
    assert latency_quantiles([]) is None


def test_latency_timeline_puts_each_record_in_its_slice() -> None:
    # Appends at 0..9 s (one a second, latency = the second) and a stall at 12.5 s.
    at = np.array([*(1_000_000 + 1000 * i for i in range(10)), 1_012_500], dtype=np.int64)
    latency = np.array([*range(10), 400], dtype=np.int64)
    got = latency_timeline(at, latency, 5)
    assert [(s["from_s"], s["records"], s["max"]) for s in got] == [
        (0.0, 5, 4.0),
        (5.0, 5, 9.0),
        (10.0, 1, 400.0),
    ]
    assert got[0]["p50"] == 2.0
    assert latency_timeline(np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64), 5) == []
    with pytest.raises(ValueError, match="3 times for 2 latencies"):
        latency_timeline(np.arange(3), np.arange(2), 5)
    with pytest.raises(ValueError, match="slice_s must be positive"):
        latency_timeline(at, latency, 0)


def test_seconds_text() -> None:
    assert seconds_text(None) == "n/a"
    assert seconds_text(12.34) == "12.3 s"
    assert seconds_text(-0.96) == "-1.0 s"


# --- result files ----------------------------------------------------------------------------


def test_result_file_name_is_bench_utc_time_and_short_commit() -> None:
    commit = Commit(FAKE_SHA, dirty=False)
    assert result_file_name("audit", AT, commit) == "audit-20261121T070812Z-0123456.json"
    # The same instant given in another zone names the same file.
    plus_two = AT.astimezone(timezone(timedelta(hours=2)))
    assert result_file_name("audit", plus_two, commit) == "audit-20261121T070812Z-0123456.json"


def test_write_result_records_commit_time_machine_arguments_and_figures(tmp_path: Path) -> None:
    results = tmp_path / "docs" / "benchmarks"  # does not exist yet
    options = argparse.Namespace(records=5, replay=Path("/saved/stream.bin"))
    figures = {"records_per_s": 1234.5, "log": Path("/var/bench/x.log"), "runs": [1, 2]}
    path = write_result(
        "replication",
        figures,
        options,
        argv=["--records", "5"],
        results_dir=results,
        commit=Commit(FAKE_SHA, dirty=True),
        at=AT,
    )
    assert path == results / "replication-20261121T070812Z-0123456.json"
    record = json.loads(path.read_text())
    assert record["bench"] == "replication"
    assert record["commit"] == FAKE_SHA
    assert record["dirty"] is True
    assert record["utc"] == "2026-11-21T07:08:12Z"
    assert record["argv"] == ["--records", "5"]
    assert record["options"] == {"records": 5, "replay": "/saved/stream.bin"}
    assert record["figures"] == {
        "records_per_s": 1234.5,
        "log": "/var/bench/x.log",
        "runs": [1, 2],
    }
    host = record["machine"]
    assert host["cpus"] == os.cpu_count()
    assert host["memory_bytes"] > 2**20
    assert host["kernel"] == f"{platform.system()} {platform.release()}"
    assert host["arch"] == platform.machine()


def test_write_result_takes_argv_from_the_process_by_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sys.argv", ["bench.audit_bench", "--quick"])
    path = write_result(
        "audit", {}, {"quick": True}, results_dir=tmp_path, commit=Commit(FAKE_SHA, None), at=AT
    )
    record = json.loads(path.read_text())
    assert record["argv"] == ["--quick"]
    assert record["options"] == {"quick": True}
    assert record["dirty"] is None


def test_write_latest_adds_finished_at_and_replaces_the_previous_run(tmp_path: Path) -> None:
    path = tmp_path / "audit-bench-result.json"
    write_latest(path, {"records": 1})
    write_latest(path, {"records": 2})
    latest = json.loads(path.read_text())
    assert latest["records"] == 2
    # Local time with its UTC offset, e.g. "2026-11-21T07:08:12+0000".
    assert datetime.strptime(latest["finished_at"], "%Y-%m-%dT%H:%M:%S%z").tzinfo is not None


def _git(repo: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.invalid",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.invalid",
    }
    done = subprocess.run(
        ["git", "-C", str(repo), "-c", "commit.gpgsign=false", *args],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    return done.stdout.strip()


def test_current_commit_and_what_makes_a_tree_dirty(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "bench.py").write_text("x = 1\n")
    _git(repo, "add", "bench.py")
    _git(repo, "commit", "-q", "-m", "first")
    head = _git(repo, "rev-parse", "HEAD")
    assert current_commit(repo) == Commit(head, dirty=False)
    # A recorded result is not a change to the measured code.
    (repo / "docs" / "benchmarks").mkdir(parents=True)
    (repo / "docs" / "benchmarks" / "audit-x.json").write_text("{}\n")
    assert current_commit(repo).dirty is False
    # An untracked source file is.
    (repo / "helper.py").write_text("y = 2\n")
    assert current_commit(repo).dirty is True
    (repo / "helper.py").unlink()
    # So is an edit to a tracked file.
    (repo / "bench.py").write_text("x = 2\n")
    assert current_commit(repo) == Commit(head, dirty=True)


def test_current_commit_outside_a_checkout(tmp_path: Path) -> None:
    assert current_commit(tmp_path) == Commit("unknown", None)


# --- work dirs, environments, the job zip ----------------------------------------------------


def test_work_dir_is_removed_however_the_block_ends(tmp_path: Path) -> None:
    parent = tmp_path / "bench"  # created on demand
    with work_dir("run-", parent=parent) as path:
        assert path.parent == parent and path.name.startswith("run-")
        (path / "data").write_text("x")
    assert not path.exists()
    with pytest.raises(RuntimeError), work_dir("run-", parent=parent) as failed:
        raise RuntimeError("bench failed")
    assert not failed.exists()


def test_work_dir_kept_on_request(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with work_dir("run-", parent=tmp_path, keep=True) as path:
        pass
    assert path.is_dir()
    assert f"kept {path}" in capsys.readouterr().out


def test_clean_env_drops_storage_overrides_and_what_the_caller_names(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("UATU_WAREHOUSE", "/elsewhere/wh")
    monkeypatch.setenv("UATU_CHECKPOINTS", "/elsewhere/ck")
    monkeypatch.setenv("UATU_WORKER_ID", "7")
    monkeypatch.setenv("BENCH_UNRELATED", "kept")
    env = clean_env()
    assert "UATU_WAREHOUSE" not in env and "UATU_CHECKPOINTS" not in env
    assert env["UATU_WORKER_ID"] == "7" and env["BENCH_UNRELATED"] == "kept"
    assert "UATU_WORKER_ID" not in clean_env("UATU_WORKER_ID")


def test_spark_submit_env_submit_args(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BENCH_SPARK_SUBMIT_ARGS", raising=False)
    monkeypatch.setenv("UATU_SPARK_SUBMIT_ARGS", "--inherited")
    monkeypatch.setenv("UATU_WAREHOUSE", "/elsewhere/wh")
    conf = Path("/run/conf")
    env = spark_submit_env(conf, master="local[4]", driver_memory="2g")
    assert env["UATU_CONF_DIR"] == "/run/conf"
    assert env["SPARK_MASTER"] == "local[4]"
    assert env["UATU_DRIVER_MEMORY"] == "2g"
    assert "UATU_WAREHOUSE" not in env
    assert env["UATU_SPARK_SUBMIT_ARGS"] == "--inherited"  # no default, nothing to replace it
    with_default = spark_submit_env(conf, master="m", driver_memory="1g", default_submit_args="-d")
    assert with_default["UATU_SPARK_SUBMIT_ARGS"] == "-d"
    monkeypatch.setenv("BENCH_SPARK_SUBMIT_ARGS", "--experiment")
    overridden = spark_submit_env(conf, master="m", driver_memory="1g", default_submit_args="-d")
    assert overridden["UATU_SPARK_SUBMIT_ARGS"] == "--experiment"


def test_jobs_zip_is_stale(tmp_path: Path) -> None:
    sources = tmp_path / "jobs"
    (sources / "audit").mkdir(parents=True)
    source = sources / "audit" / "job.py"
    source.write_text("")
    zip_path = tmp_path / "uatu-jobs.zip"
    assert jobs_zip_is_stale(zip_path, sources)  # never built
    zip_path.write_bytes(b"")
    os.utime(source, (1_000, 1_000))
    os.utime(zip_path, (2_000, 2_000))
    assert not jobs_zip_is_stale(zip_path, sources)
    os.utime(source, (3_000, 3_000))  # edited after the build
    assert jobs_zip_is_stale(zip_path, sources)


# --- command lines ---------------------------------------------------------------------------


def test_parse_args_quick_sets_defaults_that_explicit_options_beat() -> None:
    def parser() -> argparse.ArgumentParser:
        p = bench_parser("bench.example", "An example bench.")
        p.add_argument("--records", type=int, default=1_000_000)
        p.add_argument("--runs", type=int, default=5)
        return p

    quick = {"records": 20_000, "runs": 1}
    plain = parse_args(parser(), [], quick)
    assert (plain.records, plain.runs, plain.quick) == (1_000_000, 5, False)
    short = parse_args(parser(), ["--quick"], quick)
    assert (short.records, short.runs, short.quick) == (20_000, 1, True)
    mixed = parse_args(parser(), ["--quick", "--runs", "3"], quick)
    assert (mixed.records, mixed.runs) == (20_000, 3)
    shown = parser()
    parse_args(shown, [], quick)
    assert shown.prog == "python -m bench.example"
    assert "--records 20,000 --runs 1" in " ".join(shown.format_help().split())
