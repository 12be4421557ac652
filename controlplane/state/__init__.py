"""The control plane's state: the `Store` contract and its SQLite and etcd implementations,
and who leads (`Leadership`: one replica, or an election on etcd)."""
