"""Small process helpers shared by the broker and etcd tooling, the control plane's launcher
and the worker's CPU meter."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path


def pid_alive(pid: int) -> bool:
    """True while `pid` is a live process; a zombie (exited, not yet reaped) counts as dead."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    # The command name in parentheses may itself contain spaces or ')'.
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def signal_pid(pid: int, sig: signal.Signals) -> None:
    """Send `sig` to one process; already gone is fine."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def signal_group(pgid: int, sig: signal.Signals) -> None:
    """Send `sig` to a whole process group; already gone is fine."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)


def _stat_fields(pid: int) -> list[str]:
    """/proc/PID/stat's fields from the third on (state, ppid, ...); [] once `pid` is gone.
    The command name (field 2) may contain spaces; the fields after it follow ") "."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(") ")[2].split()
    except OSError:
        return []


def start_ticks(pid: int) -> int | None:
    """When `pid` started (clock ticks since boot, /proc/PID/stat field 22); None if unknown.

    A pid and its start time together name one process: after the pid is reused by another
    program the start time differs.
    """
    fields = _stat_fields(pid)
    return int(fields[19]) if len(fields) > 19 else None


def process_tree(pid: int) -> list[int]:
    """`pid` and its descendants, now (Linux: /proc/PID/task/PID/children)."""
    pids, todo = [], [pid]
    while todo:
        p = todo.pop()
        pids.append(p)
        try:
            children = Path(f"/proc/{p}/task/{p}/children").read_text().split()
        except OSError:
            continue
        todo += [int(c) for c in children]
    return pids


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system) `pid` has used so far; 0 once it is gone."""
    fields = _stat_fields(pid)
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS if len(fields) > 12 else 0.0


def reaped_cpu_seconds(pid: int) -> float:
    """CPU time of the children `pid` has waited for (with what they reaped in turn); 0 once
    it is gone."""
    fields = _stat_fields(pid)
    return (int(fields[13]) + int(fields[14])) / _CLOCK_TICKS if len(fields) > 14 else 0.0


def tree_cpu_seconds(pid: int) -> float:
    """CPU time `pid` and its living descendants have used so far."""
    return sum(cpu_seconds(p) for p in process_tree(pid))


_CLOCK_TICKS = float(os.sysconf("SC_CLK_TCK"))


def machine_busy_seconds() -> float:
    """CPU seconds every core spent not idle since boot (/proc/stat's first line)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return (sum(fields[:8]) - idle) / _CLOCK_TICKS


class CpuMeter:
    """Cores a process tree uses: CPU seconds over wall seconds between two readings, a
    reading at most every `min_seconds` (the value between readings is the last one)."""

    def __init__(
        self,
        pid: int,
        *,
        min_seconds: float = 1.0,
        read: Callable[[int], float] = tree_cpu_seconds,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.pid, self.min_seconds, self._read, self._clock = pid, min_seconds, read, clock
        self._at, self._cpu = clock(), read(pid)
        self._cores = 0.0

    def cores(self) -> float:
        now = self._clock()
        if now - self._at >= self.min_seconds:
            cpu = self._read(self.pid)
            self._cores = max(cpu - self._cpu, 0.0) / (now - self._at)
            self._at, self._cpu = now, cpu
        return self._cores


def terminate(proc: subprocess.Popen, timeout: float = 30.0) -> None:
    """SIGTERM a child we started and wait; SIGKILL its whole process group if it lingers."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        signal_group(proc.pid, signal.SIGKILL)
        proc.wait()


def read_pid(path: Path) -> int | None:
    """The pid in a pid file, None if the file is missing or garbled."""
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def wait_gone(pids: Sequence[int], timeout: float, poll: float = 0.1) -> list[int]:
    """Poll until `pids` have exited; return those still alive at the deadline."""
    deadline = time.monotonic() + timeout
    alive = list(pids)
    while alive:
        alive = [pid for pid in alive if pid_alive(pid)]
        if not alive or time.monotonic() >= deadline:
            break
        time.sleep(poll)
    return alive


# Where free_ports looks: from here up to the kernel's ephemeral range.
_LISTEN_PORTS_FROM = 20000
_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
PORT_SLICE_ENV = "UATU_PORT_SLICE"
"""`i/n`: free_ports picks from the i-th of n equal slices of its range (0-based), so that
processes picking ports at the same moment (the test suite's parallel workers) never pick
the same one. Unset: the whole range."""


def listen_port_range() -> range | None:
    """The ports :func:`free_ports` picks from: those below the kernel's ephemeral range
    (Linux), or None where that range cannot be read or leaves too little room; only slice
    i of n of them when ``UATU_PORT_SLICE`` is ``i/n``."""
    try:
        low = int(_EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    if low - _LISTEN_PORTS_FROM < 1000:
        return None
    ports = range(_LISTEN_PORTS_FROM, low)
    wanted = os.environ.get(PORT_SLICE_ENV)
    if not wanted:
        return ports
    try:
        index, count = (int(part) for part in wanted.split("/"))
    except ValueError:
        raise ValueError(f"{PORT_SLICE_ENV}={wanted!r}: expected i/n, e.g. 0/2") from None
    if not 0 <= index < count:
        raise ValueError(f"{PORT_SLICE_ENV}={wanted!r}: i must be in [0, n)")
    size = len(ports) // count
    return ports[index * size : (index + 1) * size]


def free_ports(count: int, host: str = "127.0.0.1", exclude: Iterable[int] = ()) -> list[int]:
    """`count` distinct ports on `host` that were free a moment ago, none of them in `exclude`.

    Picked at random from :func:`listen_port_range`, not by the OS's bind(0): that hands out
    ephemeral ports, the same pool the kernel gives every outgoing connection's local end, so
    between the pick and the server's bind a client anywhere on the machine (a parallel test
    worker's, say) could hold the port. Falls back to bind(0) where the range is unknown.
    """
    excluded = set(exclude)
    candidates = listen_port_range()
    rng = random.SystemRandom()
    socks: list[socket.socket] = []
    ports: list[int] = []
    try:
        # Keep every socket open until all are picked, so no port is picked twice.
        for _ in range(count * 50):
            if len(ports) == count:
                break
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            socks.append(sock)
            try:
                sock.bind((host, rng.choice(candidates) if candidates else 0))
            except OSError:
                continue  # taken: try another
            port = sock.getsockname()[1]
            if port not in excluded:
                ports.append(port)
        if len(ports) < count:
            raise OSError(f"found only {len(ports)} of {count} free ports on {host}")
        return ports
    finally:
        for sock in socks:
            sock.close()


def group_pids(pgid: int) -> list[int]:
    """Live (non-zombie) members of process group `pgid`, the leader included if alive.

    Needs procfs; without it (macOS) returns `[pgid]` while the group exists at all.
    """
    proc = Path("/proc")
    if not proc.is_dir():
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return []
        except PermissionError:
            pass
        return [pgid]
    members = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[-1].split()
        except OSError:
            continue  # exited while we looked
        # After the command name: state, ppid, pgrp, ...
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(entry.name))
    return sorted(members)
