"""Replication throughput, correctness, latency and flow control: our Spark replication job
against Apache Kafka MirrorMaker 2 and Kafka's own perf tools, between two private clusters.

Setup: two fresh single-broker clusters (source, destination; heap 1g) under var/bench/. The
source topic (--partitions, default 4) gets N records (--records) of --record-size bytes, no
key, record i in partition i % partitions; each value starts with a fixed-width ASCII header
``seq=000000123 ts=1795000000000 `` (sequence number, produce time in epoch ms) padded with dots,
and the record timestamp is that produce time. Every destination topic is created beforehand
with the source's partition count and ``message.timestamp.type=LogAppendTime``, so a copied
record's timestamp is when the destination broker appended it.

What is measured, in this order:

1. Ceilings: Kafka's ConsumerPerformance reading the N source records (fetch.nMsg.sec, which
   leaves out the group join) and ProducerPerformance writing N records of the same size to a
   scratch topic on the destination with the Spark job's producer settings (acks=all,
   idempotent, linger.ms=20, batch.size=1 MiB; see spec.producer_config). The smaller of the
   two is "the ceiling" of a copy on this machine.
2. Cold backlog, --rounds R (default 2) rounds. Each round has a source topic of its own with
   the same N records (round 1 ``bench-src``, then ``bench-src-r2``...: MM2 names its copy
   after the source, so one topic cannot be copied twice to one destination), all produced
   before step 1. Round 1 runs the Spark job then MM2, round 2 MM2 then the job, and so on
   alternating; the tools never run at the same time.
   * The Spark job: a bounded copy (replicationTaskGroup.isContinuous=false) of the round's
     topic to ``copy-spark-r<round>``, run with ./spark-submit.sh (local[P] for P partitions,
     one task slot per partition, on the same 2 cores; the low-latency copy local[2P+1], one
     slot per partition for the running epoch and for the next, one for the stats; 2g driver =
     the whole job's JVM heap, -Xmx; BENCH_SPARK_MASTER overrides).
   * MirrorMaker 2 (dedicated mode, IdentityReplicationPolicy, tasks.max = partitions) copying
     it to a topic of the same name, with the job's settings: its target producers get the
     job's producer settings (max.in.flight 5), its source consumers the job's fetch settings
     (jobs.runtime.kafka_source.RANGE_FETCH_CONFIG: max.poll.records, max.partition.fetch.bytes,
     fetch.max.bytes, as ``source.consumer.*``), and its JVM the job's heap (2g, as -Xms and
     -Xmx). Each MM2 run has its own Connect worker group and internal topics, as each Spark
     run has its own checkpoint: no run starts from an earlier run's state. Both JVMs run G1
     (the job's by the JVM's default, MM2's as Kafka's own scripts start it). MM2 logs the
     config of every consumer it creates; the bench reads back those of its copying
     consumers (client.id ``...|replication-consumer``) into the result, and an MM2 run
     whose consumers did not all get the job's fetch settings fails.
   For each run: launch-to-done wall time (launch until every record is in the destination;
   for the Spark job also until it exits), and copy throughput: the destination's record
   count is polled every 0.25 s, and throughput = records added between the first poll that
   sees records and the poll that sees all N, over that time (JVM start, planning and topic
   discovery left out); also "by append", from the first to the last LogAppendTime of the
   copy, and "from start": N over launch-to-done. The summary gives every run with its
   round, position and the 1-minute load average at its launch, then per tool the median
   over the rounds of each figure, and the Spark / MM2 ratios of those medians.
3. Correctness of every copy: each round's source and each copy are read back per partition;
   a copy is exact when every destination partition holds its source partition's sequence
   numbers in the same order. Lost, duplicated and unexpected records are counted.
4. Latency: destination LogAppendTime - produce time in the value, p50/p99 over every copied
   record. In the backlog copy above this is mostly time spent waiting in the backlog. Then a
   steady-rate phase per tool of --steady-tools (default: spark-ll, spark, mm2): the tool runs
   continuously on its own source topic while records are produced at --steady-rate for
   --steady-seconds (after a slow warm-up trickle that shows the tool is copying); p50/p99
   over the steady records, and p50/p99/max per 5 s slice of their destination append time
   (a tail spread out, or a few stalls: the low-latency copy's epoch hand-overs). spark-ll
   is the job's low-latency copy (extension.replication.low_latency, epochs of 10 s), spark
   its micro-batch copy (trigger interval 1 s). Our job is stopped with SIGTERM and must exit
   0. This phase and the next run once per tool, in that order (not alternated; MM2 with the
   same settings as in step 2).
4b. Warm backlog (--warm-records, default 1,000,000; 0 skips it): before it is stopped, each
   continuously running tool is paused with SIGSTOP to its process group, that many records
   are produced to its source topic, and it is resumed with SIGCONT. Throughput "from the
   resume": all of them over the time from SIGCONT to the poll that sees them all, so the wait
   for the tool's next poll or micro-batch counts; also as in step 2 (from the first poll that
   sees records) and by append. Unlike step 2 the tool's JVM has already compiled its copy path
   (in the steady phase), as a long-running replicator's has when a backlog builds up. The
   correctness check of step 3 covers the steady and the warm records together; the job's
   replication_stats of that run (step 6) count both.
5. Flow control: bounded copies of the first min(N, 200,000) source records with
   flowControl.messagesPerSec (--flow-messages, 5,000), then bytesPerSec (--flow-bytes,
   1,000,000, ~5,000 records/s of 200 bytes), default 2 s trigger: the job's record budget
   covers 10 s, so 200,000 records take four batches. From the job's
   replication_stats table: achieved rate = records (bytes) of the batches after the first /
   (batch_time of the last batch - batch_time of the first), compared with the cap (it must
   not be above 1.10x). Also the most records (bytes: records x --record-size) that landed
   within any 10 s and any 1 s of the destination's append time, against the cap.
6. The job's own view from replication_stats: records replicated and replication-latency-ms
   quantiles from the merged per-batch KLL sketches (kll_merge_agg_bigint).

A summary table closes the output; it also goes to var/bench/replication-bench-result.json
(with the 1-minute load average at the start and the end of the run, and MM2's settings),
and a record of the run (commit, machine, arguments, figures) to
docs/benchmarks/replication-<UTC time>-<commit>.json; job logs to
var/bench/replication-<job>.log, MM2 logs to var/bench/replication-mm2-*.log.
Nothing here asserts a duration: the exit status is 1 only if a copy lost, duplicated or
reordered records, or a run failed. BENCH_SPARK_SUBMIT_ARGS, if set, is passed to the job as
UATU_SPARK_SUBMIT_ARGS.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from array import array
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np
from confluent_kafka import (
    TIMESTAMP_LOG_APPEND_TIME,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)

from bench._common import (
    BENCH_DIR,
    bench_parser,
    latency_quantiles,
    latency_timeline,
    median_or_none,
    now_ms,
    parse_args,
    say,
    seconds_text,
    spark_submit_env,
    submit_job,
    table_session,
    warn_if_jobs_zip_stale,
    work_dir,
    write_latest,
    write_result,
)
from bench.kafka_perf import consumer_perf, producer_perf, producer_perf_args
from core.processes import signal_group
from devservices.kafka import G1_GC, KafkaCluster, start_cluster
from devservices.mirror_maker import (
    SOURCE,
    TARGET,
    MirrorMakerProcess,
    logged_consumer_configs,
    start_mirror_maker,
)
from jobs.runtime.kafka_source import RANGE_FETCH_CONFIG
from testing.conf import write_conf_dir
from testing.topic_data import iter_messages

RESULT_PATH = BENCH_DIR / "replication-bench-result.json"

SOURCE_TOPIC = "bench-src"
SPARK_COPY = "copy-spark"
SCRATCH_TOPIC = "perf-scratch"
LOG_APPEND_TIME = {"message.timestamp.type": "LogAppendTime"}

# The Spark job's destination producer (spec.producer_config), given to the other writers.
PRODUCER_SETTINGS = {
    "acks": "all",
    "enable.idempotence": "true",
    "linger.ms": "20",
    "batch.size": "1048576",
}
# The job's driver heap (spark-submit --driver-memory: -Xmx; in local mode the whole job runs
# in that JVM), given to MM2 as -Xms and -Xmx.
JOB_HEAP = "2g"


def mm2_client_settings(producer: Mapping[str, str], consumer: Mapping[str, str]) -> dict[str, str]:
    """MM2 properties giving its target producers `producer` (plus max.in.flight 5, which the
    idempotent producer keeps in order) and its source consumers `consumer`: the
    ``<alias>.producer.`` / ``<alias>.consumer.`` prefixes of MM2's cluster aliases, which MM2
    hands to the flow's connectors as ``target.producer.*`` and ``source.consumer.*``."""
    producer = {**producer, "max.in.flight.requests.per.connection": "5"}
    return {
        **{f"{TARGET}.producer.{k}": v for k, v in producer.items()},
        **{f"{SOURCE}.consumer.{k}": v for k, v in consumer.items()},
    }


MM2_EXTRA = mm2_client_settings(PRODUCER_SETTINGS, RANGE_FETCH_CONFIG)


def mm2_own_state(run: str) -> dict[str, str]:
    """MM2 properties that give one MM2 run its own Connect worker group and internal topics
    on the target (offsets, configs, status), named after `run`: a later run does not start
    with an earlier run's connector and task configs, as each Spark run starts from its own
    checkpoint."""
    return {
        f"{TARGET}.group.id": f"mm2-{run}",
        **{
            f"{TARGET}.{kind}.storage.topic": f"mm2-{kind}-{run}.internal"
            for kind in ("offset", "config", "status")
        },
    }


MM2_COPYING_CONSUMER = "replication-consumer"  # in the client.id of MM2's copying consumers

HEADER = b"seq=%09d ts=%013d "  # 31 bytes
HEADER_LEN = len(HEADER % (0, 0))
SEQ, TS = slice(4, 13), slice(17, 30)

POLL_S = 0.25
TIMELINE_SLICE_S = 5.0  # the steady latency is also printed per slice of this many seconds
WARMUP_RATE = 200  # records/s before a steady phase, until the tool is seen copying
WARMUP_AFTER_S = 3.0  # and this long after that
FLOW_RECORDS = 200_000
FLOW_MESSAGES_PER_S = 5_000
FLOW_BYTES_PER_S = 1_000_000
FLOW_LIMIT = 1.10  # achieved / cap must not be above this
QUICK = {"records": 100_000, "steady_rate": 2_000, "steady_seconds": 10, "warm_records": 100_000}


# --- producing -------------------------------------------------------------------------------


class SeqProducer:
    """Record `seq` goes to partition seq % partitions with the header value; its timestamp is
    the produce time written in the header."""

    def __init__(
        self, bootstrap: str, topic: str, partitions: int, size: int, linger_ms: int
    ) -> None:
        self.topic, self.partitions, self.size = topic, partitions, size
        self.failures: list[str] = []
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": linger_ms,
                "batch.size": 1 << 20,
                "queue.buffering.max.messages": 1_000_000,
            }
        )

    def _delivered(self, err: KafkaError | None, _msg: object) -> None:
        if err is not None:
            self.failures.append(str(err))

    def send(self, seq: int) -> None:
        produced_ms = now_ms()
        value = (HEADER % (seq, produced_ms)).ljust(self.size, b".")
        while True:
            try:
                self.producer.produce(
                    self.topic,
                    value,
                    partition=seq % self.partitions,
                    timestamp=produced_ms,
                    on_delivery=self._delivered,
                )
                return
            except BufferError:
                self.producer.poll(0.05)

    def poll(self) -> None:
        self.producer.poll(0)

    def flush(self) -> None:
        left = self.producer.flush(120)
        if left or self.failures:
            raise RuntimeError(
                f"producing to {self.topic}: {left} records unsent, {len(self.failures)} failed "
                f"{self.failures[:1]}"
            )


def produce_backlog(
    bootstrap: str, topic: str, n: int, size: int, partitions: int, first_seq: int = 0
) -> float:
    """Produce records first_seq..first_seq+n-1 as fast as possible; return records/s."""
    producer = SeqProducer(bootstrap, topic, partitions, size, linger_ms=20)
    started = time.monotonic()
    for seq in range(first_seq, first_seq + n):
        producer.send(seq)
        if seq % 10_000 == 0:
            producer.poll()
    producer.flush()
    return n / (time.monotonic() - started)


def send_at_rate(producer: SeqProducer, first_seq: int, rate: float, seconds: float) -> int:
    """Send rate x seconds records from `first_seq`, evenly spread; return the next seq."""
    total = int(rate * seconds)
    started = time.monotonic()
    seq = first_seq
    while seq < first_seq + total:
        due = first_seq + min(total, int((time.monotonic() - started) * rate) + 1)
        while seq < due:
            producer.send(seq)
            seq += 1
        producer.poll()
        time.sleep(0.001)
    return seq


# --- reading back and checking ---------------------------------------------------------------


@dataclass
class TopicScan:
    """A topic read back: per partition in offset order, the sequence numbers, record
    timestamps (on the destination topics the broker's append time, ms) and latencies (record
    timestamp - produce time in the value, ms)."""

    seqs: dict[int, array]
    latency_ms: dict[int, array]
    append_ms: dict[int, array] = field(default_factory=dict)
    not_log_append_time: int = 0  # records whose timestamp is not the broker's append time

    def flat(self, what: dict[int, array]) -> np.ndarray:
        parts = [np.frombuffer(what[p], dtype=np.int64) for p in sorted(what)]
        return np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)

    def seq_range(self, min_seq: int, end_seq: int | None) -> np.ndarray:
        """Mask over the flat arrays: the records with min_seq <= seq < end_seq."""
        seqs = self.flat(self.seqs)
        wanted = seqs >= min_seq
        if end_seq is not None:
            wanted &= seqs < end_seq
        return wanted

    def latencies(self, min_seq: int = 0, end_seq: int | None = None) -> np.ndarray:
        """Latencies of the records with min_seq <= seq < end_seq."""
        return self.flat(self.latency_ms)[self.seq_range(min_seq, end_seq)]

    def appended(self, min_seq: int = 0, end_seq: int | None = None) -> np.ndarray:
        """Append times (ms) of the records with min_seq <= seq < end_seq."""
        return self.flat(self.append_ms)[self.seq_range(min_seq, end_seq)]

    def append_rate(self, min_seq: int = 0, end_seq: int | None = None) -> float | None:
        """Records/s between the first and the last append of the records with
        min_seq <= seq < end_seq: the copy's own pace, with no polling in it."""
        appended = self.appended(min_seq, end_seq)
        if appended.size < 2 or appended.max() == appended.min():
            return None
        return float((appended.size - 1) / ((appended.max() - appended.min()) / 1000))


def scan_topic(bootstrap: str, topic: str, partitions: int, timeout_s: float = 900) -> TopicScan:
    """Read every record of `topic` up to its current end, one pass, nothing kept but ints."""
    scan = TopicScan({p: array("q") for p in range(partitions)}, {})
    scan.latency_ms = {p: array("q") for p in range(partitions)}
    scan.append_ms = {p: array("q") for p in range(partitions)}
    for m in iter_messages(bootstrap, topic, partitions, timeout_s):
        p, value = m.partition(), m.value()
        ts_type, ts = m.timestamp()
        scan.seqs[p].append(int(value[SEQ]))
        scan.latency_ms[p].append(ts - int(value[TS]))
        scan.append_ms[p].append(ts)
        scan.not_log_append_time += ts_type != TIMESTAMP_LOG_APPEND_TIME
    return scan


@dataclass
class CopyCheck:
    expected: int
    copied: int
    lost: int
    duplicated: int
    unexpected: int  # records in the copy that the source range does not hold
    partitions_not_identical: int  # sequence differs from the source's (order, loss, dups)

    @property
    def ok(self) -> bool:
        bad = self.lost + self.duplicated + self.unexpected + self.partitions_not_identical
        return bad == 0 and self.copied == self.expected


def check_copy(source: Mapping[int, array], copy: Mapping[int, array]) -> CopyCheck:
    """Compare a copy with the source, partition by partition."""
    want = np.concatenate([np.frombuffer(a, dtype=np.int64) for a in source.values()])
    got = np.concatenate([np.frombuffer(a, dtype=np.int64) for a in copy.values()])
    got_distinct = np.unique(got)
    return CopyCheck(
        expected=len(want),
        copied=len(got),
        lost=int(np.setdiff1d(want, got_distinct).size),
        duplicated=len(got) - len(got_distinct),
        unexpected=int(np.setdiff1d(got_distinct, want).size),
        partitions_not_identical=sum(copy.get(p, array("q")) != s for p, s in source.items()),
    )


def prefix(scan: TopicScan, ends: Mapping[int, int]) -> dict[int, array]:
    """The first ends[p] records of each partition."""
    return {p: scan.seqs[p][:end] for p, end in ends.items()}


# --- watching a copy -------------------------------------------------------------------------


class RecordCounter:
    """Records in a topic (sum of high - low watermarks), through one long-lived consumer."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-counter"})
        self.partitions = [TopicPartition(topic, p) for p in range(partitions)]

    def count(self) -> int:
        return sum(high - low for low, high in map(self._watermarks, self.partitions))

    def _watermarks(self, tp: TopicPartition) -> tuple[int, int]:
        # Right after a topic is created the client's metadata can lag behind the broker's
        # (NOT_LEADER_FOR_PARTITION, UNKNOWN_TOPIC_OR_PART): transient, ask again.
        for attempt in range(20):
            try:
                low, high = self.consumer.get_watermark_offsets(tp, timeout=10, cached=False)
                return int(low), int(high)
            except KafkaException:
                if attempt == 19:
                    raise
                time.sleep(0.25)
        raise AssertionError("unreachable")

    def close(self) -> None:
        self.consumer.close()


@dataclass
class CopyTiming:
    launch_to_first_s: float | None = None  # the first poll that saw records
    first_count: int = 0
    launch_to_copied_s: float | None = None  # the poll that saw all of them
    records_per_s: float | None = None  # between those two polls
    # All of them over launch (warm backlog: resume) to that poll: what waiting for the tool
    # to start copying costs is in it.
    from_start_records_per_s: float | None = None
    error: str = ""


def watch_copy(
    counter: RecordCounter,
    n: int,
    launched: float,
    running: Callable[[], bool],
    timeout_s: float,
    already: int = 0,
) -> CopyTiming:
    """Poll the destination every POLL_S until it holds n records more than `already`, the tool
    stops or time is up."""
    timing = CopyTiming()
    next_poll = time.monotonic()
    while True:
        count = counter.count() - already
        now = time.monotonic()
        if count and timing.launch_to_first_s is None:
            timing.launch_to_first_s, timing.first_count = now - launched, count
        if count >= n:
            timing.launch_to_copied_s = now - launched
            span = timing.launch_to_copied_s - (timing.launch_to_first_s or 0.0)
            timing.records_per_s = (count - timing.first_count) / span if span > 0 else None
            if timing.launch_to_copied_s > 0:
                timing.from_start_records_per_s = count / timing.launch_to_copied_s
            return timing
        if not running() and counter.count() - already < n:
            timing.error = f"stopped with {count:,} of {n:,} records copied"
            return timing
        if now - launched > timeout_s:
            timing.error = f"{count:,} of {n:,} records copied after {timeout_s:.0f} s"
            return timing
        next_poll += POLL_S
        time.sleep(max(0.0, next_poll - time.monotonic()))


# --- the tools -------------------------------------------------------------------------------


@dataclass
class Bench:
    workdir: Path
    source: KafkaCluster
    destination: KafkaCluster
    partitions: int
    record_size: int
    conf: Path = Path()
    epoch_seconds: int = 0  # of the low-latency copy; 0: the job's default

    def stats_path(self, job: str) -> Path:
        return self.workdir / "wh" / job / "replication_stats"

    def copy_timeout_s(self, n: int) -> float:
        return max(600.0, n / 1000)


def job_group(
    name: str,
    source_topic: str,
    destination_topic: str,
    bench: Bench,
    *,
    continuous: bool,
    trigger_s: int | None = None,
    low_latency: bool = False,
    epoch_seconds: int = 0,
    flow_control: Mapping[str, float] | None = None,
    ends: Mapping[int, int] | None = None,
) -> dict[str, Any]:
    """A KAFKA_REPLICATION JobGroup (protobuf JSON) from cluster src to dst, own tables."""
    extension: dict[str, Any] = {
        "@type": "type.googleapis.com/uatu.v1.JobOptions",
        "output": {
            "replicationStatsPath": str(bench.stats_path(name)),
            "replicationAuditPath": str(bench.workdir / "wh" / name / "replication_audit"),
        },
    }
    if trigger_s:
        extension["trigger"] = {"intervalSeconds": trigger_s}
    if low_latency:
        extension["replication"] = {"lowLatency": True}
        if epoch_seconds:
            extension["replication"]["epochSeconds"] = epoch_seconds
    source: dict[str, Any] = {
        "cluster": "src",
        "topic": source_topic,
        "consumerGroup": f"bench-{name}",
    }
    if ends is not None:
        ranges = [{"partition": p, "startOffset": 0, "endOffset": e} for p, e in ends.items()]
        source["partitionOffsetRanges"] = {"partitionOffsetRange": ranges}
    return {
        "jobGroupId": name,
        "type": "JOB_TYPE_KAFKA_REPLICATION",
        "kafkaConsumerTaskGroup": source,
        "kafkaDispatcherTaskGroup": {"cluster": "dst", "topic": destination_topic},
        "replicationTaskGroup": {"isContinuous": continuous},
        "flowControl": dict(flow_control or {}),
        "extension": extension,
    }


@contextmanager
def spark_job(bench: Bench, group: Mapping[str, Any]) -> Iterator[subprocess.Popen[bytes]]:
    """./spark-submit.sh GROUP in its own process group; killed if still running at the end."""
    name = group["jobGroupId"]
    path = bench.workdir / f"{name}.json"
    path.write_text(json.dumps(group, indent=2))
    # One task slot per partition, as MM2 gets one task per partition (tasks.max). The
    # low-latency copy relays between epochs (jobs/replication/continuous.py epoch_layout): its
    # next epoch's tasks hold slots while the running ones copy, and the stats need one more.
    low_latency = group.get("extension", {}).get("replication", {}).get("lowLatency", False)
    slots = 2 * bench.partitions + 1 if low_latency else bench.partitions
    env = spark_submit_env(
        bench.conf,
        master=os.environ.get("BENCH_SPARK_MASTER", f"local[{slots}]"),
        driver_memory=JOB_HEAP,
    )
    spark_log(name).unlink(missing_ok=True)
    proc = submit_job(path, env, spark_log(name))
    try:
        yield proc
    finally:
        if proc.poll() is None:
            signal_group(proc.pid, signal.SIGKILL)
            proc.wait(30)


def spark_log(name: str) -> Path:
    return BENCH_DIR / f"replication-{name}.log"


def print_job_lines(name: str, limit: int = 12) -> None:
    """The job's per-batch lines (and errors) from its log, indented."""
    lines = spark_log(name).read_text(errors="replace").splitlines()
    wanted = [
        line
        for line in lines
        if re.search(r"uatu\.replication: (batch|plan)", line) or " ERROR " in line
    ]
    for line in wanted[:limit]:
        print(f"  | {line}", flush=True)
    if len(wanted) > limit:
        print(f"  | ... {len(wanted) - limit} more in {spark_log(name)}", flush=True)


@dataclass
class CopyRun:
    tool: str
    destination_topic: str
    expected: int
    job: str = ""  # JobGroup id of a Spark run
    timing: CopyTiming = field(default_factory=CopyTiming)
    exit_code: int | None = None
    launch_to_exit_s: float | None = None
    check: CopyCheck | None = None
    latency_ms: dict[str, float] | None = None
    # steady runs: latency per TIMELINE_SLICE_S of destination append time (where a tail is)
    latency_timeline: list[dict[str, float]] = field(default_factory=list)
    append_records_per_s: float | None = None  # first to last append in the destination
    error: str = ""
    round: int = 0  # of the cold backlog copies (1, 2, ...); 0 for the other phases
    position: int = 0  # 1: this tool ran first in its round, 2: second
    source_topic: str = ""
    consumer_settings: dict[str, list[str]] = field(default_factory=dict)  # MM2's, as logged
    load_1m: float | None = None  # the 1-minute load average at launch (cold backlog runs)

    @property
    def ok(self) -> bool:
        return not self.error and self.check is not None and self.check.ok


def run_spark_bounded(bench: Bench, name: str, group: Mapping[str, Any], n: int) -> CopyRun:
    """A bounded copy: watch the destination fill up, then wait for the job to exit."""
    run = CopyRun("spark", group["kafkaDispatcherTaskGroup"]["topic"], n, job=name)
    counter = RecordCounter(
        bench.destination.bootstrap_servers, run.destination_topic, bench.partitions
    )
    launched = time.monotonic()
    try:
        with spark_job(bench, group) as proc:
            run.timing = watch_copy(
                counter, n, launched, lambda: proc.poll() is None, bench.copy_timeout_s(n)
            )
            try:
                run.exit_code = proc.wait(300)
            except subprocess.TimeoutExpired:
                run.error = "still running 300 s after the copy was complete; killed"
            run.launch_to_exit_s = time.monotonic() - launched
    finally:
        counter.close()
    if run.exit_code not in (0, None):
        run.error = f"exited {run.exit_code}"
    run.error = run.error or run.timing.error
    print_job_lines(name)
    return run


def run_mm2_bounded(bench: Bench, topic: str, n: int) -> CopyRun:
    """MM2 copies `topic` (same name on the destination) until the destination holds n."""
    run = CopyRun("mm2", topic, n)
    counter = RecordCounter(bench.destination.bootstrap_servers, topic, bench.partitions)
    launched = time.monotonic()
    try:
        with mirror_maker(bench, topic) as mm2:
            run.timing = watch_copy(counter, n, launched, mm2.is_running, bench.copy_timeout_s(n))
            run.error = run.timing.error
        save_mm2_log(mm2, topic)
    finally:
        counter.close()
    check_mm2_consumers(run)
    return run


def report_copy(run: CopyRun) -> None:
    t = run.timing
    if run.error:
        say(f"  {run.tool} FAILED: {run.error}")
    rate = f"{t.records_per_s:,.0f} records/s" if t.records_per_s else "n/a"
    rate += f" ({_rate(t.from_start_records_per_s)} from the start)"
    exit_part = ""
    if run.launch_to_exit_s is not None:
        exit_part = f", exit {run.exit_code} at {run.launch_to_exit_s:.1f} s"
    say(
        f"  {run.tool}: first records at {seconds_text(t.launch_to_first_s)}, all "
        f"{run.expected:,} at {seconds_text(t.launch_to_copied_s)}{exit_part}; copy "
        f"throughput {rate}"
    )


# --- phases ----------------------------------------------------------------------------------


def ceilings(bench: Bench, n: int) -> dict[str, Any]:
    say("ceiling: ConsumerPerformance on the source topic")
    c = consumer_perf(bench.source.bootstrap_servers, SOURCE_TOPIC, n, timeout_ms=30_000)
    if c.records < n:
        raise RuntimeError(f"ConsumerPerformance read {c.records} of {n} records")
    say(
        f"  {c.records_per_s:,.0f} records/s with the group join, {c.fetch_records_per_s:,.0f} "
        f"records/s fetch time only ({c.fetch_mb_per_s:.1f} MB/s)"
    )
    say("ceiling: ProducerPerformance to a scratch topic on the destination, the job's settings")
    bench.destination.create_topic(SCRATCH_TOPIC, bench.partitions, 1)
    p = producer_perf(
        producer_perf_args(
            bench.destination.bootstrap_servers,
            SCRATCH_TOPIC,
            n,
            bench.record_size,
            acks="all",
            extra_props=PRODUCER_SETTINGS,
        )
    )
    say(
        f"  {p.records_per_s:,.0f} records/s ({p.mb_per_s:.1f} MB/s), send-to-ack p99 {p.p99_ms} ms"
    )
    return {"consumer": asdict(c), "producer": asdict(p)}


TOOLS = ("spark", "mm2")
LOW_LATENCY = "spark-ll"  # the job with extension.replication.low_latency (steady phase only)
STEADY_TOOLS = (LOW_LATENCY, "spark", "mm2")


def is_spark(tool: str) -> bool:
    return tool in ("spark", LOW_LATENCY)


def round_order(round_no: int) -> tuple[str, ...]:
    """The tools in the order they copy in round `round_no` (1, 2, ...): round 1 the Spark job
    first, round 2 MM2 first, and so on alternating."""
    if round_no < 1:
        raise ValueError(f"rounds count from 1, got {round_no}")
    return TOOLS if round_no % 2 else TOOLS[::-1]


def round_source_topic(round_no: int) -> str:
    """Each round copies its own source topic holding the same N records: MM2 names its copy
    after the source, so a second MM2 copy of one topic would land in the first's."""
    return SOURCE_TOPIC if round_no == 1 else f"{SOURCE_TOPIC}-r{round_no}"


def backlog_copies(bench: Bench, n: int, rounds: int) -> list[CopyRun]:
    """`rounds` rounds of one cold bounded copy per tool, in round_order."""
    runs = []
    for round_no in range(1, rounds + 1):
        topic = round_source_topic(round_no)
        order = round_order(round_no)
        say(f"cold backlog, round {round_no} of {rounds}: {' then '.join(order)}, from {topic}")
        for position, tool in enumerate(order, start=1):
            load_1m = os.getloadavg()[0]
            if tool == "spark":
                name, copy_topic = f"backlog-r{round_no}", f"{SPARK_COPY}-r{round_no}"
                say(f"Spark job: bounded copy {topic} -> {copy_topic}")
                bench.destination.create_topic(copy_topic, bench.partitions, 1, LOG_APPEND_TIME)
                group = job_group(name, topic, copy_topic, bench, continuous=False, trigger_s=1)
                run = run_spark_bounded(bench, name, group, n)
            else:
                say(f"MirrorMaker 2: {topic} -> {topic} on the destination")
                bench.destination.create_topic(topic, bench.partitions, 1, LOG_APPEND_TIME)
                run = run_mm2_bounded(bench, topic, n)
            run.round, run.position, run.source_topic = round_no, position, topic
            run.load_1m = load_1m
            report_copy(run)
            runs.append(run)
    return runs


def check_backlog(bench: Bench, runs: list[CopyRun]) -> TopicScan:
    """Check every copy against its round's source; return the first round's source."""
    say("correctness: reading each round's source and its copies back")
    started = time.monotonic()
    sources: dict[str, TopicScan] = {}
    for run in runs:
        if run.source_topic not in sources:
            sources[run.source_topic] = scan_topic(
                bench.source.bootstrap_servers, run.source_topic, bench.partitions
            )
        copy = scan_topic(
            bench.destination.bootstrap_servers, run.destination_topic, bench.partitions
        )
        finish_check(run, sources[run.source_topic].seqs, copy)
    say(f"  read {len(runs) + len(sources)} topics in {time.monotonic() - started:.1f} s")
    return sources[SOURCE_TOPIC]


def round_medians(runs: list[CopyRun]) -> dict[str, dict[str, float | None]]:
    """Per tool, the median over its cold backlog runs of: polled and by-append throughput,
    launch to every record copied, and (the Spark job) launch to exit. A figure no run
    measured is None."""
    medians: dict[str, dict[str, float | None]] = {}
    for tool in TOOLS:
        mine = [r for r in runs if r.tool == tool]
        if not mine:
            continue
        figures: dict[str, list[float | None]] = {
            "records_per_s": [r.timing.records_per_s for r in mine],
            "append_records_per_s": [r.append_records_per_s for r in mine],
            "launch_to_copied_s": [r.timing.launch_to_copied_s for r in mine],
            "launch_to_exit_s": [r.launch_to_exit_s for r in mine],
        }
        medians[tool] = {
            name: median_or_none([v for v in values if v is not None])
            for name, values in figures.items()
        }
        medians[tool]["runs"] = len(mine)
    return medians


def median_ratios(medians: Mapping[str, Mapping[str, float | None]]) -> dict[str, float | None]:
    """Spark job / MM2 of the median throughputs (polled, by append), and of the median
    launch-to-done times; None where either median is missing."""

    def ratio(key: str) -> float | None:
        a, b = medians.get("spark", {}).get(key), medians.get("mm2", {}).get(key)
        return a / b if a and b else None

    return {
        "polled": ratio("records_per_s"),
        "by_append": ratio("append_records_per_s"),
        "launch_to_done": ratio("launch_to_copied_s"),
    }


def finish_check(
    run: CopyRun,
    source: Mapping[int, array],
    copy: TopicScan,
    min_seq: int = 0,
    end_seq: int | None = None,
) -> None:
    """Check the copy against the source; latency of the records min_seq <= seq < end_seq."""
    run.check = check_copy(source, copy.seqs)
    run.latency_ms = latency_quantiles(copy.latencies(min_seq, end_seq))
    run.append_records_per_s = copy.append_rate(min_seq, end_seq)
    c = run.check
    say(
        f"  {run.tool} -> {run.destination_topic}: {c.copied:,} of {c.expected:,} records, "
        f"lost {c.lost}, duplicated {c.duplicated}, unexpected {c.unexpected}, partitions not "
        f"identical to the source {c.partitions_not_identical} -> {'OK' if c.ok else 'BAD'}"
    )
    if copy.not_log_append_time:
        say(f"  WARNING: {copy.not_log_append_time} records without LogAppendTime timestamps")
    if run.latency_ms:
        lat = run.latency_ms
        say(f"  latency p50 {lat['p50']:,.0f} ms, p99 {lat['p99']:,.0f} ms, max {lat['max']:,.0f}")


def say_timeline(timeline: Sequence[Mapping[str, float]]) -> None:
    """The steady latency slice by slice, one line each."""
    for piece in timeline:
        say(
            f"    from {piece['from_s']:>5.0f} s: {piece['records']:>7,} records, p50 "
            f"{piece['p50']:>6,.0f} ms, p99 {piece['p99']:>6,.0f} ms, max {piece['max']:>6,.0f} ms"
        )


def mirror_maker(bench: Bench, topic: str) -> MirrorMakerProcess:
    """MM2 copying `topic` (same name on the destination) with the job's producer and source
    fetch settings, the job's heap and collector, and its own worker group and internal
    topics."""
    return start_mirror_maker(
        bench.workdir / f"mm2-{topic}",
        bench.source.bootstrap_servers,
        bench.destination.bootstrap_servers,
        re.escape(topic),
        tasks=bench.partitions,
        extra={**MM2_EXTRA, **mm2_own_state(topic)},
        heap=JOB_HEAP,
        gc=G1_GC,  # the job's JVM runs the JVM's default, G1
        log_consumer_configs=True,  # the proof that MM2_EXTRA reached the consumers
    )


def mm2_log(topic: str) -> Path:
    return BENCH_DIR / f"replication-mm2-{topic}.log"


def save_mm2_log(mm2: MirrorMakerProcess, topic: str) -> None:
    shutil.copy(mm2.log_path, mm2_log(topic))


def logged_fetch_settings(
    configs: list[dict[str, str]], wanted: Mapping[str, str]
) -> dict[str, list[str]]:
    """Per setting of `wanted`, the distinct values the logged consumer `configs` ran with
    (sorted; empty for no consumer logged)."""
    return {k: sorted({c.get(k, "<not logged>") for c in configs}) for k in wanted}


def fetch_settings_error(logged: Mapping[str, list[str]], wanted: Mapping[str, str]) -> str:
    """ "" when every logged consumer ran with `wanted`, else what differed."""
    wrong = {k: v for k, v in logged.items() if v != [wanted[k]]}
    if not wrong:
        return ""
    return f"MM2's copying consumers ran with {wrong}, not the job's fetch settings {wanted}"


def check_mm2_consumers(run: CopyRun) -> None:
    """Read the fetch settings of MM2's copying consumers from its saved log into `run`; an
    error on the run if they are not the job's (RANGE_FETCH_CONFIG)."""
    configs = logged_consumer_configs(
        mm2_log(run.destination_topic).read_text(errors="replace"), MM2_COPYING_CONSUMER
    )
    run.consumer_settings = logged_fetch_settings(configs, RANGE_FETCH_CONFIG)
    say(f"  MM2's {len(configs)} copying consumers ran with {run.consumer_settings}")
    run.error = run.error or fetch_settings_error(run.consumer_settings, RANGE_FETCH_CONFIG)


@dataclass
class ContinuousCopy:
    """A tool copying a topic until stopped, in its own process group (pgid)."""

    running: Callable[[], bool]
    stop: Callable[[], int | None]  # -> exit code (None for MM2)
    pgid: int

    @contextmanager
    def paused(self) -> Iterator[None]:
        """SIGSTOP the whole tool (driver, executors, every thread) and SIGCONT it at the end:
        the JVM keeps its compiled code and its clients, only time passes."""
        signal_group(self.pgid, signal.SIGSTOP)
        try:
            yield
        finally:
            signal_group(self.pgid, signal.SIGCONT)


def start_continuous(stack: ExitStack, bench: Bench, tool: str, topic: str) -> ContinuousCopy:
    """Start `tool` copying `topic` (same name on the destination) until stopped."""
    if is_spark(tool):
        group = job_group(
            topic,
            topic,
            topic,
            bench,
            continuous=True,
            trigger_s=1,
            low_latency=tool == LOW_LATENCY,
            epoch_seconds=bench.epoch_seconds,
        )
        proc = stack.enter_context(spark_job(bench, group))

        def stop_spark() -> int | None:
            proc.send_signal(signal.SIGTERM)  # spark-submit.sh creates the job's stop file
            return proc.wait(120)

        return ContinuousCopy(lambda: proc.poll() is None, stop_spark, proc.pid)
    mm2 = stack.enter_context(mirror_maker(bench, topic))

    def stop_mm2() -> None:
        mm2.stop()
        save_mm2_log(mm2, topic)

    return ContinuousCopy(mm2.is_running, stop_mm2, mm2.pid)


def warm_up(
    producer: SeqProducer, counter: RecordCounter, running: Callable[[], bool], timeout_s: float
) -> int | None:
    """Trickle WARMUP_RATE records/s until the first copies arrive, then WARMUP_AFTER_S more;
    return the next sequence number, None if nothing arrived."""
    started, seq = time.monotonic(), 0
    while counter.count() == 0:
        if not running() or time.monotonic() - started > timeout_s:
            return None
        seq = send_at_rate(producer, seq, WARMUP_RATE, 0.5)
    say(f"  first copies after {time.monotonic() - started:.1f} s")
    return send_at_rate(producer, seq, WARMUP_RATE, WARMUP_AFTER_S)


def steady_phase(
    bench: Bench, tool: str, rate: float, seconds: float, warm_records: int
) -> tuple[CopyRun, CopyRun | None]:
    """One tool copying continuously while records arrive at `rate`: latency of those records.
    Then, if warm_records, the warm backlog: the tool is paused while warm_records more are
    produced, resumed, and its copy throughput measured as in the cold backlog copy."""
    topic = f"steady-{tool}"
    bench.source.create_topic(topic, bench.partitions, 1)
    bench.destination.create_topic(topic, bench.partitions, 1, LOG_APPEND_TIME)
    run = CopyRun(tool, topic, 0, job=topic if is_spark(tool) else "")
    warm: CopyRun | None = None
    producer = SeqProducer(
        bench.source.bootstrap_servers, topic, bench.partitions, bench.record_size, linger_ms=5
    )
    counter = RecordCounter(bench.destination.bootstrap_servers, topic, bench.partitions)
    with ExitStack() as stack:
        stack.callback(counter.close)
        copier = start_continuous(stack, bench, tool, topic)
        launched = time.monotonic()
        steady_from = warm_up(producer, counter, copier.running, bench.copy_timeout_s(0))
        if steady_from is None:
            run.error = "nothing copied during the warm-up"
            return run, None
        say(f"  producing {rate:,.0f} records/s for {seconds:.0f} s")
        run.expected = send_at_rate(producer, steady_from, rate, seconds)
        producer.flush()
        run.timing = watch_copy(counter, run.expected, launched, copier.running, 600)
        if warm_records and not run.timing.error:
            warm = warm_backlog(bench, tool, copier, counter, topic, run.expected, warm_records)
        run.exit_code = copier.stop()
        if run.exit_code is not None:
            say(f"  SIGTERM -> exit {run.exit_code}")
        run.error = run.timing.error or ("" if run.exit_code in (0, None) else "bad exit")
        if tool == "mm2":
            check_mm2_consumers(run)
    source = scan_topic(bench.source.bootstrap_servers, topic, bench.partitions)
    copy = scan_topic(bench.destination.bootstrap_servers, topic, bench.partitions)
    finish_check(run, source.seqs, copy, min_seq=steady_from, end_seq=run.expected)
    run.latency_timeline = latency_timeline(
        copy.appended(steady_from, run.expected),
        copy.latencies(steady_from, run.expected),
        TIMELINE_SLICE_S,
    )
    say_timeline(run.latency_timeline)
    if warm is not None:
        warm.check = run.check  # one topic: the check covers the steady and the warm records
        warm.latency_ms = latency_quantiles(copy.latencies(run.expected))
        warm.append_records_per_s = copy.append_rate(run.expected)
        say(f"  warm backlog by append times: {_rate(warm.append_records_per_s)} records/s")
        warm.error = warm.error or run.error
    return run, warm


def warm_backlog(
    bench: Bench,
    tool: str,
    copier: ContinuousCopy,
    counter: RecordCounter,
    topic: str,
    first: int,
    n: int,
) -> CopyRun:
    """Records first..first+n-1 produced while the running tool is paused; its copy
    throughput after it is resumed (its JVM compiled the copy path in the steady phase)."""
    run = CopyRun(tool, topic, n, job=topic if is_spark(tool) else "")
    say(f"  warm backlog: pausing the tool (SIGSTOP), producing {n:,} records")
    with copier.paused():
        rate = produce_backlog(
            bench.source.bootstrap_servers,
            topic,
            n,
            bench.record_size,
            bench.partitions,
            first_seq=first,
        )
        say(f"  {n:,} records at {rate:,.0f} records/s; resuming the tool (SIGCONT)")
    resumed = time.monotonic()
    run.timing = watch_copy(
        counter, n, resumed, copier.running, bench.copy_timeout_s(n), already=first
    )
    run.error = run.timing.error
    report_copy(run)
    return run


@dataclass
class FlowRun:
    job: str
    cap_name: str  # messagesPerSec | bytesPerSec
    cap: float
    copy: CopyRun
    ends: dict[int, int]
    batches: list[tuple[int, float, int, int]] = field(default_factory=list)
    achieved: float | None = None  # records/s or bytes/s over the batches after the first
    most_in_10s: int = 0  # records appended within any 10 s (destination LogAppendTime)
    most_in_1s: int = 0
    record_size: int = 0  # bytes a record counts against bytesPerSec

    @property
    def ratio(self) -> float | None:
        return None if self.achieved is None else self.achieved / self.cap


def most_in_window(append_ms: np.ndarray, window_ms: int) -> int:
    """The most records whose append times fall within any `window_ms` (t - window, t]."""
    if append_ms.size == 0:
        return 0
    t = np.sort(append_ms)
    low = np.searchsorted(t, t - window_ms, side="right")
    return int((np.arange(t.size) - low + 1).max())


def flow_runs(
    bench: Bench, source: TopicScan, records: int, caps: Mapping[str, float]
) -> list[FlowRun]:
    """Bounded copies of the first `records` source records, one per flow-control cap."""
    per_partition = records // bench.partitions
    ends = {p: min(per_partition, len(source.seqs[p])) for p in range(bench.partitions)}
    runs = []
    for cap_name, cap in caps.items():
        name = f"flow-{cap_name.removesuffix('PerSec')}"
        say(f"flow control: bounded copy of {sum(ends.values()):,} records, {cap_name}={cap:,}")
        bench.destination.create_topic(name, bench.partitions, 1, LOG_APPEND_TIME)
        group = job_group(
            name,
            SOURCE_TOPIC,
            name,
            bench,
            continuous=False,
            flow_control={cap_name: cap},
            ends=ends,
        )
        run = run_spark_bounded(bench, name, group, sum(ends.values()))
        report_copy(run)
        copy = scan_topic(bench.destination.bootstrap_servers, name, bench.partitions)
        finish_check(run, prefix(source, ends), copy)
        appended = copy.flat(copy.append_ms)
        runs.append(
            FlowRun(
                name,
                cap_name,
                cap,
                run,
                ends,
                most_in_10s=most_in_window(appended, 10_000),
                most_in_1s=most_in_window(appended, 1000),
                record_size=bench.record_size,
            )
        )
    return runs


# --- the job's own tables --------------------------------------------------------------------


def job_stats(spark: Any, path: Path) -> dict[str, Any]:
    """Records and replication-latency-ms quantiles (merged KLL sketches) of one job."""
    from pyspark.sql import functions as F

    stats = spark.read.format("delta").load(str(path))
    sketch = F.kll_merge_agg_bigint("replication_latency_kll_sketch")
    row = (
        stats.agg(
            F.sum("records_replicated").alias("records"),
            F.sum("records_already_present").alias("already_present"),
            F.countDistinct("batch_id").alias("batches"),
            F.max("replication_latency_ms_p99").alias("max_batch_p99"),
            sketch.alias("sketch"),
        )
        .select(
            "records",
            "already_present",
            "batches",
            "max_batch_p99",
            F.kll_sketch_get_quantile_bigint("sketch", F.lit(0.5)).alias("p50"),
            F.kll_sketch_get_quantile_bigint("sketch", F.lit(0.99)).alias("p99"),
        )
        .first()
    )
    return row.asDict() if row else {}


def flow_batches(spark: Any, path: Path) -> list[tuple[int, float, int, int]]:
    """(batch_id, batch_time epoch s, records, record bytes) per batch that copied records."""
    from pyspark.sql import functions as F

    rows = (
        spark.read.format("delta")
        .load(str(path))
        .groupBy("batch_id")
        .agg(
            F.min(F.unix_micros("batch_time")).alias("t"),
            F.sum("records_replicated").alias("records"),
            F.sum("record_bytes_replicated").alias("bytes"),
        )
        .where("records > 0")
        .orderBy("batch_id")
        .collect()
    )
    return [(r["batch_id"], r["t"] / 1e6, r["records"], r["bytes"]) for r in rows]


def achieved_rate(run: FlowRun) -> float | None:
    """Records (or bytes) of the batches after the first over the time between their ends."""
    if len(run.batches) < 2:
        return None
    span = run.batches[-1][1] - run.batches[0][1]
    column = 2 if run.cap_name == "messagesPerSec" else 3
    amount = sum(b[column] for b in run.batches[1:])
    return amount / span if span > 0 else None


def read_job_tables(bench: Bench, flows: list[FlowRun], copies: list[CopyRun]) -> dict[str, Any]:
    """replication_stats of the backlog and steady copies (`job` names them) and flow runs."""
    say("reading the jobs' replication_stats tables (local SparkSession)")
    spark = table_session("uatu-replication-bench", bench.workdir, driver_memory="1g")
    try:
        stats = {run.job: job_stats(spark, bench.stats_path(run.job)) for run in copies}
        for flow in flows:
            flow.batches = flow_batches(spark, bench.stats_path(flow.job))
            flow.achieved = achieved_rate(flow)
    finally:
        spark.stop()
    for run in copies:
        s = stats[run.job]
        copied = run.check.copied if run.check else None
        say(
            f"  {run.job}: {s.get('records')} records replicated (destination holds {copied}), "
            f"{s.get('already_present')} already present, {s.get('batches')} batches; "
            f"replication-latency-ms p50 {s.get('p50')}, p99 {s.get('p99')} (merged KLL "
            f"sketches), largest per-batch p99 {s.get('max_batch_p99')}"
        )
        if copied is not None and s.get("records") != copied:
            say("  NOTE: the table does not count every copied record (a batch cut short?)")
    for flow in flows:
        report_flow(flow)
    return stats


def report_flow(flow: FlowRun) -> None:
    unit = "records/s" if flow.cap_name == "messagesPerSec" else "bytes/s"
    steps = [(b[2], round(b[1] - prev[1], 1)) for prev, b in pairwise(flow.batches)]
    first = flow.batches[0][2] if flow.batches else 0
    achieved = "n/a" if flow.achieved is None else f"{flow.achieved:,.0f} {unit}"
    say(
        f"  {flow.cap_name}={flow.cap:,.0f}: first batch {first} records, then (records, "
        f"s since the previous batch) {steps}; achieved {achieved} = "
        f"{_ratio(flow.ratio)} of the cap"
    )
    size = 1 if flow.cap_name == "messagesPerSec" else flow.record_size
    for seconds, most in ((10, flow.most_in_10s), (1, flow.most_in_1s)):
        say(
            f"  most in any {seconds} s of append time: {most:,} records = "
            f"{_ratio(most * size / (flow.cap * seconds))} of the cap"
        )


# --- summary ---------------------------------------------------------------------------------


ORDINAL = {1: "1st", 2: "2nd"}


def _ratio(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}x"


def _pair(latency: dict[str, float] | None) -> str:
    return "n/a" if latency is None else f"{latency['p50']:,.0f} / {latency['p99']:,.0f}"


def _ratio_of(a: float | None, b: float | None) -> str:
    return _ratio(a / b if a and b else None)


def _rate(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.0f}"


def summarize(
    ceiling: dict[str, Any],
    backlog: list[CopyRun],
    steady: list[CopyRun],
    warm: list[CopyRun],
    flows: list[FlowRun],
    stats: dict[str, Any],
) -> None:
    consumer = ceiling["consumer"]["fetch_records_per_s"]
    producer = ceiling["producer"]["records_per_s"]
    limit = min(consumer, producer)
    steady_lat = {r.tool: r.latency_ms for r in steady}
    print(
        f"\n{'':36} {'records/s':>9} {'by append':>9} {'from start':>10} {'x ceiling':>9} "
        f"{'launch->done':>13} "
        f"{'lost':>5} {'dup':>5} {'backlog p99':>11} {'load 1m':>7}"
    )
    for label, rate in (
        ("consumer-perf ceiling (fetch)", consumer),
        ("producer-perf ceiling", producer),
    ):
        print(f"{label:36} {_rate(rate):>9} {'':>9} {'':>10} {rate / limit:>8.2f}x")
    labels = {
        "spark": "Spark replication job",
        LOW_LATENCY: "Spark job, low-latency",
        "mm2": "MirrorMaker 2",
    }
    rows = [(f"{labels[r.tool]}, cold r{r.round} ({ORDINAL[r.position]})", r) for r in backlog]
    rows += [(f"{labels[r.tool]}, warm backlog", r) for r in warm]
    for label, run in rows:
        rate = run.timing.records_per_s
        done_text = seconds_text(run.timing.launch_to_copied_s)
        if run.launch_to_exit_s is not None:
            done_text += f" ({run.launch_to_exit_s:.0f})"
        c = run.check
        print(
            f"{label:36} {_rate(rate):>9} {_rate(run.append_records_per_s):>9} "
            f"{_rate(run.timing.from_start_records_per_s):>10} "
            f"{_ratio(rate / limit if rate else None):>9} {done_text:>13} "
            f"{c.lost if c else 'n/a':>5} {c.duplicated if c else 'n/a':>5} "
            f"{_rate(run.latency_ms['p99'] if run.latency_ms else None):>11} "
            f"{'' if run.load_1m is None else f'{run.load_1m:.1f}':>7}"
        )
    print(
        "(records/s: polled destination count, first poll with records to the poll with all; by "
        "append: first to last\n LogAppendTime of the copy; from start: all records over "
        "launch->done; launch->done: until every record "
        "was in the destination, from the\n resume for a warm backlog, in brackets the job's "
        "exit; a warm backlog's lost/dup cover its whole steady topic; load 1m: at launch)"
    )
    for run in steady:
        print(f"steady {labels[run.tool]}: latency p50 / p99 {_pair(steady_lat[run.tool])} ms")
    medians = round_medians(backlog)
    print(
        f"\ncold backlog, median per tool over {max((r.round for r in backlog), default=0)} rounds:"
    )
    for tool, m in medians.items():
        print(
            f"  {labels[tool]:22} {_rate(m['records_per_s']):>9} records/s polled, "
            f"{_rate(m['append_records_per_s']):>9} by append, launch->done "
            f"{seconds_text(m['launch_to_copied_s'])}"
            + ("" if m["launch_to_exit_s"] is None else f", to exit {m['launch_to_exit_s']:.1f} s")
        )
    ratios = median_ratios(medians)
    print(
        f"Spark / MM2, cold backlog (ratio of the medians): {_ratio(ratios['polled'])} polled, "
        f"{_ratio(ratios['by_append'])} by append; launch->done {_ratio(ratios['launch_to_done'])}"
    )
    by_tool = {r.tool: r for r in warm}
    mm2_run = by_tool.get("mm2")
    for tool in ("spark", LOW_LATENCY):
        spark_run = by_tool.get(tool)
        if spark_run is None or mm2_run is None:
            continue
        polled = _ratio_of(spark_run.timing.records_per_s, mm2_run.timing.records_per_s)
        appended = _ratio_of(spark_run.append_records_per_s, mm2_run.append_records_per_s)
        resumed = _ratio_of(
            spark_run.timing.from_start_records_per_s, mm2_run.timing.from_start_records_per_s
        )
        print(
            f"{labels[tool]} / MM2 copy throughput, warm backlog: {resumed} from the resume, "
            f"{polled} polled from the first copied record, {appended} by append"
        )
    for tool in ("spark", LOW_LATENCY):
        ours, theirs = steady_lat.get(tool), steady_lat.get("mm2")
        if ours and theirs:
            p50, p99 = (_ratio_of(ours[q], theirs[q]) for q in ("p50", "p99"))
            print(f"{labels[tool]} / MM2 steady latency: p50 {p50}, p99 {p99}")
    spark_rate = medians.get("spark", {}).get("records_per_s")
    if spark_rate:
        print(
            f"Spark (median, cold) / ceiling: {spark_rate / limit:.2f}x "
            f"(ceiling = min(consumer fetch, producer) = {limit:,.0f} records/s)"
        )
    for flow in flows:
        verdict = "n/a"
        if flow.ratio is not None:
            verdict = "within" if flow.ratio <= FLOW_LIMIT else "ABOVE"
            verdict += f" the {FLOW_LIMIT:.2f}x limit; {1 - flow.ratio:.1%} below the cap"
        print(
            f"flow control {flow.cap_name}={flow.cap:,.0f}: achieved {_ratio(flow.ratio)} "
            f"of the cap ({verdict})"
        )
    for job, s in stats.items():
        print(f"job stats {job}: replication-latency-ms p50 {s.get('p50')} p99 {s.get('p99')}")


# --- main ------------------------------------------------------------------------------------


def bench(args: argparse.Namespace, workdir: Path) -> tuple[bool, dict[str, Any]]:
    n = args.records
    load = {"start": os.getloadavg()}
    with ExitStack() as stack:
        say("starting two single-broker clusters")
        src = stack.enter_context(start_cluster(workdir / "kafka-source", heap="1g"))
        dst = stack.enter_context(start_cluster(workdir / "kafka-destination", heap="1g"))
        b = Bench(workdir, src, dst, args.partitions, args.record_size)
        b.epoch_seconds = args.epoch_seconds
        b.conf = write_conf_dir(
            workdir / "conf",
            src.bootstrap_servers,
            workdir / "wh",
            workdir / "ck",
            more_clusters={
                "src": {"bootstrap_servers": src.bootstrap_servers},
                "dst": {"bootstrap_servers": dst.bootstrap_servers},
            },
        )
        say(f"source {src.bootstrap_servers}, destination {dst.bootstrap_servers}; producing")
        for round_no in range(1, args.rounds + 1):
            topic = round_source_topic(round_no)
            src.create_topic(topic, args.partitions, 1)
            rate = produce_backlog(
                src.bootstrap_servers, topic, n, args.record_size, args.partitions
            )
            say(f"  {topic}: {n:,} records of {args.record_size} bytes at {rate:,.0f} records/s")
        ceiling = ceilings(b, n)
        backlog = backlog_copies(b, n, args.rounds)
        source = check_backlog(b, backlog)
        say("(backlog latency = destination append time - produce time: mostly backlog wait)")
        steady, warm = [], []
        if args.steady_seconds > 0:
            for tool in args.steady_tools:
                say(f"steady rate, {tool}: continuous copy of steady-{tool}")
                steady_run, warm_run = steady_phase(
                    b, tool, args.steady_rate, args.steady_seconds, args.warm_records
                )
                steady.append(steady_run)
                if warm_run is not None:
                    warm.append(warm_run)
        caps = {"messagesPerSec": args.flow_messages, "bytesPerSec": args.flow_bytes}
        flows = flow_runs(b, source, min(n, FLOW_RECORDS), caps)
        load["end"] = os.getloadavg()
        say("stopping the clusters")
    copies = [r for r in (*backlog, *steady) if is_spark(r.tool)]
    stats = read_job_tables(b, flows, copies)
    summarize(ceiling, backlog, steady, warm, flows, stats)
    runs = [*backlog, *steady, *warm, *(f.copy for f in flows)]
    failed = [r for r in runs if not r.ok]
    for run in failed:
        say(f"FAILED: {run.tool} -> {run.destination_topic}: {run.error or run.check}")
    medians = round_medians(backlog)
    result = {
        "records": n,
        "record_size": args.record_size,
        "partitions": args.partitions,
        "rounds": args.rounds,
        "job_heap": JOB_HEAP,
        "job_fetch_config": RANGE_FETCH_CONFIG,
        "mm2_extra": MM2_EXTRA,
        "load_average": load,
        "ceiling": ceiling,
        "backlog": [asdict(r) for r in backlog],
        "backlog_median": medians,
        "backlog_median_ratio": median_ratios(medians),
        "steady": [asdict(r) for r in steady],
        "warm_backlog": [asdict(r) for r in warm],
        "flow_control": [{**asdict(f), "ratio": f.ratio} for f in flows],
        "job_stats": stats,
    }
    return not failed, result


def main(argv: list[str] | None = None) -> int:
    parser = bench_parser("bench.replication_bench", __doc__)
    parser.add_argument(
        "--records", type=int, default=1_000_000, help="records in the source topic"
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=2,
        help="rounds of cold backlog copies; the tools' order alternates (1: Spark first)",
    )
    parser.add_argument("--record-size", type=int, default=200, help="value bytes per record")
    parser.add_argument("--partitions", type=int, default=4, help="partitions of every topic")
    parser.add_argument(
        "--steady-tools",
        type=lambda text: tuple(t for t in text.split(",") if t),
        default=STEADY_TOOLS,
        help=f"tools of the steady and warm phases, in order, from {','.join(STEADY_TOOLS)} "
        "(spark-ll: the job's low-latency copy, extension.replication.low_latency)",
    )
    parser.add_argument(
        "--epoch-seconds",
        type=int,
        default=0,
        help="extension.replication.epochSeconds of spark-ll (0: the job's default)",
    )
    parser.add_argument("--steady-rate", type=float, default=5_000, help="records/s, steady phase")
    parser.add_argument(
        "--steady-seconds", type=float, default=30, help="steady phase length per tool (0: skip)"
    )
    parser.add_argument(
        "--warm-records",
        type=int,
        default=1_000_000,
        help="records of the warm backlog after each steady phase (0: skip)",
    )
    parser.add_argument(
        "--flow-messages",
        type=float,
        default=FLOW_MESSAGES_PER_S,
        help="flowControl.messagesPerSec of the first flow-control run",
    )
    parser.add_argument(
        "--flow-bytes",
        type=float,
        default=FLOW_BYTES_PER_S,
        help="flowControl.bytesPerSec of the second flow-control run",
    )
    args = parse_args(parser, argv, QUICK)
    if args.rounds < 1:
        parser.error(f"--rounds must be at least 1, got {args.rounds}")
    if args.record_size < HEADER_LEN:
        parser.error(f"--record-size must be at least {HEADER_LEN} (the seq/ts header)")
    warn_if_jobs_zip_stale()
    with work_dir("replication-") as workdir:
        say(
            f"bench dir {workdir}: {args.records:,} records of {args.record_size} bytes, "
            f"{args.partitions} partitions"
        )
        started = time.monotonic()
        ok, result = bench(args, workdir)
    result["wall_s"] = time.monotonic() - started
    write_latest(RESULT_PATH, result)
    say(f"whole bench {result['wall_s']:.0f} s; result written to {RESULT_PATH}")
    say(f"run recorded in {write_result('replication', result, args, argv=argv)}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
