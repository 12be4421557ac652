"""What every job's entry module uses at run time: the SparkSession, the query runner, Kafka
source options, reporting to the control plane and the Delta table idiom."""
