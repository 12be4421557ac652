"""The CPU meter behind a worker's cpu_usage (core/processes.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from core.processes import (
    CpuMeter,
    cpu_seconds,
    machine_busy_seconds,
    process_tree,
    tree_cpu_seconds,
)
from testing.polling import wait_for


def test_the_meter_reads_cores_over_wall_time_at_most_every_min_seconds():
    cpu, now = [10.0], [100.0]
    meter = CpuMeter(1, min_seconds=1.0, read=lambda _pid: cpu[0], clock=lambda: now[0])
    assert meter.cores() == 0.0  # nothing measured yet
    cpu[0], now[0] = 13.0, 102.0
    assert meter.cores() == 1.5  # 3 CPU seconds in 2 wall seconds
    cpu[0], now[0] = 20.0, 102.5
    assert meter.cores() == 1.5  # too soon to read again: the last value
    now[0] = 104.0
    assert meter.cores() == 3.5  # 7 CPU seconds since the last reading, 2 wall seconds
    cpu[0], now[0] = 1.0, 106.0  # the tree lost a busy child: never negative
    assert meter.cores() == 0.0


def test_a_busy_child_counts_in_its_parents_tree():
    child = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        assert child.pid in process_tree(os.getpid())
        wait_for(lambda: cpu_seconds(child.pid) > 0.2, 60, "the child to use some CPU")
        parts = cpu_seconds(os.getpid()) + cpu_seconds(child.pid)
        assert tree_cpu_seconds(os.getpid()) >= parts  # read after its parts: never less
    finally:
        child.kill()
        child.wait()
    assert cpu_seconds(child.pid) == 0.0  # gone


def test_the_machines_busy_cpu_grows_by_at_least_what_this_process_spends():
    before_busy, before_own = machine_busy_seconds(), cpu_seconds(os.getpid())
    end = time.process_time() + 0.5
    while time.process_time() < end:
        pass
    spent = cpu_seconds(os.getpid()) - before_own
    assert spent >= 0.4
    assert machine_busy_seconds() - before_busy >= spent - 0.05  # tick rounding
