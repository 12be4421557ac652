"""`EnsuredTables`: each (path, table) ensured once per process, callers that come at once
share the one check and its outcome, a failure or a vanished table is ensured again. Stand-in
checks here; tests/jobs/test_delta.py runs it on real Delta tables."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from jobs.runtime import ensured_tables
from jobs.runtime.ensured_tables import EnsuredTables


class Check:
    """A stand-in ensure that counts its runs and, when told, holds until released."""

    def __init__(self, hold: bool = False, error: Exception | None = None) -> None:
        self.runs = 0
        self.error = error
        self.started = threading.Event()
        self.release = threading.Event()
        if not hold:
            self.release.set()

    def __call__(self) -> None:
        self.runs += 1
        self.started.set()
        self.release.wait(10)
        if self.error is not None:
            raise self.error


def test_callers_that_come_while_one_checks_wait_for_it_and_later_ones_return_at_once():
    tables, check = EnsuredTables(), Check(hold=True)
    with ThreadPoolExecutor(4) as pool:
        first = pool.submit(tables.once, "t", check, lambda: True)
        assert check.started.wait(10)
        waiting = [pool.submit(tables.once, "t", check, lambda: True) for _ in range(3)]
        assert not any(w.done() for w in waiting)  # they wait for the check in progress
        check.release.set()
        for call in [first, *waiting]:
            call.result(10)
    tables.once("t", check, lambda: True)
    assert check.runs == 1
    tables.once("other", check, lambda: True)
    assert check.runs == 2  # another table is checked


def test_a_failed_check_is_shared_by_its_waiters_and_not_remembered():
    tables, failing = EnsuredTables(), Check(hold=True, error=ValueError("schema differs"))
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(tables.once, "t", failing, lambda: True)
        assert failing.started.wait(10)
        waiter = pool.submit(tables.once, "t", failing, lambda: True)
        failing.release.set()
        for call in (first, waiter):
            with pytest.raises(ValueError, match="schema differs"):
                call.result(10)
    assert failing.runs == 1
    fixed = Check()
    tables.once("t", fixed, lambda: True)  # the table was fixed meanwhile: checked again
    assert fixed.runs == 1


def test_a_table_whose_log_is_gone_is_ensured_again():
    tables, check = EnsuredTables(), Check()
    tables.once("t", check, lambda: True)
    tables.once("t", check, lambda: False)
    assert check.runs == 2


def test_remembering_holds_for_its_block_only():
    assert ensured_tables.current() is None
    with ensured_tables.remembering() as tables:
        assert ensured_tables.current() is tables
    assert ensured_tables.current() is None
