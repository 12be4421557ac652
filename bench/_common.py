"""Helpers every bench shares: progress lines, medians and percentiles, the bench's work dir,
clean environments for the processes it starts, the session that reads the jobs' Delta tables,
and the result files.

Each bench writes its figures twice: the latest run to ``var/bench/<name>-result.json``
(overwritten; what the benches always wrote) and a record of the run to the tracked folder
``docs/benchmarks/<bench>-<UTC timestamp>-<short commit>.json`` with the commit it measured,
the machine and the command line, so figures stay comparable over time.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from core.paths import JOBS_ZIP, ROOT, VAR_DIR

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

BENCH_DIR = VAR_DIR / "bench"  # work dirs, job logs and the latest result of each bench
RESULTS_DIR = ROOT / "docs" / "benchmarks"  # the tracked record of every run

# Variables that would beat the conf dir a bench writes for each run (core.config reads them).
STORAGE_OVERRIDES = ("UATU_WAREHOUSE", "UATU_CHECKPOINTS")


# --- output ----------------------------------------------------------------------------------


def say(msg: str) -> None:
    """Print `msg` after the local wall-clock time (HH:MM:SS), flushed at once so progress
    shows while a long step runs."""
    print(f"{time.strftime('%H:%M:%S')} {msg}", flush=True)


def seconds_text(seconds: float | None) -> str:
    """``"12.3 s"``, or ``"n/a"`` for a time that was not measured."""
    return "n/a" if seconds is None else f"{seconds:.1f} s"


def now_ms() -> int:
    """Wall-clock time in epoch milliseconds, the unit of Kafka record timestamps."""
    return time.time_ns() // 1_000_000


def bench_parser(module: str, doc: str | None) -> argparse.ArgumentParser:
    """The argument parser of ``python -m <module>``: its docstring, kept as written, is the
    help text."""
    return argparse.ArgumentParser(
        prog=f"python -m {module}",
        description=doc,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def parse_args(
    parser: argparse.ArgumentParser, argv: Sequence[str] | None, quick: Mapping[str, Any]
) -> argparse.Namespace:
    """Parse `argv` (None: this process's arguments) after adding ``--quick``, a smoke run:
    it makes `quick` (option dest -> number) the defaults, so an option given explicitly
    still wins over it. The option's help lists what it sets."""
    shortcuts = " ".join(f"--{dest.replace('_', '-')} {value:,}" for dest, value in quick.items())
    parser.add_argument(
        "--quick", action="store_true", help=f"smoke run, other defaults: {shortcuts}"
    )
    if parser.parse_known_args(argv)[0].quick:
        parser.set_defaults(**quick)
    return parser.parse_args(argv)


# --- statistics ------------------------------------------------------------------------------


def median(values: Iterable[float]) -> float:
    """The middle value, or the mean of the two middle ones for an even count;
    statistics.StatisticsError for no values."""
    return statistics.median(values)


def median_or_none(values: Sequence[float]) -> float | None:
    """`median`, or None for no values (a measurement that produced none)."""
    return statistics.median(values) if values else None


def percentiles(values: Sequence[float] | np.ndarray, qs: Sequence[float]) -> list[float]:
    """The `qs` percentiles (0..100) of `values`, interpolated linearly between the two
    nearest ranks (numpy's default): for sorted x of n values, percentile q lies at rank
    (n - 1) * q / 100. ValueError for no values."""
    data = np.asarray(values, dtype=np.float64)
    if not data.size:
        raise ValueError("percentiles of no values")
    return [float(v) for v in np.percentile(data, qs)]


def latency_quantiles(values: Sequence[float] | np.ndarray) -> dict[str, float] | None:
    """``{"p50", "p99", "max"}`` of `values`, or None for no values."""
    if not len(values):
        return None
    p50, p99 = percentiles(values, [50, 99])
    return {"p50": p50, "p99": p99, "max": float(np.max(values))}


def latency_timeline(
    at_ms: np.ndarray, latency_ms: np.ndarray, slice_s: float
) -> list[dict[str, float]]:
    """Latency per `slice_s` slice of `at_ms` (e.g. the destination's append times), from the
    earliest: ``{"from_s", "records", "p50", "p99", "max"}`` per slice that has records, in
    time order. Shows whether a tail is spread out or comes in a few stalls. ValueError if
    the arrays differ in length or `slice_s` is not positive."""
    if len(at_ms) != len(latency_ms):
        raise ValueError(f"{len(at_ms)} times for {len(latency_ms)} latencies")
    if slice_s <= 0:
        raise ValueError(f"slice_s must be positive, got {slice_s}")
    if not len(at_ms):
        return []
    at = np.asarray(at_ms, dtype=np.int64)
    lat = np.asarray(latency_ms, dtype=np.float64)
    slices = (at - at.min()) // int(slice_s * 1000)
    timeline = []
    for index in np.unique(slices):
        quantiles = latency_quantiles(lat[slices == index])
        assert quantiles is not None  # the slice has records
        records = int(np.count_nonzero(slices == index))
        timeline.append({"from_s": float(index * slice_s), "records": records, **quantiles})
    return timeline


# --- work dirs and processes -----------------------------------------------------------------


@contextmanager
def work_dir(prefix: str, *, parent: Path | None = BENCH_DIR, keep: bool = False) -> Iterator[Path]:
    """A new folder named `prefix` + a random suffix under `parent` (created if missing;
    None: the system's temp dir). It is removed with everything in it on exit, however the
    block ends, unless `keep` (then its path is said)."""
    if parent is not None:
        parent.mkdir(parents=True, exist_ok=True)
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    try:
        yield path
    finally:
        if keep:
            say(f"kept {path}")
        else:
            shutil.rmtree(path, ignore_errors=True)


def clean_env(*also_drop: str) -> dict[str, str]:
    """A copy of this process's environment without STORAGE_OVERRIDES and `also_drop`, for a
    process that must use the conf dir it is given (its warehouse and checkpoints)."""
    drop = {*STORAGE_OVERRIDES, *also_drop}
    return {k: v for k, v in os.environ.items() if k not in drop}


def spark_submit_env(
    conf_dir: Path,
    *,
    master: str | None,
    driver_memory: str,
    default_submit_args: str | None = None,
) -> dict[str, str]:
    """The environment of one ``./spark-submit.sh`` run of a bench: `clean_env`, the run's
    conf dir, master (None: spark-submit.sh's default) and driver memory.
    ``UATU_SPARK_SUBMIT_ARGS`` becomes the caller's ``BENCH_SPARK_SUBMIT_ARGS`` if set (for
    experiments), else `default_submit_args` if given, else whatever this environment holds."""
    env = clean_env("SPARK_MASTER")
    env.update(UATU_CONF_DIR=str(conf_dir), UATU_DRIVER_MEMORY=driver_memory)
    if master is not None:
        env["SPARK_MASTER"] = master
    submit_args = os.environ.get("BENCH_SPARK_SUBMIT_ARGS", default_submit_args)
    if submit_args is not None:
        env["UATU_SPARK_SUBMIT_ARGS"] = submit_args
    return env


def submit_job(jobgroup: Path, env: Mapping[str, str], log: Path) -> subprocess.Popen:
    """Start ``./spark-submit.sh jobgroup`` with `env` (`spark_submit_env`) in a process group
    of its own (so the bench can signal the driver and everything it started), its output
    appended to `log`."""
    with log.open("ab") as out:
        return subprocess.Popen(
            [str(ROOT / "spark-submit.sh"), str(jobgroup)],
            cwd=ROOT,
            env=dict(env),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def jobs_zip_is_stale(zip_path: Path = JOBS_ZIP, sources: Path = ROOT / "jobs") -> bool:
    """True when `zip_path` is missing or older than a ``.py`` file under `sources`."""
    if not zip_path.exists():
        return True
    built = zip_path.stat().st_mtime
    return any(p.stat().st_mtime > built for p in sources.rglob("*.py"))


def warn_if_jobs_zip_stale() -> None:
    """Say so when ``./spark-submit.sh`` would run an outdated build of jobs/: it ships the
    zip, not the source tree, so a bench would measure old code."""
    if jobs_zip_is_stale():
        say(f"WARNING: {JOBS_ZIP} is older than jobs/ and is what the job runs; `make build`")


def table_session(app_name: str, workdir: Path, driver_memory: str) -> SparkSession:
    """A local[2] session for reading the jobs' Delta tables after (or next to) a run:
    testing's small session, its warehouse under `workdir`, `driver_memory` for the driver.
    Python workers run this checkout's venv unless PYSPARK_PYTHON says otherwise."""
    from testing.spark import small_local_session

    os.environ.setdefault("PYSPARK_PYTHON", str(ROOT / ".venv" / "bin" / "python"))
    return small_local_session(
        app_name, workdir / "spark-warehouse", {"spark.driver.memory": driver_memory}
    )


# --- result files ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Commit:
    """The checkout a bench measured: the full hash of HEAD ("unknown" outside a git
    checkout) and whether the working tree differed from it (None when git could not say)."""

    sha: str
    dirty: bool | None

    @property
    def short(self) -> str:
        return self.sha[:7]


def current_commit(repo: Path = ROOT) -> Commit:
    """HEAD of `repo` and whether its working tree is dirty: a change to a tracked file, or an
    untracked file git does not ignore. The result files under docs/benchmarks do not count,
    so that recording one run does not mark the next as dirty."""

    def git(*args: str) -> str:
        done = subprocess.run(
            ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True
        )
        return done.stdout

    try:
        sha = git("rev-parse", "HEAD").strip()
    except (OSError, subprocess.CalledProcessError):
        return Commit("unknown", None)
    try:
        changes = git("status", "--porcelain", "--", ".", ":(exclude)docs/benchmarks")
    except (OSError, subprocess.CalledProcessError):
        return Commit(sha, None)
    return Commit(sha, bool(changes.strip()))


def machine() -> dict[str, Any]:
    """What the figures were measured on: logical CPUs, physical memory in bytes, kernel and
    CPU architecture."""
    uname = platform.uname()
    try:
        memory: int | None = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, OSError, ValueError):  # not a POSIX system that reports it
        memory = None
    return {
        "cpus": os.cpu_count(),
        "memory_bytes": memory,
        "kernel": f"{uname.system} {uname.release}",
        "arch": uname.machine,
    }


def result_file_name(bench: str, at: datetime, commit: Commit) -> str:
    """``<bench>-<UTC timestamp>-<short commit>.json``, e.g.
    ``audit-20261121T070812Z-ba873e6.json``: sorting the names of one bench sorts its runs
    by time. `at` must be timezone-aware."""
    stamp = at.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")
    return f"{bench}-{stamp}-{commit.short}.json"


def result_record(
    bench: str,
    figures: Mapping[str, Any],
    *,
    argv: Sequence[str],
    options: Mapping[str, Any],
    commit: Commit,
    host: Mapping[str, Any],
    at: datetime,
) -> dict[str, Any]:
    """The content of a result file: which bench, the commit (hash and dirty flag), the UTC
    time, the machine, the command line (raw `argv` and the parsed `options`) and the
    bench's own `figures`."""
    return {
        "bench": bench,
        "commit": commit.sha,
        "dirty": commit.dirty,
        "utc": at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": dict(host),
        "argv": list(argv),
        "options": dict(options),
        "figures": dict(figures),
    }


def write_result(
    bench: str,
    figures: Mapping[str, Any],
    options: argparse.Namespace | Mapping[str, Any],
    *,
    argv: Sequence[str] | None = None,
    results_dir: Path = RESULTS_DIR,
    commit: Commit | None = None,
    at: datetime | None = None,
) -> Path:
    """Write `result_record` to `results_dir` (created if missing) under `result_file_name`;
    return its path. `argv` defaults to this process's arguments, `commit` to
    `current_commit()`, `at` to now. Values JSON cannot hold (paths, ...) are written as
    their str()."""
    at = at or datetime.now(UTC)
    commit = commit or current_commit()
    record = result_record(
        bench,
        figures,
        argv=sys.argv[1:] if argv is None else argv,
        options=vars(options) if isinstance(options, argparse.Namespace) else options,
        commit=commit,
        host=machine(),
        at=at,
    )
    results_dir.mkdir(parents=True, exist_ok=True)
    path = results_dir / result_file_name(bench, at, commit)
    path.write_text(json.dumps(record, indent=2, default=str) + "\n")
    return path


def write_latest(path: Path, figures: Mapping[str, Any]) -> None:
    """Write `figures` plus ``finished_at`` (local time with its UTC offset) to `path` as
    JSON, replacing the previous run's: the bench's latest result."""
    latest = {**figures, "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    path.write_text(json.dumps(latest, indent=2, default=str) + "\n")


def wait_for(what: str, check, deadline_s: float, every: float = 5.0) -> float | None:
    """Seconds until `check()` is true, None at the deadline."""
    started = time.monotonic()
    while time.monotonic() - started < deadline_s:
        if check():
            return time.monotonic() - started
        time.sleep(every)
    say(f"  {what}: not within {deadline_s:.0f} s")
    return None
