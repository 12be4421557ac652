"""The SQL settings the tests' spark-submit.sh runs take from the test session's
(`testing.spark.small_submit_args`, used by testing/jobrun.py)."""

from __future__ import annotations

import shlex

from testing.spark import SMALL_LOCAL_CONF, small_submit_args


def submitted() -> dict[str, str]:
    words = shlex.split(small_submit_args())
    assert words[::2] == ["--conf"] * (len(words) // 2), words
    return dict(word.split("=", 1) for word in words[1::2])


def test_the_runs_take_the_sessions_sql_settings_and_leave_the_slots_to_the_master() -> None:
    kept = ("spark.ui.enabled", "spark.driver.extraJavaOptions", "spark.default.parallelism")
    expected = {k: v for k, v in SMALL_LOCAL_CONF.items() if k not in kept}
    assert submitted() == expected
    # what the runs save: no generated code, no re-planning
    assert submitted()["spark.sql.codegen.wholeStage"] == "false"
    assert submitted()["spark.sql.adaptive.enabled"] == "false"
