"""The key of every record the dispatcher (and uForwarder) writes to a retry, DLQ or resilience
topic: `uber.data.kafka.consumer.DLQMetadata` (proto/uber/data/kafka/consumer/dlq_metadata.proto),
byte-compatible with uForwarder's.

    >>> meta = DlqMetadata(retry_count=5, topic="orders", partition=2, offset=41,
    ...                    timestamp_ms=1700000000000, key=b"k", timeout_count=0)
    >>> decode(encode(meta)) == meta
    True

The value and headers of such a record are the original record's, unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

from google.protobuf.message import DecodeError
from uber.data.kafka.consumer.dlq_metadata_pb2 import DLQMetadata


@dataclass(frozen=True)
class DlqMetadata:
    retry_count: int  # deliveries after retriable failures so far
    topic: str  # the original topic
    partition: int  # the original partition
    offset: int  # the original offset
    timestamp_ms: int  # the original record timestamp (the proto field is timestamp_ns)
    key: bytes | None  # the original key (None when it was empty or null)
    timeout_count: int  # deliveries after RPC timeouts so far

    @property
    def origin(self) -> str:
        return f"{self.topic}/{self.partition}/{self.offset}"


def decode(raw: bytes | None) -> DlqMetadata:
    """The metadata in a retry/DLQ/resq record key; ValueError if it is not a DLQMetadata."""
    if raw is None:
        raise ValueError("a null key is not a DLQMetadata")
    message = DLQMetadata()
    try:
        message.ParseFromString(raw)
    except DecodeError as e:
        raise ValueError(f"not a DLQMetadata: {e}") from None
    if not message.topic:
        raise ValueError("not a DLQMetadata: no original topic")
    return DlqMetadata(
        retry_count=message.retry_count,
        topic=message.topic,
        partition=message.partition,
        offset=message.offset,
        timestamp_ms=message.timestamp_ns,
        key=message.data or None,
        timeout_count=message.timeout_count,
    )


def encode(meta: DlqMetadata) -> bytes:
    return DLQMetadata(
        retry_count=meta.retry_count,
        topic=meta.topic,
        partition=meta.partition,
        offset=meta.offset,
        timestamp_ns=meta.timestamp_ms,
        data=meta.key or b"",
        timeout_count=meta.timeout_count,
    ).SerializeToString()
