"""confluent-kafka Producer and Consumer wrappers that report what they handled, per window.

    from clients import AuditedProducer, AuditSettings

    audit = AuditSettings(service="orders-api", cluster="local", audit_topic="uatu-audit")
    producer = AuditedProducer({"bootstrap.servers": "127.0.0.1:9092"}, audit)
    producer.produce("orders", value=b"...", key=b"42")
    ...
    producer.close()  # flushes the records, then the last audit reports

`AuditedProducer` counts every record the broker acknowledged (tier SERVICE, or KRP for a proxy
tier) by the window of its Kafka timestamp: a record produced without a timestamp has
librdkafka's (the time of `produce`), which the broker stores too, so both place it in the
same window. `AuditedConsumer` counts every record `poll`/`consume` returned (tier CONSUMER,
its group.id as consumer_group). Both hash key + value exactly like the audit job's default
dedupe key (Spark's `xxhash64(key, value)`), keep an HLL sketch of those hashes and a KLL
sketch of latency, and send one `uatu.v1.AuditReport` per (topic, window) every
`report_interval_s` and at `close` (`core.audit_reports`). Everything else is confluent-kafka's
own API, passed through.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, Message, Producer

from core.audit_reports import AuditReporter, ReporterIdentity, WindowTally

DeliveryCallback = Callable[[KafkaError | None, Message], None]


@dataclass(frozen=True)
class AuditSettings:
    """Where and how a wrapper reports.

    service: the reporting service's name. cluster: the audited cluster's name as the audit
    jobs know it (conf/clusters.yaml), written into every report. audit_topic: where reports
    go. audit_config: librdkafka settings for the audit topic's cluster (default: the wrapped
    client's bootstrap.servers and security settings). window_seconds: report window length
    (default 60; the audit compares it against windows it divides). lg_k: HLL precision
    (default 12, the audit job's).
    """

    service: str
    cluster: str
    audit_topic: str
    audit_config: Mapping[str, Any] | None = None
    window_seconds: int = 60
    report_interval_s: float = 10.0
    lg_k: int = 12
    tier: str = "SERVICE"


_CONNECTION_KEYS = ("bootstrap.servers", "security.protocol", "client.dns.lookup")


def _audit_client_config(settings: AuditSettings, config: Mapping[str, Any]) -> dict[str, Any]:
    if settings.audit_config is not None:
        return dict(settings.audit_config)
    return {
        k: v for k, v in config.items() if k in _CONNECTION_KEYS or k.startswith(("sasl.", "ssl."))
    }


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class AuditedProducer:
    """A confluent_kafka.Producer that reports the records the broker acknowledged.

    The wrapper's delivery callback is the producer's default one (config `on_delivery`), so a
    record produced without a callback of its own costs no Python object per record; a
    per-record `on_delivery`/`callback`, and an `on_delivery` in `config`, are called after the
    wrapper has counted the record. A record without a timestamp gets librdkafka's (the time of
    `produce`, CreateTime), which its delivery report carries and which the broker stores.
    """

    def __init__(self, config: Mapping[str, Any], audit: AuditSettings) -> None:
        config = dict(config)
        user_default = config.pop("on_delivery", None)
        self.tally = WindowTally(audit.window_seconds, audit.lg_k)
        self.reporter = AuditReporter(
            self.tally,
            ReporterIdentity(audit.service, audit.cluster, audit.tier),
            audit.audit_topic,
            _audit_client_config(audit, config),
            report_interval_s=audit.report_interval_s,
        )
        self._add = self.tally.add
        self._add_failed = self.tally.add_failed
        default: DeliveryCallback = self._on_delivery
        if user_default is not None:
            default = self._chained(user_default)
        self._producer = Producer({**config, "on_delivery": default})
        self._produce = self._producer.produce

    def _on_delivery(self, err: KafkaError | None, msg: Message) -> None:
        timestamp = msg.timestamp()[1]
        topic = msg.topic() or ""
        if err is not None:
            self._add_failed(topic, timestamp if timestamp > 0 else _now_ms())
            return
        self._add(topic, msg.key(), msg.value(), timestamp, _now_ms() - timestamp)

    def _chained(self, user: DeliveryCallback) -> DeliveryCallback:
        counted = self._on_delivery

        def report(err: KafkaError | None, msg: Message) -> None:
            counted(err, msg)
            user(err, msg)

        return report

    def produce(
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        partition: int = -1,
        on_delivery: DeliveryCallback | None = None,
        timestamp: int = 0,
        headers: Any = None,
        callback: DeliveryCallback | None = None,
    ) -> None:
        """Producer.produce; the record is counted when the broker acknowledges it."""
        user = on_delivery or callback
        if user is None:
            # The producer's default callback (the wrapper's) reports this record.
            self._produce(topic, value, key, partition, timestamp=timestamp, headers=headers)
        else:
            self._produce(
                topic, value, key, partition, self._chained(user),
                timestamp=timestamp, headers=headers,
            )  # fmt: skip

    def poll(self, timeout: float = 0) -> int:
        return self._producer.poll(timeout)

    def flush(self, timeout: float = -1) -> int:
        return self._producer.flush(timeout) if timeout >= 0 else self._producer.flush()

    def close(self, timeout_s: float = 30.0) -> None:
        """Flush the records, then send the last audit reports and wait for them."""
        self._producer.flush(timeout_s)
        self.reporter.close(timeout_s)

    def __getattr__(self, name: str) -> Any:  # the rest of Producer's API, unchanged
        return getattr(self._producer, name)

    def __len__(self) -> int:
        return len(self._producer)


class AuditedConsumer:
    """A confluent_kafka.Consumer that reports the records poll/consume returned (tier
    CONSUMER, consumer_group = group.id)."""

    def __init__(self, config: Mapping[str, Any], audit: AuditSettings) -> None:
        self._consumer = Consumer(dict(config))
        self.tally = WindowTally(audit.window_seconds, audit.lg_k)
        self.reporter = AuditReporter(
            self.tally,
            ReporterIdentity(
                audit.service, audit.cluster, "CONSUMER", consumer_group=str(config["group.id"])
            ),
            audit.audit_topic,
            _audit_client_config(audit, config),
            report_interval_s=audit.report_interval_s,
        )

    def _count(self, msg: Message | None) -> None:
        if msg is None or msg.error() is not None:
            return
        timestamp = msg.timestamp()[1]
        topic = msg.topic() or ""
        self.tally.add(topic, msg.key(), msg.value(), timestamp, _now_ms() - timestamp)

    def poll(self, timeout: float = -1) -> Message | None:
        msg = self._consumer.poll(timeout)
        self._count(msg)
        return msg

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Message]:
        messages = self._consumer.consume(num_messages, timeout)
        for msg in messages:
            self._count(msg)
        return messages

    def close(self, timeout_s: float = 30.0) -> None:
        """Close the consumer, then send the last audit reports and wait for them."""
        self._consumer.close()
        self.reporter.close(timeout_s)

    def __getattr__(self, name: str) -> Any:  # subscribe, assign, commit, ... unchanged
        return getattr(self._consumer, name)
