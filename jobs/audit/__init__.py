"""JOB_TYPE_KAFKA_AUDIT: per topic, partition and event-time window, how many records arrived,
how many were unique, how many bytes, how late; written to the Delta table `audit_counts`.
The cross-tier audits, which decide `audit_verdicts`, are in `tiers/`."""
