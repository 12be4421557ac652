"""`jobs.runtime.runner`'s batch log: every finished batch logged once, in order, however many
finish between two polls; the retained progress (a py4j call per entry) read only when more
than one batch finished since the last poll. And a query's own SQL settings
(`QuerySettings.conf`), which it starts with and the session keeps no trace of."""

from __future__ import annotations

import logging

import pytest

from jobs.runtime.runner import QuerySettings, _log_batches, batch_phases, run_query


class PolledQuery:
    """A StreamingQuery's progress as the runner polls it; counts the reads of every
    retained progress."""

    def __init__(self) -> None:
        self.progress: list[dict] = []
        self.recent_reads = 0

    def finish(self, *batches: int) -> None:
        self.progress += [
            {"name": "q", "batchId": b, "numInputRows": 10 * b, "batchDuration": 1000}
            for b in batches
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
    assert logged_batches(caplog) == [f"q batch {b}" for b in range(5)]
    assert "q batch 2: 20 records in 1.0 s" in caplog.text


def test_the_batch_line_says_where_the_triggers_time_went() -> None:
    # Spark's durationMs of a trigger; triggerExecution (the whole) and getBatch are not
    # phases of their own here.
    timed = {
        "triggerExecution": 6512,
        "getBatch": 0,
        "commitOffsets": 31,
        "addBatch": 3649,
        "queryPlanning": 2350,
        "walCommit": 44,
        "latestOffset": 160,
    }
    assert batch_phases(timed) == (
        ": latest offsets 0.2 s, offset log 0.0 s, planning 2.4 s, the batch 3.6 s, commit 0.0 s"
    )
    assert batch_phases({"latestOffset": 160}) == ": latest offsets 0.2 s"
    assert batch_phases({}) == ""


@pytest.mark.spark
def test_a_querys_own_conf_is_its_alone(spark, tmp_path) -> None:
    """QuerySettings.conf: the query's batches see it (Spark copied it into the query as it
    started), and the session, which a worker's other queries start from, is as before."""
    key = "spark.sql.streaming.kafka.useDeprecatedOffsetFetching"
    assert spark.conf.get(key, None) is None
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.json").write_text('{"v": 1}\n')
    seen: list[str | None] = []
    settings = QuerySettings(
        name="own-conf",
        checkpoint=str(tmp_path / "ck"),
        once=True,
        poll_seconds=1,
        conf={key: "true"},
    )
    stream = spark.readStream.schema("v INT").json(str(tmp_path / "in"))
    status = run_query(
        stream, lambda batch, _: seen.append(batch.sparkSession.conf.get(key)), settings
    )
    assert status == 0 and seen == ["true"]
    assert spark.conf.get(key, None) is None
