"""The Airflow venv as the tests run it: its own Python, the provider and uatu-spark installed
from their wheels (`make airflow-provider`), and no PYTHONPATH, so nothing is imported from the
checkout (a PYTHONPATH naming the checkout would hide a wheel that lacks a module)."""

from __future__ import annotations

import os

from core.paths import ROOT

AIRFLOW_VENV = ROOT / "integrations" / "airflow" / ".venv"
AIRFLOW_PY = AIRFLOW_VENV / "bin" / "python"


def airflow_env() -> dict[str, str]:
    """This process's environment without PYTHONPATH."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
