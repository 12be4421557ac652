"""JOB_TYPE_LOAD_GEN_PRODUCE and JOB_TYPE_LOAD_GEN_CONSUME: traffic of a chosen shape at a
chosen rate, and what arrives measured (throughput, end-to-end latency, lost and duplicated
sequence numbers) into the Delta table `loadgen_stats`, in the terms of Kafka's perf tools."""
