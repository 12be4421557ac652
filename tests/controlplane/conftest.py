"""The control plane's tests: the applications a control plane starts here through
`spark-submit.sh` (the local launcher; a worker pool's worker applications too) take the test
session's SQL settings, as the crash tests' runs do (`testing.spark.small_submit_args`). These
tests are about launching, placing, failing over and stopping applications, not about Spark's
code generation. The control plane of the Prometheus test (tests/integrations), the demo,
Airflow and the standalone cluster still start jobs with Spark's defaults (docs/testing.md)."""

from __future__ import annotations

import pytest

from testing.spark import small_submit_args


@pytest.fixture(autouse=True)
def _small_launched_applications(monkeypatch: pytest.MonkeyPatch) -> None:
    """UATU_SPARK_SUBMIT_ARGS for every spark-submit.sh started during the test (a control
    plane process started here inherits the variable, and so do the applications it starts)."""
    monkeypatch.setenv("UATU_SPARK_SUBMIT_ARGS", small_submit_args())
