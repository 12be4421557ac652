"""Both load generators across process deaths, through ./spark-submit.sh: LOAD_GEN_CONSUME
killed with SIGKILL mid-stream still ends with every record in loadgen_stats exactly once and
the injected gap and duplicate found once; LOAD_GEN_PRODUCE stopped with SIGTERM twice
continues its sequence numbers without a gap or a duplicate."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from core.paths import ROOT
from testing.polling import wait_for
from testing.topic_data import Record, iter_messages, produce_records
from tests.jobs.loadgen.conftest import consume_group, decode_header, encode_header, produce_group

pytestmark = pytest.mark.integration


def submit(group: dict, workdir: Path, conf_dir: Path, *args: str) -> subprocess.Popen:
    """./spark-submit.sh in its own process group; output to <workdir>/<id>.log."""
    path = workdir / f"{group['jobGroupId']}-{time.monotonic_ns()}.json"
    path.write_text(json.dumps(group))
    log = (workdir / f"{group['jobGroupId']}.log").open("a")
    env = {**os.environ, "UATU_CONF_DIR": str(conf_dir)}
    return subprocess.Popen(
        [str(ROOT / "spark-submit.sh"), str(path), *args],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


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

    proc = submit(group, tmp_path, conf_dir)
    try:
        # Killed once some batches are kept but, 30 s being far off, not yet in the table.
        wait_for(
            lambda: len(saved_batches(pending)) >= 3 or proc.poll() is not None, 300, "kept batches"
        )
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL

    restarted = submit(group, tmp_path, conf_dir, "--once")
    assert restarted.wait(timeout=600) == 0, (tmp_path / "lg-kill.log").read_text()[-3000:]

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


def run_then_stop(group: dict, workdir: Path, conf_dir: Path, state: Path) -> None:
    """Run until two more batches are saved, then SIGTERM mid-batch; the job must exit 0."""
    target = newest(state) + 2
    proc = submit(group, workdir, conf_dir)
    try:
        wait_for(lambda: newest(state) >= target or proc.poll() is not None, 300, "two batches")
        time.sleep(1)  # mid-batch: the generators have sent past the last cut
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 0, (workdir / "lg-stops.log").read_text()[-3000:]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=60)


def test_produce_stopped_twice_continues_without_gap_or_duplicate(kafka, conf_dir, tmp_path):
    topic = "lg-produce-stops"
    kafka.create_topic(topic, 2, 1)
    group = produce_group("lg-stops", topic, flow={"messagesPerSec": 400})
    group["extension"]["trigger"] = {"intervalSeconds": 2}
    state = tmp_path / "ck" / "lg-stops" / "loadgen-produce"
    run_then_stop(group, tmp_path, conf_dir, state)
    run_then_stop(group, tmp_path, conf_dir, state)

    by_generator: dict[tuple[int, str], list[int]] = {}
    for m in iter_messages(kafka.bootstrap_servers, topic, 2):
        seq, _, generator = decode_header(m.headers())
        by_generator.setdefault((m.partition(), generator), []).append(seq)
    # One generator per partition over both runs (the checkpoint's run id), each sequence
    # 0, 1, 2, ... in offset order: nothing sent twice, nothing skipped.
    assert sorted(p for p, _ in by_generator) == [0, 1]
    for seqs in by_generator.values():
        assert seqs == list(range(len(seqs)))
    log = (tmp_path / "lg-stops.log").read_text()
    assert Counter("before the stop" in line for line in log.splitlines())[True] == 2
