"""`warm_up_delta`: each write the jobs' batches make, once, on a throwaway table that is
gone afterwards; a failure is returned, never raised (the worker starts anyway)."""

from __future__ import annotations

from jobs.runtime import warm_up
from jobs.runtime.warm_up import warm_up_delta


def test_a_warm_up_makes_each_write_once_and_leaves_nothing(spark, tmp_path):
    done = warm_up_delta(spark, str(tmp_path))

    assert done.failure is None
    assert list(done.seconds) == ["create", "append", "replayed append", "merge", "read"]
    # Appended keys 0-2; the replay adds nothing; the MERGE updates key 2 and inserts 3, 4.
    # A replay that appended again, or a MERGE that matched nothing, reads otherwise.
    assert done.rows_read == 5
    assert list(tmp_path.iterdir()) == []


def test_a_failed_warm_up_is_returned_and_its_folder_removed(spark, tmp_path, monkeypatch):
    def refuse(*args, **kwargs):
        raise RuntimeError("no MERGE today\nsecond line")

    monkeypatch.setattr(warm_up.delta, "merge_once", refuse)

    done = warm_up_delta(spark, str(tmp_path))

    assert done.failure == "RuntimeError: no MERGE today"
    assert done.rows_read is None
    assert list(done.seconds) == ["create", "append", "replayed append"]
    assert list(tmp_path.iterdir()) == []
