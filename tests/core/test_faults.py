"""The fault hook itself (`core/faults.py`): what UATU_FAULT accepts, when a point fires, and
that a crash takes the whole process group with it. No JVM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from core import faults
from core.errors import EXIT_BAD_INPUT, ConfigError
from core.faults import (
    CRASH,
    FAIL_FIRST_ATTEMPT,
    PAUSE,
    Fault,
    FaultInjected,
    fault_point,
    parse,
)
from core.paths import ROOT
from core.processes import pid_alive


@pytest.fixture(autouse=True)
def fresh_counts():
    faults.reset()
    yield
    faults.reset()


def test_parse_points_hits_and_actions() -> None:
    assert parse("") == ()
    assert parse("audit.keys_committed") == (Fault("audit.keys_committed", 1, CRASH),)
    assert parse(" replication.record_acked@40:fail-first-attempt , audit.keys_committed@2") == (
        Fault("replication.record_acked", 40, FAIL_FIRST_ATTEMPT),
        Fault("audit.keys_committed", 2, CRASH),
    )
    assert parse("replication.tail_read@3:pause=2500") == (
        Fault("replication.tail_read", 3, PAUSE, 2500),
    )


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("audit.keys_comitted", "unknown point"),
        ("audit.keys_committed:explode", "the action must be one of"),
        ("audit.keys_committed@0", "@n must be a whole number >= 1"),
        ("audit.keys_committed@x", "@n must be a whole number >= 1"),
        ("replication.tail_read:pause", "the action must be one of"),
        ("replication.tail_read:crash=10", "the action must be one of"),
        ("replication.tail_read:pause=1.5s", "pause=<ms> needs a whole number of milliseconds"),
    ],
)
def test_a_malformed_value_is_bad_input_naming_the_entry(value: str, fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment) as caught:
        parse(value)
    assert caught.value.exit_status == EXIT_BAD_INPUT
    assert faults.ENV in str(caught.value)


def test_without_the_variable_every_point_is_a_no_op(monkeypatch) -> None:
    monkeypatch.delenv(faults.ENV, raising=False)
    for _ in range(3):
        fault_point("audit.keys_committed")


def test_fail_first_attempt_fails_the_nth_hit_only(monkeypatch) -> None:
    monkeypatch.setenv(faults.ENV, "audit.keys_committed@2:fail-first-attempt")
    fault_point("audit.keys_committed")
    fault_point("replication.record_acked")  # another point: not counted with it
    with pytest.raises(FaultInjected, match=r"audit.keys_committed \(hit 2\)"):
        fault_point("audit.keys_committed")
    fault_point("audit.keys_committed")  # the retry goes through


def test_pause_sleeps_at_the_nth_hit_then_the_step_goes_on(monkeypatch, capsys) -> None:
    slept: list[float] = []
    monkeypatch.setattr(faults.time, "sleep", slept.append)
    monkeypatch.setenv(faults.ENV, "replication.tail_read@2:pause=1500")
    for _ in range(3):
        fault_point("replication.tail_read")
    assert slept == [1.5]
    assert "UATU_FAULT: pause 1500 ms at replication.tail_read (hit 2)" in capsys.readouterr().err


def test_an_undeclared_point_is_a_programming_error(monkeypatch) -> None:
    monkeypatch.setenv(faults.ENV, "audit.keys_committed")
    with pytest.raises(ValueError, match="not declared"):
        fault_point("audit.no_such_step")


def test_crash_kills_the_whole_process_group_at_the_nth_hit(tmp_path) -> None:
    """A driver with a child (as spark-submit.sh has a JVM): both die at the second hit."""
    child_pid = tmp_path / "child.pid"
    script = textwrap.dedent(
        f"""
        import subprocess, sys, time
        from core.faults import fault_point
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        open({str(child_pid)!r}, "w").write(str(child.pid))
        fault_point("audit.keys_committed")
        print("first hit passed", flush=True)
        fault_point("audit.keys_committed")
        print("not reached", flush=True)
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script],
        env={**os.environ, faults.ENV: "audit.keys_committed@2", "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        start_new_session=True,
        timeout=60,
    )
    assert proc.returncode == -signal.SIGKILL
    assert proc.stdout == "first hit passed\n"
    assert "UATU_FAULT: crash at audit.keys_committed (hit 2)" in proc.stderr
    pid = int(child_pid.read_text())
    deadline = time.monotonic() + 10
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not pid_alive(pid), "the child in the same process group survived"
