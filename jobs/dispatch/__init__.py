"""JOB_TYPE_KAFKA_CONSUMER_TO_RPC_DISPATCHER: each record of a Kafka topic sent to a gRPC
service, with uForwarder's routing to retry tiers, a DLQ and a resilience queue, at least once;
the Delta table `dispatch_stats` (docs/dispatch.md)."""
