"""Spark Structured Streaming jobs, one package per uForwarder JobType; `main.py` dispatches."""
