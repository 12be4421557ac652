"""`uatu` (core/cli.py): one command in front of the entry points. The table is pure; one real
run shows the entry point's output and exit code come through the exec untouched."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import tomllib

import pytest

from core.cli import COMMANDS, UsageError, command_line, main, version
from core.paths import ROOT, SPARK_SUBMIT_SCRIPT


def test_each_command_runs_its_entry_point_with_the_arguments_after_it() -> None:
    assert command_line(["report", "--out", "r.html"], python="/py") == [
        "/py", "-m", "integrations.report", "--out", "r.html",
    ]  # fmt: skip
    assert command_line(["submit", "group.json", "--once"], python="/py") == [
        str(SPARK_SUBMIT_SCRIPT), "group.json", "--once",
    ]  # fmt: skip
    assert command_line(["controlplane", "serve"], python="/py")[:3] == [
        "/py",
        "-m",
        "controlplane",
    ]


@pytest.mark.parametrize("name", [n for n, c in COMMANDS.items() if c.module])
def test_every_module_the_table_names_exists(name: str) -> None:
    module = COMMANDS[name].module
    assert module is not None and importlib.util.find_spec(module) is not None, module


def test_a_missing_or_unknown_command_is_one_line_and_exit_2(capsys) -> None:
    with pytest.raises(UsageError, match=r"command='serve' is not one of submit, controlplane"):
        command_line(["serve"])
    assert main([]) == 2
    assert capsys.readouterr().err == "uatu: give a command (uatu --help lists them)\n"


def test_version_is_the_projects(capsys) -> None:
    with (ROOT / "pyproject.toml").open("rb") as f:
        expected = tomllib.load(f)["project"]["version"]
    assert version() == expected
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"uatu {expected}\n"
    assert main(["--help"]) == 0
    listed = capsys.readouterr().out
    assert all(f"  {name} " in listed for name in COMMANDS)


def test_the_entry_points_exit_code_and_line_come_through(tmp_path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "core.cli", "report", "--warehouse", str(tmp_path / "nope")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=tmp_path,
    )
    assert (done.returncode, done.stderr) == (
        2, f"report: --warehouse {tmp_path / 'nope'}: no such directory\n",
    )  # fmt: skip
