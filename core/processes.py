"""Small process helpers shared by the broker and etcd tooling and the control plane's launcher."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterable, Sequence
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


def start_ticks(pid: int) -> int | None:
    """When `pid` started (clock ticks since boot, /proc/PID/stat field 22); None if unknown.

    A pid and its start time together name one process: after the pid is reused by another
    program the start time differs.
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may contain spaces; the fields after it follow ") ".
    fields = stat.rpartition(") ")[2].split()
    return int(fields[19]) if len(fields) > 19 else None


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


def free_ports(count: int, host: str = "127.0.0.1", exclude: Iterable[int] = ()) -> list[int]:
    """`count` distinct ports on `host` that were free a moment ago (the OS picks them),
    none of them in `exclude`."""
    excluded = set(exclude)
    socks: list[socket.socket] = []
    ports: list[int] = []
    try:
        # Keep every socket open until all are picked, so the OS cannot hand out one twice.
        while len(ports) < count:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            socks.append(sock)
            sock.bind((host, 0))
            port = sock.getsockname()[1]
            if port not in excluded:
                ports.append(port)
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
