"""The tables a long-running application has ensured already, so each is checked once.

A worker application (jobs/worker/) starts many groups' queries in one session, and every
start-up ensures the job's tables (`delta.ensure`): ten replications started together
check the same two tables ten times at once, and every generation of an audit pack checks
`audit_counts` again. Each check reads the table's newest log files and, when they do not
tell, loads its Delta snapshot: a Spark job that waits for task slots behind the running
queries' batches, and ten of them at once in a cold JVM. With `remembering()` in effect (the
worker's whole life), `delta.ensure` asks `EnsuredTables.once`: the first caller of a
(path, table) ensures it, the callers that come meanwhile wait for that one and share its
outcome, and later callers return at once while the table's log is still there.

Not remembered: a failed ensure (the next caller tries again, so a table fixed meanwhile
is found fixed), and a table whose log has gone since (it is ensured again, so it is
created with its declared partitioning instead of by a write). A table changed by someone
else meanwhile is not checked again: its next write fails as Delta refuses it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager


class EnsuredTables:
    """(path, table) keys ensured in this process, each once; see the module docstring."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ensured: dict[Hashable, Future[None]] = {}

    def once(self, key: Hashable, ensure: Callable[[], None], exists: Callable[[], bool]) -> None:
        """Run `ensure` unless `key` was ensured already and `exists()` still holds; a caller
        that comes while another runs it waits and shares its outcome (its error too)."""
        with self._lock:
            running = self._ensured.get(key)
        if running is not None and running.done() and not exists():
            with self._lock:
                if self._ensured.get(key) is running:
                    del self._ensured[key]
        with self._lock:
            running = self._ensured.get(key)
            mine = running is None
            if running is None:
                running = self._ensured[key] = Future()
        if not mine:
            running.result()
            return
        try:
            ensure()
        except BaseException as error:
            with self._lock:
                del self._ensured[key]
            running.set_exception(error)
            raise
        running.set_result(None)


_current: EnsuredTables | None = None


def current() -> EnsuredTables | None:
    """The process's memory of ensured tables while `remembering()` is in effect, else None
    (every ensure checks the table)."""
    return _current


@contextmanager
def remembering() -> Iterator[EnsuredTables]:
    """Remember ensured tables for the duration (a worker application's life)."""
    global _current
    previous, _current = _current, EnsuredTables()
    try:
        yield _current
    finally:
        _current = previous
