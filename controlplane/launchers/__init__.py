"""How a stored JobGroup becomes a running Spark application: the `Launcher` contract and
its launch record (`base.py`), the spark-submit command line (`submit.py`), and one launcher
per place an application runs (local process, Spark standalone, Kubernetes)."""
