"""JOB_TYPE_KAFKA_AVAILABILITY: round-trip probes per broker and zone (`probes/`), topic
availability (`topic_health.py`) and Burrow-style consumer-group status (`lag/`), written to
Delta tables (docs/availability.md)."""
