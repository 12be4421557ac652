"""The replication sink: runs in Spark's Python workers, one task per source partition.

`PartitionWriter` is the function given to `DataFrame.mapInArrow`. For the source partition
its task holds, it

1. reads the tail of the destination partition and finds the highest source offset already
   stamped there (`replicated_up_to`), so records a crashed run wrote are not written again;
2. produces every newer record to the destination partition with librdkafka, keeping key,
   value, headers and the source timestamp, and appending the provenance stamps
   (`uatu.src.cluster`, `.topic`, `.partition`, `.offset`; the last header of a name wins);
3. flushes, fails the task if any delivery failed (so the batch, and the query, fail rather
   than lose a record), and returns one row per input record: the ack time per record, from
   which MirrorMaker 2's record-age-ms and replication-latency-ms are computed in Spark.

Why not Spark's Kafka sink: in Spark 4.2 it cannot set the record timestamp (SPARK-50160 is
not in it), it reports no per-record ack, and a retried task re-sends records the failed
attempt already wrote. Doing step 1 in every task makes task retries, executor loss and driver
restarts all leave exactly one copy, provided the destination partition is written only by
this job and in order (one task per partition, no speculation, idempotent or single-in-flight
producer).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

STAMP_CLUSTER = "uatu.src.cluster"
STAMP_TOPIC = "uatu.src.topic"
STAMP_PARTITION = "uatu.src.partition"
STAMP_OFFSET = "uatu.src.offset"
ENCODED_FORMAT = "uatu.encoded.format"
ENCODED_SCHEMA_VERSION = "uatu.encoded.schema.version"

# The columns PartitionWriter reads, and the rows it returns.
INPUT_COLUMNS = ("key", "value", "partition", "offset", "timestamp_ms", "headers")
ACK_SCHEMA = (
    "partition int, offset long, timestamp_ms long, destination_partition int, "
    "value_bytes long, record_bytes long, replicated boolean, read_ms long, acked_ms long"
)

Headers = list[tuple[str, str | bytes | None]]


class ReplicationWriteError(RuntimeError):
    """A record could not be written; the task (and the micro-batch) fail instead of losing it."""


@dataclass(frozen=True)
class DestinationConfig:
    """Everything a task needs, picklable (shipped to the Python workers)."""

    source_cluster: str
    source_topic: str
    topic: str
    producer_config: Mapping[str, Any]
    consumer_config: Mapping[str, Any]
    partition_map: Mapping[int, int]  # source partition -> destination partition
    extra_headers: tuple[tuple[str, bytes], ...] = ()
    scan_limit: int = 100_000  # records read back at most to find the last stamp


def stamp_headers(
    source_headers: Sequence[Mapping[str, Any]] | None,
    fixed: Headers,
    offset: int,
) -> Headers:
    """Source headers, then the fixed stamps (cluster, topic, partition, format), then offset."""
    headers: Headers = []
    if source_headers:
        # A header may have a null value; it is copied as null.
        headers = [(h["key"], h["value"]) for h in source_headers]
    headers.extend(fixed)
    headers.append((STAMP_OFFSET, str(offset).encode()))
    return headers


def stamped_source(headers: Sequence[tuple[str, bytes | None]] | None) -> dict[str, bytes]:
    """The provenance stamps of a destination record (last value of each name wins)."""
    stamps: dict[str, bytes] = {}
    for key, value in headers or ():
        if key.startswith("uatu.src.") and value is not None:
            stamps[key] = value
    return stamps


def replicated_up_to(
    consumer: Consumer,
    config: DestinationConfig,
    source_partition: int,
    timeout_s: float = 10.0,
) -> int:
    """Highest offset of `source_partition` already in its destination partition, or -1.

    Reads the destination partition backwards in growing chunks until a record stamped with
    this source partition appears, the partition's start is reached, or `scan_limit` records
    were read.
    """
    destination = config.partition_map[source_partition]
    tp = TopicPartition(config.topic, destination)
    low, high = _watermarks(consumer, tp, timeout_s)
    want = (
        config.source_cluster.encode(),
        config.source_topic.encode(),
        str(source_partition).encode(),
    )
    end, chunk, scanned = high, 16, 0
    while end > low and scanned < config.scan_limit:
        start = max(low, end - chunk)
        best = -1
        for message in _read_range(consumer, config.topic, destination, start, end, timeout_s):
            stamps = stamped_source(message.headers())
            key = (stamps.get(STAMP_CLUSTER), stamps.get(STAMP_TOPIC), stamps.get(STAMP_PARTITION))
            if key == want and STAMP_OFFSET in stamps:
                best = max(best, int(stamps[STAMP_OFFSET]))
        if best >= 0:
            return best
        scanned += end - start
        end, chunk = start, chunk * 4
    return -1


def _watermarks(consumer: Consumer, tp: TopicPartition, timeout_s: float) -> tuple[int, int]:
    """(low, high) of a partition; retried, because a broker handle can be mid-reconnect
    (a broker just went away and its leaderships moved) when a task starts."""
    for attempt in range(5):
        try:
            low, high = consumer.get_watermark_offsets(tp, timeout=timeout_s)
            return int(low), int(high)
        except KafkaException:
            if attempt == 4:
                raise
            time.sleep(0.5 * 2**attempt)
    raise AssertionError("unreachable")


def _read_range(
    consumer: Consumer, topic: str, partition: int, start: int, end: int, timeout_s: float
) -> Iterator[Any]:
    consumer.assign([TopicPartition(topic, partition, start)])
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        messages: list[Any] = consumer.consume(num_messages=1000, timeout=0.2)
        for message in messages:
            if message.error():
                if message.error().code() == KafkaError._PARTITION_EOF:
                    return
                raise ReplicationWriteError(f"reading {topic}[{partition}]: {message.error()}")
            if message.offset() >= end:
                return
            yield message
            if message.offset() >= end - 1:
                return
    raise ReplicationWriteError(
        f"reading {topic}[{partition}] offsets {start}..{end} took longer than {timeout_s} s"
    )


# Clients live as long as the Python worker (Spark reuses workers across tasks and batches):
# creating a librdkafka producer per task would cost more than small batches take to write.
_PRODUCERS: dict[tuple, Producer] = {}
_CONSUMERS: dict[tuple, Consumer] = {}


def close_clients() -> None:
    """Close the cached clients (a process that runs the writer in-process, like a test)."""
    for consumer in _CONSUMERS.values():
        consumer.close()
    _CONSUMERS.clear()
    _PRODUCERS.clear()  # a Producer is released when its last reference goes


def _cached(cache: dict, cls: type, config: Mapping[str, Any]) -> Any:
    key = tuple(sorted((k, str(v)) for k, v in config.items()))
    if key not in cache:
        cache[key] = cls(dict(config))
    return cache[key]


class PartitionWriter:
    """`mapInArrow` function: write one source partition's records, return per-record acks."""

    def __init__(self, config: DestinationConfig) -> None:
        self.config = config

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        producer: Producer = _cached(_PRODUCERS, Producer, self.config.producer_config)
        consumer_config = {**self.config.consumer_config, "enable.partition.eof": True}
        consumer: Consumer = _cached(_CONSUMERS, Consumer, consumer_config)
        acked_ms: list[int] = []
        errors: list[str] = []

        def on_delivery(err: KafkaError | None, _msg: Any) -> None:
            # One task writes one destination partition, and librdkafka reports a partition's
            # deliveries in produce order (idempotent, or one request in flight), so the
            # n-th report belongs to the n-th record produced.
            if err is not None:
                errors.append(str(err))
            acked_ms.append(time.time_ns() // 1_000_000)

        source_partition: int | None = None
        done_up_to = -1
        rows: list[tuple] = []  # per input record, ack filled in after the flush
        for batch in batches:
            if batch.num_rows == 0:
                continue  # nothing to write, and no partition to look up yet
            read_ms = time.time_ns() // 1_000_000
            columns = {name: batch.column(name).to_pylist() for name in INPUT_COLUMNS}
            for p in columns["partition"]:
                if source_partition is None:
                    source_partition = p
                    done_up_to = replicated_up_to(consumer, self.config, p)
                    destination = self.config.partition_map[p]
                    fixed: Headers = [
                        (STAMP_CLUSTER, self.config.source_cluster.encode()),
                        (STAMP_TOPIC, self.config.source_topic.encode()),
                        (STAMP_PARTITION, str(p).encode()),
                        *self.config.extra_headers,
                    ]
                elif p != source_partition:
                    raise ReplicationWriteError(
                        f"one task got source partitions {source_partition} and {p}; per-"
                        "partition order needs one task per partition (do not set minPartitions)"
                    )
            self._produce(
                producer, columns, fixed, destination, done_up_to, read_ms, rows, on_delivery
            )
        producer.flush()
        if errors:
            raise ReplicationWriteError(
                f"{len(errors)} records of partition {source_partition} were not written to "
                f"{self.config.topic}: {errors[0]}"
            )
        yield _ack_batch(rows, acked_ms)

    def _produce(
        self,
        producer: Producer,
        columns: dict[str, list],
        fixed: Headers,
        destination: int,
        done_up_to: int,
        read_ms: int,
        rows: list[tuple],
        on_delivery: Any,
    ) -> None:
        produce, topic = producer.produce, self.config.topic
        for key, value, partition, offset, ts, headers in zip(
            *(columns[name] for name in INPUT_COLUMNS), strict=True
        ):
            size = len(value or b"")
            replicated = offset > done_up_to
            rows.append(
                (
                    partition,
                    offset,
                    ts,
                    destination,
                    size,
                    size + len(key or b""),
                    replicated,
                    read_ms,
                )
            )
            if not replicated:
                continue
            stamped = stamp_headers(headers, fixed, offset)
            while True:
                try:
                    produce(
                        topic, value, key, destination, on_delivery, timestamp=ts, headers=stamped
                    )
                    break
                except BufferError:
                    producer.poll(0.05)  # local queue full: let deliveries drain
            if len(rows) % 1000 == 0:
                producer.poll(0)


def _ack_batch(rows: list[tuple], acked_ms: list[int]) -> pa.RecordBatch:
    names = [
        "partition",
        "offset",
        "timestamp_ms",
        "destination_partition",
        "value_bytes",
        "record_bytes",
        "replicated",
        "read_ms",
    ]
    columns: dict[str, list] = {name: [r[i] for r in rows] for i, name in enumerate(names)}
    acks = iter(acked_ms)
    columns["acked_ms"] = [next(acks) if r[6] else None for r in rows]
    types = [
        pa.int32(),
        pa.int64(),
        pa.int64(),
        pa.int32(),
        pa.int64(),
        pa.int64(),
        pa.bool_(),
        pa.int64(),
        pa.int64(),
    ]
    return pa.RecordBatch.from_arrays(
        [pa.array(columns[n], type=t) for n, t in zip([*names, "acked_ms"], types, strict=True)],
        names=[*names, "acked_ms"],
    )
