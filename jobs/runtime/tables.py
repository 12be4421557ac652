"""Delta tables every Kafka-sourced job may write, beside its own.

`source_data_loss`: one row per source partition whose records were deleted (retention,
delete-records) before the job read them, written when the job stops on it or when a
`--skip-lost-records` run goes past it (`jobs/runtime/source_failure.py`).

=====================  =========  ============================================================
column                 type       meaning
=====================  =========  ============================================================
job_group_id           string     the JobGroup whose query stopped
cluster, topic         string     the source
partition              int        the source partition
from_offset            long       the first offset the job had not read yet (its checkpoint)
until_offset           long       the partition's earliest offset when the loss was found:
                                  offsets [from_offset, until_offset) were never read
detected_at            timestamp  when the job found it
=====================  =========  ============================================================

The table sits in the folder of the job's first table (by default the warehouse):
`<warehouse>/source_data_loss`. Each lost offset is recorded once per JobGroup, cluster and
topic: a job that stops on the same loss again, or the run that skips it, appends nothing;
a loss found grown (retention went on) appends the new part only.
"""

from __future__ import annotations

from pyspark.sql.types import (
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from jobs.runtime.delta import DeltaTableSpec

SOURCE_DATA_LOSS = DeltaTableSpec(
    name="source_data_loss",
    description="Source records deleted before the job read them: offsets [from, until)",
    schema=StructType(
        [
            StructField("job_group_id", StringType(), False),
            StructField("cluster", StringType(), False),
            StructField("topic", StringType(), False),
            StructField("partition", IntegerType(), False),
            StructField("from_offset", LongType(), False),
            StructField("until_offset", LongType(), False),
            StructField("detected_at", TimestampType(), False),
        ]
    ),
)


def data_loss_path(first_table_path: str) -> str:
    """Where `source_data_loss` goes: beside the job's first table (a path or a URI)."""
    return f"{first_table_path.rstrip('/').rsplit('/', 1)[0]}/{SOURCE_DATA_LOSS.name}"
