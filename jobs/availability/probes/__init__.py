"""Round-trip probes per broker and zone, natively and through kafka-pixy: the probe topic,
the sender and receiver threads, their ledger and the per-window statistics."""
