"""The audit job's byte cap (flow_control.bytes_per_sec) in a real run: `./spark-submit.sh
--once` over a real broker, measured from the job's own log.

The audit has no destination to measure at, so the measure is the job's read pace: each
batch's bytes are spread evenly over its trigger (planning, fold, MERGE and the flow-control
wait), as the runner logs it. The topic's newest records (the ones
the job samples for its record budget) are 8 bytes, the older ones 31 times larger, so the
first batch reads about 30 s of the cap at once, far more than it takes to fold and MERGE:
only the pacing on each batch's exact bytes can hold the cap.
"""

from __future__ import annotations

import re
import time
from datetime import datetime

import pytest
from pyspark.sql import functions as F

from testing.conf import write_conf_dir
from testing.demo_data import SentRecord, produce
from testing.jobrun import run_job
from tests.jobs.audit.test_audit_flow import windowed_max
from tests.jobs.audit.test_audit_job_integration import jobgroup

pytestmark = pytest.mark.integration

CAP = 10_000  # bytes/s of key + value
PARTITIONS = 2
NEW = 200  # records per partition at the end: 8 bytes (key "n000" + value "tiny"), the sample
BUDGET = CAP // 8  # records a 1 s batch may take at the sampled size: 1,250
OLD = BUDGET // PARTITIONS  # records per partition before them: the first batch, 30 s of the cap
OLD_VALUE = 244  # bytes (+ a 4-byte key)
LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) \w+ uatu\.(\w+): (.*)$")
WRITTEN = re.compile(r"batch (\d+) folded: \d+ records, (\d+) bytes")
# The runner's batch line: "<query> batch N: R records in D s ..." (jobs/runtime/runner.py).
FINISHED = re.compile(r"\S+ batch (\d+): \d+ records in ([\d.]+) s")


def batch_intervals(log: str) -> list[tuple[float, float, int]]:
    """(start, end, bytes) of every batch that read records: the bytes from the audit's "batch
    N folded" line, the span from the runner's "<query> batch N: ... in D s" line (logged when the
    trigger, the flow-control wait included, has finished; D is the trigger's duration)."""
    written: dict[int, int] = {}
    events: list[tuple[float, float, int]] = []
    for line in log.splitlines():
        m = LINE.match(line)
        if not m:
            continue
        at = datetime.strptime(m[1], "%Y-%m-%d %H:%M:%S,%f").timestamp()
        if m[2] == "audit" and (w := WRITTEN.match(m[3])):
            written[int(w[1])] = int(w[2])
        elif m[2] == "runner" and (f := FINISHED.match(m[3])) and int(f[1]) in written:
            start = at - float(f[2])
            if events:  # the log line comes a moment after the trigger ends: no overlaps
                start = max(start, events[-1][1])
            events.append((start, at, written[int(f[1])]))
    return events


def test_bytes_per_sec_holds_over_every_10_s_window_of_a_real_run(spark, kafka, tmp_path) -> None:
    topic = f"audit-bytes-{time.monotonic_ns()}"
    kafka.create_topic(topic, partitions=PARTITIONS)
    now_ms = int(time.time() * 1000)
    records = [
        SentRecord(p, f"o{i:03d}".encode(), b"x" * OLD_VALUE, None, now_ms, "no_event_time")
        for p in range(PARTITIONS)
        for i in range(OLD)
    ] + [
        SentRecord(p, f"n{i:03d}".encode(), b"tiny", None, now_ms, "no_event_time")
        for p in range(PARTITIONS)
        for i in range(NEW)
    ]
    produce(kafka.bootstrap_servers, topic, records)
    sent_bytes = sum(len(r.key) + len(r.value) for r in records)
    conf_dir = write_conf_dir(
        tmp_path / "conf", kafka.bootstrap_servers, tmp_path / "wh", tmp_path / "ck"
    )
    group = jobgroup("bytes-cap", topic, trigger_s=1)
    group["flowControl"] = {"bytesPerSec": CAP}

    status, log = run_job(group, tmp_path, conf_dir, "--once")

    assert status == 0, log
    events = batch_intervals(log)
    assert sum(n for _, _, n in events) == sent_bytes, log
    assert f"at most {BUDGET} records a batch" in log
    assert len(events) >= 2, log
    # The first batch read its 30 s of the cap in far less: the job waited out the rest.
    assert "flow control: waiting" in log, log
    assert windowed_max(events, 10.0) <= 1.1 * CAP * 10, events
    # And every byte was audited: the approximate audit's windows add up to what was sent.
    counts = spark.read.format("delta").load(str(tmp_path / "wh" / "audit_counts"))
    audited = counts.where(F.col("audit_type") == "AUDIT_TYPE_APPROX_UNIQ").agg(F.sum("bytes"))
    assert audited.first()[0] == sent_bytes
