"""The replication sink: runs in Spark's Python workers, one task per source partition.

`PartitionWriter` is the function given to `DataFrame.mapInArrow`. For the source partition
its task holds, it

1. reads the tail of the destination partition and finds the highest source offset already
   stamped there (`replicated_up_to`), so records a crashed run wrote are not written again;
2. produces every newer record to the destination partition with librdkafka, keeping key,
   value, headers and the source timestamp, and appending the provenance stamps
   (`uatu.src.cluster`, `.topic`, `.partition`, `.offset`; the last header of a name wins);
3. flushes, fails the task if any delivery failed (so the batch, and the query, fail rather
   than lose a record), and returns one summary row per window of source timestamps: counts,
   bytes, MirrorMaker 2's record-age-ms (min, sum, max) and the replication-latency-ms of every
   written record, which Spark turns into `replication_stats` and `replication_audit`.

Everything per record that is not the produce call itself is done on whole arrays (numpy,
pyarrow), and success is tracked without a callback per record (`AckClock`): the Python sink
runs at librdkafka's pace rather than the interpreter's.

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
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

STAMP_CLUSTER = "uatu.src.cluster"
STAMP_TOPIC = "uatu.src.topic"
STAMP_PARTITION = "uatu.src.partition"
STAMP_OFFSET = "uatu.src.offset"
ENCODED_FORMAT = "uatu.encoded.format"
ENCODED_SCHEMA_VERSION = "uatu.encoded.schema.version"

# The columns PartitionWriter reads, and the rows it returns: one per source-timestamp window
# of the task's partition, with every written record's latency (MM2 replication-latency-ms).
INPUT_COLUMNS = ("key", "value", "partition", "offset", "timestamp_ms", "headers")
SUMMARY_SCHEMA = (
    "partition int, destination_partition int, window_start_ms long, records_read long, "
    "records_replicated long, records_already_present long, bytes_replicated long, "
    "record_bytes_replicated long, first_offset long, last_offset long, "
    "record_age_ms_min long, record_age_ms_sum long, record_age_ms_max long, "
    "replication_latency_ms array<long>"
)
SUMMARY_ARROW_SCHEMA = pa.schema(
    [
        ("partition", pa.int32()),
        ("destination_partition", pa.int32()),
        *(
            (name, pa.int64())
            for name in (
                "window_start_ms",
                "records_read",
                "records_replicated",
                "records_already_present",
                "bytes_replicated",
                "record_bytes_replicated",
                "first_offset",
                "last_offset",
                "record_age_ms_min",
                "record_age_ms_sum",
                "record_age_ms_max",
            )
        ),
        ("replication_latency_ms", pa.list_(pa.int64())),
    ]
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
    audit_interval_ms: int = 60_000  # the windows of the summary rows
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


class AckClock:
    """When each produced record was acknowledged, without a Python callback per record.

    The producer runs with `delivery.report.only.error`, so librdkafka calls back only for
    failures. Successes are seen through the producer's queue length instead: at every
    `observe`, produced - len(producer) records have been delivered, and as one task writes
    one partition in order (idempotent, or one request in flight), those are the first ones.
    Record i was acknowledged at the first observation that counted more than i deliveries,
    so an ack time is late by at most the gap between observations (about 1,000 records).
    """

    def __init__(self) -> None:
        self.times_ms: list[int] = []
        self.delivered: list[int] = []

    def observe(self, produced: int, outstanding: int) -> None:
        """Note that `produced - outstanding` records are delivered now."""
        self.times_ms.append(time.time_ns() // 1_000_000)
        self.delivered.append(produced - outstanding)

    def ack_times_ms(self, count: int) -> np.ndarray:
        """Ack time of records 0..count-1; needs a last observation after every delivery."""
        if count and (not self.delivered or self.delivered[-1] < count):
            raise ValueError(f"only {self.delivered[-1:]} of {count} deliveries observed")
        first_seen = np.searchsorted(np.asarray(self.delivered), np.arange(count), side="right")
        return np.asarray(self.times_ms, dtype=np.int64)[first_seen]


@dataclass
class _Columns:
    """Per-record arrays of one task, gathered batch by batch."""

    offset: list[np.ndarray] = field(default_factory=list)
    timestamp_ms: list[np.ndarray] = field(default_factory=list)
    value_bytes: list[np.ndarray] = field(default_factory=list)
    key_bytes: list[np.ndarray] = field(default_factory=list)
    read_ms: list[np.ndarray] = field(default_factory=list)

    def add(self, batch: pa.RecordBatch, read_ms: int) -> None:
        self.offset.append(batch.column("offset").to_numpy())
        self.timestamp_ms.append(batch.column("timestamp_ms").to_numpy())
        for name, out in (("value", self.value_bytes), ("key", self.key_bytes)):
            lengths = pc.fill_null(pc.binary_length(batch.column(name)), 0)
            out.append(lengths.to_numpy().astype(np.int64))
        self.read_ms.append(np.full(batch.num_rows, read_ms, dtype=np.int64))

    def joined(self, name: str) -> np.ndarray:
        parts = getattr(self, name)
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


class PartitionWriter:
    """`mapInArrow` function: write one source partition's records, return window summaries."""

    def __init__(self, config: DestinationConfig) -> None:
        self.config = config

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        producer: Producer = _cached(
            _PRODUCERS,
            Producer,
            {**self.config.producer_config, "delivery.report.only.error": True},
        )
        consumer_config = {**self.config.consumer_config, "enable.partition.eof": True}
        consumer: Consumer = _cached(_CONSUMERS, Consumer, consumer_config)
        errors: list[str] = []

        def on_failure(err: KafkaError | None, _msg: Any) -> None:
            errors.append(str(err))  # called for failed deliveries only (see AckClock)

        producer.flush()  # nothing of an earlier task may count as this task's delivery
        clock = AckClock()
        columns = _Columns()
        source_partition: int | None = None
        destination, done_up_to, produced = -1, -1, 0
        fixed: Headers = []
        for batch in batches:
            if batch.num_rows == 0:
                continue  # nothing to write, and no partition to look up yet
            read_ms = time.time_ns() // 1_000_000
            low, high = pc.min_max(batch.column("partition")).values()
            if source_partition is None:
                source_partition = low.as_py()
                done_up_to = replicated_up_to(consumer, self.config, source_partition)
                destination = self.config.partition_map[source_partition]
                fixed = [
                    (STAMP_CLUSTER, self.config.source_cluster.encode()),
                    (STAMP_TOPIC, self.config.source_topic.encode()),
                    (STAMP_PARTITION, str(source_partition).encode()),
                    *self.config.extra_headers,
                ]
            if {low.as_py(), high.as_py()} != {source_partition}:
                raise ReplicationWriteError(
                    f"one task got source partitions {source_partition}, {low}..{high}; per-"
                    "partition order needs one task per partition (do not set minPartitions)"
                )
            columns.add(batch, read_ms)
            produced = self._produce(
                producer, batch, fixed, destination, done_up_to, produced, clock, on_failure
            )
        while producer.flush(0.005) > 0:
            clock.observe(produced, len(producer))
        clock.observe(produced, len(producer))
        if errors:
            raise ReplicationWriteError(
                f"{len(errors)} records of partition {source_partition} were not written to "
                f"{self.config.topic}: {errors[0]}"
            )
        if source_partition is None:
            yield pa.RecordBatch.from_pylist([], schema=SUMMARY_ARROW_SCHEMA)
            return
        offsets = columns.joined("offset")
        replicated = offsets > done_up_to
        acked_ms = np.zeros(len(offsets), dtype=np.int64)
        acked_ms[replicated] = clock.ack_times_ms(produced)
        yield summarize(
            source_partition,
            destination,
            self.config.audit_interval_ms,
            offsets=offsets,
            timestamp_ms=columns.joined("timestamp_ms"),
            value_bytes=columns.joined("value_bytes"),
            key_bytes=columns.joined("key_bytes"),
            read_ms=columns.joined("read_ms"),
            replicated=replicated,
            acked_ms=acked_ms,
        )

    def _produce(
        self,
        producer: Producer,
        batch: pa.RecordBatch,
        fixed: Headers,
        destination: int,
        done_up_to: int,
        produced: int,
        clock: AckClock,
        on_failure: Any,
    ) -> int:
        """Produce the batch's records past `done_up_to`; returns the task's produced count."""
        headers_column = batch.column("headers")
        all_plain = headers_column.null_count == batch.num_rows
        rows = zip(
            batch.column("key").to_pylist(),
            batch.column("value").to_pylist(),
            batch.column("offset").to_pylist(),
            batch.column("timestamp_ms").to_pylist(),
            [None] * batch.num_rows if all_plain else headers_column.to_pylist(),
            strict=True,
        )
        produce, topic = producer.produce, self.config.topic
        for key, value, offset, ts, headers in rows:
            if offset <= done_up_to:
                continue
            stamped = stamp_headers(headers, fixed, offset)
            while True:
                try:
                    produce(
                        topic, value, key, destination, on_failure, timestamp=ts, headers=stamped
                    )
                    break
                except BufferError:
                    clock.observe(produced, len(producer))
                    producer.poll(0.005)  # local queue full: let deliveries drain
            produced += 1
            if produced % 1000 == 0:
                clock.observe(produced, len(producer))  # no poll: only failures are reported
        return produced


def summarize(
    partition: int,
    destination_partition: int,
    interval_ms: int,
    *,
    offsets: np.ndarray,
    timestamp_ms: np.ndarray,
    value_bytes: np.ndarray,
    key_bytes: np.ndarray,
    read_ms: np.ndarray,
    replicated: np.ndarray,
    acked_ms: np.ndarray,
) -> pa.RecordBatch:
    """One row per window of source timestamps (`SUMMARY_SCHEMA`) from per-record arrays.

    `acked_ms` is read only where `replicated` is true. Windows are epoch-aligned, as in the
    audit job, so rows of different batches and partitions line up.
    """
    windows = timestamp_ms - np.mod(timestamp_ms, interval_ms)
    # Sorted by window (stable, so offsets stay in order), each window is one slice.
    order = np.argsort(windows, kind="stable")
    windows, offsets, timestamp_ms = windows[order], offsets[order], timestamp_ms[order]
    value_bytes, key_bytes = value_bytes[order], key_bytes[order]
    read_ms, replicated, acked_ms = read_ms[order], replicated[order], acked_ms[order]
    bounds = np.flatnonzero(np.diff(windows)) + 1
    rows = []
    for lo, hi in zip(
        np.concatenate(([0], bounds)), np.concatenate((bounds, [len(windows)])), strict=True
    ):
        window = slice(lo, hi)
        written = replicated[window]
        age = read_ms[window] - timestamp_ms[window]
        rows.append(
            {
                "partition": partition,
                "destination_partition": destination_partition,
                "window_start_ms": int(windows[lo]),
                "records_read": int(hi - lo),
                "records_replicated": int(written.sum()),
                "records_already_present": int((~written).sum()),
                "bytes_replicated": int(value_bytes[window][written].sum()),
                "record_bytes_replicated": int(
                    (value_bytes[window] + key_bytes[window])[written].sum()
                ),
                "first_offset": int(offsets[window].min()),
                "last_offset": int(offsets[window].max()),
                "record_age_ms_min": int(age.min()),
                "record_age_ms_sum": int(age.sum()),
                "record_age_ms_max": int(age.max()),
                "replication_latency_ms": acked_ms[window][written] - timestamp_ms[window][written],
            }
        )
    return pa.RecordBatch.from_pylist(rows, schema=SUMMARY_ARROW_SCHEMA)
