"""The one door to the Hadoop file system, and the reader of Spark's checkpoint layout.

Checkpoints and tables may be on HDFS or an object store, so every file a job reads or writes
outside Spark's and Delta's own APIs goes through Hadoop's FileSystem of the driver's session,
here, never Python's `open`:

* `HadoopFiles`: existence, the names in a folder, a file's text, deletes, and JSON files
  written through a temporary file and a rename, so a reader never sees half a file;
* `CheckpointFiles`: the small JSON files a job keeps beside Spark's own under its checkpoint
  (the continuous replication copy's progress log, the audit's saved partials);
* Spark's own layout, read as files (no Spark job, no Delta code): the query id a checkpoint
  keeps across restarts (`query_id`) and its offset log (`OffsetLog`): `offsets/N` holds
  "v1", the batch metadata, then one line of offset JSON per source; `commits/N` exists once
  batch N is committed; `sources/0/0` holds the offsets the first batch started from.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pyspark.sql import SparkSession

from jobs.runtime.py4j import java_class


class HadoopFiles:
    """Files at absolute locations (any scheme Hadoop knows) through the session's Hadoop
    configuration. One file system is opened per scheme and authority."""

    def __init__(self, spark: SparkSession) -> None:
        self._path = java_class(spark, "org.apache.hadoop.fs.Path", "the Hadoop file system")
        self._io_utils = java_class(spark, "org.apache.commons.io.IOUtils")
        self._conf = spark.sparkContext._jsc.hadoopConfiguration()  # type: ignore[union-attr]

    def _open(self, location: str):  # (FileSystem, Path)
        path = self._path(location)
        return path.getFileSystem(self._conf), path

    def exists(self, location: str) -> bool:
        fs, path = self._open(location)
        return bool(fs.exists(path))

    def names(self, folder: str) -> list[str]:
        """The names of what `folder` holds; [] when there is no such folder."""
        fs, path = self._open(folder)
        if not fs.exists(path):
            return []
        return [str(status.getPath().getName()) for status in fs.listStatus(path)]

    def newest_modification_ms(self, location: str) -> int:
        """The newest modification time (epoch ms) of `location` and what it holds, one level
        deep; 0 when there is no such file or folder."""
        fs, path = self._open(location)
        if not fs.exists(path):
            return 0
        times = [int(fs.getFileStatus(path).getModificationTime())]
        if fs.getFileStatus(path).isDirectory():
            times += [int(status.getModificationTime()) for status in fs.listStatus(path)]
        return max(times)

    def numbers(self, folder: str) -> list[int]:
        """The names in `folder` that are whole numbers, sorted (Spark's batch files)."""
        return sorted(int(name) for name in self.names(folder) if name.isdigit())

    def read_text(self, location: str) -> str | None:
        """The file's text (UTF-8); None when there is no such file."""
        fs, path = self._open(location)
        if not fs.exists(path):
            return None
        stream = fs.open(path)
        try:
            return str(self._io_utils.toString(stream, "UTF-8"))
        finally:
            stream.close()

    def write_json(self, location: str, data: Mapping[str, Any]) -> None:
        """Replace the file with `data` as JSON, atomically for a reader."""
        fs, final = self._open(location)
        _, temporary = self._open(f"{location}.{uuid.uuid4().hex}.tmp")
        stream = fs.create(temporary, True)
        try:
            stream.write(json.dumps(data, sort_keys=True).encode())
        finally:
            stream.close()
        if fs.exists(final):
            fs.delete(final, False)
        if not fs.rename(temporary, final):
            raise OSError(f"could not rename {temporary} to {final}")

    def delete(self, location: str, *, recursive: bool = False) -> None:
        """Delete the file (or, with `recursive`, the folder and all it holds), if it exists."""
        fs, path = self._open(location)
        fs.delete(path, recursive)


class CheckpointFiles:
    """JSON files under `<checkpoint>/<folder>`; names are relative to that folder."""

    def __init__(self, spark: SparkSession, checkpoint: str, folder: str) -> None:
        self._files = HadoopFiles(spark)
        self._root = checkpoint.rstrip("/") + "/" + folder

    def _path(self, name: str) -> str:
        return f"{self._root}/{name}" if name else self._root

    def exists(self, name: str) -> bool:
        return self._files.exists(self._path(name))

    def numbers(self, folder: str = "") -> list[int]:
        """The names under `folder` (the root by default) that are whole numbers, sorted."""
        return self._files.numbers(self._path(folder))

    def read(self, name: str) -> Any:
        """The file's JSON value; None when there is no such file."""
        text = self._files.read_text(self._path(name))
        return None if text is None else json.loads(text)

    def write(self, name: str, data: Mapping[str, Any]) -> None:
        """Replace the file with `data` as JSON, atomically for a reader."""
        self._files.write_json(self._path(name), data)

    def delete(self, name: str) -> None:
        self._files.delete(self._path(name))


# --- Spark's checkpoint layout ---------------------------------------------------------------


def query_id(spark: SparkSession, checkpoint: str) -> str:
    """The id Spark stored in the checkpoint when the query first ran, stable across restarts
    (read as a file, not with spark.read.json, whose schema inference is a Spark job)."""
    text = HadoopFiles(spark).read_text(f"{checkpoint.rstrip('/')}/metadata")
    if not text:
        raise RuntimeError(f"no query id in {checkpoint}/metadata")
    return str(json.loads(text.splitlines()[0])["id"])


def _source_lines(text: str) -> list[dict]:
    """The per-source offset JSON of an offset-log file (after "v1" and the metadata)."""
    return [json.loads(line) for line in text.splitlines()[2:] if line.startswith("{")]


@dataclass(frozen=True)
class OffsetLog:
    """What a query's checkpoint says of its batches, read once."""

    planned: tuple[int, ...]  # batch ids in offsets/
    committed: tuple[int, ...]  # batch ids in commits/
    committed_sources: tuple[dict, ...] | None  # offsets of the last committed batch
    started_sources: tuple[dict, ...] | None  # offsets the first batch started from

    @property
    def last_planned(self) -> int | None:
        return self.planned[-1] if self.planned else None

    @property
    def last_committed(self) -> int | None:
        return self.committed[-1] if self.committed else None

    @property
    def replay_batch(self) -> int | None:
        """The batch a restart runs again, if one was planned but not committed."""
        planned, committed = self.last_planned, self.last_committed
        if planned is None or (committed is not None and planned <= committed):
            return None
        return planned

    def committed_offsets(self, topic: str) -> dict[int, int] | None:
        """{partition: next offset} of `topic` after the last committed batch; None when no
        batch is committed or no source of it reads `topic`."""
        return _topic_offsets(self.committed_sources, topic)

    def resume_offsets(self, topic: str) -> dict[int, int]:
        """Where the query resumes in `topic`: after its last committed batch, else where its
        first batch started; {} for a checkpoint without either."""
        committed = self.committed_offsets(topic)
        if committed is not None:
            return committed
        return _topic_offsets(self.started_sources, topic) or {}

    def committed_progress(self) -> dict | None:
        """The last committed batch's end offsets shaped as a progress record
        ({"sources": [{"endOffset": ...}, ...]}), what heartbeats report after a restart;
        None before the first commit."""
        if self.committed_sources is None:
            return None
        return {"sources": [{"endOffset": json.dumps(s)} for s in self.committed_sources]}


def _topic_offsets(sources: tuple[dict, ...] | None, topic: str) -> dict[int, int] | None:
    for source in sources or ():
        if isinstance(source.get(topic), dict):
            return {int(p): int(o) for p, o in source[topic].items()}
    return None


def read_offset_log(spark: SparkSession, checkpoint: str) -> OffsetLog:
    """The checkpoint's offset log (an empty one for a new checkpoint)."""
    files = HadoopFiles(spark)
    root = checkpoint.rstrip("/")
    planned, committed = files.numbers(f"{root}/offsets"), files.numbers(f"{root}/commits")
    committed_sources = None
    if committed:
        text = files.read_text(f"{root}/offsets/{committed[-1]}")
        committed_sources = tuple(_source_lines(text)) if text is not None else None
    started = files.read_text(f"{root}/sources/0/0")
    started_sources = None
    if started is not None:
        started_sources = tuple(
            json.loads(line) for line in started.splitlines() if line.startswith("{")
        )
    return OffsetLog(tuple(planned), tuple(committed), committed_sources, started_sources)


def batch_end_offsets(
    spark: SparkSession, checkpoint: str, batch_id: int
) -> dict[str, dict[int, int]] | None:
    """{topic: {partition: offset}} that micro-batch `batch_id` reads up to, over every Kafka
    source of the query, from its offset-log entry; None when the batch is not in the log."""
    text = HadoopFiles(spark).read_text(f"{checkpoint.rstrip('/')}/offsets/{batch_id}")
    if text is None:
        return None
    ends: dict[str, dict[int, int]] = {}
    for source in _source_lines(text):
        for topic, offsets in source.items():
            if isinstance(offsets, dict):
                ends[topic] = {int(p): int(o) for p, o in offsets.items()}
    return ends
