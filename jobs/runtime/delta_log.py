"""A Delta table's log read as files, through Hadoop's FileSystem and no Delta code: what a
job asks of a table before the first Delta operation of its session (which costs seconds in
a cold JVM), or where a Delta snapshot of a busy table would cost more than the few files
that answer. `jobs/runtime/delta.py` is this module's one user."""

from __future__ import annotations

import json
import re

from pyspark.sql import SparkSession

from jobs.runtime.checkpoint_files import HadoopFiles

# How many of a table's newest commit files `marker_in_newest_commits` reads at most.
NEWEST_COMMITS_READ = 50
_COMMIT_FILE = re.compile(r"\d{20}\.json")
_CHECKSUM_FILE = re.compile(r"\d{20}\.crc")


def log_dir(path: str) -> str:
    """The folder of the log of the Delta table at `path`."""
    return path.rstrip("/") + "/_delta_log"


def log_files(spark: SparkSession, path: str) -> int | None:
    """None: no Delta log at `path`; else how many commit and checkpoint files it has."""
    files = HadoopFiles(spark)
    if not files.exists(log_dir(path)):
        return None
    names = files.names(log_dir(path))
    return sum(1 for name in names if name.endswith((".json", ".parquet")))


def only_commit_zero(spark: SparkSession, path: str) -> list[dict] | None:
    """The actions of commit 0 of the Delta log at `path` when it is the log's only commit
    or checkpoint file; None when there is no log or more than that commit."""
    files = HadoopFiles(spark)
    folder = log_dir(path)
    names = set(files.names(folder))
    logged = {name for name in names if name.endswith((".json", ".parquet"))}
    first = f"{0:020d}.json"
    if logged != {first}:
        return None
    text = files.read_text(f"{folder}/{first}")
    if text is None:
        return None
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def marker_in_newest_commits(files: HadoopFiles, path: str, app_id: str) -> tuple[bool, int | None]:
    """(True, the version) when one of the NEWEST_COMMITS_READ newest commit files holds
    `app_id`'s marker (the newest such file holds its newest version: versions only grow);
    (True, None) when every commit file from version 0 was read without one; else (False,
    None): the answer lies in older commits or a checkpoint, for Delta to read."""
    folder = log_dir(path)
    versions = sorted(
        (int(name[:-5]) for name in files.names(folder) if _COMMIT_FILE.fullmatch(name)),
        reverse=True,
    )
    for version in versions[:NEWEST_COMMITS_READ]:
        text = files.read_text(f"{folder}/{version:020d}.json")
        for line in (text or "").splitlines():
            txn = json.loads(line).get("txn") if '"txn"' in line else None
            if txn is not None and txn.get("appId") == app_id:
                return True, int(txn["version"])
    read_all = 0 < len(versions) <= NEWEST_COMMITS_READ and versions[-1] == 0
    return (True, None) if read_all else (False, None)


def current_metadata(files: HadoopFiles, path: str) -> dict | None:
    """The table's metaData action as of its newest commit file: walking back from the
    newest version, the first checksum file (`<version>.crc`, which Delta writes after a
    commit, holds the table's metadata as of that version) or commit file with a metaData
    action answers; at most NEWEST_COMMITS_READ versions. None when that does not answer (no
    log, no checksum file within reach, a file gone meanwhile): ask Delta."""
    folder = log_dir(path)
    names = files.names(folder)
    checksums = {int(name[:-4]) for name in names if _CHECKSUM_FILE.fullmatch(name)}
    versions = sorted(int(name[:-5]) for name in names if _COMMIT_FILE.fullmatch(name))
    for version in reversed(versions[-NEWEST_COMMITS_READ:]):
        if version in checksums:
            text = files.read_text(f"{folder}/{version:020d}.crc")
            metadata = json.loads(text).get("metadata") if text else None
            return metadata if isinstance(metadata, dict) else None
        text = files.read_text(f"{folder}/{version:020d}.json")
        if text is None:
            return None
        for line in reversed(text.splitlines()):
            action = json.loads(line) if '"metaData"' in line else {}
            if "metaData" in action:
                return dict(action["metaData"])
    return None
