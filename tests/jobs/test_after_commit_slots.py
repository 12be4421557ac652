"""Write slots of `jobs.runtime.after_commit`: writers sharing a semaphore write at most its
count at a time, and each write carries every batch that became ready while it waited."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from jobs.runtime.after_commit import AfterCommitWriter, Ready

DEADLINE_S = 30.0


class Writes:
    """The writes of several writers: who is writing now, the most at once, what each wrote.
    A write holds until `gate` opens, so writers that may write together do."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.active = 0
        self.most = 0
        self.written: dict[str, list[list[int]]] = {}
        self.gate = threading.Event()

    def writer(self, name: str) -> Any:
        def write(_spark, ready: Ready[int]) -> str:
            with self.lock:
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


def writers(spark, tmp_path: Path, writes: Writes, slots) -> list[AfterCommitWriter[int]]:
    made = []
    for name in ("a", "b", "c"):
        made.append(
            AfterCommitWriter(
                str(tmp_path / name),
                "stats",
                name,
                writes.writer(name),
                lambda _spark, saved: int(saved["n"]),
                logging.getLogger("test"),
                at_saved=lambda: None,
                at_writing=lambda: None,
                write_slots=slots,
            )
        )
    return made


@pytest.mark.parametrize("slots", [1, None], ids=["one-slot", "no-slots"])
def test_writers_sharing_a_slot_write_one_at_a_time_and_catch_up_in_one_write(
    spark, tmp_path: Path, slots
) -> None:
    writes = Writes()
    semaphore = threading.BoundedSemaphore(slots) if slots else None
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
