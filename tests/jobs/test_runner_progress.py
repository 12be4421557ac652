"""`jobs.runtime.runner`'s batch log: every finished batch logged once, in order, however many
finish between two polls; the retained progress (a py4j call per entry) read only when more
than one batch finished since the last poll."""

from __future__ import annotations

import logging

import pytest

from jobs.runtime.runner import _log_batches


class PolledQuery:
    """A StreamingQuery's progress as the runner polls it; counts the reads of every
    retained progress."""

    def __init__(self) -> None:
        self.progress: list[dict] = []
        self.recent_reads = 0

    def finish(self, *batches: int) -> None:
        self.progress += [
            {"batchId": b, "numInputRows": 10 * b, "batchDuration": 1000} for b in batches
        ]

    @property
    def lastProgress(self) -> dict | None:
        return self.progress[-1] if self.progress else None

    @property
    def recentProgress(self) -> list[dict]:
        self.recent_reads += 1
        return list(self.progress)


def logged_batches(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage().split(":")[0] for r in caplog.records if r.name == "uatu.runner"]


def test_each_batch_is_logged_once_in_order_and_the_retained_progress_read_only_for_a_gap(
    caplog: pytest.LogCaptureFixture,
) -> None:
    query = PolledQuery()
    caplog.set_level(logging.INFO, logger="uatu.runner")

    last = _log_batches(query, -1)  # type: ignore[arg-type]
    assert (last, logged_batches(caplog), query.recent_reads) == (-1, [], 0)

    query.finish(0)
    last = _log_batches(query, last)  # type: ignore[arg-type]
    assert (last, query.recent_reads) == (0, 0)  # one new batch: the newest progress only
    last = _log_batches(query, last)  # type: ignore[arg-type]
    assert (last, query.recent_reads) == (0, 0)  # nothing new

    query.finish(1, 2, 3)
    last = _log_batches(query, last)  # type: ignore[arg-type]
    assert (last, query.recent_reads) == (3, 1)  # three finished between two polls

    query.finish(4)
    last = _log_batches(query, last)  # type: ignore[arg-type]
    assert (last, query.recent_reads) == (4, 1)
    assert logged_batches(caplog) == [f"batch {b}" for b in range(5)]
    assert "batch 2: 20 records in 1.0 s" in caplog.text
