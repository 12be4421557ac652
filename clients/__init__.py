"""Libraries users embed in their own services (no pyspark): confluent-kafka wrappers that
report what they produced or consumed to an audit topic (`docs/clients.md`)."""

from clients.audit import AuditedConsumer, AuditedProducer, AuditSettings

__all__ = ["AuditSettings", "AuditedConsumer", "AuditedProducer"]
