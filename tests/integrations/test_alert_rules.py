"""The alert rules in conf/prometheus/uatu-alerts.yml, held by Prometheus's own `promtool test
rules` (Debian's prometheus package, `make prometheus`) on the cases in alert_rules_test.yml:
every rule fires on the series as the jobs and the control plane label them, and stays quiet
where it should."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from core.paths import ROOT
from devservices.prometheus import PROMTOOL

pytestmark = pytest.mark.integration

RULES = ROOT / "conf" / "prometheus" / "uatu-alerts.yml"
CASES = Path(__file__).with_name("alert_rules_test.yml")


def promtool_test(cases: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(PROMTOOL), "test", "rules", cases.name],
        cwd=cases.parent,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_every_rule_fires_where_it_should_and_only_there() -> None:
    assert PROMTOOL.exists(), f"{PROMTOOL} is missing: run make prometheus"
    checked = subprocess.run(
        [str(PROMTOOL), "check", "rules", str(RULES)], capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    run = promtool_test(CASES)
    assert run.returncode == 0, run.stdout + run.stderr


def test_the_cases_fail_the_window_rule_as_it_was_documented(tmp_path: Path) -> None:
    """Without `on(instance)`, `and` matches on every label, and a window series and a query
    series never share them all: the rule never fired. The cases must catch that."""
    documented = RULES.read_text().replace(" and on(instance) ", " and ")
    assert documented != RULES.read_text()
    (tmp_path / "rules.yml").write_text(documented)
    cases = yaml.safe_load(CASES.read_text())
    cases["rule_files"] = ["rules.yml"]
    (tmp_path / "cases.yml").write_text(yaml.safe_dump(cases))
    run = promtool_test(tmp_path / "cases.yml")
    assert run.returncode != 0
    assert "alertname: AuditWindowIncomplete" in run.stdout + run.stderr
