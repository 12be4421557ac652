"""Small JSON files a job keeps beside Spark's own under its checkpoint (Hadoop FileSystem).

The checkpoint may be on HDFS or an object store, so the files go through Hadoop's FileSystem
of the driver's session, never Python's `open`. Every write goes to a temporary file that is
then renamed, so a reader never sees half a file. Used by the continuous replication copy's
progress log (`jobs/replication/progress_log.py`) and the audit's saved partials
(`jobs/audit/counts_writer.py`).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from typing import Any

from pyspark.sql import SparkSession


class CheckpointFiles:
    """JSON files under `<checkpoint>/<folder>`; names are relative to that folder."""

    def __init__(self, spark: SparkSession, checkpoint: str, folder: str) -> None:
        jvm = spark.sparkContext._jvm
        assert jvm is not None
        self._jvm = jvm
        self._root = jvm.org.apache.hadoop.fs.Path(checkpoint.rstrip("/") + "/" + folder)
        self._fs = self._root.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())  # type: ignore[union-attr]

    def exists(self, name: str) -> bool:
        return bool(self._fs.exists(self._path(name)))

    def numbers(self, folder: str = "") -> list[int]:
        """The names under `folder` (the root by default) that are whole numbers, sorted."""
        path = self._path(folder) if folder else self._root
        if not self._fs.exists(path):
            return []
        names = [status.getPath().getName() for status in self._fs.listStatus(path)]
        return sorted(int(name) for name in names if name.isdigit())

    def read(self, name: str) -> Any:
        """The file's JSON value; None when there is no such file."""
        path = self._path(name)
        if not self._fs.exists(path):
            return None
        stream = self._fs.open(path)
        try:
            text = self._jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8")
        finally:
            stream.close()
        return json.loads(text)

    def write(self, name: str, data: Mapping[str, Any]) -> None:
        """Replace the file with `data` as JSON, atomically for a reader."""
        final = self._path(name)
        temporary = self._path(f"{name}.{uuid.uuid4().hex}.tmp")
        stream = self._fs.create(temporary, True)
        try:
            stream.write(json.dumps(data, sort_keys=True).encode())
        finally:
            stream.close()
        if self._fs.exists(final):
            self._fs.delete(final, False)
        if not self._fs.rename(temporary, final):
            raise OSError(f"could not rename {temporary} to {final}")

    def delete(self, name: str) -> None:
        self._fs.delete(self._path(name), False)

    def _path(self, name: str):  # a Hadoop Path
        return self._jvm.org.apache.hadoop.fs.Path(self._root, name)
