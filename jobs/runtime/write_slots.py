"""Write slots: at most a few Delta writes at once among the after-commit writers of one
application (jobs/runtime/after_commit.py), however many groups it runs.

Why an order: each Delta commit costs the driver's cores a second or more, and on a loaded
worker a write waits several others' turns. A writer whose query has ended is draining: a
CANCEL, an UPDATE's restart or a move waits for its last writes. Given the slot on a first
come basis, or to whichever waiter wakes first, it waited behind every group's routine
writes (docs/benchmarks.md, the worker pool). So a freed slot goes to the writer that waited
longest, except that a draining writer goes first.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

# How often a writer waiting for a slot asks whether it should give up (it is being closed).
POLL_SECONDS = 0.2


@dataclass(eq=False)
class _Turn:
    urgent: Callable[[], bool]  # asked when a slot is freed: its writer is draining now
    granted: threading.Event = field(default_factory=threading.Event)


class WriteSlots:
    """`count` slots; `take` one, write, `give_back`. A freed slot goes straight to a waiter:
    the first one whose `urgent()` is true when it is freed, else the one that waited
    longest."""

    def __init__(self, count: int) -> None:
        self._lock = threading.Lock()
        self._free = count
        self._waiting: list[_Turn] = []  # in arrival order

    def take(self, urgent: Callable[[], bool], give_up: Callable[[], bool]) -> bool:
        """Wait for a slot; False, holding none, when `give_up()` turns true first."""
        with self._lock:
            if self._free > 0 and not self._waiting:
                self._free -= 1
                return True
            turn = _Turn(urgent)
            self._waiting.append(turn)
        while not turn.granted.wait(POLL_SECONDS):
            if give_up():
                with self._lock:
                    if turn in self._waiting:
                        self._waiting.remove(turn)
                        return False
                self.give_back()  # granted just now: pass it on
                return False
        return True

    def give_back(self) -> None:
        """Free a slot taken by `take`: to the next waiter (see the class), if any."""
        with self._lock:
            if not self._waiting:
                self._free += 1
                return
            turn = next((t for t in self._waiting if t.urgent()), self._waiting[0])
            self._waiting.remove(turn)
            turn.granted.set()

    def waiting(self) -> int:
        """How many writers wait for a slot now."""
        with self._lock:
            return len(self._waiting)
