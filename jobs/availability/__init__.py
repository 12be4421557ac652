"""JOB_TYPE_KAFKA_AVAILABILITY: produce/consume probes and consumer-lag evaluation. Not built yet
(see the availability issue); `jobs/main.py` rejects this JobType with exit status 2 until it is."""
