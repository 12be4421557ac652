"""`jobs.runtime.query_listener`: a listener that reads each event whole, as JSON, gets the
events PySpark's own bridge gives, field for field, for a query that commits two batches and
one that fails."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQueryListener
from pyspark.sql.streaming.listener import QueryProgressEvent

from jobs.runtime.query_listener import JsonEventBridge, JsonEventsListener
from jobs.runtime.session import listening
from testing.polling import wait_for


class Recording:
    """What a listener saw, as comparable values."""

    def __init__(self) -> None:
        self.events: dict[str, list] = {"started": [], "progress": [], "terminated": []}

    def onQueryStarted(self, event) -> None:
        self.events["started"].append((event.id, event.runId, event.name, event.timestamp))

    def onQueryProgress(self, event) -> None:
        self.events["progress"].append(json.loads(event.progress.json))

    def onQueryIdle(self, event) -> None:
        pass

    def onQueryTerminated(self, event) -> None:
        self.events["terminated"].append(
            (event.id, event.runId, event.exception, event.errorClassOnException)
        )


class WholeEvents(Recording, JsonEventsListener):
    pass


class PySparksEvents(Recording, StreamingQueryListener):
    pass


def two_batches(spark: SparkSession, source: Path) -> None:
    for n in (0, 1):
        rows = spark.range(n * 10, n * 10 + 10, numPartitions=1)  # one file: one batch
        rows.write.parquet(str(source / f"part-{n}"))


def fail_on_second_batch(frame, batch_id: int) -> None:
    if batch_id == 1:
        raise ValueError("the second batch fails on purpose")


@pytest.mark.spark
def test_whole_events_equal_pysparks_own_for_a_query_that_commits_and_one_that_fails(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    field_by_field: list[object] = []  # PySpark's bridge's reads of a progress event
    own_reading = QueryProgressEvent.fromJObject.__func__  # type: ignore[attr-defined]
    monkeypatch.setattr(
        QueryProgressEvent,
        "fromJObject",
        classmethod(lambda cls, jevent: field_by_field.append(jevent) or own_reading(cls, jevent)),
    )
    source = tmp_path / "in"
    two_batches(spark, source)
    whole, own = WholeEvents(), PySparksEvents()
    frame = (
        spark.readStream.schema("id LONG")
        .option("maxFilesPerTrigger", 1)
        .option("recursiveFileLookup", "true")
        .parquet(str(source))
    )
    started: list = []
    with listening(spark, whole, own):
        try:
            done = (
                frame.writeStream.format("noop")
                .queryName("json-events-ok")
                .option("checkpointLocation", str(tmp_path / "ck-ok"))
                .trigger(availableNow=True)
                .start()
            )
            started.append(done)
            done.awaitTermination(120)
            failing = (
                frame.writeStream.foreachBatch(fail_on_second_batch)
                .queryName("json-events-failing")
                .option("checkpointLocation", str(tmp_path / "ck-failing"))
                .trigger(availableNow=True)
                .start()
            )
            started.append(failing)
            with pytest.raises(Exception, match="the second batch fails on purpose"):
                failing.awaitTermination(120)
        finally:  # a query still running after a timeout must not outlive the test
            for query in started:
                query.stop()
        wait_for(lambda: len(own.events["terminated"]) == 2, 30, "both queries' terminations")
        wait_for(lambda: len(whole.events["terminated"]) == 2, 30, "the same, whole")

    assert whole.events == own.events
    assert len(field_by_field) == len(own.events["progress"])  # none of them for `whole`
    batches: dict[str, list[tuple[int, int]]] = {}
    for progress in whole.events["progress"]:
        batches.setdefault(progress["name"], []).append(
            (progress["batchId"], progress["numInputRows"])
        )
    assert batches["json-events-ok"] == [(0, 10), (1, 10)]
    assert [batch for batch, _ in batches["json-events-failing"]] == [0]  # batch 1 failed
    (_, _, ok_error, _), (_, _, failure, _) = whole.events["terminated"]
    assert ok_error is None and "the second batch fails on purpose" in failure


def test_the_bridge_hands_each_event_built_from_its_json() -> None:
    class JavaEvent:
        def __init__(self, payload: dict) -> None:
            self.payload = payload

        def json(self) -> str:
            return json.dumps(self.payload)

    seen = Recording()
    bridge = JsonEventBridge(seen)  # type: ignore[arg-type]
    ids = {
        "id": "3f8ad537-9c91-458f-88ad-59e5e02a1040",
        "runId": "95396b8c-7418-4c71-bfd1-b9264388a932",
    }
    bridge.onQueryStarted(JavaEvent({**ids, "name": "q", "timestamp": "t", "jobTags": []}))
    bridge.onQueryTerminated(JavaEvent({**ids, "exception": "boom", "errorClassOnException": None}))
    started, terminated = seen.events["started"], seen.events["terminated"]
    assert [(str(i), str(r), n, t) for i, r, n, t in started] == [(*ids.values(), "q", "t")]
    assert [(str(i), str(r), e, c) for i, r, e, c in terminated] == [(*ids.values(), "boom", None)]
