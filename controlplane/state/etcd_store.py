"""The `Store` contract on etcd, so several control-plane replicas share one state.

Same semantics as `SqliteStore` (state/sqlite.py), with these etcd specifics:

* versions are etcd mod_revisions: they grow with every write but are not consecutive, and
  a group's first version is not 1. Callers treat them as opaque, which the contract allows;
* every compare-and-swap is one etcd txn: `create` on create_revision == 0 (with a limit,
  also on no group key modified since the revision the groups were counted at, retried
  until it holds), `replace` on mod_revision == expected (and the key existing), `next_ids`
  a CAS retry loop on the sequence key;
* leader-only writes (`put_launch`, `delete_launch`) are fenced when a `fence` is given: the
  txn also compares the leader key's create_revision with the one this replica won, so a
  deposed leader that has not noticed yet (paused, partitioned) cannot write; it gets
  `NotLeader` naming the current leader instead;
* an unreachable etcd raises `StoreUnavailable`;
* `put_job_statuses` / `delete_job_statuses` write up to `max_txn_ops` statuses (etcd's
  --max-txn-ops, 128 by default) per atomic txn; a larger batch takes several txns.

Key layout under `prefix` (values are serialized protobuf unless noted)::

    <prefix>/jobgroups/<job_group_id>    StoredJobGroup
    <prefix>/sequences/<name>            last id handed out, decimal text
    <prefix>/launches/<job_group_id>     launch handle, JSON
    <prefix>/workers/<node id>           StoredWorker
    <prefix>/jobstatuses/<job id>        StoredJobStatus

Thread-safe (the client keeps a connection per thread).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence

from uber.data.kafka.datatransfer.job_group_pb2 import StoredJobGroup
from uber.data.kafka.datatransfer.job_status_pb2 import StoredJobStatus
from uber.data.kafka.datatransfer.worker_pb2 import StoredWorker

from controlplane.errors import (
    JobGroupExists,
    JobGroupNotFound,
    LimitReached,
    NotLeader,
    StaleWrite,
)
from controlplane.launchers.base import LaunchRecord
from controlplane.state import etcd_client as ops
from controlplane.state.base import Versioned
from controlplane.state.etcd_client import EtcdAccess, EtcdClient, Json, KeyValue
from core.faults import fault_point

Fence = Callable[[], tuple[str, int] | None]

ETCD_MAX_TXN_OPS = 128  # etcd's default --max-txn-ops


class EtcdStore:
    """A `Store` on the etcd at `endpoint` (``http://host:port``), keys under `prefix`.

    `fence` returns the (leader key, create_revision) this replica leads with, or None while
    it does not lead (`EtcdLeadership.fence`); without it, launch writes are unguarded.
    `leader_key` is read to name the leader when `fence` returns None.
    """

    def __init__(
        self,
        endpoint: str | EtcdAccess,
        prefix: str = "/uatu",
        fence: Fence | None = None,
        *,
        leader_key: str | None = None,
        page_size: int = 500,
        max_txn_ops: int = ETCD_MAX_TXN_OPS,
        timeout: float = 5.0,
    ) -> None:
        self._etcd = EtcdClient(endpoint, timeout=timeout)
        root = prefix.rstrip("/").encode()
        self._groups = root + b"/jobgroups/"
        self._sequences = root + b"/sequences/"
        self._launches = root + b"/launches/"
        self._workers = root + b"/workers/"
        self._statuses = root + b"/jobstatuses/"
        self._fence = fence
        self._leader_key = leader_key
        self._page_size = page_size
        self._max_txn_ops = max_txn_ops

    def close(self) -> None:
        self._etcd.close()

    # Job groups, compare-and-swap on mod_revision.

    def get(self, job_group_id: str) -> Versioned | None:
        kv = self._etcd.get(self._groups + job_group_id.encode())
        return None if kv is None else Versioned(_parse(kv.value), kv.mod_revision)

    def count(self) -> int:
        answer = self._etcd.range(self._groups, ops.prefix_end(self._groups), count_only=True)
        return int(answer.get("count", 0))

    def create(self, group: StoredJobGroup, limit: int | None = None) -> int:
        """Put a new group; with `limit`, only while fewer groups are stored.

        etcd cannot count inside a txn, so the count is read first and the txn also compares
        that no group key changed since the revision of that count: a concurrent create (or
        any group write) in between fails the compare, and the count is read again.
        """
        job_group_id = group.job_group.job_group_id
        key = self._groups + job_group_id.encode()
        value = group.SerializeToString()
        while True:
            compare = [ops.created_at(key, 0)]
            if limit is not None:
                counted = self._etcd.range(
                    self._groups, ops.prefix_end(self._groups), count_only=True
                )
                if int(counted.get("count", 0)) >= limit:
                    raise LimitReached("stored JobGroups", limit)
                fault_point("controlplane.etcd_groups_counted")
                compare.append(
                    ops.unmodified_since(
                        self._groups, ops.prefix_end(self._groups), ops.revision(counted)
                    )
                )
            answer = self._etcd.txn(compare, [ops.put(key, value)], [ops.get(key)])
            if answer.get("succeeded"):
                return ops.revision(answer)
            if limit is None or ops.failure_kv(answer) is not None:
                raise JobGroupExists(job_group_id)

    def replace(self, group: StoredJobGroup, expected_version: int) -> int:
        job_group_id = group.job_group.job_group_id
        key = self._groups + job_group_id.encode()
        answer = self._etcd.txn(
            # A missing key has mod_revision 0 too: `exists` keeps replace from creating.
            [ops.exists(key), ops.modified_at(key, expected_version)],
            [ops.put(key, group.SerializeToString())],
            [ops.get(key)],
        )
        if answer.get("succeeded"):
            return ops.revision(answer)
        current = ops.failure_kv(answer)
        if current is None:
            raise JobGroupNotFound(job_group_id)
        raise StaleWrite(job_group_id, expected_version, current.mod_revision)

    def delete(self, job_group_id: str) -> None:
        key = self._groups + job_group_id.encode()
        answer = self._etcd.call("kv/deleterange", {"key": ops.b64(key)})
        if int(answer.get("deleted", 0)) == 0:
            raise JobGroupNotFound(job_group_id)

    def all(self) -> Iterator[Versioned]:
        """Every group, ordered by id (bytewise, as SQLite orders TEXT), read in pages."""
        for kv in self._etcd.scan(self._groups, self._page_size):
            yield Versioned(_parse(kv.value), kv.mod_revision)

    def next_ids(self, sequence: str, count: int) -> range:
        """Reserve `count` consecutive ids of a named sequence (ids start at 1).

        Compare-and-swap until no other writer got in between; each lost round costs one
        request, since the failure branch returns the current value.
        """
        key = self._sequences + sequence.encode()
        current = self._etcd.get(key)
        while True:
            last = int(current.value) if current else 0
            start = last + 1
            answer = self._etcd.txn(
                [ops.modified_at(key, current.mod_revision if current else 0)],
                [ops.put(key, str(last + count).encode())],
                [ops.get(key)],
            )
            if answer.get("succeeded"):
                return range(start, start + count)
            current = ops.failure_kv(answer)

    # Launch records: leader-only, fenced.

    def put_launch(self, job_group_id: str, record: LaunchRecord) -> None:
        value = record.to_json().encode()
        self._fenced([ops.put(self._launches + job_group_id.encode(), value)])

    def launches(self) -> dict[str, LaunchRecord]:
        return {
            kv.key[len(self._launches) :].decode(): LaunchRecord.from_json(kv.value)
            for kv in self._etcd.scan(self._launches, self._page_size)
        }

    def get_launch(self, job_group_id: str) -> LaunchRecord | None:
        kv = self._etcd.get(self._launches + job_group_id.encode())
        return None if kv is None else LaunchRecord.from_json(kv.value)

    def delete_launch(self, job_group_id: str) -> None:
        self._fenced([ops.delete(self._launches + job_group_id.encode())])

    # Workers (running Spark applications) and their latest per-job statuses.

    def put_worker(self, worker: StoredWorker) -> None:
        key = self._workers + str(worker.node.id).encode()
        self._etcd.call("kv/put", ops.put(key, worker.SerializeToString())["request_put"])

    def get_worker(self, worker_id: int) -> StoredWorker | None:
        kv = self._etcd.get(self._workers + str(worker_id).encode())
        return None if kv is None else StoredWorker.FromString(kv.value)

    def workers(self) -> list[StoredWorker]:
        found = [
            StoredWorker.FromString(kv.value)
            for kv in self._etcd.scan(self._workers, self._page_size)
        ]
        # Keys hold decimal ids, whose byte order is not numeric order.
        return sorted(found, key=lambda w: w.node.id)

    def delete_worker(self, worker_id: int) -> None:
        key = self._workers + str(worker_id).encode()
        self._etcd.call("kv/deleterange", {"key": ops.b64(key)})

    def put_job_statuses(self, statuses: Iterable[StoredJobStatus]) -> None:
        # One txn may not touch a key twice: the last status of a job wins, as in SQLite.
        latest = {s.job_status.job.job_id: s for s in statuses}
        self._in_txns(
            [
                ops.put(self._statuses + str(job_id).encode(), status.SerializeToString())
                for job_id, status in latest.items()
            ]
        )

    def job_statuses(self, job_ids: Iterable[int] | None = None) -> dict[int, StoredJobStatus]:
        if job_ids is None:
            found = list(self._etcd.scan(self._statuses, self._page_size))
        else:  # point reads, batched into transactions
            keys = [self._statuses + str(i).encode() for i in sorted(set(job_ids))]
            found = []
            for i in range(0, len(keys), self._max_txn_ops):
                answer = self._etcd.txn([], [ops.get(k) for k in keys[i : i + self._max_txn_ops]])
                for response in answer.get("responses", []):
                    found.extend(
                        KeyValue.from_json(kv) for kv in response["response_range"].get("kvs", [])
                    )
        return {
            int(kv.key[len(self._statuses) :]): StoredJobStatus.FromString(kv.value) for kv in found
        }

    def delete_job_statuses(self, job_ids: Iterable[int]) -> None:
        self._in_txns([ops.delete(self._statuses + str(i).encode()) for i in set(job_ids)])

    # Helpers.

    def _in_txns(self, requests: Sequence[Json]) -> None:
        for i in range(0, len(requests), self._max_txn_ops):
            self._etcd.txn([], requests[i : i + self._max_txn_ops])

    def _fenced(self, requests: Sequence[Json]) -> None:
        """Apply `requests` in one txn, only while this replica's leadership still holds."""
        if self._fence is None:
            self._etcd.txn([], requests)
            return
        token = self._fence()
        if token is None:
            raise NotLeader(self._leader(self._leader_key))
        leader_key, leader_revision = token
        key = leader_key.encode()
        answer = self._etcd.txn([ops.created_at(key, leader_revision)], requests, [ops.get(key)])
        if not answer.get("succeeded"):
            # The key was deleted or re-created since we won it: someone else leads (or will).
            current = ops.failure_kv(answer)
            raise NotLeader(current.value.decode() if current else None)

    def _leader(self, leader_key: str | None) -> str | None:
        if leader_key is None:
            return None
        kv = self._etcd.get(leader_key.encode())
        return kv.value.decode() if kv else None


def _parse(data: bytes) -> StoredJobGroup:
    return StoredJobGroup.FromString(data)
