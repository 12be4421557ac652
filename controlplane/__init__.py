"""The control plane: uForwarder's MasterAdminService over gRPC, backed by a JobGroup store.

So far: the admin API (add, update, set state, delete, get, list, scale status) on an
embedded SQLite store, with per-partition jobs derived from the topic's partition count, and
the pure `spark-submit.sh` argument builder. The reconciler, launchers, worker service, etcd
store and leader election belong to the control-plane issue and are not built yet.
"""
