"""The embedded store: the `Store` contract (state/base.py) on one SQLite file.

`SqliteStore` is thread-safe: one connection behind a lock. `state/etcd_store.py`
implements the same contract on etcd for high availability.

It never acknowledges a write it did not commit:

* every write is one transaction (`_transaction`): BEGIN IMMEDIATE takes the write lock up
  front, COMMIT ends it, and any error in between (a "database is locked" after the busy
  timeout, a constraint, a crash of the statement) rolls it back before the error leaves,
  as `StoreUnavailable` (UNAVAILABLE) for SQLite's own errors. The connection is therefore
  never left inside an open transaction whose later writes would "succeed" in memory and
  vanish with the process;
* `busy_seconds` (5 s) is how long a write waits for a lock someone else holds (an
  operator's sqlite3 shell, a backup) before it fails;
* `exclusive=True` (what `serve` uses) takes an exclusive lock on the database file itself
  for the store's lifetime: a second control plane on the same file is refused at start
  (`StoreLocked`) instead of both reconciling, whatever name it was given (a symlink, a
  hard link, a relative path), since the lock belongs to the file, not to its name. The lock
  is flock(2) on a descriptor of the file: the kernel drops it when the process dies,
  however it dies. It does not meet SQLite's own locks, which are fcntl(2) byte-range locks
  (independent of flock on a local Linux file system; over NFS flock is emulated with
  fcntl, and SQLite should not be used there anyway). The descriptor is closed only after
  the connection, since closing any descriptor of the file drops the fcntl locks this
  process holds on it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sqlite3
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path

from uber.data.kafka.datatransfer.job_group_pb2 import StoredJobGroup
from uber.data.kafka.datatransfer.job_status_pb2 import StoredJobStatus
from uber.data.kafka.datatransfer.worker_pb2 import StoredWorker

from controlplane.errors import (
    JobGroupExists,
    JobGroupNotFound,
    LimitReached,
    NotLeader,
    StaleWrite,
    StoreUnavailable,
)
from controlplane.launchers.base import LaunchRecord
from controlplane.state.base import Versioned
from controlplane.state.leadership import Leadership
from core.errors import ConfigError

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


class StoreLocked(ConfigError):
    """Another process (a second control plane) holds the store file's exclusive lock."""

    def __init__(self, path: Path, holder: str) -> None:
        super().__init__(
            str(path),
            f"another control plane ({holder or 'unknown process'}) uses this store; "
            "two on one SQLite file would both launch applications",
        )


def _lock_exclusively(path: Path) -> int:
    """Open `path` (the database file, created empty if missing) and flock it; the fd holds
    the lock until closed (or process exit). StoreLocked when another descriptor holds it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _flock_holder(os.fstat(fd))
        os.close(fd)  # before this store opens a connection: no lock of its own to drop
        raise StoreLocked(path, holder) from None
    return fd


def _flock_holder(file: os.stat_result, locks: Path = Path("/proc/locks")) -> str:
    """'pid N' of the process holding a flock on `file`, from /proc/locks; '' if unknown.

    /proc/locks names a file as MAJOR:MINOR:INODE, the device numbers in hex."""
    wanted = f"{os.major(file.st_dev):02x}:{os.minor(file.st_dev):02x}:{file.st_ino}"
    try:
        lines = locks.read_text().splitlines()
    except OSError:
        return ""
    for line in lines:
        fields = line.split()
        if "->" in fields:  # a waiter queued behind a holder, not a holder
            continue
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5] == wanted:
            return f"pid {fields[4]}"
    return ""


class SqliteStore:
    def __init__(
        self,
        path: Path | str,
        leadership: Leadership | None = None,
        *,
        exclusive: bool = False,
        busy_seconds: float = 5.0,
    ) -> None:
        """`leadership`, when given, fences the leader-only writes (launch records): they
        raise NotLeader once it no longer leads, as the etcd store's fenced txns do."""
        self._leadership = leadership
        self._lock = threading.Lock()
        self._path = str(path)
        self._lock_fd: int | None = None
        if self._path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            if exclusive:
                self._lock_fd = _lock_exclusively(Path(path))
        self._db = sqlite3.connect(
            self._path, timeout=busy_seconds, check_same_thread=False, isolation_level=None
        )
        self._db.execute(f"PRAGMA busy_timeout = {int(busy_seconds * 1000)}")
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")  # an acknowledged commit survives power loss
        self._db.executescript(_SCHEMA)  # idempotent statements, each its own transaction

    def close(self) -> None:
        with self._lock:
            self._db.close()
            if self._lock_fd is not None:
                os.close(self._lock_fd)
                self._lock_fd = None

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[None]:
        """One write transaction; rolled back on any error. Call with `self._lock` held."""
        try:
            if self._db.in_transaction:  # never nest into (or inherit) an open transaction
                self._db.execute("ROLLBACK")
            self._db.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as e:
            raise StoreUnavailable(self._path, str(e)) from None
        try:
            yield
            self._db.execute("COMMIT")
        except BaseException as e:
            if self._db.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    self._db.execute("ROLLBACK")
            if isinstance(e, sqlite3.OperationalError):
                raise StoreUnavailable(self._path, str(e)) from None
            raise

    def _read(self, sql: str, parameters: tuple = ()) -> list:
        try:
            return self._db.execute(sql, parameters).fetchall()
        except sqlite3.OperationalError as e:
            raise StoreUnavailable(self._path, str(e)) from None

    def get(self, job_group_id: str) -> Versioned | None:
        with self._lock:
            rows = self._read("SELECT version, data FROM job_groups WHERE id = ?", (job_group_id,))
        return None if not rows else Versioned(_parse(rows[0][1]), rows[0][0])

    def count(self) -> int:
        with self._lock:
            return int(self._read("SELECT count(*) FROM job_groups")[0][0])

    def create(self, group: StoredJobGroup, limit: int | None = None) -> int:
        job_group_id = group.job_group.job_group_id
        with self._lock:
            try:
                with self._transaction():  # the count and the insert under one write lock
                    if limit is not None:
                        stored = self._db.execute("SELECT count(*) FROM job_groups").fetchone()
                        if stored[0] >= limit:
                            raise LimitReached("stored JobGroups", limit)
                    self._db.execute(
                        "INSERT INTO job_groups (id, version, data) VALUES (?, 1, ?)",
                        (job_group_id, group.SerializeToString()),
                    )
            except sqlite3.IntegrityError:
                raise JobGroupExists(job_group_id) from None
        return 1

    def replace(self, group: StoredJobGroup, expected_version: int) -> int:
        job_group_id = group.job_group.job_group_id
        with self._lock, self._transaction():
            updated = self._db.execute(
                "UPDATE job_groups SET version = version + 1, data = ? "
                "WHERE id = ? AND version = ?",
                (group.SerializeToString(), job_group_id, expected_version),
            ).rowcount
            row = None
            if updated != 1:
                row = self._db.execute(
                    "SELECT version FROM job_groups WHERE id = ?", (job_group_id,)
                ).fetchone()
        if updated == 1:
            return expected_version + 1
        if row is None:
            raise JobGroupNotFound(job_group_id)
        raise StaleWrite(job_group_id, expected_version, row[0])

    def delete(self, job_group_id: str) -> None:
        with self._lock, self._transaction():
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
                rows = self._read(
                    "SELECT id, version, data FROM job_groups WHERE id > ? ORDER BY id LIMIT 500",
                    (last,),
                )
            if not rows:
                return
            for job_group_id, version, data in rows:
                yield Versioned(_parse(data), version)
                last = job_group_id

    def next_ids(self, sequence: str, count: int) -> range:
        """Reserve `count` consecutive ids of a named sequence (ids start at 1)."""
        with self._lock, self._transaction():
            row = self._db.execute(
                "SELECT value FROM sequences WHERE name = ?", (sequence,)
            ).fetchone()
            start = (row[0] if row else 0) + 1
            self._db.execute(
                "INSERT INTO sequences (name, value) VALUES (?, ?) "
                "ON CONFLICT(name) DO UPDATE SET value = excluded.value",
                (sequence, start + count - 1),
            )
        return range(start, start + count)

    # Launch records: what runs for a JobGroup, kept so a restarted control plane adopts it.

    def put_launch(self, job_group_id: str, record: LaunchRecord) -> None:
        self._check_fence()
        with self._lock, self._transaction():
            self._db.execute(
                "INSERT INTO launches (id, record) VALUES (?, ?) "
                "ON CONFLICT(id) DO UPDATE SET record = excluded.record",
                (job_group_id, record.to_json()),
            )

    def launches(self) -> dict[str, LaunchRecord]:
        with self._lock:
            rows = self._read("SELECT id, record FROM launches")
        return {job_group_id: LaunchRecord.from_json(record) for job_group_id, record in rows}

    def get_launch(self, job_group_id: str) -> LaunchRecord | None:
        with self._lock:
            rows = self._read("SELECT record FROM launches WHERE id = ?", (job_group_id,))
        return None if not rows else LaunchRecord.from_json(rows[0][0])

    def delete_launch(self, job_group_id: str) -> None:
        self._check_fence()
        with self._lock, self._transaction():
            self._db.execute("DELETE FROM launches WHERE id = ?", (job_group_id,))

    def _check_fence(self) -> None:
        if self._leadership is not None and not self._leadership.is_leader():
            raise NotLeader(self._leadership.leader())

    # Workers (running Spark applications) and their latest per-job statuses.

    def put_worker(self, worker: StoredWorker) -> None:
        with self._lock, self._transaction():
            self._db.execute(
                "INSERT INTO workers (id, data) VALUES (?, ?) "
                "ON CONFLICT(id) DO UPDATE SET data = excluded.data",
                (worker.node.id, worker.SerializeToString()),
            )

    def get_worker(self, worker_id: int) -> StoredWorker | None:
        with self._lock:
            rows = self._read("SELECT data FROM workers WHERE id = ?", (worker_id,))
        return None if not rows else StoredWorker.FromString(rows[0][0])

    def workers(self) -> list[StoredWorker]:
        with self._lock:
            rows = self._read("SELECT data FROM workers ORDER BY id")
        return [StoredWorker.FromString(data) for (data,) in rows]

    def delete_worker(self, worker_id: int) -> None:
        with self._lock, self._transaction():
            self._db.execute("DELETE FROM workers WHERE id = ?", (worker_id,))

    def put_job_statuses(self, statuses: Iterable[StoredJobStatus]) -> None:
        rows = [(s.job_status.job.job_id, s.SerializeToString()) for s in statuses]
        with self._lock, self._transaction():
            self._db.executemany(
                "INSERT INTO job_statuses (job_id, data) VALUES (?, ?) "
                "ON CONFLICT(job_id) DO UPDATE SET data = excluded.data",
                rows,
            )

    def job_statuses(self, job_ids: Iterable[int] | None = None) -> dict[int, StoredJobStatus]:
        """Every job's latest status, or only those of `job_ids` (one group's, say)."""
        with self._lock:
            if job_ids is None:
                rows = self._read("SELECT job_id, data FROM job_statuses")
            else:
                rows = self._read(
                    "SELECT job_id, data FROM job_statuses WHERE job_id IN "
                    "(SELECT value FROM json_each(?))",
                    (json.dumps(sorted(set(job_ids))),),
                )
        return {job_id: StoredJobStatus.FromString(data) for job_id, data in rows}

    def delete_job_statuses(self, job_ids: Iterable[int]) -> None:
        with self._lock, self._transaction():
            self._db.executemany(
                "DELETE FROM job_statuses WHERE job_id = ?", [(i,) for i in job_ids]
            )


def _parse(data: bytes) -> StoredJobGroup:
    return StoredJobGroup.FromString(data)
