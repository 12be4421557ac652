"""Produce a known set of records and read a topic back, partition by partition.

The replication tests and benchmark produce `Record`s with explicit partition, timestamp and
headers, and compare what the destination holds against them in plain Python.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition


@dataclass(frozen=True)
class Record:
    partition: int
    key: bytes | None
    value: bytes | None
    timestamp_ms: int
    headers: tuple[tuple[str, bytes], ...] = ()
    offset: int = -1  # set on records read back


def produce_records(bootstrap_servers: str, topic: str, records: Iterable[Record]) -> int:
    """Produce `records` in order (idempotent producer, acks=all); return how many."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap_servers,
            "enable.idempotence": True,
            "linger.ms": 20,
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    failures: list[str] = []

    def on_delivery(err: KafkaError | None, _msg: object) -> None:
        if err is not None:
            failures.append(str(err))

    count = 0
    for r in records:
        while True:
            try:
                producer.produce(
                    topic,
                    r.value,
                    r.key,
                    r.partition,
                    on_delivery,
                    timestamp=r.timestamp_ms,
                    headers=list(r.headers) or None,
                )
                break
            except BufferError:
                producer.poll(0.05)
        count += 1
        if count % 10_000 == 0:
            producer.poll(0)
    producer.flush()
    if failures:
        raise RuntimeError(f"{len(failures)} records not produced to {topic}: {failures[0]}")
    return count


def iter_messages(
    bootstrap_servers: str, topic: str, partitions: int, timeout_s: float = 60.0
) -> Iterator[Any]:
    """Every message of `topic` up to its end when called, in offset order per partition.

    Raises RuntimeError on a read error, or when `timeout_s` passes before every partition
    was read to its end.
    """
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap_servers,
            "group.id": f"read-topic-{time.time_ns()}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    try:
        ends, starts = {}, []
        for p in range(partitions):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            if high > low:
                ends[p] = high
                starts.append(TopicPartition(topic, p, low))
        consumer.assign(starts)
        pending = set(ends)
        deadline = time.monotonic() + timeout_s
        while pending and time.monotonic() < deadline:
            messages: list[Any] = consumer.consume(num_messages=10_000, timeout=0.5)
            for m in messages:
                if m.error():
                    if m.error().code() != KafkaError._PARTITION_EOF:
                        raise RuntimeError(f"reading {topic}: {m.error()}")
                    # At the end: past `ends`, whose last offsets may be transaction markers
                    # (never delivered as messages).
                    pending.discard(m.partition())
                    continue
                yield m
                if m.offset() >= ends[m.partition()] - 1:
                    pending.discard(m.partition())
        if pending:
            raise RuntimeError(f"reading {topic}: partitions {sorted(pending)} not read to the end")
    finally:
        consumer.close()


def read_partitions(
    bootstrap_servers: str, topic: str, partitions: int, timeout_s: float = 60.0
) -> dict[int, list[Record]]:
    """Every record of `topic`, per partition in offset order (reads up to the current end)."""
    out: dict[int, list[Record]] = {p: [] for p in range(partitions)}
    for m in iter_messages(bootstrap_servers, topic, partitions, timeout_s):
        headers = tuple((k, v or b"") for k, v in (m.headers() or ()))
        out[m.partition()].append(
            Record(m.partition(), m.key(), m.value(), m.timestamp()[1], headers, m.offset())
        )
    return out


def count_records(bootstrap_servers: str, topic: str, partitions: int) -> int:
    """Records in `topic` by offsets (high - low watermark), without reading them."""
    marks = watermarks(bootstrap_servers, topic, partitions)
    return sum(high - low for low, high in marks.values())


def watermarks(bootstrap_servers: str, topic: str, partitions: int) -> dict[int, tuple[int, int]]:
    """{partition: (low, high)} of `topic` now."""
    consumer = Consumer({"bootstrap.servers": bootstrap_servers, "group.id": "count-records"})
    try:
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            for p in range(partitions)
        }
    finally:
        consumer.close()


def high_watermarks(bootstrap_servers: str, topic: str, partitions: int) -> dict[int, int]:
    """{partition: end offset} of `topic` now."""
    return {p: high for p, (_, high) in watermarks(bootstrap_servers, topic, partitions).items()}


def partition_count(bootstrap_servers: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap_servers, "group.id": "count-records"})
    try:
        return len(consumer.list_topics(topic, timeout=10).topics[topic].partitions)
    finally:
        consumer.close()


def committed_offsets(
    bootstrap_servers: str, group: str, topic: str, partitions: int
) -> dict[int, int]:
    """{partition: offset} `group` has committed on `topic` (negative: none)."""
    consumer = Consumer({"bootstrap.servers": bootstrap_servers, "group.id": group})
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        return {tp.partition: tp.offset for tp in consumer.committed(tps, timeout=30)}
    finally:
        consumer.close()


def commit_offsets(bootstrap_servers: str, group: str, topic: str, offsets: dict[int, int]) -> None:
    """Commit {partition: next offset} of `topic` for `group`, as any other consumer of the
    group would (no membership: the group must have no active members)."""
    consumer = Consumer({"bootstrap.servers": bootstrap_servers, "group.id": group})
    try:
        tps = [TopicPartition(topic, p, o) for p, o in offsets.items()]
        consumer.commit(offsets=tps, asynchronous=False)
    finally:
        consumer.close()


def java_default_partition(key: bytes, partitions: int) -> int:
    """The partition the Java client's default partitioner gives a keyed record:
    ``toPositive(murmur2(key)) % partitions`` (Kafka's ``Utils.murmur2``, seed 0x9747b28c), so
    a test can choose keys that land on the partitions it needs."""
    mask = 0xFFFFFFFF
    m = 0x5BD1E995
    h = (0x9747B28C ^ len(key)) & mask
    whole = len(key) - len(key) % 4
    for i in range(0, whole, 4):
        k = int.from_bytes(key[i : i + 4], "little")
        k = (k * m) & mask
        k ^= k >> 24
        k = (k * m) & mask
        h = ((h * m) & mask) ^ k
    tail = key[whole:]
    if tail:
        for shift, byte in reversed(list(enumerate(tail))):
            h ^= byte << (8 * shift)
        h = (h * m) & mask
    h ^= h >> 13
    h = (h * m) & mask
    h ^= h >> 15
    return (h & 0x7FFFFFFF) % partitions
