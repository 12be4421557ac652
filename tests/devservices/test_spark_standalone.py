"""`hidden_argv`: how the standalone workers of the tests become hosts without the checkout
(the cluster itself runs in tests/jobs/test_cluster_hosts.py and the standalone launcher's
tests). Runs the real `unshare`, no Spark."""

from __future__ import annotations

import subprocess
from pathlib import Path

from devservices.spark_standalone import hidden_argv


def test_a_hidden_path_is_empty_and_spark_stays_visible_through_the_bind(tmp_path: Path) -> None:
    checkout = tmp_path / "my checkout"  # a space: the script quotes every path
    spark_home = checkout / ".venv" / "pyspark"  # Spark under a hidden path, as pip puts it
    (spark_home / "bin").mkdir(parents=True)
    (spark_home / "bin" / "spark-class").write_text("#!/bin/sh\n")
    bound = tmp_path / "spark-home"
    bound.mkdir()

    argv = hidden_argv(
        ["sh", "-c", 'ls -A "$0"; echo --; ls -A "$1/bin"', str(checkout), str(bound)],
        [checkout],
        spark_home,
        bound,
    )
    seen = subprocess.run(argv, capture_output=True, text=True, check=True).stdout

    assert seen == "--\nspark-class\n"
    # The mounts were the namespace's own: outside it, nothing changed.
    assert (spark_home / "bin" / "spark-class").exists()
    assert list(bound.iterdir()) == []
