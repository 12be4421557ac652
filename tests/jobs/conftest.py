"""Fixtures of the job tests."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture()
def stop_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The stop file of a job run in this process (`tests.jobs.in_process.running`): the
    job polls `UATU_STOP_FILE` and stops its query once the path exists."""
    path = tmp_path / "stop"
    monkeypatch.setenv("UATU_STOP_FILE", str(path))
    return path
