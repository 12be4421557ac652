"""Build the JVM class-data sharing (AppCDS) archive that Spark drivers start from.

A Spark driver loads and verifies many thousands of classes (Spark, Scala, Delta) before its
first batch, on every launch. A dynamic CDS archive holds those classes already parsed and verified;
a JVM started with ``-XX:SharedArchiveFile`` maps it instead, which cuts the CPU a start-up
spends in class loading (docs/benchmarks.md, start-up).

The archive is recorded here by a training run: ``spark-submit`` with
``-XX:ArchiveClassesAtExit`` runs this file with ``--train``, which builds a session as the
jobs do (``jobs.runtime.session``, the project's jars), makes a job's Delta writes
(``jobs.runtime.warm_up``: create, append, MERGE, read), runs a streaming query and plans a
Kafka read. A JVM can only use the archive with the exact JDK and classpath that recorded
it, so:

* the archive is written to a temporary file, checked with ``-Xshare:on`` (a JVM that cannot
  map it fails instead of running without it) and only then renamed into place: a half-written
  archive would crash the JVMs that map it;
* users of the archive (``spark-submit.sh``, ``core.paths.cds_java_options``) run with
  ``-Xshare:auto``: a stale archive (a new JDK, a new pyspark) prints one warning on stderr and
  the JVM starts without it.

Usage: python -m dev.cds_archive build/spark-cds.jsa
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from core.paths import C1_ONLY_JIT, CDS_LOG_OPTIONS, ROOT, project_jars


def spark_submit_command(venv_bin: Path, jars: list[str], script: Path) -> list[str]:
    """spark-submit of `script --train` with the jars a job runs with (as spark-submit.sh)."""
    return [
        str(venv_bin / "spark-submit"),
        "--master",
        "local[2]",
        "--jars",
        ",".join(jars),
        str(script),
        "--train",
    ]


def train() -> None:
    """What a job's driver does before its first batch, on toy data (runs inside spark-submit)."""
    from jobs.runtime.session import build_session

    spark = build_session("uatu-cds-training", conf={"spark.ui.enabled": "false"})
    spark.sparkContext.setLogLevel("ERROR")
    with tempfile.TemporaryDirectory(prefix="uatu-cds-") as tmp:
        # The Delta writes a job's first batches make (a table's creation as
        # jobs.runtime.delta.ensure does it, an idempotent append, a MERGE, a read): what a
        # worker warms before it registers, on a table of its own.
        from jobs.runtime.warm_up import warm_up_delta

        warmed = warm_up_delta(spark, tmp)
        if warmed.failure is not None:
            raise RuntimeError(f"the Delta writes of the training run failed: {warmed.failure}")
        query = (
            spark.readStream.format("rate")
            .option("rowsPerSecond", 10)
            .load()
            .writeStream.format("delta")
            .option("checkpointLocation", f"{tmp}/checkpoint")
            .trigger(availableNow=True)
            .start(f"{tmp}/stream")
        )
        query.awaitTermination(120)
        # Analyzes (never runs) a Kafka read, which loads the connector's classes.
        kafka = spark.read.format("kafka").option("kafka.bootstrap.servers", "127.0.0.1:9")
        print(kafka.option("subscribe", "cds").load().schema.simpleString())
    spark.stop()


def archive_maps(archive: Path, venv_bin: Path) -> tuple[bool, str]:
    """Whether a Spark JVM (spark-submit's classpath) maps `archive`, and the JVM's output.
    -Xshare:on makes a JVM that cannot use the archive fail instead of starting without it; a
    broken archive can crash it, so it runs in a folder of its own for the crash report."""
    with tempfile.TemporaryDirectory(prefix="uatu-cds-check-") as scratch:
        check = subprocess.run(
            [str(venv_bin / "spark-submit"), "--version"],
            env={
                **os.environ,
                # spark-submit finds its SPARK_HOME through this Python's pyspark.
                "PYSPARK_PYTHON": str(venv_bin / "python"),
                "SPARK_SUBMIT_OPTS": f"-XX:SharedArchiveFile={archive} -Xshare:on"
                " -XX:-CreateCoredumpOnCrash",
            },
            cwd=scratch,
            capture_output=True,
            text=True,
            check=False,
        )
    return check.returncode == 0, check.stdout + check.stderr


def build(out: Path, venv_bin: Path, jars: list[str]) -> None:
    """Record the archive into `out` (replaced only by an archive that maps)."""
    tmp = out.with_name(out.name + ".tmp")
    tmp.unlink(missing_ok=True)
    # The training driver is this file run as a script: its imports (core, jobs) come from
    # the checkout's root, which a script's own folder does not put on the path.
    python_path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "PYSPARK_PYTHON": str(venv_bin / "python"), "PYTHONPATH": python_path}
    started = time.monotonic()
    print(f"recording {out} (a training Spark run, about a minute)", flush=True)
    # C1 only: the archive holds parsed classes, not compiled code, and C2's work on a run
    # this short is CPU that `make setup` waits for; the archive maps with either JIT
    # (archive_maps checks it with the default one).
    record = subprocess.run(
        spark_submit_command(venv_bin, jars, Path(__file__).resolve()),
        env={
            **env,
            "SPARK_SUBMIT_OPTS": f"{C1_ONLY_JIT} -XX:ArchiveClassesAtExit={tmp} {CDS_LOG_OPTIONS}",
        },
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        check=False,
    )
    if record.returncode != 0 or not tmp.exists():
        tmp.unlink(missing_ok=True)
        # The archiving JVM warns about every class it leaves out, and Spark logs its shutdown
        # after Python's traceback: show the traceback, else the last lines.
        lines = [line for line in record.stderr.splitlines() if "][cds" not in line]
        if "Traceback (most recent call last):" in lines:
            lines = [line for line in lines if " INFO " not in line and " WARN " not in line]
            lines = lines[
                len(lines) - lines[::-1].index("Traceback (most recent call last):") - 1 :
            ]
        raise SystemExit(
            f"error: the CDS training run exited {record.returncode}; its last output:\n"
            + "\n".join(lines[-20:])
        )
    maps, output = archive_maps(tmp, venv_bin)
    if not maps:
        tmp.unlink(missing_ok=True)
        raise SystemExit(f"error: the recorded CDS archive does not map:\n{output[-2000:]}")
    os.replace(tmp, out)
    size_mb = out.stat().st_size / 1e6
    print(f"wrote {out} ({size_mb:.0f} MB) in {time.monotonic() - started:.0f} s", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, nargs="?", help="archive to write")
    parser.add_argument("--train", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.train:
        train()
        return 0
    if args.out is None:
        parser.error("the archive's path is required")
    build(args.out.resolve(), ROOT / ".venv" / "bin", project_jars())
    return 0


if __name__ == "__main__":
    sys.exit(main())
