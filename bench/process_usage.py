"""Resident memory and CPU of processes and their descendants, read from /proc (Linux)."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path

from core.processes import cpu_seconds, process_tree


def tree_usage(pid: int) -> tuple[int, float]:
    """(resident bytes, CPU seconds) of `pid` and its descendants, now."""
    rss, cpu = 0, 0.0
    for p in process_tree(pid):
        try:
            status = Path(f"/proc/{p}/status").read_text()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                rss += int(line.split()[1]) * 1024
        cpu += cpu_seconds(p)
    return rss, cpu


class Usage:
    """Resident memory and CPU of processes' trees together, from now: `take` a sample of the
    memory, `result` the mean and peak memory and the mean cores since the start."""

    def __init__(self, pids: Sequence[int]) -> None:
        self.pids = list(pids)
        self.started = time.monotonic()
        self.first_cpu = sum(tree_usage(p)[1] for p in self.pids)
        self.rss: list[int] = []

    def take(self) -> None:
        self.rss.append(sum(tree_usage(p)[0] for p in self.pids))

    def result(self) -> dict[str, float]:
        self.take()
        cpu = sum(tree_usage(p)[1] for p in self.pids) - self.first_cpu
        return {
            "rss_mean_gib": sum(self.rss) / len(self.rss) / 2**30,
            "rss_peak_gib": max(self.rss) / 2**30,
            "cores": cpu / (time.monotonic() - self.started),
        }


def sample(pids: Sequence[int], seconds: float) -> dict[str, float]:
    """Mean and peak resident bytes of `pids`' trees together, and mean cores, over `seconds`."""
    usage = Usage(pids)
    while time.monotonic() - usage.started < seconds:
        usage.take()
        time.sleep(5)
    return usage.result()


# A HotSpot JVM's JIT compiler threads, by their /proc name (cut to 15 characters).
JIT_THREAD_NAMES = ("C1 CompilerThre", "C2 CompilerThre")


class JitCpu:
    """The CPU seconds JVMs' JIT compiler threads spent since the first `read`, by process.

    A compiler thread's CPU is read from /proc/<pid>/task/<its id>/stat, so it counts while
    the thread lives: HotSpot stops an idle extra compiler thread, and what that thread spent
    since the last `read` is lost. The figure is a lower bound, close when reads are a second
    apart."""

    def __init__(self) -> None:
        # Keyed by (process, thread id): a thread id is unique only while its thread lives.
        self._names: dict[tuple[int, int], str] = {}  # a thread's name, read once
        self._first: dict[tuple[int, int], float] = {}  # a compiler thread's CPU when first seen
        self._last: dict[tuple[int, int], float] = {}  # ... and at the last read that found it
        self._reads = 0

    def read(self, pids: Sequence[int]) -> None:
        """Read the compiler threads of `pids` (a thread first seen after the first read counts
        from zero: it was born since)."""
        for pid in pids:
            try:
                tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
            except OSError:
                continue
            for tid in tids:
                key = (pid, tid)
                if key not in self._names:
                    self._names[key] = _thread_name(pid, tid)
                if not self._names[key].startswith(JIT_THREAD_NAMES):
                    continue
                cpu = _thread_cpu_seconds(pid, tid)
                if cpu is None:  # gone since the listing
                    continue
                self._first.setdefault(key, cpu if self._reads == 0 else 0.0)
                self._last[key] = cpu
        self._reads += 1

    def by_process(self) -> dict[int, float]:
        """Each process's compiler threads' CPU seconds since the first read."""
        spent: dict[int, float] = {}
        for (pid, tid), cpu in self._last.items():
            spent[pid] = spent.get(pid, 0.0) + cpu - self._first[(pid, tid)]
        return spent


def _thread_name(pid: int, tid: int) -> str:
    try:
        return Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip()
    except OSError:
        return ""


def _thread_cpu_seconds(pid: int, tid: int) -> float | None:
    """CPU time (user + system) thread `tid` of `pid` has used; None once it is gone."""
    try:
        stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rpartition(") ")[2].split()  # from the state on, as in core.processes
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS


_CLOCK_TICKS = float(os.sysconf("SC_CLK_TCK"))
