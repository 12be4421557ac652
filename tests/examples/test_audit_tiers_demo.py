"""`make demo-audit-tiers` end to end (a subprocess: the demo starts its own broker, Spark
session and jobs): it exits 0 only when every verdict, count and gap it prints matches what it
did to the topics, and it prints the loss with its offset range."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from core.paths import ROOT

pytestmark = pytest.mark.integration


def test_the_demo_finds_the_loss_and_the_duplication_it_made(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "examples.audit_tiers_demo", "--work-dir", str(tmp_path / "demo")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    out = done.stdout
    assert done.returncode == 0, out[-4000:] + done.stderr[-4000:]
    assert "MISMATCH" not in out
    assert "replication gaps" in out and "expected [(0, 0, 49)]  got [(0, 0, 49)]  OK" in out
    assert out.count("DUPLICATION") >= 2 and "LOSS" in out
