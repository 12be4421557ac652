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
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from pathlib import Path

from jobs import main as job_main
from testing.jobrun import stopped_at_block_end


def run_in_process(group: Mapping, workdir: Path, conf: Path, *args: str) -> int:
    """`jobs/main.py` on `group` (a JobGroup as a protobuf-JSON dict) in this process: its exit
    status; its one error line goes to this process's stderr, its log to the caller's
    logging (caplog)."""
    path = workdir / f"{group['jobGroupId']}-{time.monotonic_ns()}.json"
    path.write_text(json.dumps(group))
    return job_main.main([str(path), "--conf-dir", str(conf), *args])


def running(
    group: Mapping, workdir: Path, conf: Path, stop_file: Path, *args: str
) -> AbstractContextManager[Callable[[], int | None]]:
    """`run_in_process` in a thread for the length of the block; yields its exit status (None
    while it runs). The block's end stops a run still going with the stop file and waits for
    it (`testing.jobrun.stopped_at_block_end`)."""
    return stopped_at_block_end(lambda: run_in_process(group, workdir, conf, *args), stop_file)
