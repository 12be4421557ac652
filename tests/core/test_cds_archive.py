"""The drivers' class-data sharing archive (dev/cds_archive.py): the options that use it, and
that a Spark JVM maps the archive `make build` recorded and refuses a broken one."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.paths import ROOT, SPARK_CDS_ARCHIVE, SPARK_SUBMIT_SCRIPT, cds_java_options
from dev.cds_archive import archive_maps, spark_submit_command

VENV_BIN = ROOT / ".venv" / "bin"


def test_no_archive_means_no_options(tmp_path):
    assert cds_java_options(tmp_path / "missing.jsa") == ""


def test_an_archive_is_used_when_it_maps_and_skipped_quietly_on_stdout_when_not(tmp_path):
    archive = tmp_path / "spark.jsa"
    archive.write_bytes(b"x")
    options = cds_java_options(archive).split()
    assert options[:2] == [f"-XX:SharedArchiveFile={archive}", "-Xshare:auto"]
    assert "-Xlog:cds*=off:stdout" in options


def test_spark_submit_sh_adds_the_same_options(tmp_path):
    archive = tmp_path / "spark.jsa"
    archive.write_bytes(b"x")
    in_script = cds_java_options(archive).replace(str(archive), "$CDS_ARCHIVE")
    script = SPARK_SUBMIT_SCRIPT.read_text()
    assert f'SPARK_SUBMIT_OPTS="${{SPARK_SUBMIT_OPTS:-}} {in_script}"' in script
    assert 'CDS_ARCHIVE="$ROOT/build/spark-cds.jsa"' in script
    assert SPARK_CDS_ARCHIVE == ROOT / "build" / "spark-cds.jsa"


def test_training_runs_this_file_through_spark_submit_with_the_jobs_jars():
    command = spark_submit_command(Path("/v/bin"), ["/j/a.jar", "/j/b.jar"], Path("/d/x.py"))
    assert command == [
        "/v/bin/spark-submit",
        "--master",
        "local[2]",
        "--jars",
        "/j/a.jar,/j/b.jar",
        "/d/x.py",
        "--train",
    ]


@pytest.mark.spark
def test_a_spark_jvm_maps_the_recorded_archive_and_refuses_a_truncated_one(tmp_path):
    if not SPARK_CDS_ARCHIVE.exists():
        pytest.fail(f"{SPARK_CDS_ARCHIVE} is missing: run `make build`")
    maps, output = archive_maps(SPARK_CDS_ARCHIVE, VENV_BIN)
    assert maps, output
    truncated = tmp_path / "truncated.jsa"
    with SPARK_CDS_ARCHIVE.open("rb") as whole, truncated.open("wb") as part:
        part.write(whole.read(1_000_000))
    maps, output = archive_maps(truncated, VENV_BIN)
    assert not maps, output
    assert not list(Path.cwd().glob("hs_err_pid*.log"))
