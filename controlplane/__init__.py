"""The control plane: uForwarder's MasterAdminService over gRPC, backed by a JobGroup store,
and a reconciler that turns stored JobGroup state into Spark applications.

Built so far: the admin API on an embedded SQLite store (compare-and-swap writes), with
per-partition jobs derived from the topic's partition count; the reconciler with the local
launcher (RUN / CANCEL / UPDATE, relaunch with backoff, adoption of running applications via
stored launch records); the pure `spark-submit.sh` argument builder; a CLI. Not yet:
MasterWorkerService and heartbeats, the etcd store and leader election, the standalone and
Kubernetes launchers.
"""
