"""List a DLQ's (or a retry tier's, or the resq's) records with their DLQMetadata.

    python -m clients.dlq_list orders-dlq --bootstrap-servers 127.0.0.1:9092
    python -m clients.dlq_list orders-dlq --cluster local            # from conf/clusters.yaml
    python -m clients.dlq_list orders-dlq --cluster local --json --partition 0 --limit 100

One line (or one JSON object) per record, in offset order per partition: where it is
(partition, offset, timestamp), where it came from (original topic, partition, offset), its
retry and timeout counts, and its original key and value size. A record whose key is not a
DLQMetadata is listed with ``"origin": null``. This is also how to build a redrive JobGroup: the
partition_offset_ranges of a DLQ are its partitions' offsets listed here.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, TopicPartition

from clients.dlq_metadata import decode


@dataclass(frozen=True)
class DlqRecord:
    partition: int
    offset: int
    timestamp_ms: int
    original_topic: str | None
    original_partition: int | None
    original_offset: int | None
    retry_count: int | None
    timeout_count: int | None
    key: bytes | None
    value_bytes: int

    def as_dict(self) -> dict[str, Any]:
        origin = None
        if self.original_topic is not None:
            origin = f"{self.original_topic}/{self.original_partition}/{self.original_offset}"
        return {
            "partition": self.partition,
            "offset": self.offset,
            "timestamp_ms": self.timestamp_ms,
            "origin": origin,
            "original_topic": self.original_topic,
            "original_partition": self.original_partition,
            "original_offset": self.original_offset,
            "retry_count": self.retry_count,
            "timeout_count": self.timeout_count,
            "key": self.key.decode("utf-8", "backslashreplace") if self.key else None,
            "value_bytes": self.value_bytes,
        }


def list_records(
    bootstrap_servers: str,
    topic: str,
    *,
    partitions: list[int] | None = None,
    limit: int | None = None,
    properties: dict[str, str] | None = None,
    timeout_s: float = 30.0,
) -> Iterator[DlqRecord]:
    """The records of `topic` up to its end when called, decoded."""
    consumer = Consumer(
        {
            **(properties or {}),
            "bootstrap.servers": bootstrap_servers,
            "group.id": f"uatu-dlq-list-{time.time_ns()}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    try:
        meta = consumer.list_topics(topic, timeout=timeout_s).topics.get(topic)
        if meta is None or meta.error is not None:
            raise SystemExit(f"error: topic {topic!r} not found")
        wanted = sorted(meta.partitions) if partitions is None else partitions
        ends, starts = {}, []
        for p in wanted:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout_s)
            if high > low:
                ends[p] = high
                starts.append(TopicPartition(topic, p, low))
        consumer.assign(starts)
        pending, listed = set(ends), 0
        deadline = time.monotonic() + timeout_s
        while pending and time.monotonic() < deadline:
            for m in consumer.consume(num_messages=1000, timeout=0.5):
                error = m.error()
                if error is not None:
                    if error.code() != KafkaError._PARTITION_EOF:
                        raise SystemExit(f"error: reading {topic}: {error}")
                    continue
                partition, offset = m.partition(), m.offset()
                if partition is None or offset is None or partition not in pending:
                    continue
                yield _record(m)
                listed += 1
                if limit is not None and listed >= limit:
                    return
                if offset >= ends[partition] - 1:
                    pending.discard(partition)
    finally:
        consumer.close()


def _record(m: Any) -> DlqRecord:
    value = m.value()
    try:
        meta = decode(m.key())
    except ValueError:
        return DlqRecord(
            m.partition(),
            m.offset(),
            m.timestamp()[1],
            None,
            None,
            None,
            None,
            None,
            m.key(),
            len(value or b""),
        )
    return DlqRecord(
        m.partition(),
        m.offset(),
        m.timestamp()[1],
        meta.topic,
        meta.partition,
        meta.offset,
        meta.retry_count,
        meta.timeout_count,
        meta.key,
        len(value or b""),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m clients.dlq_list", description=__doc__.splitlines()[0]
    )
    parser.add_argument("topic", help="the DLQ (or a retry tier, or the resq)")
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--bootstrap-servers", help="host:port[,host:port]")
    where.add_argument("--cluster", help="a cluster name of clusters.yaml")
    parser.add_argument("--conf-dir", type=Path, default=None, help="folder of clusters.yaml")
    parser.add_argument("--partition", type=int, action="append", help="only this partition")
    parser.add_argument("--limit", type=int, default=None, help="at most this many records")
    parser.add_argument("--json", action="store_true", help="one JSON object per line")
    args = parser.parse_args(argv)
    properties: dict[str, str] = {}
    servers = args.bootstrap_servers
    if args.cluster:
        from core.config import load_settings

        cluster = load_settings(args.conf_dir).clusters.get(args.cluster)
        if cluster is None:
            print(f"error: no cluster {args.cluster!r} in clusters.yaml", file=sys.stderr)
            return 2
        servers = cluster.bootstrap_servers
        properties = {k: str(v) for k, v in cluster.client_config().items()}
        properties.pop("bootstrap.servers", None)
    count = 0
    for record in list_records(
        servers, args.topic, partitions=args.partition, limit=args.limit, properties=properties
    ):
        count += 1
        d = record.as_dict()
        if args.json:
            print(json.dumps(d))
        else:
            print(
                f"{d['partition']:>3} {d['offset']:>8}  origin {d['origin'] or '(not DLQMetadata)'}"
                f"  retries {d['retry_count']}  timeouts {d['timeout_count']}"
                f"  key {d['key']!r}  {d['value_bytes']} value bytes"
            )
    if not args.json:
        print(f"{count} records", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
