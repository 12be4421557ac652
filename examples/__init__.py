"""Runnable examples: the demo behind `make run` and its JobGroups."""
