"""Libraries users embed in their own services (no pyspark): the consumer-service helper for
the dispatcher job (`consumer_service`), the DLQMetadata key codec (`dlq_metadata`), a command
that lists a DLQ's records (`python -m clients.dlq_list`), and confluent-kafka wrappers that
report what they produced or consumed to an audit topic (`audit`, counting through the
librdkafka plugin in `audit_interceptor/` via `native_tally`; docs/audit.md, "Reporting
clients")."""

from clients.audit import AuditedConsumer, AuditedProducer, AuditSettings

__all__ = ["AuditSettings", "AuditedConsumer", "AuditedProducer"]
