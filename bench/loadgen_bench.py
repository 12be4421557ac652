"""The load generators against Kafka's own perf tools, in the same run on one private broker.

`make bench-loadgen`. Not a timed test: it prints the figures, writes them to
var/bench/loadgen-bench-result.json (the latest run) and docs/benchmarks/loadgen-<UTC time>-<short
commit>.json (bench/_common.py: the commit, the machine and the command line), and exits 1
only if a run failed or a count was wrong.

Setup: a fresh single broker (heap 1g) under var/bench/; every topic has --partitions
partitions and message.timestamp.type=LogAppendTime, so each record's timestamp is when the
broker appended it.

1. Producer, --rounds rounds in alternating order (kafka-producer-perf-test first in even
   rounds, LOAD_GEN_PRODUCE first in odd ones), each on a fresh topic: N (--records) records of
   --record-size value bytes, no key, with --acks, both with the same producer settings
   (`jobs/loadgen/spec.py` ProduceSpec.producer_config: linger.ms 10, batch.size 256 KiB,
   acks=all with idempotence, or acks=1 without). The workload of LOAD_GEN_PRODUCE is the
   JobGroup examples/loadgen-bench.json with the record count, size and acks filled in; it
   runs with ./spark-submit.sh --once on local[2] (2 cores), unpaced (no flow control).
   Throughput, measured the same way for both: records / (last append - first append) from
   the broker's LogAppendTime of every record (and each tool's own figure, for reference).
2. Consumer, the same alternation, on the first LOAD_GEN_PRODUCE topic (the benchmark's
   consume workload is produced by LOAD_GEN_PRODUCE): kafka-consumer-perf-test's
   fetch.nMsg.sec (its start-up and group join left out) against LOAD_GEN_CONSUME --once
   (fresh checkpoint and table each time) reading the same N records in micro-batches of
   --consume-batch-records. The job's figures come from its progress lines: records over its
   fetch time (first to last fetch of a batch's fold tasks) and over its batch time (the whole
   foreachBatch: planning, the fold, the Delta append, the group commit). The rate held
   against the target is the batch rate of the batches after the first, the steady state of a
   streaming job; the first batch also pays the JVM's and Delta's first-use costs, which are
   start-up, as kafka-consumer-perf-test's JVM start is. All-batches and fetch rates are
   reported next to it. Every consume run must count N records, 0 lost, 0 duplicated.

Targets: producer >= 0.7x, consumer >= 0.5x, from the medians of the rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from statistics import median
from typing import Any

from google.protobuf import json_format
from uber.data.kafka.datatransfer.job_group_pb2 import JobGroup

from bench._common import BENCH_DIR, say, write_latest, write_result
from bench.kafka_perf import (
    consumer_perf,
    parse_producer_output,
    producer_perf,
    producer_perf_args,
)
from core.config import load_settings
from core.paths import ROOT
from devservices.kafka import KafkaCluster, start_cluster
from jobs.loadgen.spec import produce_spec
from testing.conf import write_conf_dir
from testing.topic_data import iter_messages

RESULT_PATH = BENCH_DIR / "loadgen-bench-result.json"
WORKLOAD = ROOT / "examples" / "loadgen-bench.json"
TARGETS = {"producer": 0.7, "consumer": 0.5}
LOG_APPEND_TIME = {"message.timestamp.type": "LogAppendTime"}
QUICK_RECORDS = 200_000
BATCH_FIELDS = ("batch", "records", "fetch_ms", "lost", "duplicated", "batch_ms")
FLUSH_LINE = re.compile(r"rows of batches [\d, ]+ written in ([\d.]+) s")
CONSUME_LINE = re.compile(
    r"batch (\d+), [\d.]+ MB, [\d.]+ MB\.sec, (\d+) nMsg, [\d.]+ nMsg\.sec, "
    r"fetch\.time\.ms (\d+), .*, lost ([+-]\d+), duplicated (\d+), .*batch\.time\.ms (\d+) "
)


def append_rate(bootstrap: str, topic: str, partitions: int) -> dict[str, float]:
    """Records and records/s between the first and the last broker append of `topic`."""
    first = last = None
    count = 0
    for m in iter_messages(bootstrap, topic, partitions, timeout_s=600):
        kind, ts = m.timestamp()
        if kind != 2:
            raise RuntimeError(f"{topic}: records without LogAppendTime")
        first = ts if first is None else min(first, ts)
        last = ts if last is None else max(last, ts)
        count += 1
    span = ((last or 0) - (first or 0)) / 1000
    return {"records": count, "span_s": span, "records_per_s": (count - 1) / span if span else 0}


def spark_submit(group: dict, workdir: Path, conf: Path, name: str) -> tuple[int, str, float]:
    """./spark-submit.sh GROUP --once; exit status, log text, wall seconds."""
    path = workdir / f"{name}.json"
    path.write_text(json.dumps(group, indent=2))
    env = {k: v for k, v in os.environ.items() if k not in ("UATU_WAREHOUSE", "UATU_CHECKPOINTS")}
    env.update(
        UATU_CONF_DIR=str(conf), SPARK_MASTER=os.environ.get("BENCH_SPARK_MASTER", "local[2]")
    )
    log_path = BENCH_DIR / f"loadgen-{name}.log"
    started = time.monotonic()
    with log_path.open("wb") as log:
        status = subprocess.run(
            [str(ROOT / "spark-submit.sh"), str(path), "--once"],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            check=False,
        ).returncode
    return status, log_path.read_text(errors="replace"), time.monotonic() - started


def produce_workload(topic: str, n: int, size: int, acks: str) -> dict:
    group = json.loads(WORKLOAD.read_text())
    group["jobGroupId"] = f"bench-{topic}"
    group["kafkaDispatcherTaskGroup"].update(topic=topic, isAcksOne=acks == "1")
    group["extension"]["loadgen"].update(totalRecords=n, recordSize={"fixedBytes": size})
    return group


def producer_settings(group: dict, conf: Path) -> dict[str, str]:
    """The Java producer settings LOAD_GEN_PRODUCE runs with, for kafka-producer-perf-test."""
    spec = produce_spec(json_format.ParseDict(group, JobGroup()), load_settings(conf))
    return {k: v for k, v in spec.producer_config().items() if k != "bootstrap.servers"}


def run_producers(
    cluster: KafkaCluster, args: argparse.Namespace, n: int, workdir: Path, conf: Path
) -> list[dict[str, Any]]:
    rounds = []
    for r in range(args.rounds):
        order = ("perf", "loadgen") if r % 2 == 0 else ("loadgen", "perf")
        result: dict[str, Any] = {"round": r, "order": list(order)}
        for tool in order:
            topic = f"{tool}-{r}"
            cluster.create_topic(topic, args.partitions, 1, LOG_APPEND_TIME)
            group = produce_workload(topic, n, args.record_size, args.acks)
            if tool == "perf":
                say(f"round {r}: kafka-producer-perf-test -> {topic}")
                own = producer_perf(
                    producer_perf_args(
                        cluster.bootstrap_servers,
                        topic,
                        n,
                        args.record_size,
                        acks=args.acks,
                        extra_props=producer_settings(group, conf),
                    )
                )
                result["perf_tool"] = asdict(own)
            else:
                say(f"round {r}: LOAD_GEN_PRODUCE -> {topic}")
                status, text, wall = spark_submit(group, workdir, conf, f"produce-{r}")
                if status != 0:
                    raise RuntimeError(f"LOAD_GEN_PRODUCE exited {status}; see its log")
                result["loadgen_tool"] = asdict(parse_producer_output(text))
                result["loadgen_wall_s"] = wall
            measured = append_rate(cluster.bootstrap_servers, topic, args.partitions)
            if measured["records"] != n:
                raise RuntimeError(f"{topic} holds {measured['records']} records, want {n}")
            result[tool] = measured
            rate, span = measured["records_per_s"], measured["span_s"]
            say(f"  {rate:,.0f} records/s at the broker ({span:.1f} s)")
        result["ratio"] = result["loadgen"]["records_per_s"] / result["perf"]["records_per_s"]
        say(f"  LOAD_GEN_PRODUCE / kafka-producer-perf-test = {result['ratio']:.2f}")
        rounds.append(result)
    return rounds


def run_consumers(
    cluster: KafkaCluster, args: argparse.Namespace, n: int, workdir: Path, conf: Path
) -> list[dict[str, Any]]:
    topic = "loadgen-0"  # written by LOAD_GEN_PRODUCE in round 0
    rounds = []
    for r in range(args.rounds):
        order = ("perf", "loadgen") if r % 2 == 0 else ("loadgen", "perf")
        result: dict[str, Any] = {"round": r, "order": list(order)}
        for tool in order:
            if tool == "perf":
                say(f"round {r}: kafka-consumer-perf-test on {topic}")
                perf = consumer_perf(cluster.bootstrap_servers, topic, n, timeout_ms=30_000)
                if perf.records < n:
                    raise RuntimeError(f"kafka-consumer-perf-test read {perf.records} of {n}")
                result["perf"] = {**asdict(perf), "records_per_s": perf.fetch_records_per_s}
                say(f"  fetch.nMsg.sec {perf.fetch_records_per_s:,.0f}")
            else:
                say(f"round {r}: LOAD_GEN_CONSUME --once on {topic}")
                name = f"consume-{r}"
                group = {
                    "jobGroupId": f"bench-{name}",
                    "type": "JOB_TYPE_LOAD_GEN_CONSUME",
                    "kafkaConsumerTaskGroup": {"cluster": "local", "topic": topic},
                    # maxOffsetsPerTrigger = rate x the 10 s trigger: batches of that many.
                    "flowControl": {"messagesPerSec": args.consume_batch_records / 10},
                    "extension": {
                        "@type": "type.googleapis.com/uatu.v1.JobOptions",
                        "output": {"loadgenStatsPath": str(workdir / "wh" / name)},
                    },
                }
                status, text, wall = spark_submit(group, workdir, conf, name)
                if status != 0:
                    raise RuntimeError(f"LOAD_GEN_CONSUME exited {status}; see its log")
                batches = [tuple(map(int, m.groups())) for m in CONSUME_LINE.finditer(text)]
                records = sum(b[1] for b in batches)
                lost = sum(b[3] for b in batches)
                duplicated = sum(b[4] for b in batches)
                if (records, lost, duplicated) != (n, 0, 0):
                    raise RuntimeError(
                        f"LOAD_GEN_CONSUME counted {records} records, {lost} lost, {duplicated} "
                        f"duplicated; want {n}, 0, 0"
                    )
                fetch_s = sum(b[2] for b in batches) / 1000
                batch_s = sum(b[5] for b in batches) / 1000
                later = batches[1:]
                later_s = sum(b[5] for b in later) / 1000
                flush_s = sum(float(m.group(1)) for m in FLUSH_LINE.finditer(text))
                result["loadgen"] = {
                    "batches": [dict(zip(BATCH_FIELDS, b, strict=True)) for b in batches],
                    "records": records,
                    "fetch_s": fetch_s,
                    "batch_s": batch_s,
                    "wall_s": wall,
                    "fetch_records_per_s": records / fetch_s if fetch_s else None,
                    "all_batches_records_per_s": records / batch_s if batch_s else None,
                    # The rows' Delta commit, once at the end (every 30 s in a stream).
                    "table_write_s": flush_s,
                    "with_table_write_records_per_s": records / (batch_s + flush_s),
                    # The steady state (a warm JVM), as a streaming run sees it: the target's.
                    "records_per_s": (
                        sum(b[1] for b in later) / later_s if later_s else records / batch_s
                    ),
                }
                got = result["loadgen"]
                say(
                    f"  {len(batches)} batches: {got['records_per_s']:,.0f} records/s per batch "
                    f"time after the first, {got['all_batches_records_per_s']:,.0f} over all "
                    f"({batch_s:.1f} s), {got['with_table_write_records_per_s']:,.0f} with the "
                    f"table write ({flush_s:.1f} s), {got['fetch_records_per_s']:,.0f} per fetch "
                    f"time ({fetch_s:.1f} s); wall {wall:.0f} s"
                )
        result["ratio"] = result["loadgen"]["records_per_s"] / result["perf"]["records_per_s"]
        result["fetch_ratio"] = (
            result["loadgen"]["fetch_records_per_s"] / result["perf"]["records_per_s"]
        )
        say(f"  LOAD_GEN_CONSUME / kafka-consumer-perf-test = {result['ratio']:.2f}")
        rounds.append(result)
    return rounds


def summarize(producers: list[dict], consumers: list[dict]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    print(f"\n{'':34} {'ratios per round':>24} {'median':>8} {'target':>8}  result")
    for name, rounds in (("producer", producers), ("consumer", consumers)):
        ratios = [r["ratio"] for r in rounds]
        mid = median(ratios)
        met = mid >= TARGETS[name]
        out[name] = {"ratios": ratios, "median_ratio": mid, "target": TARGETS[name], "met": met}
        cells = ", ".join(f"{x:.2f}" for x in ratios)
        print(
            f"{name:34} {cells:>24} {mid:>8.2f} {TARGETS[name]:>7}x  {'MET' if met else 'NOT MET'}"
        )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.loadgen_bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--record-size", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--acks", choices=("all", "1"), default="all")
    parser.add_argument(
        "--rounds",
        type=int,
        default=4,
        help="alternating rounds per side (4: the tool that runs second in a round is faster, "
        "so two rounds leave a median of one favourable and one unfavourable round)",
    )
    parser.add_argument("--quick", action="store_true", help=f"--records {QUICK_RECORDS}")
    parser.add_argument("--skip-consumer", action="store_true")
    parser.add_argument(
        "--consume-batch-records",
        type=int,
        default=500_000,
        help="records per LOAD_GEN_CONSUME micro-batch (flow control); the batches after the "
        "first are the steady state the target is judged on",
    )
    args = parser.parse_args(argv)
    n = QUICK_RECORDS if args.quick else args.records
    BENCH_DIR.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="loadgen-run-", dir=BENCH_DIR))
    say(
        f"bench dir {workdir}: {n:,} records of {args.record_size} B, "
        f"{args.partitions} partitions, acks={args.acks}"
    )
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    cluster = start_cluster(workdir / "kafka", n_brokers=1, heap="1g")
    try:
        conf = write_conf_dir(
            workdir / "conf", cluster.bootstrap_servers, workdir / "wh", workdir / "ck"
        )
        producers = run_producers(cluster, args, n, workdir, conf)
        consumers = [] if args.skip_consumer else run_consumers(cluster, args, n, workdir, conf)
    finally:
        cluster.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    result = {
        "started_at": started,
        "records": n,
        "record_size": args.record_size,
        "partitions": args.partitions,
        "acks": args.acks,
        "spark_master": os.environ.get("BENCH_SPARK_MASTER", "local[2]"),
        "cores": os.cpu_count(),
        "load_average_at_end": os.getloadavg(),
        "producer_rounds": producers,
        "consumer_rounds": consumers,
        "summary": summarize(producers, consumers)
        if consumers
        else summarize(producers, producers),
    }
    write_latest(RESULT_PATH, result)
    say(f"latest result in {RESULT_PATH.relative_to(ROOT)}")
    say(f"run recorded in {write_result('loadgen', result, args, argv=argv)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
