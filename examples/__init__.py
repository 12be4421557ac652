"""Runnable examples and their JobGroups: the demo behind `make run`, the cross-tier audit demo
(`make demo-audit-tiers`, `audit-tiers/`), the dispatcher demo (`make demo-dispatch`) and the
load generators' benchmark workload (`loadgen-bench.json`)."""
