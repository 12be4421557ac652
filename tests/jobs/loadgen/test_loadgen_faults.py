"""LOAD_GEN_PRODUCE's guarantee across a crash at each of its two steps (core/faults.py):

* `loadgen.state_saved`: a batch's state is saved under the checkpoint and Spark has not
  committed the batch. Spark replays the batch after a restart; it was produced in full, so
  nothing of it may be sent again.
* `loadgen.batch_acked`: every record of a batch is acknowledged and its state is not saved.
  What was sent after the last saved state is sent again after a restart (at least once,
  docs/loadgen.md), from exactly where that state stopped: nothing lost, nothing skipped.

One bounded run (2 partitions, 1 s batches) is SIGKILLed at the first point, restarted and
SIGKILLed at the second, then restarted to its end, all on one checkpoint through
./spark-submit.sh. The truth is the topic, read back after each run: every run's records of a
partition are sequence numbers counting up without a gap from where the newest saved state
(`<checkpoint>/loadgen-produce/<batch>`, its documented layout) stopped, and a re-sent record
is its original again.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from testing.jobrun import run_job
from testing.topic_data import Record, read_partitions
from tests.jobs.loadgen.conftest import decode_header, produce_group

pytestmark = pytest.mark.integration

PARTITIONS = 2
TOTAL = 3000  # 1500 a partition: six batches at 500 records/s
KILLED = -9


def newest_state(checkpoint: Path) -> tuple[int, dict]:
    """The newest batch whose state the generator saved, and that state (JSON)."""
    directory = checkpoint / "loadgen-produce"
    batch = max(int(p.name) for p in directory.iterdir() if p.name.isdigit())
    return batch, json.loads((directory / str(batch)).read_text())


def sent_since(
    bootstrap: str, topic: str, before: dict[int, list[Record]]
) -> tuple[dict[int, list[Record]], dict[int, list[Record]]]:
    """(the topic's records per partition now, those after `before`'s in offset order)."""
    now = read_partitions(bootstrap, topic, PARTITIONS)
    return now, {p: records[len(before.get(p, [])) :] for p, records in now.items()}


def assert_counts_on(records: list[Record], start: int, generator: str) -> None:
    """`records` are `generator`'s sequence numbers start, start + 1, ... in offset order."""
    headers = [decode_header(r.headers) for r in records]
    assert {h[2] for h in headers if h} <= {generator} and None not in headers
    seqs = [h[0] for h in headers if h]
    assert seqs == list(range(start, start + len(seqs))), (start, seqs[:5], seqs[-5:])


def test_a_crash_at_each_step_resends_only_what_no_saved_state_covers(
    kafka, conf_dir, tmp_path
) -> None:
    topic = "lg-produce-crash"
    kafka.create_topic(topic, PARTITIONS, 1)
    group = produce_group("lg-crash", topic, flow={"messagesPerSec": 500}, totalRecords=TOTAL)
    group["extension"]["trigger"] = {"intervalSeconds": 1}
    checkpoint = tmp_path / "ck" / "lg-crash"
    bootstrap = kafka.bootstrap_servers

    # 1. Killed once batch 1's state is saved (the second batch of the run), before Spark
    #    commits batch 1.
    status, log = run_job(
        group, tmp_path, conf_dir, "--once", env={"UATU_FAULT": "loadgen.state_saved@2"}
    )
    assert status == KILLED, log[-3000:]
    assert "UATU_FAULT: crash at loadgen.state_saved (hit 2)" in log
    batch, first = newest_state(checkpoint)
    assert batch == 1
    prefix = f"lg-crash/{first['run_id']}/"
    on_topic, new = sent_since(bootstrap, topic, {})
    saved = {int(p): s["next_seq"] for p, s in first["partitions"].items()}
    for p in range(PARTITIONS):
        assert_counts_on(new[p], 0, f"{prefix}{p}")
        assert 0 < saved[p] <= len(new[p])  # the state counts only records on the topic

    # 2. Restarted: Spark replays batch 1, which sends nothing; killed after batch 3's records
    #    were all acknowledged (the second cut this run collects), before its state is saved.
    status, log = run_job(
        group, tmp_path, conf_dir, "--once", env={"UATU_FAULT": "loadgen.batch_acked@2"}
    )
    assert status == KILLED, log[-3000:]
    assert "UATU_FAULT: crash at loadgen.batch_acked (hit 2)" in log
    before = on_topic
    on_topic, new = sent_since(bootstrap, topic, before)
    for p in range(PARTITIONS):
        assert_counts_on(new[p], saved[p], f"{prefix}{p}")  # from batch 1's state on
    batch, second = newest_state(checkpoint)
    assert batch == 2 and second["run_id"] == first["run_id"]
    resent = {int(p): s["next_seq"] for p, s in second["partitions"].items()}
    for p in range(PARTITIONS):
        # Batch 3 was acknowledged and is past the saved state: it will be sent again.
        assert saved[p] < resent[p] < saved[p] + len(new[p])

    # 3. Restarted to the end: Spark replays batch 3 from batch 2's state.
    status, log = run_job(group, tmp_path, conf_dir, "--once")
    assert status == 0, log[-3000:]
    before = on_topic
    on_topic, new = sent_since(bootstrap, topic, before)
    for p in range(PARTITIONS):
        assert_counts_on(new[p], resent[p], f"{prefix}{p}")
        assert resent[p] + len(new[p]) == TOTAL // PARTITIONS  # every record, none beyond

    # A record sent again is its original again (key and value; only the send time differs).
    for records in on_topic.values():
        originals: dict[int, tuple[bytes | None, bytes | None]] = {}
        for r in records:
            header = decode_header(r.headers)
            assert header is not None
            assert originals.setdefault(header[0], (r.key, r.value)) == (r.key, r.value)
