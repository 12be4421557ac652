"""JOB_TYPE_KAFKA_REPLICATION: Kafka-to-Kafka copy, partitions and order kept, no loss and no
duplicate across a crash, in micro-batches or as a low-latency copy; the Delta tables
`replication_stats` and `replication_audit` (docs/replication.md)."""
