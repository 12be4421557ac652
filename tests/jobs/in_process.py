"""Running a JobGroup's `jobs/main.py` in the test process, on the test session.

The cheap way to run a job when `./spark-submit.sh` itself is not what a test is about: no
driver JVM to start (testing/jobrun.py's subprocess runs cost that on every run). A run that
must die at a fault point, or take a signal, still goes through `testing.jobrun`: a crash here
would end the test process.

A streaming run is stopped through the stop file (`UATU_STOP_FILE`), which the `stop_file`
fixture (tests/jobs/conftest.py) points at a path of the test's own.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from jobs import main as job_main


def run_in_process(group: Mapping, workdir: Path, conf: Path, *args: str) -> int:
    """`jobs/main.py` on `group` (a JobGroup as a protobuf-JSON dict) in this process: its exit
    status; its one error line goes to this process's stderr, its log to the caller's
    logging (caplog)."""
    path = workdir / f"{group['jobGroupId']}-{time.monotonic_ns()}.json"
    path.write_text(json.dumps(group))
    return job_main.main([str(path), "--conf-dir", str(conf), *args])


@contextmanager
def running(
    group: Mapping, workdir: Path, conf: Path, stop_file: Path, *args: str
) -> Iterator[Callable[[], int | None]]:
    """`run_in_process` in a thread for the length of the block; yields its exit status (None
    while it runs). The block's end stops a run still going with the stop file and waits for
    it, 180 s at most."""
    result: list = []

    def run() -> None:
        try:
            result.append(run_in_process(group, workdir, conf, *args))
        except BaseException as e:  # handed to the test
            result.append(e)

    def status() -> int | None:
        if result and isinstance(result[0], BaseException):
            raise result[0]
        return result[0] if result else None

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield status
    finally:
        if thread.is_alive():
            stop_file.touch()
        thread.join(180)
        stop_file.unlink(missing_ok=True)
    assert not thread.is_alive(), "the job did not stop"
