"""A micro-batch's rows as JSON, in the files the after-commit writers save under a checkpoint
(`jobs/runtime/after_commit.py`): `encode_rows` for a DataFrame of a few rows,
`encode_values` for rows computed in Python, `decode_rows` back to a DataFrame with the same
schema. Timestamps are kept as epoch microseconds, binary as base64."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    LongType,
    StringType,
    StructType,
    TimestampType,
)


def encode_rows(rows: DataFrame) -> dict[str, Any]:
    """A DataFrame of a few rows as plain JSON: timestamps as epoch microseconds, binary as
    base64 (collecting a local relation runs no job; any other runs one)."""
    encoded = rows.select(*(_encode(f.name, f.dataType) for f in rows.schema.fields))
    return {
        "schema": rows.schema.jsonValue(),
        "rows": [row.asDict() for row in encoded.collect()],
    }


def encode_values(schema: StructType, rows: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Rows computed in Python (datetimes, bytes) as `encode_rows` keeps a DataFrame's: the
    same JSON, read back by `decode_rows`. Each row holds `schema`'s columns (None: null)."""
    codecs = [(f.name, _VALUE_CODECS.get(type(f.dataType), _plain_value)) for f in schema.fields]
    return {
        "schema": schema.jsonValue(),
        "rows": [{name: encode(row.get(name)) for name, encode in codecs} for row in rows],
    }


def timestamp_millis(epoch_ms: int) -> datetime:
    """The UTC timestamp of epoch milliseconds, exactly (also before 1970): a timestamp column's
    value in rows computed in Python, as Spark's timestamp_millis gives it."""
    return _EPOCH + timedelta(milliseconds=epoch_ms)


def decode_rows(spark: SparkSession, data: dict[str, Any]) -> DataFrame:
    """`encode_rows`' value -> the DataFrame it was made from. Built in the JVM from the rows'
    JSON (`from_json` over one row of `range`), never from a Python list: that would ship the
    rows to Python workers, which executors on hosts without the project's venv cannot start.
    Every column comes back nullable (a Delta table's NOT NULL columns still check the
    values)."""
    schema = StructType.fromJson(data["schema"])
    plain = StructType(
        [f.__class__(f.name, _plain_type(f.dataType), f.nullable) for f in schema.fields]
    )
    rows = spark.range(1).select(
        F.explode(F.from_json(F.lit(json.dumps(data["rows"])), ArrayType(plain))).alias("row")
    )
    return rows.select(*(_decode(f"row.{f.name}", f.dataType, f.name) for f in schema.fields))


# How a column type is kept in the file: (the JSON-able type, encode, decode).
_CODECS: dict[type, tuple[Any, Callable[[str], Column], Callable[[str], Column]]] = {
    TimestampType: (LongType(), F.unix_micros, F.timestamp_micros),
    BinaryType: (StringType(), F.base64, F.unbase64),
}


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _plain_value(value: Any) -> Any:
    return value


def _micros(value: datetime | None) -> int | None:
    return None if value is None else (value - _EPOCH) // timedelta(microseconds=1)


def _base64(value: bytes | None) -> str | None:
    return None if value is None else base64.b64encode(value).decode("ascii")


# The same forms for values computed in Python (`encode_values`).
_VALUE_CODECS: dict[type, Callable[[Any], Any]] = {TimestampType: _micros, BinaryType: _base64}


def _plain_type(kind: Any) -> Any:
    codec = _CODECS.get(type(kind))
    return kind if codec is None else codec[0]


def _encode(name: str, kind: Any) -> Column:
    codec = _CODECS.get(type(kind))
    return F.col(name) if codec is None else codec[1](name).alias(name)


def _decode(column: str, kind: Any, name: str) -> Column:
    codec = _CODECS.get(type(kind))
    return (F.col(column) if codec is None else codec[2](column)).alias(name)
