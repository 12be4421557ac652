"""Plausible wrong versions of the cross-tier verdict rules, each run against their unit tests.

Each mutant changes one rule of `jobs/audit/tiers/verdicts.py` the way a hurried edit could
(a threshold taken from the wrong side, `>=` for `>`, rules in another order, ...). The file is
rewritten for one mutant at a time, `tests/jobs/audit/test_tier_verdicts.py` and
`test_tier_checks.py` run, and the original is restored afterwards whatever happens. A mutant
that no test kills is a rule no test holds: the run lists it and exits 1.

Usage: python -m dev.verdict_mutants   (from the repository root, with build/gen on PYTHONPATH)
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from typing import NamedTuple

from core.paths import ROOT

RULES = ROOT / "jobs" / "audit" / "tiers" / "verdicts.py"
TESTS = ("tests/jobs/audit/test_tier_verdicts.py", "tests/jobs/audit/test_tier_checks.py")


class Mutant(NamedTuple):
    name: str
    original: str  # occurs exactly once in the rules module
    changed: str


MUTANTS = (
    Mutant(
        "rule 2's threshold relative to the right side",
        "lacking > allowed_difference(left, threshold)",
        "lacking > allowed_difference(right, threshold)",
    ),
    Mutant(
        "rule 2 with >= for >",
        "lacking > 0 and lacking > allowed_difference",
        "lacking > 0 and lacking >= allowed_difference",
    ),
    Mutant(
        "rule 2 without its threshold",
        "lacking if lacking > 0 and lacking > allowed_difference(left, threshold) else 0",
        "lacking if lacking > 0 else 0",
    ),
    Mutant(
        "rule 3 on the left's upper bound",
        "gap = left.unique_low - right.unique_high",
        "gap = left.unique_high - right.unique_high",
    ),
    Mutant("rule 3 without its whole-record floor", "and gap >= 1 else 0.0", "else 0.0"),
    Mutant(
        "rule 3 without its threshold",
        "gap if gap > max(allowed_difference(left, threshold), 0.0)",
        "gap if gap > 0.0",
    ),
    Mutant(
        "rule 4's threshold relative to the right side",
        "surplus > allowed_difference(left, threshold)",
        "surplus > allowed_difference(right, threshold)",
    ),
    Mutant(
        "rule 4 with >= for >",
        "surplus > 0 and surplus > allowed_difference",
        "surplus > 0 and surplus >= allowed_difference",
    ),
    Mutant(
        "rule 4 without its threshold",
        "surplus if surplus > 0 and surplus > allowed_difference(left, threshold) else 0",
        "surplus if surplus > 0 else 0",
    ),
    Mutant(
        "rule 1 judging a side that has not reported",
        "        if not side.reported:\n",
        "        if False:\n",
    ),
    Mutant(
        "duplication judged before loss",
        "    if lacking := missing_records(left, right, threshold):",
        "    if extra_records(left, right, threshold):\n"
        "        return DUPLICATION, 'more records'\n"
        "    if lacking := missing_records(left, right, threshold):",
    ),
    Mutant(
        "replication: a partition behind hides another's gap",
        "    if missing:\n        parts",
        "    if behind:\n        return (INCOMPLETE, 'behind', *counts)\n"
        "    if missing:\n        parts",
    ),
    Mutant(
        "replication: one extra copy forgiven", "if copies > present:", "if copies > present + 1:"
    ),
    Mutant(
        "revision: an INCOMPLETE window's count change revises",
        'row["verdict"] != INCOMPLETE and changed_counts',
        "changed_counts",
    ),
    Mutant(
        "revision: a count change never revises",
        'if changed_verdict or (row["verdict"] != INCOMPLETE and changed_counts):',
        "if changed_verdict:",
    ),
)


def failures_with(source: str) -> str:
    """pytest's summary line of the rule tests run against `source` as the rules module."""
    RULES.write_text(source)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:randomly",
            "-p",
            "no:cacheprovider",
            *TESTS,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    lines = [line for line in done.stdout.splitlines() if " passed" in line or " failed" in line]
    return lines[-1] if lines else done.stdout[-300:] + done.stderr[-300:]


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args(argv)
    original = RULES.read_text()
    survivors = []
    try:
        for mutant in MUTANTS:
            if original.count(mutant.original) != 1:
                print(f"{mutant.name}: its text is not in {RULES.name} once; update the mutant")
                return 2
            summary = failures_with(original.replace(mutant.original, mutant.changed))
            print(f"{mutant.name:55} {summary}")
            if " failed" not in summary:
                survivors.append(mutant.name)
    finally:
        RULES.write_text(original)
    print(f"{len(MUTANTS) - len(survivors)} of {len(MUTANTS)} mutants killed")
    return 1 if survivors else 0


if __name__ == "__main__":
    sys.exit(main())
