"""bench.process_usage.JitCpu: the CPU of a JVM's JIT compiler threads, read from /proc, here
on threads of this process given those threads' names."""

from __future__ import annotations

import ctypes
import os
import threading
import time

import pytest

from bench.process_usage import JitCpu

_PR_SET_NAME = 15  # prctl: name the calling thread (its /proc comm)
_TICK_S = 1 / os.sysconf("SC_CLK_TCK")


class NamedSpinner:
    """A thread named `name` that spins `seconds` of CPU once told, then stays until ended."""

    def __init__(self, name: str, seconds: float) -> None:
        self.seconds = seconds
        self.named, self.go, self.spun, self.end = (threading.Event() for _ in range(4))
        self.cpu = 0.0  # CPU seconds of its spin, by its own clock
        self.thread = threading.Thread(target=self._run, args=(name,))
        self.thread.start()
        assert self.named.wait(5)

    def _run(self, name: str) -> None:
        ctypes.CDLL(None).prctl(_PR_SET_NAME, name.encode(), 0, 0, 0)
        self.named.set()
        self.go.wait()
        before = time.thread_time()
        while time.thread_time() - before < self.seconds:
            pass
        self.cpu = time.thread_time() - before
        self.spun.set()
        self.end.wait()

    def spin(self) -> None:
        self.go.set()
        assert self.spun.wait(10)

    def stop(self) -> None:
        self.end.set()
        self.go.set()
        self.thread.join()


def test_compiler_threads_count_from_the_first_read_or_their_birth():
    c2 = NamedSpinner("C2 CompilerThre", 0.2)
    other = NamedSpinner("not-a-compiler", 0.2)
    try:
        jit = JitCpu()
        jit.read([os.getpid()])
        assert jit.by_process() == {os.getpid(): 0.0}  # the C2 thread, idle so far
        c2.spin()
        other.spin()
        born_later = NamedSpinner("C1 CompilerThre", 0.1)
        born_later.spin()  # its CPU before its first read counts: it was born since
        jit.read([os.getpid()])
        born_later.stop()
        expected = c2.cpu + born_later.cpu
        assert jit.by_process()[os.getpid()] == pytest.approx(expected, abs=4 * _TICK_S)
    finally:
        c2.stop()
        other.stop()
