"""Where a command's CPU goes, by kind of process: `python -m bench.suite_cpu -- make test`.

`/usr/bin/time -v` counts only the processes its command waited for: a JVM a test started in
a session of its own and killed, or a service a test left to exit on its own, is not in its
figure. This runs the command and reads every process on the machine once a second from
/proc: each process's own CPU (utime + stime) at its last reading, filed under a kind read
from its latest command line (`KINDS`, the first match wins: a launcher script execs its JVM
under the same pid), and the machine's busy CPU from /proc/stat over the same time, so what
no reading saw (processes shorter than a second, the last second of each, the rest of the
machine) shows as `unattributed`.

It prints a table (kind, processes, CPU seconds, share) and writes it as JSON with
`--out`. Run it on a quiet machine: every process counts, the command's or not. With
`--test-cpu-dir`, the command runs with `UATU_TEST_CPU` set to that folder (a pytest run then
writes each test's CPU there, testing/cpu_per_test.py) and the JSON also lists the tests and
the test files that spent the most.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from core.processes import cpu_seconds, machine_busy_seconds
from testing import cpu_per_test

# (kind, pattern searched in the NUL-joined command line); the first match names the kind.
KINDS: tuple[tuple[str, str], ...] = (
    ("spark session JVM (pyspark-shell)", r"SparkSubmit.*pyspark-shell"),
    ("spark-submit.sh driver JVM", r"org\.apache\.spark\.deploy\.SparkSubmit"),
    ("spark standalone master/worker", r"org\.apache\.spark\.deploy\.(master|worker)\."),
    ("spark executor JVM", r"CoarseGrainedExecutorBackend"),
    ("kafka broker JVM", r"kafka\.Kafka\b"),
    ("mirror maker JVM", r"MirrorMaker"),
    ("other JVM", r"/java\b|^java\b"),
    ("pyspark python workers", r"pyspark\.daemon|pyspark\.worker"),
    ("job driver python", r"jobs/main\.py|jobs\.zip|-m jobs\b"),
    ("control plane python", r"-m controlplane|controlplane/__main__"),
    ("airflow", r"airflow"),
    ("pytest", r"pytest|execnet|xdist|sys\.stdin\.readline"),
    ("etcd", r"\betcd\b"),
    ("kafka-pixy", r"kafka-pixy"),
    ("burrow", r"[Bb]urrow"),
    ("prometheus", r"prometheus"),
    ("chromium", r"chrom"),
    ("other python", r"python"),
    ("build tools (make, mvn, cargo, go, pip)", r"\b(make|mvn|cargo|rustc|go|pip)\b"),
)
_COMPILED = tuple((kind, re.compile(pattern)) for kind, pattern in KINDS)
TOP = 150  # processes listed one by one in the JSON


def kind_of(command_line: str) -> str:
    """The kind of a process by its command line (NUL-separated arguments as space)."""
    for kind, pattern in _COMPILED:
        if pattern.search(command_line):
            return kind
    return "other"


def abridged(command_line: str, head: int = 150, tail: int = 350) -> str:
    """The command line's first `head` and last `tail` characters, joined by " ... " when
    it is longer than both."""
    if len(command_line) <= head + tail:
        return command_line
    return f"{command_line[:head]} ... {command_line[-tail:]}"


def _command_line(pid: str) -> str:
    try:
        arguments = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    return arguments.replace(b"\0", b" ").decode(errors="replace")


@dataclass
class Ledger:
    """Each process seen: its kind and its CPU at the last reading, minus its CPU when the
    ledger started (a process already running then counts only what it spent since)."""

    started_with: dict[str, float] = field(default_factory=dict)
    kinds: dict[str, str] = field(default_factory=dict)
    commands: dict[str, str] = field(default_factory=dict)
    last_cpu: dict[str, float] = field(default_factory=dict)

    def read(self, baseline: bool = False) -> None:
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            cpu = cpu_seconds(int(pid))
            if not cpu:  # gone since the listing (or nothing spent yet: read it next time)
                continue
            # A pid reused by a new process shows less CPU than the old one had.
            if pid in self.last_cpu and cpu < self.last_cpu[pid]:
                key = f"{pid}@{len(self.kinds)}"
                self.kinds[key] = self.kinds.pop(pid)
                self.commands[key] = self.commands.pop(pid)
                self.last_cpu[key] = self.last_cpu.pop(pid)
                if pid in self.started_with:
                    self.started_with[key] = self.started_with.pop(pid)
            if pid not in self.kinds and baseline:
                self.started_with[pid] = cpu
            # Read again each time: a launcher script execs its JVM under the same pid.
            command = _command_line(pid) or self.commands.get(pid, "")
            if command != self.commands.get(pid):
                self.commands[pid] = command
                self.kinds[pid] = kind_of(command)
            self.last_cpu[pid] = cpu

    def spent(self, key: str) -> float:
        return self.last_cpu[key] - self.started_with.get(key, 0.0)

    def top(self, n: int) -> list[dict]:
        """The `n` processes that spent the most CPU: kind, CPU seconds, command line
        (`abridged`: a JVM's is mostly its class path, its end names a driver's JobGroup file
        or a broker's data directory, and so the test that started it)."""
        spending = [k for k in self.kinds if self.spent(k) > 0]
        keys = sorted(spending, key=self.spent, reverse=True)[:n]
        return [
            {
                "kind": self.kinds[k],
                "cpu_seconds": round(self.spent(k), 1),
                "command": abridged(self.commands[k]),
            }
            for k in keys
        ]

    def by_kind(self) -> dict[str, tuple[int, float]]:
        totals: dict[str, tuple[int, float]] = {}
        for key, kind in self.kinds.items():
            spent = self.spent(key)
            if spent <= 0 and key in self.started_with:
                continue
            count, cpu = totals.get(kind, (0, 0.0))
            totals[kind] = (count + (key not in self.started_with), cpu + spent)
        return totals


def ranked_tests(folder: Path, n: int = TOP) -> dict[str, list[dict]]:
    """The `n` tests and test files that spent the most CPU, from cpu_per_test's lines."""
    lines = cpu_per_test.read_lines(folder)
    files: dict[str, list[float]] = {}
    for line in lines:
        spent = files.setdefault(line["test"].split("::", 1)[0], [0.0, 0.0])
        spent[0] += line["cpu_seconds"]
        spent[1] += line["wall_seconds"]
    ranked = sorted(files.items(), key=lambda kv: -kv[1][0])
    return {
        "top_tests": lines[:n],
        "top_test_files": [
            {"file": f, "cpu_seconds": round(cpu, 1), "wall_seconds": round(wall, 1)}
            for f, (cpu, wall) in ranked[:n]
        ],
    }


def run(command: list[str], interval: float, test_cpu_dir: Path | None = None) -> dict:
    """Run `command`, reading the processes every `interval` seconds until it exits."""
    ledger = Ledger()
    ledger.read(baseline=True)
    busy_before, started = machine_busy_seconds(), time.monotonic()
    env = None if test_cpu_dir is None else {**os.environ, cpu_per_test.ENV: str(test_cpu_dir)}
    child = subprocess.Popen(command, env=env)
    while child.poll() is None:
        ledger.read()
        time.sleep(interval)
    ledger.read()
    busy = machine_busy_seconds() - busy_before
    wall = time.monotonic() - started
    kinds = ledger.by_kind()
    attributed = sum(cpu for _, cpu in kinds.values())
    rows = [
        {"kind": kind, "processes": count, "cpu_seconds": round(cpu, 1)}
        for kind, (count, cpu) in sorted(kinds.items(), key=lambda kv: -kv[1][1])
        if count or cpu >= 0.5
    ]
    unattributed = round(busy - attributed, 1)
    rows.append({"kind": "unattributed", "processes": 0, "cpu_seconds": unattributed})
    return {
        "command": command,
        "exit_status": child.returncode,
        "wall_seconds": round(wall, 1),
        "machine_busy_cpu_seconds": round(busy, 1),
        "cores": os.cpu_count(),
        "kinds": rows,
        "top_processes": ledger.top(TOP),
        **(ranked_tests(test_cpu_dir) if test_cpu_dir is not None else {}),
    }


def render(result: dict) -> str:
    busy = result["machine_busy_cpu_seconds"]
    lines = [
        f"{' '.join(result['command'])}: exit {result['exit_status']}, "
        f"wall {result['wall_seconds']:.0f} s, machine busy {busy:.0f} CPU s "
        f"({busy / result['wall_seconds'] / result['cores']:.0%} of {result['cores']} cores)",
        f"{'kind':42} {'processes':>9} {'CPU s':>8} {'share':>6}",
    ]
    for row in result["kinds"]:
        share = row["cpu_seconds"] / busy if busy else 0.0
        lines.append(
            f"{row['kind']:42} {row['processes']:9d} {row['cpu_seconds']:8.0f} {share:6.1%}"
        )
    lines.append("the ten processes that spent the most (all of the top ones in the JSON):")
    for process in result["top_processes"][:10]:
        lines.append(f"{process['cpu_seconds']:8.0f}  {process['command'][-110:]}")
    if "top_test_files" in result:
        lines.append("the ten test files that spent the most (CPU s, wall s; more in the JSON):")
        for tested in result["top_test_files"][:10]:
            lines.append(
                f"{tested['cpu_seconds']:8.0f} {tested['wall_seconds']:8.0f}  {tested['file']}"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.suite_cpu",
        description="Run a command and show where the machine's CPU went, by kind of process.",
    )
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between readings")
    parser.add_argument("--out", type=Path, help="also write the result as JSON here")
    parser.add_argument(
        "--test-cpu-dir",
        type=Path,
        help="set UATU_TEST_CPU to this folder for the command (each pytest test's CPU, "
        "testing/cpu_per_test.py) and rank its tests in the JSON",
    )
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the command, after --")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("a command to run is required, e.g. -- make test")
    result = run(command, args.interval, args.test_cpu_dir)
    print(render(result), flush=True)
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    return int(result["exit_status"] != 0)


if __name__ == "__main__":
    sys.exit(main())
