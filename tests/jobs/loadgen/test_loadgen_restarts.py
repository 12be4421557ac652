"""Both load generators across stops: LOAD_GEN_CONSUME killed with SIGKILL mid-stream (through
./spark-submit.sh, its restart in this process) still ends with every record in loadgen_stats
exactly once and the injected gap and duplicate found once; LOAD_GEN_PRODUCE stopped mid-batch
twice (in this process, by its stop file: what spark-submit.sh does on SIGTERM) continues its
sequence numbers without a gap or a duplicate."""

from __future__ import annotations

import logging
import os
import signal
import time
from collections import Counter
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from core.errors import EXIT_OK
from testing.jobrun import submit_job
from testing.polling import wait_for
from testing.topic_data import Record, iter_messages, produce_records
from tests.jobs.in_process import run_in_process, running
from tests.jobs.loadgen.conftest import consume_group, decode_header, encode_header, produce_group

pytestmark = pytest.mark.integration


def saved_batches(directory: Path) -> list[int]:
    return sorted(int(p.name) for p in directory.glob("*") if p.name.isdigit())


def test_consume_killed_mid_stream_counts_every_record_once(spark, kafka, conf_dir, tmp_path):
    topic = "lg-consume-kill"
    kafka.create_topic(topic, 2, 1)
    now_us = time.time_ns() // 1000
    seqs = {0: [s for s in range(1000) if not 700 <= s < 710], 1: list(range(1000))}
    seqs[0].insert(501, 500)  # one duplicate
    records = [
        Record(
            p, None, b"v" * 20, now_us // 1000, (("loadgen", encode_header(s, now_us, f"G{p}")),)
        )
        for p, ss in seqs.items()
        for s in ss
    ]
    produce_records(kafka.bootstrap_servers, topic, records)
    group = consume_group("lg-kill", topic)
    group["flowControl"] = {"messagesPerSec": 150}  # 150 records per 1 s micro-batch
    pending = tmp_path / "ck" / "lg-kill" / "loadgen-pending"

    proc = submit_job(group, tmp_path, conf_dir)
    try:
        # Killed once some batches are kept but, 30 s being far off, not yet in the table.
        wait_for(
            lambda: len(saved_batches(pending)) >= 3 or proc.poll() is not None, 300, "kept batches"
        )
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL

    assert run_in_process(group, tmp_path, conf_dir, "--once") == EXIT_OK

    table = spark.read.format("delta").load(str(tmp_path / "wh" / "loadgen_stats"))
    totals = table.groupBy("generator").agg(
        F.sum("records").alias("records"),
        F.sum("duplicates").alias("duplicates"),
        F.sum("lost").alias("lost"),
        F.flatten(F.collect_list("missing_ranges")).alias("missing"),
    )
    got = {
        r["generator"]: (r["records"], r["duplicates"], r["lost"], r["missing"])
        for r in totals.collect()
    }
    assert got == {
        "G0": (len(seqs[0]), 1, 10, [(700, 710)]),
        "G1": (len(seqs[1]), 0, 0, []),
    }


def newest(directory: Path) -> int:
    return max(saved_batches(directory), default=-1)


def run_then_stop(group: dict, workdir: Path, conf_dir: Path, state: Path, stop_file: Path) -> None:
    """Run in this process until two more batches are saved, then stop it mid-batch by its
    stop file; the job must exit 0."""
    target = newest(state) + 2
    with running(group, workdir, conf_dir, stop_file) as status:
        wait_for(lambda: newest(state) >= target or status() is not None, 300, "two batches")
        time.sleep(1)  # mid-batch: the generators have sent past the last cut
    assert status() == EXIT_OK


def test_produce_stopped_twice_continues_without_gap_or_duplicate(
    spark, kafka, conf_dir, tmp_path, caplog, stop_file
):
    topic = "lg-produce-stops"
    kafka.create_topic(topic, 2, 1)
    group = produce_group("lg-stops", topic, flow={"messagesPerSec": 400})
    group["extension"]["trigger"] = {"intervalSeconds": 2}
    state = tmp_path / "ck" / "lg-stops" / "loadgen-produce"
    with caplog.at_level(logging.INFO, logger="uatu"):
        run_then_stop(group, tmp_path, conf_dir, state, stop_file)
        run_then_stop(group, tmp_path, conf_dir, state, stop_file)

    by_generator: dict[tuple[int, str], list[int]] = {}
    for m in iter_messages(kafka.bootstrap_servers, topic, 2):
        seq, _, generator = decode_header(m.headers())
        by_generator.setdefault((m.partition(), generator), []).append(seq)
    # One generator per partition over both runs (the checkpoint's run id), each sequence
    # 0, 1, 2, ... in offset order: nothing sent twice, nothing skipped.
    assert sorted(p for p, _ in by_generator) == [0, 1]
    for seqs in by_generator.values():
        assert seqs == list(range(len(seqs)))
    assert Counter("before the stop" in r.getMessage() for r in caplog.records)[True] == 2
