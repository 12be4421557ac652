"""Remove jars from a folder when pyspark already ships the same artifact.

`mvn dependency:copy-dependencies` copies every runtime dependency of the Kafka connector and
Delta, including older copies of Hadoop, Jackson, Parquet and Scala that pyspark bundles in
newer versions. Two versions of one library on the classpath fail at run time in confusing
ways, so the copies pyspark already has are deleted and Spark's own win.

Usage: python -m dev.prune_jars <jar-dir> <pyspark-jars-dir>
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

# artifactId-version.jar. The version starts with a digit and has no underscore, which tells
# "kafka-0-10_2.13-4.1.0-preview1" (artifact ...kafka-0-10_2.13) from "zstd-jni-1.5.7-3".
_JAR_NAME = re.compile(r"^(?P<artifact>.+?)-(?P<version>\d[A-Za-z0-9.]*(?:-[A-Za-z0-9.]+)*)\.jar$")


def artifact_of(jar_name: str) -> str:
    """The artifact id of a Maven jar file name, or the whole stem if it has no version."""
    match = _JAR_NAME.match(jar_name)
    return match.group("artifact") if match else jar_name.removesuffix(".jar")


def jars_to_remove(candidates: list[str], shipped: list[str]) -> list[str]:
    """The candidate jar names whose artifact is already among the shipped jar names."""
    shipped_artifacts = {artifact_of(name) for name in shipped}
    return sorted(name for name in candidates if artifact_of(name) in shipped_artifacts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("jar_dir", type=Path, help="folder to prune")
    parser.add_argument("pyspark_jars", type=Path, help="pyspark's own jars folder")
    args = parser.parse_args(argv)
    candidates = [p.name for p in args.jar_dir.glob("*.jar")]
    shipped = [p.name for p in args.pyspark_jars.glob("*.jar")]
    if not shipped:
        print(f"no jars found in {args.pyspark_jars}", file=sys.stderr)
        return 1
    removed = jars_to_remove(candidates, shipped)
    for name in removed:
        (args.jar_dir / name).unlink()
    kept = sorted(set(candidates) - set(removed))
    print(f"kept {len(kept)} jars pyspark lacks: {', '.join(kept)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
