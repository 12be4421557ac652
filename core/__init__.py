"""What both deployables (the Spark jobs and the control plane) share: errors, site
configuration, paths, JobGroup loading and checks, the job contract (`spec.py`) and where
jobs may write (`storage.py`), the control-plane channel, the fault hook, Kafka admin calls,
provenance stamps, audit reports and process helpers.

No pyspark and no gRPC server here: the control plane imports this without Spark installed.
"""
