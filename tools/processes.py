"""Small process helpers shared by the broker tooling and the control plane's launcher."""

from __future__ import annotations

import contextlib
import os
import signal
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
