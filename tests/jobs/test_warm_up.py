"""`warm_up_delta`: each write the jobs' batches make, once, on a throwaway table that is
gone afterwards; `warm_up_job_types`: the job types' own warm-ups. A failure is returned,
never raised (the worker starts anyway)."""

from __future__ import annotations

from jobs import registry
from jobs.runtime import warm_up
from jobs.runtime.template import StreamingJob
from jobs.runtime.warm_up import warm_up_delta, warm_up_job_types


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


def test_the_job_types_warm_up_runs_only_their_own_and_opens_no_groups_clients(spark):
    # Of every job type, only the dispatcher has clients to warm (a throwaway gRPC channel
    # and Kafka producer, closed again); a runtime that keeps the default is not called.
    done = warm_up_job_types(spark, registry.every_runtime())

    assert list(done) == ["DispatchJob"]
    assert isinstance(done["DispatchJob"], float)
    # A warm-up that built a group's runtime (GroupRuntime.of) would leave it open here.
    assert list(spark.sparkContext._jvm.dev.uatu.dispatch.Dispatch.openGroups()) == []


def test_a_job_types_failed_warm_up_is_returned_and_the_next_still_runs(spark):
    calls = []

    class Refusing(StreamingJob):
        @classmethod
        def warm_up(cls, spark):
            calls.append(cls.__name__)
            raise RuntimeError("no clients today\nsecond line")

    class Warming(Refusing):
        @classmethod
        def warm_up(cls, spark):
            calls.append(cls.__name__)

    class Default(StreamingJob):
        pass

    done = warm_up_job_types(spark, [Refusing, Default, Warming])

    assert calls == ["Refusing", "Warming"]
    assert done["Refusing"] == "RuntimeError: no clients today"
    assert isinstance(done["Warming"], float)
    assert "Default" not in done
