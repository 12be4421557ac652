"""The `Store` contract, run against every implementation: SQLite and etcd (a real server).

Versions are opaque: SQLite counts 1, 2, 3 while etcd hands out mod_revisions, so the tests
only rely on what the contract promises (a write returns the version `get` then reports, and
a stale version loses).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from uber.data.kafka.datatransfer.job_group_pb2 import StoredJobGroup
from uber.data.kafka.datatransfer.job_status_pb2 import StoredJobStatus
from uber.data.kafka.datatransfer.worker_pb2 import StoredWorker

from controlplane.errors import (
    JobGroupExists,
    JobGroupNotFound,
    LimitReached,
    StaleWrite,
    StoreUnavailable,
)
from controlplane.launchers.base import LaunchRecord, launch_details
from controlplane.state.base import Store
from controlplane.state.etcd_store import EtcdStore
from controlplane.state.sqlite import SqliteStore
from core.processes import free_ports


@pytest.fixture(
    params=["sqlite", pytest.param("etcd", marks=pytest.mark.integration)],
)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    impl: Store
    if request.param == "sqlite":
        impl = SqliteStore(tmp_path / "store.sqlite")
    else:
        # Requested lazily, so the SQLite half runs without starting etcd.
        server = request.getfixturevalue("etcd")
        # A fresh prefix per test: the session's etcd is shared by every test.
        impl = EtcdStore(server.endpoint, prefix=f"/test/{uuid.uuid4().hex}", page_size=100)
    try:
        yield impl
    finally:
        impl.close()


def group(job_group_id: str, *, label: str = "") -> StoredJobGroup:
    stored = StoredJobGroup()
    stored.job_group.job_group_id = job_group_id
    if label:
        stored.job_group.kafka_consumer_task_group.cluster = label
    return stored


def worker(node_id: int, host: str = "127.0.0.1") -> StoredWorker:
    stored = StoredWorker()
    stored.node.id = node_id
    stored.node.host = host
    return stored


def status(job_id: int, worker_id: int) -> StoredJobStatus:
    stored = StoredJobStatus(worker_id=worker_id)
    stored.job_status.job.job_id = job_id
    return stored


def test_create_then_get_returns_the_group_and_its_version(store: Store) -> None:
    version = store.create(group("g1", label="a"))

    found = store.get("g1")
    assert found is not None
    assert found.group == group("g1", label="a")
    assert found.version == version
    assert store.get("missing") is None


def test_create_of_an_existing_id_raises_and_keeps_the_first(store: Store) -> None:
    version = store.create(group("g1", label="first"))

    with pytest.raises(JobGroupExists, match="'g1'"):
        store.create(group("g1", label="second"))
    assert store.get("g1") == (group("g1", label="first"), version)


def test_replace_with_the_current_version_wins_and_a_stale_one_loses(store: Store) -> None:
    v1 = store.create(group("g1", label="v1"))
    v2 = store.replace(group("g1", label="v2"), v1)
    assert v2 != v1
    assert store.get("g1") == (group("g1", label="v2"), v2)

    # A second writer that read v1 must not overwrite v2.
    with pytest.raises(StaleWrite, match=f"expected version {v1}, found {v2}"):
        store.replace(group("g1", label="lost"), v1)
    assert store.get("g1") == (group("g1", label="v2"), v2)


def test_replace_of_a_missing_group_raises_not_found_even_with_version_0(store: Store) -> None:
    # etcd reports mod_revision 0 for a missing key: replace must not create it.
    for version in (0, 1):
        with pytest.raises(JobGroupNotFound, match="'ghost'"):
            store.replace(group("ghost"), version)
    assert store.get("ghost") is None


def test_delete_removes_and_a_second_delete_raises_not_found(store: Store) -> None:
    store.create(group("g1"))
    store.create(group("g2"))

    store.delete("g1")

    assert store.get("g1") is None
    assert [v.group.job_group.job_group_id for v in store.all()] == ["g2"]
    with pytest.raises(JobGroupNotFound, match="'g1'"):
        store.delete("g1")
    # Deleted ids can be created again.
    store.create(group("g1"))
    assert store.get("g1") is not None


def test_all_is_ordered_by_id_across_pages(store: Store) -> None:
    # 1,200 groups: more than two pages of SQLite's 500 and twelve of the etcd store's 100.
    ids = [f"group-{n:05d}" for n in range(1200)]
    created = {}
    for job_group_id in reversed(ids):  # insertion order must not matter
        created[job_group_id] = store.create(group(job_group_id))
    # Ids that sort around the page boundaries, and one that is a prefix of another.
    for job_group_id in ("group", "group-00099x", "group-00100"[:-1]):
        created[job_group_id] = store.create(group(job_group_id))

    listed = list(store.all())

    assert [v.group.job_group.job_group_id for v in listed] == sorted(created)
    assert {v.group.job_group.job_group_id: v.version for v in listed} == created


def test_all_of_an_empty_store_is_empty(store: Store) -> None:
    assert list(store.all()) == []
    assert store.count() == 0


def test_count_counts_groups_only(store: Store) -> None:
    for job_group_id in ("a", "b", "c"):
        store.create(group(job_group_id))
    store.put_launch("a", launch_record("1", pid=1))
    store.delete("b")
    assert store.count() == 2


def test_next_ids_are_unique_and_consecutive_under_four_threads(store: Store) -> None:
    reserved: list[range] = []
    lock = threading.Lock()
    errors: list[BaseException] = []

    def reserve() -> None:
        try:
            for _ in range(25):
                got = store.next_ids("jobs", 3)
                with lock:
                    reserved.append(got)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=reserve) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert errors == []
    assert all(len(r) == 3 for r in reserved)
    ids = sorted(i for r in reserved for i in r)
    assert ids == list(range(1, 4 * 25 * 3 + 1))
    # Sequences are independent of one another.
    assert store.next_ids("other", 2) == range(1, 3)


def test_create_with_a_limit_counts_what_is_stored(store: Store) -> None:
    store.create(group("a"), limit=2)
    store.create(group("b"), limit=2)
    with pytest.raises(LimitReached, match="stored JobGroups limit of 2 reached"):
        store.create(group("c"), limit=2)
    with pytest.raises(JobGroupExists):
        store.create(group("a"), limit=3)  # under the limit: the id still may not repeat
    store.delete("a")
    store.create(group("c"), limit=2)  # a deleted group frees its place
    assert [v.group.job_group.job_group_id for v in store.all()] == ["b", "c"]


def test_concurrent_creates_never_overshoot_the_limit(store: Store) -> None:
    """Eight threads create 32 distinct groups against a limit of 5: exactly 5 are stored,
    every other create raises LimitReached."""
    outcomes: list[str] = []
    lock = threading.Lock()

    def create(index: int) -> None:
        try:
            store.create(group(f"g{index:02d}"), limit=5)
            outcome = "stored"
        except LimitReached:
            outcome = "limit"
        except BaseException as e:
            outcome = repr(e)
        with lock:
            outcomes.append(outcome)

    threads = [
        threading.Thread(target=lambda n=n: [create(n * 4 + i) for i in range(4)]) for n in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["limit"] * 27 + ["stored"] * 5
    assert store.count() == 5


def launch_record(handle: str, **details: str | int | None) -> LaunchRecord:
    return LaunchRecord(handle, "def", 1.5, "app.log", launch_details(**details), worker_id=7)


def test_launches_put_overwrite_list_and_delete(store: Store) -> None:
    store.put_launch("g1", launch_record("1", pid=1))
    store.put_launch("g2", launch_record("2", pid=2, pid_start=None, stop_file="/s"))
    store.put_launch("g1", launch_record("3", pid=3).replace(failures=2, gave_up=True))

    assert store.launches() == {
        "g1": launch_record("3", pid=3).replace(failures=2, gave_up=True),
        "g2": launch_record("2", pid=2, pid_start=None, stop_file="/s"),
    }

    store.delete_launch("g1")
    store.delete_launch("never-launched")  # deleting nothing is fine
    assert store.launches() == {"g2": launch_record("2", pid=2, pid_start=None, stop_file="/s")}


def test_a_launch_record_written_as_a_flat_dict_reads_back_with_its_details() -> None:
    # Control planes before LaunchRecord stored each launcher's dict as it was.
    old = '{"definition": "d", "failures": 1, "handle": "9", "log": "l", "pid": 9, "started_at": 2}'
    record = LaunchRecord.from_json(old)
    assert record == LaunchRecord("9", "d", 2, "l", launch_details(pid=9), failures=1)
    assert LaunchRecord.from_json(record.to_json()) == record


def test_workers_put_get_list_in_id_order_and_delete(store: Store) -> None:
    for node_id in (10, 9, 100, 2):
        store.put_worker(worker(node_id))
    store.put_worker(worker(9, host="10.0.0.9"))  # re-registering replaces

    assert store.get_worker(9) == worker(9, host="10.0.0.9")
    assert store.get_worker(7) is None
    # Numeric order, not the byte order of "10" < "100" < "2" < "9".
    assert [w.node.id for w in store.workers()] == [2, 9, 10, 100]

    store.delete_worker(10)
    store.delete_worker(10)
    assert [w.node.id for w in store.workers()] == [2, 9, 100]


def test_job_statuses_put_in_one_batch_overwrite_and_delete(store: Store) -> None:
    # 300 statuses: more than etcd's default 128 operations per txn.
    store.put_job_statuses(status(job_id, worker_id=1) for job_id in range(1, 301))
    # The last status of a job in one batch wins.
    store.put_job_statuses([status(5, worker_id=2), status(5, worker_id=3), status(6, 3)])

    statuses = store.job_statuses()
    assert sorted(statuses) == list(range(1, 301))
    assert statuses[5] == status(5, worker_id=3)
    assert statuses[6] == status(6, worker_id=3)
    assert statuses[7] == status(7, worker_id=1)
    # Only some jobs (one group's): 150 ids, more than one etcd txn; missing ids are absent.
    some = store.job_statuses([5, 5, 999, *range(100, 250)])
    assert sorted(some) == [5, *range(100, 250)]
    assert some[5] == status(5, worker_id=3)
    assert store.job_statuses([]) == {}

    store.delete_job_statuses(range(1, 200))
    store.delete_job_statuses([250, 250, 999])
    assert sorted(store.job_statuses()) == [j for j in range(200, 301) if j != 250]


def test_empty_batches_are_no_ops(store: Store) -> None:
    store.put_job_statuses([])
    store.delete_job_statuses([])
    assert store.job_statuses() == {}
    assert store.launches() == {}
    assert store.workers() == []


def test_etcd_store_names_the_endpoint_when_etcd_is_unreachable() -> None:
    (port,) = free_ports(1)  # nothing listens there
    store = EtcdStore(f"http://127.0.0.1:{port}", timeout=2.0)

    with pytest.raises(StoreUnavailable, match=f"127.0.0.1:{port}"):
        store.get("g1")
    with pytest.raises(StoreUnavailable):
        store.create(group("g1"))


@pytest.mark.integration
def test_an_etcd_write_whose_answer_was_lost_is_not_sent_again(etcd, monkeypatch) -> None:
    """etcd applied a write and its answer was lost (`controlplane.etcd_answered`): the
    caller gets StoreUnavailable, and the write is not sent again (a resent put would land a
    second time, with a new mod_revision)."""
    from controlplane.state.etcd_client import EtcdClient
    from core import faults

    prefix = f"/contract-{uuid.uuid4().hex[:8]}"
    store = EtcdStore(etcd.endpoint, prefix)
    reader = EtcdClient(etcd.endpoint)
    record = LaunchRecord("pid-1", "d", 1.0, "log")
    try:
        faults.reset()
        monkeypatch.setenv(faults.ENV, f"controlplane.etcd_answered:{faults.FAIL_FIRST_ATTEMPT}")
        with pytest.raises(StoreUnavailable):
            store.put_launch("lost-answer", record)
        monkeypatch.delenv(faults.ENV)
        kv = reader.get(f"{prefix}/launches/lost-answer".encode())
        assert kv is not None and kv.mod_revision == kv.create_revision  # written once
        assert store.get_launch("lost-answer") == record
    finally:
        faults.reset()
        reader.close()
        store.close()
