"""`uatu`: one command in front of the project's entry points.

    uatu --version
    uatu submit JOBGROUP.json [--once] ...     spark-submit.sh (the checkout's)
    uatu controlplane serve ...                the control plane and its admin commands
    uatu report --warehouse W --out F          the completeness report (docs/report.md)
    uatu query --warehouse W "SELECT ..."      SQL over the Delta tables without Spark
    uatu notify ...                            the webhook notifier
    uatu dlq TOPIC ...                         list a DLQ's records with their metadata
    uatu translate-offsets ...                 consumer-group offsets after a failover

Each subcommand replaces this process with the entry point it names (the same Python, or the
script), so its arguments, output and exit code are the entry point's own. This module imports
none of them: `command_line` is a pure table lookup.
"""

from __future__ import annotations

import os
import sys
import tomllib
from dataclasses import dataclass
from importlib import metadata

from core.paths import ROOT, SPARK_SUBMIT_SCRIPT

DISTRIBUTION = "uatu-spark"


@dataclass(frozen=True)
class Command:
    """A subcommand: a Python module run with -m, or a script (module None)."""

    summary: str
    module: str | None = None


COMMANDS = {
    "submit": Command("run a JobGroup with spark-submit.sh (the checkout's)"),
    "controlplane": Command("the control plane: serve, and its admin commands", "controlplane"),
    "report": Command("write the completeness report (HTML)", "integrations.report"),
    "query": Command("SQL over the Delta tables, without Spark", "integrations.query"),
    "notify": Command("post LOSS verdicts to a webhook", "integrations.notifier"),
    "dlq": Command("list a DLQ's records with their metadata", "clients.dlq_list"),
    "translate-offsets": Command(
        "consumer-group offsets on a replica after failover", "jobs.replication.offsets"
    ),
}


class UsageError(ValueError):
    """Bad arguments to `uatu` itself: exit 2 with the one line."""


def version() -> str:
    """The installed distribution's version, else the checkout's pyproject.toml's."""
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        with (ROOT / "pyproject.toml").open("rb") as f:
            return str(tomllib.load(f)["project"]["version"])


def usage() -> str:
    width = max(len(name) for name in COMMANDS)
    lines = [f"  {name:<{width}}  {c.summary}" for name, c in COMMANDS.items()]
    return (
        "usage: uatu [--version] COMMAND [ARGS...]\n\ncommands:\n"
        + "\n".join(lines)
        + "\n\n`uatu COMMAND --help` shows a command's own options."
    )


def command_line(argv: list[str], python: str = sys.executable) -> list[str]:
    """The argument list `uatu ARGV` runs (pure). Raises UsageError naming a missing or
    unknown command."""
    if not argv:
        raise UsageError("uatu: give a command (uatu --help lists them)")
    name, rest = argv[0], argv[1:]
    command = COMMANDS.get(name)
    if command is None:
        raise UsageError(f"uatu: command={name!r} is not one of {', '.join(COMMANDS)}")
    if command.module is None:
        return [str(SPARK_SUBMIT_SCRIPT), *rest]
    return [python, "-m", command.module, *rest]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] in (["-h"], ["--help"]):
        print(usage())
        return 0
    if args[:1] == ["--version"]:
        print(f"uatu {version()}")
        return 0
    try:
        line = command_line(args)
    except UsageError as error:
        print(error, file=sys.stderr)
        return 2
    if line[0] == str(SPARK_SUBMIT_SCRIPT) and not SPARK_SUBMIT_SCRIPT.exists():
        print(
            f"uatu submit: {SPARK_SUBMIT_SCRIPT} not found (it runs from a checkout)",
            file=sys.stderr,
        )
        return 2
    sys.stdout.flush()
    os.execv(line[0], line)  # replaced: the entry point's exit code is ours


if __name__ == "__main__":
    sys.exit(main())
