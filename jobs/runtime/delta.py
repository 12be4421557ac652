"""Delta helpers shared by the jobs: create a table once, append a micro-batch exactly once."""

from __future__ import annotations

from delta.tables import DeltaTable
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType


def ensure_table(spark: SparkSession, path: str, schema: StructType) -> None:
    """Create the Delta table at `path` with `schema` unless it exists."""
    DeltaTable.createIfNotExists(spark).location(path).addColumns(schema).execute()


def append_once(
    rows: DataFrame, path: str, app_id: str, batch_id: int, *, merge_schema: bool = False
) -> None:
    """Append a batch's rows unless this (app_id, batch_id) was committed before.

    Delta's idempotent-write marker (txnAppId = the streaming query id, txnVersion = the batch
    id) makes a batch replayed after a crash a no-op. `merge_schema` adds columns the rows have
    and the table lacks (a table created by an earlier release).
    """
    writer = rows.write.format("delta").mode("append")
    if merge_schema:
        writer = writer.option("mergeSchema", "true")
    writer.option("txnAppId", app_id).option("txnVersion", batch_id).save(path)
