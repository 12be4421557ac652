"""Running a JobGroup through `./spark-submit.sh` in a subprocess, and reading what a run
committed: the support of the fault tests (tests/*/test_*faults.py).

A job run this way has a process group of its own (`start_new_session`), so a crash at a
fault point (`core.faults`, `UATU_FAULT`) or a test's `os.killpg` ends the whole application
and nothing else.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from core.errors import EXIT_OK
from core.faults import ENV as FAULT_ENV
from core.paths import ROOT
from core.processes import signal_group
from testing.spark import small_submit_args

# Variables of the test process a job run must not inherit.
NOT_INHERITED = (FAULT_ENV, "UATU_WAREHOUSE", "UATU_CHECKPOINTS", "UATU_CONTROL_PLANE")


def submit_job(
    group: Mapping,
    workdir: Path,
    conf_dir: Path,
    *args: str,
    env: Mapping[str, str] | None = None,
) -> subprocess.Popen:
    """Start `./spark-submit.sh` on `group` (a JobGroup as a protobuf-JSON dict) in its own
    process group; its output goes to `log_path(workdir, group)`.

    The run takes the test session's SQL settings (`testing.spark.small_submit_args`) and 1g
    of driver memory. `env` adds to (and overrides) those and the test process's environment,
    less the variables a test may have set for itself (UATU_FAULT, the storage roots, the
    control plane).
    """
    path = workdir / f"{group['jobGroupId']}-{time.monotonic_ns()}.json"
    path.write_text(json.dumps(group))
    # A file, not a pipe: nobody reads a pipe while the job runs, and a full one blocks it.
    log = log_path(workdir, group).open("ab")
    inherited = {k: v for k, v in os.environ.items() if k not in NOT_INHERITED}
    full_env = {
        **inherited,
        "UATU_CONF_DIR": str(conf_dir),
        "UATU_DRIVER_MEMORY": "1g",
        "UATU_SPARK_SUBMIT_ARGS": small_submit_args(),
        **(env or {}),
    }
    try:
        return subprocess.Popen(
            [str(ROOT / "spark-submit.sh"), str(path), *args],
            env=full_env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    finally:
        log.close()


def log_path(workdir: Path, group: Mapping) -> Path:
    return workdir / f"{group['jobGroupId']}.log"


def run_job(
    group: Mapping,
    workdir: Path,
    conf_dir: Path,
    *args: str,
    env: Mapping[str, str] | None = None,
    timeout_s: float = 600,
) -> tuple[int, str]:
    """`submit_job` and wait: (exit status, the run's log so far)."""
    proc = submit_job(group, workdir, conf_dir, *args, env=env)
    try:
        status = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        signal_group(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    return status, log_path(workdir, group).read_text(errors="replace")


@contextmanager
def running_job(
    group: Mapping,
    workdir: Path,
    conf_dir: Path,
    *args: str,
    env: Mapping[str, str] | None = None,
) -> Iterator[subprocess.Popen]:
    """`submit_job` for the length of the block. However the block ends, the job's whole
    process group is gone afterwards (SIGKILL if it still runs): a failed test leaks no job."""
    proc = submit_job(group, workdir, conf_dir, *args, env=env)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            signal_group(proc.pid, signal.SIGKILL)
            proc.wait()


@contextmanager
def stopped_at_block_end(
    run: Callable[[], int], stop_file: Path
) -> Iterator[Callable[[], int | None]]:
    """`run()` (a job run that polls `stop_file`) in a thread of this process for the length
    of the block; yields its exit status (None: still running; an exception it raised is
    raised again). The block's end creates the stop file; the run must then end within 180 s.
    """
    result: list[int | BaseException] = []

    def target() -> None:
        try:
            result.append(run())
        except BaseException as e:  # handed to the test through `status`
            result.append(e)

    def status() -> int | None:
        if not result:
            return None
        if isinstance(result[0], BaseException):
            raise result[0]
        return result[0]

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    try:
        yield status
    finally:
        stop_file.touch()
        thread.join(180)
        stop_file.unlink(missing_ok=True)
    assert not thread.is_alive(), "the job did not stop"


@contextmanager
def running_in_thread(job, stop_file: Path) -> Iterator[Callable[[], int | None]]:
    """`job.run(once=False, stop_file=...)` (a `StreamingJob`) in a thread of this process,
    on the test session, for the length of the block (`stopped_at_block_end`); the job must
    stop with exit 0."""
    with stopped_at_block_end(
        lambda: job.run(once=False, stop_file=str(stop_file)), stop_file
    ) as status:
        yield status
    assert status() == EXIT_OK


def stop_job(proc: subprocess.Popen, timeout_s: float = 120) -> int:
    """SIGTERM a streaming job (it finishes its batch and stops its query) and return its exit
    status; subprocess.TimeoutExpired if it has not exited within `timeout_s`."""
    proc.send_signal(signal.SIGTERM)
    return proc.wait(timeout_s)


def log_actions(table_path: Path | str, kind: str) -> list[dict]:
    """The `kind` actions ("txn", "commitInfo", ...) of a Delta table's JSON commits, in
    commit order. Read from the log files themselves, without Spark: what a crash left behind.
    """
    actions = []
    for commit in sorted((Path(table_path) / "_delta_log").glob("*.json")):
        for line in commit.read_text().splitlines():
            action = json.loads(line)
            if kind in action:
                actions.append(action[kind])
    return actions


def committed_batch(table_path: Path | str) -> int | None:
    """The highest batch id committed to a Delta table by a job's exactly-once writes (the
    largest `txn` version in its log, whatever the appId), None if it has none."""
    return max((int(t["version"]) for t in log_actions(table_path, "txn")), default=None)


def last_keys_batch(checkpoints: Path | str) -> int | None:
    """The newest batch whose exact keys an audit job's JVM fold wrote under the checkpoints
    (`dev.uatu.audit.KeyFiles`: <checkpoint>/audit-keys/p<n>/log/<batch>, or
    <checkpoint>/audit-keys/topics/<topic>/p<n>/log/<batch> for a topic selection), None if
    none."""
    root = Path(checkpoints)
    logs = [*root.glob("*/audit-keys/p*/log/*"), *root.glob("*/audit-keys/topics/*/p*/log/*")]
    return max((int(f.name) for f in logs if f.name.isdigit()), default=None)


def saved_batches(checkpoints: Path | str, folder: str) -> list[int]:
    """The batches a job saved under `<checkpoint>/<folder>/<batch>` and has not yet written
    to its tables (`jobs/runtime/after_commit.py`: the audit's `audit-partials`, the
    replication's `replication-stats`), sorted."""
    files = Path(checkpoints).glob(f"*/{folder}/*")
    return sorted(int(f.name) for f in files if f.name.isdigit())


def spark_committed_batch(checkpoints: Path | str) -> int | None:
    """The newest batch Spark's commit log holds under the checkpoints (<checkpoint>/commits/N),
    None if none."""
    files = Path(checkpoints).glob("*/commits/*")
    return max((int(f.name) for f in files if f.name.isdigit()), default=None)


def query_conf(checkpoints: Path | str) -> list[dict[str, str]]:
    """The Spark settings each streaming query under the checkpoints started with, as its
    first offset-log entry records them (<checkpoint>/offsets/0: a version line, then JSON
    whose `conf` holds the settings a checkpoint fixes, such as the shuffle partitions)."""
    files = sorted(Path(checkpoints).glob("*/offsets/0"))
    return [json.loads(f.read_text().splitlines()[1])["conf"] for f in files]
