"""testing.cpu_per_test: a test's CPU is its pytest process's, its reaped children's and what
its living descendants spent meanwhile; bench.suite_cpu ranks the lines."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from bench.suite_cpu import ranked_tests
from core.paths import ROOT
from testing import cpu_per_test
from testing.cpu_per_test import own_and_reaped_seconds, spent_between

BUSY = "import time\nend = time.process_time() + 0.6\nwhile time.process_time() < end: pass"


def test_a_childs_cpu_counts_once_it_is_reaped():
    before = own_and_reaped_seconds(os.getpid())
    subprocess.run([sys.executable, "-c", BUSY], check=True)  # waited for: reaped
    assert own_and_reaped_seconds(os.getpid()) - before >= 0.5


def test_living_processes_count_what_they_spent_since_and_a_new_one_all_of_it():
    before = {(1, 100): 5.0, (2, 200): 1.0}
    after = {(1, 100): 7.5, (3, 300): 0.5, (2, 201): 0.25}  # pid 2 reused: another process
    assert spent_between(before, after) == 2.5 + 0.5 + 0.25


def test_the_plugin_writes_each_tests_cpu_and_the_bench_ranks_them(tmp_path: Path):
    (tmp_path / "conftest.py").write_text(
        "from testing import cpu_per_test\n\n"
        "def pytest_configure(config):\n"
        "    cpu_per_test.register_if_asked(config)\n"
    )
    (tmp_path / "test_sample.py").write_text(
        "import subprocess, sys\n\n"
        f"BUSY = {BUSY!r}\n\n"
        "def test_busy():\n"
        "    subprocess.run([sys.executable, '-c', BUSY], check=True)\n\n"
        "def test_idle():\n"
        "    pass\n"
    )
    out = tmp_path / "cpu"
    env = {**os.environ, cpu_per_test.ENV: str(out), "PYTHONPATH": str(ROOT)}
    env.pop("PYTEST_XDIST_WORKER", None)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    lines = [json.loads(line) for line in (out / "main.jsonl").read_text().splitlines()]
    spent = {line["test"].rsplit("::", 1)[1]: line["cpu_seconds"] for line in lines}
    assert spent["test_busy"] >= 0.5 > spent["test_idle"], lines
    ranked = ranked_tests(out)
    assert [t["test"].rsplit("::", 1)[1] for t in ranked["top_tests"]] == ["test_busy", "test_idle"]
    (tested,) = ranked["top_test_files"]
    assert tested["file"].endswith("test_sample.py")
    assert tested["cpu_seconds"] == round(sum(spent.values()), 1)
