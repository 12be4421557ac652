"""Libraries users embed in their own services (no pyspark): the consumer-service helper for
the dispatcher job (`consumer_service`), the DLQMetadata key codec (`dlq_metadata`) and a
command that lists a DLQ's records (`python -m clients.dlq_list`)."""
