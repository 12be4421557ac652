"""Producing services that report to the cross-tier audit, for its tests and
`make demo-audit-tiers`: one through the Python wrapper (`clients.AuditedProducer`), one a
Java KafkaProducer with the audit interceptor, driven through a SparkSession's JVM (py4j)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from clients import AuditedProducer, AuditSettings

INTERCEPTOR = "dev.uatu.audit.report.AuditProducerInterceptor"


def produce_with_wrapper(
    bootstrap: str,
    topic: str,
    audit_topic: str,
    records: Iterable[tuple[bytes, bytes, int]],
    service: str = "orders-api",
) -> None:
    """Send (key, value, timestamp ms) records through `clients.AuditedProducer` reporting as
    `service` to `audit_topic` (cluster `local`); close() flushes the records, then the last
    reports."""
    producer = AuditedProducer(
        {"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5},
        AuditSettings(service=service, cluster="local", audit_topic=audit_topic),
    )
    for key, value, ts in records:
        producer.produce(topic, value=value, key=key, timestamp=ts)
        producer.poll(0)
    producer.close()


def produce_with_interceptor(
    spark: Any,
    bootstrap: str,
    topic: str,
    audit_topic: str,
    records: Iterable[tuple[bytes, bytes, int]],
    service: str = "java-api",
) -> None:
    """Send (key, value, timestamp ms) records with `service`'s audit interceptor reporting to
    `audit_topic` (cluster `local`); close() flushes the records, then the last reports."""
    jvm = spark.sparkContext._jvm
    props = jvm.java.util.HashMap()
    for k, v in {
        "bootstrap.servers": bootstrap,
        "enable.idempotence": "true",
        "acks": "all",
        "interceptor.classes": INTERCEPTOR,
        "uatu.audit.service": service,
        "uatu.audit.cluster": "local",
        "uatu.audit.topic": audit_topic,
    }.items():
        props.put(k, v)
    serializer = jvm.org.apache.kafka.common.serialization.ByteArraySerializer
    producer = jvm.org.apache.kafka.clients.producer.KafkaProducer(
        props, serializer(), serializer()
    )
    try:
        for key, value, ts in records:
            producer.send(
                jvm.org.apache.kafka.clients.producer.ProducerRecord(
                    topic, None, jvm.java.lang.Long.valueOf(ts), bytearray(key), bytearray(value)
                )
            )
    finally:
        producer.close()
