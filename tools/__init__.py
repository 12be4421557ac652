"""Developer and test tooling: local Kafka brokers, demo data."""
