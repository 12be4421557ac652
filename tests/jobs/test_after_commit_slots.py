"""Write slots of `jobs.runtime.after_commit`: writers sharing a semaphore write at most its
count at a time, and each write carries every batch that became ready while it waited. And
`recover`: a crashed run's saved batches go in as few writes as the tables' markers allow,
each batch's rows once in every table."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql.types import IntegerType, StructField, StructType

from jobs.runtime.after_commit import (
    WRITES_POOL,
    AfterCommitWriter,
    Ready,
    recovery_writes,
    tables_held_through,
)
from jobs.runtime.delta import DeltaTableSpec, append_once
from jobs.runtime.write_slots import WriteSlots

DEADLINE_S = 30.0


class Writes:
    """The writes of several writers: who is writing now, the most at once, what each wrote.
    A write holds until `gate` opens, so writers that may write together do."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.active = 0
        self.most = 0
        self.written: dict[str, list[list[int]]] = {}
        self.started: list[str] = []  # the writers, in the order their writes began
        self.gate = threading.Event()

    def writer(self, name: str) -> Any:
        def write(_spark, ready: Ready[int]) -> str:
            with self.lock:
                self.started.append(name)
                self.active += 1
                self.most = max(self.most, self.active)
            self.gate.wait(DEADLINE_S)
            with self.lock:
                self.active -= 1
                self.written.setdefault(name, []).append([b for b, _ in ready])
            return "test write"

        return write


def poll(check, what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not check():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.02)


def int_writer(checkpoint: Path, folder: str, what: str, write, **options) -> AfterCommitWriter:
    """A writer of int batches (saved as {"n": batch}) without fault points."""
    return AfterCommitWriter(
        str(checkpoint),
        folder,
        what,
        write,
        lambda _spark, saved: int(saved["n"]),
        logging.getLogger("test"),
        at_saved=lambda: None,
        at_writing=lambda: None,
        **options,
    )


def writers(spark, tmp_path: Path, writes: Writes, slots) -> list[AfterCommitWriter[int]]:
    return [
        int_writer(tmp_path / name, "stats", name, writes.writer(name), write_slots=slots)
        for name in ("a", "b", "c")
    ]


def test_a_draining_writer_takes_the_next_slot_before_those_that_waited_longer(
    spark, tmp_path: Path
) -> None:
    # a writes; b waits for the slot, then c and d, whose queries ended (drain) while they
    # waited and after they began waiting: the freed slot goes to c, then d, then b.
    writes = Writes()
    slots = WriteSlots(1)
    a, b, c, d = (
        int_writer(tmp_path / n, "stats", n, writes.writer(n), write_slots=slots) for n in "abcd"
    )
    draining = []
    try:
        for expected_waiting, writer in enumerate((a, b, c, d)):
            writer.submit(spark, 0, {"n": 0})
            writer.release(0)  # written without waiting for a Spark commit
            poll(lambda n=expected_waiting: slots.waiting() == n, "the writers in line")
        for writer in (c, d):
            draining.append(threading.Thread(target=writer.drain))
            draining[-1].start()
            poll(lambda w=writer: w._draining, "the drain to begin")
        writes.gate.set()
        for thread in draining:
            thread.join(DEADLINE_S)
        for writer in (a, b):
            writer.drain()
    finally:
        for writer in (a, b, c, d):
            writer.close()
    assert writes.started == ["a", "c", "d", "b"]


@pytest.mark.parametrize("slots", [1, None], ids=["one-slot", "no-slots"])
def test_writers_sharing_a_slot_write_one_at_a_time_and_catch_up_in_one_write(
    spark, tmp_path: Path, slots
) -> None:
    writes = Writes()
    semaphore = WriteSlots(slots) if slots else None
    group = writers(spark, tmp_path, writes, semaphore)
    try:
        for w in group:
            w.submit(spark, 0, {"n": 0})
            w.release(0)  # written without waiting for a Spark commit
        if slots is None:
            # Without slots the three write at once: what the slot prevents can happen.
            poll(lambda: writes.active == 3, "three writes at once")
        else:
            poll(lambda: writes.active == 1, "the first write")
            # The others wait for the slot; batches 1 and 2 become ready meanwhile.
            for w in group:
                for batch_id in (1, 2):
                    w.submit(spark, batch_id, {"n": batch_id})
                    w.release(batch_id)
        writes.gate.set()
        for w in group:
            w.drain()
    finally:
        for w in group:
            w.close()
    if slots is None:
        assert writes.most == 3
        assert all(batches == [[0]] for batches in writes.written.values())
        return
    assert writes.most == 1
    # The writer that took the slot first wrote batch 0 alone, then 1 and 2 together; each of
    # the others, which waited, wrote all three in one write.
    assert sorted(writes.written.values()) == [[[0], [1, 2]], [[0, 1, 2]], [[0, 1, 2]]]
    for name in ("a", "b", "c"):
        assert not list((tmp_path / name / "stats").glob("[0-9]*"))  # files deleted


def test_the_writes_spark_jobs_go_to_the_writes_pool_not_the_querys(spark, tmp_path) -> None:
    """The writer's thread runs its writes in WRITES_POOL (which the worker's allocation file
    serves first), whatever pool the query's thread that submitted the batch is in."""
    pools: list[str | None] = []

    def write(spark_, ready: Ready[int]) -> str:
        pools.append(spark_.sparkContext.getLocalProperty("spark.scheduler.pool"))
        return "test write"

    writer = int_writer(tmp_path, "stats", "pooled", write)
    spark.sparkContext.setLocalProperty("spark.scheduler.pool", "a-group")
    try:
        writer.submit(spark, 0, {"n": 0})
        writer.release(0)
        writer.drain()
    finally:
        writer.close()
        spark.sparkContext.setLocalProperty("spark.scheduler.pool", None)  # type: ignore[arg-type]
    assert pools == [WRITES_POOL]


@pytest.mark.parametrize(
    ("held", "writes"),
    [
        ([(-1, -1)] * 3, [[3, 4, 5]]),  # no table holds any: one write
        ([(4, 4)] * 3, [[5]]),  # every table holds 3 and 4
        ([(3, 4)] * 3, [[4], [5]]),  # one table holds 4, the other not: 4 alone
        ([(5, 5)] * 3, []),
        # Batches of two write ids (a dispatcher's redelivery): each by its own markers.
        ([(3, 3), (-1, -1), (4, 5)], [[5], [4]]),
    ],
)
def test_recovery_writes_leave_out_what_every_table_holds_and_write_the_rest_together(
    held, writes
) -> None:
    batches = [(3, "b3"), (4, "b4"), (5, "b5")]
    planned = recovery_writes(batches, held)
    assert [[b for b, _ in ready] for ready in planned] == writes


ROWS = DeltaTableSpec(
    "recovered_rows",
    StructType([StructField("batch", IntegerType(), False)]),
    "rows of a test's batches",
)


class CrashedRun:
    """Two tables and a writer of both over a crashed run's checkpoint: batches 3 to 7 saved,
    the crash between the two tables' writes of batch 4 (the first holds 0 to 4, the second
    0 to 3); `writes` lists the batch ids of each write."""

    def __init__(self, spark, tmp_path: Path) -> None:
        self.paths = [str(tmp_path / "first"), str(tmp_path / "second")]
        app_id = "recovery-test"
        self.writes: list[list[int]] = []
        self.saved_when_written: list[list[int]] = []  # the saved files at each write
        self.gate = threading.Event()  # a write holds until it opens
        self.gate.set()

        def rows(batch_ids: list[int]):
            return spark.createDataFrame([(b,) for b in batch_ids], ROWS.schema)

        for path, through in zip(self.paths, (4, 3), strict=True):
            for batch_id in range(through + 1):
                append_once(rows([batch_id]), ROWS, path, app_id, batch_id)

        def write(_spark, ready: Ready[int]) -> str:
            self.gate.wait(DEADLINE_S)
            ids = [b for b, _ in ready]
            self.writes.append(ids)
            self.saved_when_written.append(sorted(int(f.name) for f in self.files.glob("[0-9]*")))
            for path in self.paths:
                append_once(rows(ids), ROWS, path, app_id, ids[-1])
            return "test write"

        self.writer = int_writer(
            tmp_path / "ck",
            "saved",
            "recovered_rows",
            write,
            held_through=lambda spark, ready: (
                [tables_held_through(spark, self.paths, app_id)] * len(ready)
            ),
        )
        self.files = tmp_path / "ck" / "saved"
        self.files.mkdir(parents=True)
        for batch_id in range(3, 8):
            (self.files / str(batch_id)).write_text(f'{{"n": {batch_id}}}')

    def held(self, spark) -> list[list[int]]:
        return [
            sorted(r.batch for r in spark.read.format("delta").load(path).collect())
            for path in self.paths
        ]


def test_a_crashed_runs_batches_are_recovered_once_in_each_table_in_two_writes(
    spark, tmp_path: Path
) -> None:
    """Batch 4, which one table holds and the other not, is written alone, 5 to 7 together,
    and each table holds each batch once."""
    run = CrashedRun(spark, tmp_path)
    assert run.writer.recover(spark) == [3, 4, 5, 6, 7]
    assert run.held(spark) == [list(range(8))] * 2
    assert run.writes == [[4], [5, 6, 7]]
    assert not list(run.files.glob("[0-9]*"))


def test_recovered_in_the_background_before_the_new_runs_batches_and_a_replay_alone(
    spark, tmp_path: Path
) -> None:
    """With `in_background` the new run saves its batches at once (Spark's replay of 7, then
    8, both committed meanwhile); the thread writes the crashed run's first, then the replay
    of 7 alone (the marker skips it) and 8: each batch once in each table."""
    run = CrashedRun(spark, tmp_path)
    writer = run.writer
    run.gate.clear()  # the recovered writes wait until the new run's batches are queued
    try:
        assert writer.recover(spark, in_background=True) == [3, 4, 5, 6, 7]
        for batch_id in (7, 8):
            writer.submit(spark, batch_id, {"n": batch_id})
            writer.release(batch_id)
        run.gate.set()
        writer.drain()
    finally:
        writer.close()
    assert run.held(spark) == [list(range(9))] * 2
    assert run.writes == [[4], [5, 6, 7], [7], [8]]
    # The recovery deleted its files but not 7's, which the new run saved again: a crash
    # before the replay's write would have left nothing to write it from.
    assert run.saved_when_written[2] == [7, 8]
    assert not list(run.files.glob("[0-9]*"))
