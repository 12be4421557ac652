"""What both deployables (the Spark jobs and the control plane) share: errors, site
configuration, paths, JobGroup loading and checks, Kafka admin calls, process helpers.

No pyspark and no gRPC server here: the control plane imports this without Spark installed.
"""
