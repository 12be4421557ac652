"""The worker-pool bench's "first rows" figure, on a real Delta table (delta-rs, no Spark)."""

from __future__ import annotations

import time

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from bench.progress_times import FirstRows, file_times


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
    from bench.fleet_pool import seconds_by_kind

    split = seconds_by_kind({"a-x": 1.0, "r-y": 30.0, "a-z": 3.0, "d-w": 7.0})
    assert sorted(split) == ["a", "d", "r"]
    assert (split["a"]["n"], split["a"]["max"], split["r"]["max"]) == (2, 3.0, 30.0)
