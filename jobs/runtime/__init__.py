"""What every job's entry module uses at run time: the job template (`template.py`), the
SparkSession, the query runner and its stop requests, Kafka source options, the checkpoint's
files, reporting to the control plane, the metrics endpoint and the Delta table idiom."""
