"""Benchmarks of the audit job against Kafka's own tools (run as ``python -m bench.<name>``)."""
