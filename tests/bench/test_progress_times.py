"""The worker-pool bench's progress figures: its "first rows" on a real Delta table (delta-rs,
no Spark), a group's first batch from checkpoint files."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import write_deltalake
from uber.data.kafka.datatransfer.job_group_pb2 import JobGroup

from bench.fleet_pool_phases import (
    BurstCpu,
    add_one_at_a_time,
    burst_cpu,
    first_commits,
    seconds_by_kind,
)
from bench.progress_times import FirstRows, file_times
from jobs.audit.packs import LEDGER


def test_first_rows_keep_each_groups_earliest_file_across_a_rewrite(tmp_path):
    table = tmp_path / "audit_counts"
    assert file_times(table, "job_group_id") == {}  # no table yet
    rows = pa.table({"job_group_id": ["a", "a", "b"], "n": [1, 2, 3]})
    write_deltalake(str(table), rows, partition_by=["job_group_id"])
    first = file_times(table, "job_group_id")
    assert set(first) == {"a", "b"}
    seen = FirstRows(table, "job_group_id")
    seen.look()
    while time.time() <= first["a"] + 0.01:  # the rewrite's files must be newer to tell apart
        time.sleep(0.005)
    a_again = pa.table({"job_group_id": ["a"], "n": [9]})
    write_deltalake(str(table), a_again, mode="overwrite", predicate="job_group_id = 'a'")
    assert file_times(table, "job_group_id")["a"] > first["a"]  # a MERGE-like rewrite
    seen.look()
    assert seen.seen == first
    assert seen.since({"a": first["a"] - 5.0, "never": 0.0}) == [pytest.approx(5.0)]


def test_the_fleet_figures_split_by_kind_of_group() -> None:
    """Each kind's figures come from its own groups only (the id's first letter)."""
    split = seconds_by_kind({"a-x": 1.0, "r-y": 30.0, "a-z": 3.0, "d-w": 7.0})
    assert sorted(split) == ["a", "d", "r"]
    assert (split["a"]["n"], split["a"]["max"], split["r"]["max"]) == (2, 3.0, 30.0)


def test_a_group_s_first_batch_is_the_first_committed_after_its_add(tmp_path: Path) -> None:
    """A group that joins a running pack sees the pack's older commits through its ledger:
    only a commit after the AddJobGroup is its first batch."""
    commits = tmp_path / "pack" / "commits"
    commits.mkdir(parents=True)
    (tmp_path / "late").mkdir()
    (tmp_path / "late" / LEDGER).write_text(json.dumps({"checkpoint": str(tmp_path / "pack")}))
    added_at = 1_000_000.0
    (commits / "0").touch()
    os.utime(commits / "0", (added_at - 10, added_at - 10))
    first: dict[str, float] = {}
    assert not first_commits(tmp_path, {"late": added_at}, first)
    assert first == {}
    (commits / "1").touch()
    os.utime(commits / "1", (added_at + 3, added_at + 3))
    assert first_commits(tmp_path, {"late": added_at}, first)
    assert first == {"late": pytest.approx(3.0)}


class _CommitsOnAdd:
    """A MasterAdminService stub whose AddJobGroup makes the group's first batch commit: its
    checkpoint's `commits/0`, a minute later (after the bench notes the add)."""

    def __init__(self, checkpoints: Path) -> None:
        self.checkpoints = checkpoints

    def AddJobGroup(self, request) -> None:
        commits = self.checkpoints / request.job_group.job_group_id / "commits"
        commits.mkdir(parents=True)
        (commits / "0").touch()
        later = time.time() + 60
        os.utime(commits / "0", (later, later))


def test_groups_added_one_at_a_time_each_get_their_own_first_batch(tmp_path: Path) -> None:
    groups = [JobGroup(job_group_id=g) for g in ("a-x", "r-y", "d-z")]
    figures = add_one_at_a_time(_CommitsOnAdd(tmp_path), groups, tmp_path, deadline_s=10)
    assert figures["never_committed"] == []
    assert sorted(figures["add_to_first_commit_s_by_kind"]) == ["a", "d", "r"]
    assert figures["add_to_first_commit_s"]["n"] == 3


def test_burst_cpu_reads_from_the_first_add_to_half_and_to_all_committed():
    cpu = BurstCpu([])
    # (epoch s, machine busy CPU s, workers' CPU s): 2 busy cores for 4 s, then 1 for 4 s.
    cpu.readings = [(100.0, 50.0, 10.0), (104.0, 58.0, 17.0), (108.0, 62.0, 20.0)]
    cpu.kinds = [
        (100.0, {}, {}),
        (104.0, {"broker": 1.0, "worker": 7.0}, {"broker": 0.4, "worker": 2.0}),
        (108.0, {"worker": 10.0}, {"worker": 3.0}),
    ]
    added = {"a": 100.5, "b": 101.0, "c": 101.5}
    first = {"a": 3.0, "b": 4.0, "c": 6.6}  # committed at 103.5, 105.0 and 108.1
    figures = burst_cpu(cpu, added, first)
    half = figures["to_half_committed"]  # b at 105.0: the reading at 104 is the last before
    assert half["wall_s"] == 4.0
    assert half["machine_busy_cores"] == 2.0
    assert half["workers_cpu_s"] == 7.0
    assert list(half["cpu_s_by_kind"].items()) == [("worker", 7.0), ("broker", 1.0)]
    assert list(half["jit_cpu_s_by_kind"].items()) == [("worker", 2.0), ("broker", 0.4)]
    whole = figures["to_all_committed"]
    assert whole["machine_busy_cores"] == 1.5
    assert whole["workers_cpu_s"] == 10.0
    assert figures["workers_cpu_s_per_group"] == 10.0 / 3
    assert burst_cpu(cpu, added, {}) == {}
