"""JOB_TYPE_KAFKA_REPLICATION: Kafka-to-Kafka copy. Not built yet (see the replication issue);
`jobs/main.py` rejects this JobType with exit status 2 until it is."""
