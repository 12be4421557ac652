"""Benchmarks of the jobs, the control plane and the audit clients against Kafka's own tools,
MirrorMaker 2, Burrow and hand-written baselines (run as ``python -m bench.<name>`` or
``make bench-<name>``; figures in docs/benchmarks.md). `_common.py` holds what they share."""
