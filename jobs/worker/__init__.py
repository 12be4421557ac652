"""A worker application: many JobGroups in one Spark application (main.py, runs.py)."""
