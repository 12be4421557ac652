"""The embedded store: the `Store` contract (state/base.py) on one SQLite file.

`SqliteStore` is thread-safe: one connection behind a lock. `state/etcd_store.py`
implements the same contract on etcd for high availability.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path

from uber.data.kafka.datatransfer.job_group_pb2 import StoredJobGroup
from uber.data.kafka.datatransfer.job_status_pb2 import StoredJobStatus
from uber.data.kafka.datatransfer.worker_pb2 import StoredWorker

from controlplane.errors import JobGroupExists, JobGroupNotFound, NotLeader, StaleWrite
from controlplane.launchers.base import LaunchRecord
from controlplane.state.base import Versioned
from controlplane.state.leadership import Leadership

_SCHEMA = """
CREATE TABLE IF NOT EXISTS job_groups (
    id      TEXT PRIMARY KEY,
    version INTEGER NOT NULL,
    data    BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS sequences (
    name  TEXT PRIMARY KEY,
    value INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS launches (
    id     TEXT PRIMARY KEY,
    record TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS workers (
    id   INTEGER PRIMARY KEY,
    data BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS job_statuses (
    job_id INTEGER PRIMARY KEY,
    data   BLOB NOT NULL
);
"""


class SqliteStore:
    def __init__(self, path: Path | str, leadership: Leadership | None = None) -> None:
        """`leadership`, when given, fences the leader-only writes (launch records): they
        raise NotLeader once it no longer leads, as the etcd store's fenced txns do."""
        self._leadership = leadership
        if str(path) != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.executescript(_SCHEMA)
        self._lock = threading.Lock()

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def get(self, job_group_id: str) -> Versioned | None:
        with self._lock:
            row = self._db.execute(
                "SELECT version, data FROM job_groups WHERE id = ?", (job_group_id,)
            ).fetchone()
        return None if row is None else Versioned(_parse(row[1]), row[0])

    def create(self, group: StoredJobGroup) -> int:
        job_group_id = group.job_group.job_group_id
        with self._lock:
            try:
                self._db.execute(
                    "INSERT INTO job_groups (id, version, data) VALUES (?, 1, ?)",
                    (job_group_id, group.SerializeToString()),
                )
            except sqlite3.IntegrityError:
                raise JobGroupExists(job_group_id) from None
        return 1

    def replace(self, group: StoredJobGroup, expected_version: int) -> int:
        job_group_id = group.job_group.job_group_id
        with self._lock:
            updated = self._db.execute(
                "UPDATE job_groups SET version = version + 1, data = ? "
                "WHERE id = ? AND version = ?",
                (group.SerializeToString(), job_group_id, expected_version),
            ).rowcount
            if updated == 1:
                return expected_version + 1
            row = self._db.execute(
                "SELECT version FROM job_groups WHERE id = ?", (job_group_id,)
            ).fetchone()
        if row is None:
            raise JobGroupNotFound(job_group_id)
        raise StaleWrite(job_group_id, expected_version, row[0])

    def delete(self, job_group_id: str) -> None:
        with self._lock:
            deleted = self._db.execute(
                "DELETE FROM job_groups WHERE id = ?", (job_group_id,)
            ).rowcount
        if deleted == 0:
            raise JobGroupNotFound(job_group_id)

    def all(self) -> Iterator[Versioned]:
        """Every group, ordered by id, read in pages so ten thousand groups stay cheap."""
        last = ""
        while True:
            with self._lock:
                rows = self._db.execute(
                    "SELECT id, version, data FROM job_groups WHERE id > ? ORDER BY id LIMIT 500",
                    (last,),
                ).fetchall()
            if not rows:
                return
            for job_group_id, version, data in rows:
                yield Versioned(_parse(data), version)
                last = job_group_id

    def next_ids(self, sequence: str, count: int) -> range:
        """Reserve `count` consecutive ids of a named sequence (ids start at 1)."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            row = self._db.execute(
                "SELECT value FROM sequences WHERE name = ?", (sequence,)
            ).fetchone()
            start = (row[0] if row else 0) + 1
            self._db.execute(
                "INSERT INTO sequences (name, value) VALUES (?, ?) "
                "ON CONFLICT(name) DO UPDATE SET value = excluded.value",
                (sequence, start + count - 1),
            )
            self._db.execute("COMMIT")
        return range(start, start + count)

    # Launch records: what runs for a JobGroup, kept so a restarted control plane adopts it.

    def put_launch(self, job_group_id: str, record: LaunchRecord) -> None:
        self._check_fence()
        with self._lock:
            self._db.execute(
                "INSERT INTO launches (id, record) VALUES (?, ?) "
                "ON CONFLICT(id) DO UPDATE SET record = excluded.record",
                (job_group_id, record.to_json()),
            )

    def launches(self) -> dict[str, LaunchRecord]:
        with self._lock:
            rows = self._db.execute("SELECT id, record FROM launches").fetchall()
        return {job_group_id: LaunchRecord.from_json(record) for job_group_id, record in rows}

    def get_launch(self, job_group_id: str) -> LaunchRecord | None:
        with self._lock:
            row = self._db.execute(
                "SELECT record FROM launches WHERE id = ?", (job_group_id,)
            ).fetchone()
        return None if row is None else LaunchRecord.from_json(row[0])

    def delete_launch(self, job_group_id: str) -> None:
        self._check_fence()
        with self._lock:
            self._db.execute("DELETE FROM launches WHERE id = ?", (job_group_id,))

    def _check_fence(self) -> None:
        if self._leadership is not None and not self._leadership.is_leader():
            raise NotLeader(self._leadership.leader())

    # Workers (running Spark applications) and their latest per-job statuses.

    def put_worker(self, worker: StoredWorker) -> None:
        with self._lock:
            self._db.execute(
                "INSERT INTO workers (id, data) VALUES (?, ?) "
                "ON CONFLICT(id) DO UPDATE SET data = excluded.data",
                (worker.node.id, worker.SerializeToString()),
            )

    def get_worker(self, worker_id: int) -> StoredWorker | None:
        with self._lock:
            row = self._db.execute("SELECT data FROM workers WHERE id = ?", (worker_id,)).fetchone()
        return None if row is None else StoredWorker.FromString(row[0])

    def workers(self) -> list[StoredWorker]:
        with self._lock:
            rows = self._db.execute("SELECT data FROM workers ORDER BY id").fetchall()
        return [StoredWorker.FromString(data) for (data,) in rows]

    def delete_worker(self, worker_id: int) -> None:
        with self._lock:
            self._db.execute("DELETE FROM workers WHERE id = ?", (worker_id,))

    def put_job_statuses(self, statuses: Iterable[StoredJobStatus]) -> None:
        rows = [(s.job_status.job.job_id, s.SerializeToString()) for s in statuses]
        with self._lock:
            self._db.execute("BEGIN")
            self._db.executemany(
                "INSERT INTO job_statuses (job_id, data) VALUES (?, ?) "
                "ON CONFLICT(job_id) DO UPDATE SET data = excluded.data",
                rows,
            )
            self._db.execute("COMMIT")

    def job_statuses(self, job_ids: Iterable[int] | None = None) -> dict[int, StoredJobStatus]:
        """Every job's latest status, or only those of `job_ids` (one group's, say)."""
        with self._lock:
            if job_ids is None:
                rows = self._db.execute("SELECT job_id, data FROM job_statuses").fetchall()
            else:
                rows = self._db.execute(
                    "SELECT job_id, data FROM job_statuses WHERE job_id IN "
                    "(SELECT value FROM json_each(?))",
                    (json.dumps(sorted(set(job_ids))),),
                ).fetchall()
        return {job_id: StoredJobStatus.FromString(data) for job_id, data in rows}

    def delete_job_statuses(self, job_ids: Iterable[int]) -> None:
        with self._lock:
            self._db.executemany(
                "DELETE FROM job_statuses WHERE job_id = ?", [(i,) for i in job_ids]
            )


def _parse(data: bytes) -> StoredJobGroup:
    return StoredJobGroup.FromString(data)
