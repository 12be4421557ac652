"""The one door to the Hadoop file system, and the reader of Spark's checkpoint layout.

Checkpoints and tables may be on HDFS or an object store, so every file a job reads or writes
outside Spark's and Delta's own APIs goes through here, never Python's `open` elsewhere:

* `HadoopFiles`: existence, the names in a folder, a file's text, deletes, and JSON files
  written through a temporary file and a rename, so a reader never sees half a file. A
  location on another file system goes through Hadoop's FileSystem of the driver's session;
  one on the driver's local file system (`file:`, or a path without a scheme where that is
  the session's default) through the operating system's calls, the ones Hadoop's local file
  system makes: without Hadoop's native library (Spark's distribution has none) that one
  forks a `chmod` for every file it creates, and each call is a py4j round trip, so a pack's
  ledgers and a batch's saved rows cost processes and round trips on the driver that starts
  the next batch (docs/benchmarks.md, "Fleet, part 2"). Files written this way have no
  Hadoop checksum file beside them, which Hadoop's readers accept; a stale one, from a file
  Hadoop wrote there before, is removed with the file it described;
* `CheckpointFiles`: the small JSON files a job keeps beside Spark's own under its checkpoint
  (the continuous replication copy's progress log, the audit's saved partials);
* Spark's own layout, read as files (no Spark job, no Delta code): the query id a checkpoint
  keeps across restarts (`query_id`) and its offset log (`OffsetLog`): `offsets/N` holds
  "v1", the batch metadata, then one line of offset JSON per source; `commits/N` exists once
  batch N is committed; `sources/0/0` holds the offsets the first batch started from.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pyspark.sql import SparkSession

from jobs.runtime.py4j import java_class


def local_path(location: str, default_fs: str) -> str | None:
    """The operating system's path of `location` when it is on the driver's local file
    system: a `file:` URI without a host, or a path without a scheme when the session's
    default file system (`fs.defaultFS`) is `file:`; None for any other location."""
    scheme, sep, rest = location.partition(":")
    if sep and "/" not in scheme:  # a URI
        if scheme != "file":
            return None
        if rest.startswith("//"):  # file://host/path: only an empty host is this machine
            host, slash, path = rest[2:].partition("/")
            return "/" + path if slash and not host else None
        return rest if rest.startswith("/") else None
    if not default_fs.startswith("file:"):
        return None
    return os.path.abspath(location)


def _checksum_file(path: str) -> str:
    """Where Hadoop's checksummed local file system keeps `path`'s checksum."""
    folder, name = os.path.split(path)
    return os.path.join(folder, f".{name}.crc")


def _is_checksum_file(name: str) -> bool:
    return name.startswith(".") and name.endswith(".crc")


class _LocalFiles:
    """HadoopFiles' operations on the driver's local file system, as Hadoop's checksummed
    local file system answers them (its checksum files are not listed)."""

    @staticmethod
    def exists(path: str) -> bool:
        return os.path.exists(path)

    @staticmethod
    def names(folder: str) -> list[str]:
        if not os.path.isdir(folder):
            return [os.path.basename(folder)] if os.path.exists(folder) else []
        return [name for name in os.listdir(folder) if not _is_checksum_file(name)]

    @classmethod
    def modification_times_ms(cls, path: str) -> list[int]:
        if not os.path.exists(path):
            return []
        times = [os.stat(path).st_mtime_ns // 1_000_000]
        if os.path.isdir(path):
            times += [
                os.stat(os.path.join(path, name)).st_mtime_ns // 1_000_000
                for name in cls.names(path)
            ]
        return times

    @staticmethod
    def read_text(path: str) -> str | None:
        try:
            with open(path, encoding="utf-8") as file:
                return file.read()
        except FileNotFoundError:
            return None

    @staticmethod
    def write_bytes(path: str, data: bytes) -> None:
        """Replace the file with `data` through a temporary file and an atomic rename."""
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        temporary = f"{path}.{uuid.uuid4().hex}.tmp"
        with open(temporary, "wb") as file:
            file.write(data)
        os.replace(temporary, path)
        _LocalFiles.delete(_checksum_file(path), recursive=False)

    @staticmethod
    def delete(path: str, *, recursive: bool) -> None:
        if os.path.isdir(path) and not os.path.islink(path):
            if recursive:
                shutil.rmtree(path, ignore_errors=True)  # as Hadoop, which answers false
            else:
                os.rmdir(path)  # OSError when it holds anything, as Hadoop's IOException
            return
        try:
            os.remove(path)
        except FileNotFoundError:
            return
        if not _is_checksum_file(os.path.basename(path)):
            _LocalFiles.delete(_checksum_file(path), recursive=False)


class HadoopFiles:
    """Files at absolute locations (any scheme Hadoop knows) through the session's Hadoop
    configuration; locations on the driver's local file system through the operating system
    (the module's docstring says why). One file system is opened per scheme and authority."""

    def __init__(self, spark: SparkSession) -> None:
        self._path = java_class(spark, "org.apache.hadoop.fs.Path", "the Hadoop file system")
        self._io_utils = java_class(spark, "org.apache.commons.io.IOUtils")
        self._conf = spark.sparkContext._jsc.hadoopConfiguration()  # type: ignore[union-attr]
        self._default_fs: str | None = None

    def _local(self, location: str) -> str | None:
        if self._default_fs is None and not location.startswith("file:"):
            self._default_fs = str(self._conf.get("fs.defaultFS", "file:///"))
        return local_path(location, self._default_fs or "file:///")

    def _open(self, location: str):  # (FileSystem, Path)
        path = self._path(location)
        return path.getFileSystem(self._conf), path

    def exists(self, location: str) -> bool:
        if (local := self._local(location)) is not None:
            return _LocalFiles.exists(local)
        fs, path = self._open(location)
        return bool(fs.exists(path))

    def names(self, folder: str) -> list[str]:
        """The names of what `folder` holds; [] when there is no such folder."""
        if (local := self._local(folder)) is not None:
            return _LocalFiles.names(local)
        fs, path = self._open(folder)
        if not fs.exists(path):
            return []
        return [str(status.getPath().getName()) for status in fs.listStatus(path)]

    def newest_modification_ms(self, location: str) -> int:
        """The newest modification time (epoch ms) of `location` and what it holds, one level
        deep; 0 when there is no such file or folder."""
        if (local := self._local(location)) is not None:
            return max(_LocalFiles.modification_times_ms(local), default=0)
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
        if (local := self._local(location)) is not None:
            return _LocalFiles.read_text(local)
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
        text = json.dumps(data, sort_keys=True).encode()
        if (local := self._local(location)) is not None:
            _LocalFiles.write_bytes(local, text)
            return
        fs, final = self._open(location)
        _, temporary = self._open(f"{location}.{uuid.uuid4().hex}.tmp")
        stream = fs.create(temporary, True)
        try:
            stream.write(text)
        finally:
            stream.close()
        if fs.exists(final):
            fs.delete(final, False)
        if not fs.rename(temporary, final):
            raise OSError(f"could not rename {temporary} to {final}")

    def delete(self, location: str, *, recursive: bool = False) -> None:
        """Delete the file (or, with `recursive`, the folder and all it holds), if it exists."""
        if (local := self._local(location)) is not None:
            _LocalFiles.delete(local, recursive=recursive)
            return
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
