"""Producing services that report to the cross-tier audit, for its tests and
`make demo-audit-tiers`: one through the Python wrapper (`clients.AuditedProducer`), one a
Java KafkaProducer with the audit interceptor, driven through a SparkSession's JVM (py4j); and
the classpath a Java client outside Spark needs for the interceptor (tests, the bench)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from clients import AuditedProducer, AuditSettings
from core.paths import PROJECT_JAR, ROOT
from jobs.runtime.py4j import java_class, java_map

INTERCEPTOR = "dev.uatu.audit.report.AuditProducerInterceptor"


def interceptor_jars(kafka_jars: Path, into: Path) -> Path:
    """A folder of links for a Java client with the audit interceptor: the Kafka jars in
    ``kafka_jars`` (a client generation's), the project's jar and DataSketches (which the
    interceptor needs and a Kafka client lacks)."""
    into.mkdir()
    pyspark_jars = ROOT / ".venv/lib/python3.11/site-packages/pyspark/jars"
    jars = [*kafka_jars.resolve().glob("*.jar"), PROJECT_JAR.resolve()]
    jars += sorted(pyspark_jars.resolve().glob("datasketches-*.jar"))
    for jar in jars:
        (into / jar.name).symlink_to(jar)
    return into


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
    props = java_map(
        spark,
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": "true",
            "acks": "all",
            "interceptor.classes": INTERCEPTOR,
            "uatu.audit.service": service,
            "uatu.audit.cluster": "local",
            "uatu.audit.topic": audit_topic,
        },
    )
    serializer = java_class(spark, "org.apache.kafka.common.serialization.ByteArraySerializer")
    producer = java_class(spark, "org.apache.kafka.clients.producer.KafkaProducer")(
        props, serializer(), serializer()
    )
    record = java_class(spark, "org.apache.kafka.clients.producer.ProducerRecord")
    timestamp = java_class(spark, "java.lang.Long").valueOf
    try:
        for key, value, ts in records:
            producer.send(record(topic, None, timestamp(ts), bytearray(key), bytearray(value)))
    finally:
        producer.close()
