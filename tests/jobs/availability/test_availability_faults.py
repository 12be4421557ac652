"""The availability job's four tables are exactly-once across a failure at every step between
two of its writes (core/faults.py's `availability.*_appended` points), against truth the test
knows.

The job's first batch fails at each point in turn (`fail-first-attempt`: the write before the
point is durable, the ones after it are not, as a crash there would leave them), the job
starting again on its checkpoint after each; the last run has no fault and streams until a
second batch has written. What a batch reads from `__consumer_offsets` is decided by its
offsets, so it can be checked exactly: the commits the test made for its own group are in
`consumer_offset_commits` once each, and every status of that group shows the windows those
commits make, no commit counted twice. What is decided by time (the metadata samples, the
probes, the lag at a commit's time) differs from one run to the next, so for those the test
checks that no sample or probe window is written twice, and that the last run's first probe
window, final before its replayed first batch ran, is written by a later batch with the probes
the topic holds for it (a replayed batch whose probe windows were written by its first attempt
must leave its own for the next batch: it would append nothing).

The job runs in this process on the test's session (`fail-first-attempt` rather than a
SIGKILL: no JVM start per run).
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from pyspark.sql import functions as F

from core import faults
from core.config import load_settings
from core.errors import EXIT_FAILED, EXIT_OK
from jobs import registry
from jobs.runtime.template import StreamingJob
from testing.conf import write_conf_dir
from testing.jobgroups import parse
from testing.polling import wait_for
from testing.topic_data import Record, produce_records

pytestmark = pytest.mark.integration

POINTS = (
    "availability.probes_appended",
    "availability.topic_availability_appended",
    "availability.commits_appended",
    "availability.status_appended",
)
COMMITS = ((0, 3), (1, 2), (0, 5), (1, 4), (0, 8))  # (partition, offset), in commit order
WINDOW_COMMITS = 10
PROBE_WINDOW_MS = 1000
ROUNDTRIP_SLA_MS = 1000


def availability_group(group_id: str, probe_topic: str) -> dict[str, Any]:
    return {
        "jobGroupId": group_id,
        "type": "JOB_TYPE_KAFKA_AVAILABILITY",
        "kafkaConsumerTaskGroup": {"cluster": "local", "topic": probe_topic},
        "availabilityTaskGroup": {"availabilityJobType": "AVAILABILITY_JOB_TYPE_NATIVE_PRODUCER"},
        "extension": {
            "@type": "type.googleapis.com/uatu.v1.JobOptions",
            "trigger": {"intervalSeconds": 1},
            "availability": {
                "probeIntervalMs": 200,
                "probeWindowSeconds": PROBE_WINDOW_MS // 1000,
                "probeAckSlaMs": 500,
                "probeRoundtripSlaMs": ROUNDTRIP_SLA_MS,
                "lagWindowCommits": WINDOW_COMMITS,
            },
        },
    }


def probes_on(bootstrap: str, topic: str) -> list[dict]:
    """Every probe on the probe topic (one partition): {"instance", "seq", "sent_ms"}."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "probe-check", "enable.auto.commit": False}
    )
    try:
        end = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
        consumer.assign([TopicPartition(topic, 0, 0)])
        found: list[dict] = []
        deadline = time.monotonic() + 30
        while len(found) < end and time.monotonic() < deadline:
            found += [json.loads(m.value()) for m in consumer.consume(500, 1) if not m.error()]
        return found
    finally:
        consumer.close()


def first_window_final(bootstrap: str, topic: str, since_ms: int) -> int:
    """Wait until the window of the first probe sent at or after `since_ms` is final (over, and
    past the round-trip SLA of every probe in it: ProbeLedger.take_final hands it out then,
    whatever came back); returns that window's start (ms)."""
    sent = wait_for(
        lambda: [p["sent_ms"] for p in probes_on(bootstrap, topic) if p["sent_ms"] >= since_ms],
        60,
        "the prober's first probe",
    )
    start = min(sent) - min(sent) % PROBE_WINDOW_MS
    final_at = start + PROBE_WINDOW_MS + ROUNDTRIP_SLA_MS
    wait_for(lambda: time.time() * 1000 > final_at, 10, "the first probe window to be final")
    return start


def new_job(conf_dir: Path, group: dict[str, Any]) -> StreamingJob:
    """The group's job, its source made to exist (`__consumer_offsets` on a new broker)."""
    job_type, spec = registry.validate(parse(group), load_settings(conf_dir))
    job = job_type.load_runtime()(spec)
    job.ensure_source()
    return job


def start_job(
    spark, conf_dir: Path, group: dict[str, Any], point: str | None, env: pytest.MonkeyPatch
) -> StreamingJob:
    """The group's job with its tables and its samplers started, UATU_FAULT failing the first
    hit of `point` from now on (none: no fault)."""
    job = new_job(conf_dir, group)
    faults.reset()
    if point is None:
        env.delenv(faults.ENV, raising=False)
    else:
        env.setenv(faults.ENV, f"{point}:{faults.FAIL_FIRST_ATTEMPT}")
    job.ensure_tables(spark)
    assert job.before_query(spark) is None
    return job


def run_query(job: StreamingJob, spark, *, stop_file: Path | None = None) -> int:
    """The job's query on its checkpoint to its end (--once without a stop file), then close."""
    try:
        stop = str(stop_file) if stop_file else None
        return job.run_stream(spark, once=stop is None, stop_file=stop, reporting=None)
    finally:
        job.close()
        faults.reset()


def table(spark, warehouse: Path, name: str):
    return spark.read.format("delta").load(str(warehouse / name))


def test_every_table_is_exactly_once_across_a_failure_at_each_step(
    spark, kafka, tmp_path, monkeypatch
):
    name = tmp_path.name[-16:].replace("_", "-").lower()
    topic, probe_topic, group_name = f"avail-{name}", f"probe-{name}", f"g-{name}"
    bootstrap = kafka.bootstrap_servers
    kafka.create_topic(topic, partitions=2)
    produce_records(bootstrap, topic, [Record(p, None, b"x", 0) for p in (0, 1) for _ in range(10)])
    warehouse = tmp_path / "wh"
    conf_dir = write_conf_dir(tmp_path / "conf", bootstrap, warehouse, tmp_path / "ck")
    group = availability_group(f"avail-{name}", probe_topic)
    new_job(conf_dir, group)  # a group coordinator to commit to
    committer = Consumer({"bootstrap.servers": bootstrap, "group.id": group_name})
    for partition, offset in COMMITS:
        committer.commit(offsets=[TopicPartition(topic, partition, offset)], asynchronous=False)
    committer.close()

    # The first attempt of batch 0 has a final probe window to write.
    since = int(time.time() * 1000)
    job = start_job(spark, conf_dir, group, POINTS[0], monkeypatch)
    first_window_final(bootstrap, probe_topic, since)
    statuses = [run_query(job, spark)]
    assert table(spark, warehouse, "availability_probes").count() > 0
    for point in POINTS[1:]:
        statuses.append(run_query(start_job(spark, conf_dir, group, point, monkeypatch), spark))
    assert statuses == [EXIT_FAILED] * len(POINTS)

    # The last run: its replayed batch 0 finds a final probe window, which batch 1 must write.
    since = int(time.time() * 1000)
    job = start_job(spark, conf_dir, group, None, monkeypatch)
    window = first_window_final(bootstrap, probe_topic, since)
    status: list[int] = []
    stop_file = tmp_path / "stop"
    thread = threading.Thread(
        target=lambda: status.append(run_query(job, spark, stop_file=stop_file))
    )
    thread.start()
    try:
        at = F.lit(window / 1000).cast("timestamp")
        wait_for(
            lambda: (
                table(spark, warehouse, "availability_probes")
                .where(F.col("window_start") == at)
                .count()
            ),
            60,
            "the last run's first probe window",
        )
    finally:
        stop_file.touch()
        thread.join(180)
    assert status == [EXIT_OK]

    # consumer_offset_commits: the test's commits, each once.
    commits = table(spark, warehouse, "consumer_offset_commits").where(F.col("group") == group_name)
    assert sorted((r["partition"], r["offset"]) for r in commits.collect()) == sorted(COMMITS)
    # consumer_group_status: one row per evaluation, each with the windows of those commits.
    statuses_written = table(spark, warehouse, "consumer_group_status").where(
        F.col("group") == group_name
    )
    rows = statuses_written.collect()
    assert rows and len({r["evaluated_at"] for r in rows}) == len(rows)
    offsets = {p: [o for q, o in COMMITS if q == p] for p in (0, 1)}
    expected = [
        (p, offsets[p][0], offsets[p][-1], len(offsets[p]) / WINDOW_COMMITS) for p in (0, 1)
    ]
    for r in rows:
        windows = [
            (w["partition"], w["start_offset"], w["end_offset"], w["complete"])
            for w in sorted(r["partitions"], key=lambda w: w["partition"])
        ]
        assert windows == expected, r["evaluated_at"]

    # topic_availability: every sample holds each partition of the topic once.
    samples = table(spark, warehouse, "topic_availability").where(F.col("topic") == topic)
    per_sample = Counter(r["sampled_at"] for r in samples.collect())
    assert per_sample and set(per_sample.values()) == {2}
    assert samples.count() == samples.select("sampled_at", "partition").distinct().count()

    # availability_probes: no window written twice; the last run's first window holds the
    # probes the topic holds for it.
    probes = table(spark, warehouse, "availability_probes")
    keys = ("window_start", "broker", "zone")
    assert probes.count() == probes.select(*keys).distinct().count()
    (row,) = probes.where(F.col("window_start") == at).where(F.col("broker").isNotNull()).collect()
    last = [p for p in probes_on(bootstrap, probe_topic) if p["sent_ms"] >= since]
    instance = min(last, key=lambda p: p["sent_ms"])["instance"]
    on_topic = {
        p["seq"]
        for p in last
        if p["instance"] == instance and window <= p["sent_ms"] < window + PROBE_WINDOW_MS
    }
    assert row["probes"] == len(on_topic) > 0
