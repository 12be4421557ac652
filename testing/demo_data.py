"""Generate and produce an audit data set whose true counts are known.

Used by `make run` (examples/demo.py) and by the integration tests, which compute the expected
audit table from the returned records in plain Python, independently of Spark.

Records are JSON values {"id", "ts", "payload"}; `ts` is the event time in epoch ms. The set
mixes four kinds of records:

* on time: `ts` spread over the minutes before `now_ms`,
* duplicates: an exact re-send (same partition, key and value) of an earlier record,
* late: `ts` two hours before `now_ms`,
* without a usable event time: `ts` missing or not a number; the audit job places them by
  their Kafka timestamp, which the producer sets explicitly to `kafka_ts_ms`.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass

from confluent_kafka import Producer

LATE_BY_MS = 2 * 3600 * 1000


@dataclass(frozen=True)
class SentRecord:
    partition: int
    key: bytes
    value: bytes
    event_ms: int | None  # the usable event time, None when the record has none
    kafka_ts_ms: int
    kind: str  # on_time, duplicate, late, no_event_time


def audit_dataset(
    n_originals: int,
    partitions: int,
    now_ms: int,
    *,
    spread_ms: int = 180_000,
    duplicate_every: int = 10,
    late_every: int = 20,
    untimed_every: int = 25,
    seed: int = 7,
) -> list[SentRecord]:
    """`n_originals` distinct records plus one duplicate of every `duplicate_every`-th."""
    rng = random.Random(seed)
    records: list[SentRecord] = []
    for i in range(n_originals):
        partition = i % partitions
        key = f"order-{i}".encode()
        payload = "x" * rng.randint(20, 120)
        if i % untimed_every == 0:
            kind, event_ms = "no_event_time", None
            body = (
                {"id": i, "payload": payload}
                if i % 2
                else {"id": i, "ts": "n/a", "payload": payload}
            )
        elif i % late_every == 0:
            kind, event_ms = "late", now_ms - LATE_BY_MS - rng.randint(0, 60_000)
            body = {"id": i, "ts": event_ms, "payload": payload}
        else:
            kind, event_ms = "on_time", now_ms - rng.randint(0, spread_ms)
            body = {"id": i, "ts": event_ms, "payload": payload}
        record = SentRecord(partition, key, json.dumps(body).encode(), event_ms, now_ms, kind)
        records.append(record)
        if i % duplicate_every == 0:
            records.append(SentRecord(partition, key, record.value, event_ms, now_ms, "duplicate"))
    return records


def produce(bootstrap_servers: str, topic: str, records: list[SentRecord]) -> None:
    """Send every record to its partition with acks=all; raise if any delivery failed."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap_servers,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 20,
        }
    )
    failures: list[str] = []

    def on_delivery(err, _msg) -> None:
        if err is not None:
            failures.append(str(err))

    for r in records:
        producer.produce(
            topic,
            key=r.key,
            value=r.value,
            partition=r.partition,
            timestamp=r.kafka_ts_ms,
            on_delivery=on_delivery,
        )
        producer.poll(0)
    remaining = producer.flush(60)
    if remaining or failures:
        raise RuntimeError(f"{remaining} records unsent, {len(failures)} failed: {failures[:3]}")
