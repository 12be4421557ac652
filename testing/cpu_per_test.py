"""CPU per test: a pytest plugin that, when `UATU_TEST_CPU` names a folder, appends one JSON
line per test to `<folder>/<xdist worker>.jsonl`: the test's node id, its wall seconds (setup,
call and teardown) and the CPU seconds its pytest process and that process's descendants
spent meanwhile (`python -m bench.suite_cpu --test-cpu-dir` sets the variable and ranks the
lines).

What is counted, from /proc: the pytest process's own CPU and that of the children it reaped
(a `spark-submit.sh` run it waited for, with what that run reaped), plus the CPU the living
descendants spent during the test (the test session's JVM, the worker's brokers, a job still
running), each told apart by its start time. A process orphaned before it was reaped (the JVM
of a run killed with its whole process group) is not counted here; bench.suite_cpu's
per-process list has it. Brokers and services the worker keeps for every test count towards
the test during which they spent it.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from core.processes import cpu_seconds, process_tree, reaped_cpu_seconds, start_ticks

ENV = "UATU_TEST_CPU"


def own_and_reaped_seconds(pid: int) -> float:
    """CPU of `pid` itself and of the children it has reaped."""
    return cpu_seconds(pid) + reaped_cpu_seconds(pid)


def descendants_seconds(pid: int) -> dict[tuple[int, int | None], float]:
    """Each living descendant of `pid`, keyed by (pid, start time), -> its own CPU seconds."""
    return {(child, start_ticks(child)): cpu_seconds(child) for child in process_tree(pid)[1:]}


def spent_between(
    before: Mapping[tuple[int, int | None], float], after: Mapping[tuple[int, int | None], float]
) -> float:
    """CPU the processes in `after` spent since `before` (all of it for one not seen before)."""
    return sum(max(cpu - before.get(key, 0.0), 0.0) for key, cpu in after.items())


class CpuPerTest:
    """The plugin (`register_if_asked`)."""

    def __init__(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        self.out = folder / f"{worker}.jsonl"
        self.pid = os.getpid()

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Iterator[None]:
        started, own = time.monotonic(), own_and_reaped_seconds(self.pid)
        living = descendants_seconds(self.pid)
        yield
        cpu = own_and_reaped_seconds(self.pid) - own
        cpu += spent_between(living, descendants_seconds(self.pid))
        line = {
            "test": item.nodeid,
            "wall_seconds": round(time.monotonic() - started, 2),
            "cpu_seconds": round(cpu, 2),
        }
        with self.out.open("a") as out:
            out.write(json.dumps(line) + "\n")


def register_if_asked(config: pytest.Config) -> None:
    """From a conftest's `pytest_configure`: the plugin on, when `UATU_TEST_CPU` is set."""
    folder = os.environ.get(ENV)
    if folder:
        config.pluginmanager.register(CpuPerTest(Path(folder)), "uatu-cpu-per-test")


def read_lines(folder: Path) -> list[dict]:
    """Every line the plugin wrote under `folder`, most CPU first."""
    lines = [
        json.loads(text)
        for path in sorted(folder.glob("*.jsonl"))
        for text in path.read_text().splitlines()
        if text.strip()
    ]
    return sorted(lines, key=lambda line: -line["cpu_seconds"])
