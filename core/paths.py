"""The one place that knows the checkout's layout: its root and where `make` puts things.

Everything here is a path under the project root (the folder holding `conf/`, `Makefile` and
`spark-submit.sh`). Production code reads the folders `make setup` fills (jars, the job zip,
the project's jar); dev services put their data and binaries under `var/`.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CONF_DIR = ROOT / "conf"
VAR_DIR = ROOT / "var"
BUILD_DIR = ROOT / "build"

SPARK_SUBMIT_SCRIPT = ROOT / "spark-submit.sh"
SPARK_JARS_DIR = VAR_DIR / "jars" / "spark"  # Kafka connector and Delta (`make jars`)
KAFKA_JARS_DIR = VAR_DIR / "jars" / "kafka"  # the Kafka broker and its tools (`make jars`)
KAFKA4_JARS_DIR = VAR_DIR / "jars" / "kafka4"  # Kafka 4.1 clients and perf tools (`make jars`)
PROJECT_JAR = BUILD_DIR / "uatu-jvm.jar"  # the project's Java (`make build`)
JOBS_ZIP = BUILD_DIR / "uatu-jobs.zip"  # what --py-files ships (`make build`)
SPARK_CDS_ARCHIVE = BUILD_DIR / "spark-cds.jsa"  # class-data sharing for drivers (`make build`)


def project_jars() -> list[str]:
    """The jars a Spark application of this project runs with: what `make jars` put in
    var/jars/spark (sorted) and then the project's jar that `make build` compiles, if built."""
    jars = sorted(SPARK_JARS_DIR.glob("*.jar"))
    return [str(p) for p in [*jars, PROJECT_JAR] if p.exists()]


# C1 only, for JVMs that live seconds to minutes (the test suite's, the CDS training run): C2's
# compile work would be CPU they never earn back.
C1_ONLY_JIT = "-XX:TieredStopAtLevel=1"

# Keeps a stale archive's one warning off stdout, where jobs print their results.
CDS_LOG_OPTIONS = "-Xlog:cds*=warning:stderr -Xlog:cds*=off:stdout"


def cds_java_options(archive: Path = SPARK_CDS_ARCHIVE) -> str:
    """JVM options that start a Spark JVM from the class-data sharing archive `make build`
    records (dev/cds_archive.py), or "" when there is none. With -Xshare:auto a stale archive
    (a new JDK or pyspark) is skipped with one warning on stderr. spark-submit.sh adds the
    same options."""
    if not archive.exists():
        return ""
    return f"-XX:SharedArchiveFile={archive} -Xshare:auto {CDS_LOG_OPTIONS}"
