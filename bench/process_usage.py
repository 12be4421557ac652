"""Resident memory and CPU of processes and their descendants, read from /proc (Linux)."""

from __future__ import annotations

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
