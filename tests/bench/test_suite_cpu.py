"""bench.suite_cpu: which kind a process is filed under, and the ledger's arithmetic."""

from __future__ import annotations

import pytest

from bench import suite_cpu
from bench.suite_cpu import Ledger, kind_of


@pytest.mark.parametrize(
    ("command_line", "kind"),
    [
        (
            "/usr/lib/jvm/java/bin/java -cp x org.apache.spark.deploy.SparkSubmit "
            "--conf a=b pyspark-shell",
            "spark session JVM (pyspark-shell)",
        ),
        (
            "/usr/lib/jvm/java/bin/java -cp x org.apache.spark.deploy.SparkSubmit "
            "--py-files build/uatu-jobs.zip /repo/jobs/main.py g.json --once",
            "spark-submit.sh driver JVM",
        ),
        ("java -Xmx512m -cp jars/* kafka.Kafka /tmp/k/server.properties", "kafka broker JVM"),
        ("/repo/.venv/bin/python /repo/jobs/main.py g.json --once", "job driver python"),
        ("/repo/.venv/bin/python -c import sys;exec(eval(sys.stdin.readline()))", "pytest"),
        ("/repo/.venv/bin/python -m pyspark.daemon", "pyspark python workers"),
        ("/repo/var/etcd/usr/bin/etcd --data-dir /tmp/e", "etcd"),
        ("sleep 5", "other"),
    ],
)
def test_a_process_is_filed_under_the_first_kind_its_command_line_matches(command_line, kind):
    assert kind_of(command_line) == kind


def test_a_process_running_at_the_start_counts_only_what_it_spent_since(monkeypatch):
    readings = iter([{"1": (10.0, "sleep 1")}, {"1": (12.5, "sleep 1"), "2": (3.0, "sleep 2")}])
    _read_from(monkeypatch, readings)
    ledger = Ledger()
    ledger.read(baseline=True)
    ledger.read()
    assert ledger.by_kind() == {"other": (1, 5.5)}  # 2.5 since the start, 3.0 all new


def test_a_reused_pid_keeps_both_processes(monkeypatch):
    readings = iter([{"7": (4.0, "sleep 1")}, {"7": (1.0, "kafka.Kafka")}])
    _read_from(monkeypatch, readings)
    ledger = Ledger()
    ledger.read()
    ledger.read()
    assert ledger.by_kind() == {"other": (1, 4.0), "kafka broker JVM": (1, 1.0)}


def _read_from(monkeypatch, readings):
    """Each `Ledger.read` sees the next reading: {pid: (cpu seconds, command line)}."""
    current: dict[str, tuple[float, str]] = {}

    def listdir(path):
        current.clear()
        current.update(next(readings))
        return list(current)

    monkeypatch.setattr(suite_cpu.os, "listdir", listdir)
    monkeypatch.setattr(suite_cpu, "cpu_seconds", lambda pid: current[str(pid)][0])
    monkeypatch.setattr(suite_cpu, "_command_line", lambda pid: current[pid][1])


def test_top_lists_the_processes_that_spent_most_with_their_command_lines(monkeypatch):
    readings = iter([{"1": (2.0, "kafka.Kafka a"), "2": (9.0, "sleep 9"), "3": (5.0, "x")}])
    _read_from(monkeypatch, readings)
    ledger = Ledger()
    ledger.read()
    assert [(p["command"], p["cpu_seconds"]) for p in ledger.top(2)] == [
        ("sleep 9", 9.0),
        ("x", 5.0),
    ]


def test_a_long_command_line_keeps_its_start_and_its_end():
    line = "java -cp " + "x" * 1000 + " jobs/main.py /tmp/t/test_a0/g-1.json --once"
    short = suite_cpu.abridged(line)
    assert short.startswith("java -cp xx") and short.endswith("/tmp/t/test_a0/g-1.json --once")
    assert len(short) == 150 + 5 + 350
    assert suite_cpu.abridged("sleep 5") == "sleep 5"
