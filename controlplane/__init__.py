"""The control plane: uForwarder's MasterAdminService and MasterWorkerService over gRPC.

It stores JobGroups (`state/`: SQLite, or etcd with leader election for several replicas),
derives one StoredJob per partition, and its reconciler turns each group's state into a
running Spark application (`launchers/`: a local process, a Spark standalone cluster, or a
Spark Operator SparkApplication), watched through heartbeats. `docs/controlplane.md` has
the API, the CLI and the guarantees.
"""
