"""What a query's checkpoint says (Spark's offset log), read on the driver through Hadoop's
FileSystem: the offsets of the last committed batch, and whether a batch was planned but not
committed (a crash cut it short; Spark runs it again, with the same offsets, on restart).

Spark's layout: `offsets/N` holds "v1", the batch metadata, then one line of offset JSON per
source; `commits/N` exists once batch N is committed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from pyspark.sql import SparkSession


@dataclass(frozen=True)
class CheckpointState:
    committed: dict[int, int] | None  # partition -> next offset of the last committed batch
    last_planned: int | None  # the highest batch id in offsets/
    last_committed: int | None  # the highest batch id in commits/

    @property
    def replay_batch(self) -> int | None:
        """The batch a restart dispatches again, if one was cut short."""
        if self.last_planned is None:
            return None
        if self.last_committed is None or self.last_planned > self.last_committed:
            return self.last_planned
        return None


def read_state(spark: SparkSession, checkpoint: str, topic: str) -> CheckpointState:
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    fs_path = jvm.org.apache.hadoop.fs.Path
    root = fs_path(checkpoint)
    fs = root.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())  # type: ignore[union-attr]

    def batches(name: str) -> list[int]:
        folder = fs_path(root, name)
        if not fs.exists(folder):
            return []
        return [
            int(f.getPath().getName())
            for f in fs.listStatus(folder)
            if f.getPath().getName().isdigit()
        ]

    planned, committed = batches("offsets"), batches("commits")
    offsets = None
    if committed:
        stream = fs.open(fs_path(root, f"offsets/{max(committed)}"))
        try:
            text = jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8")
        finally:
            stream.close()
        for line in text.splitlines()[2:]:
            if line.startswith("{"):
                data = json.loads(line)
                if topic in data:
                    offsets = {int(p): int(o) for p, o in data[topic].items()}
    return CheckpointState(
        offsets, max(planned) if planned else None, max(committed) if committed else None
    )
