"""Dispatcher throughput: the dispatcher job against a hand-written dispatcher and the sink's
own ceiling, in one run (`make bench-dispatch`).

Setup: a fresh single-broker cluster under var/bench/dispatch/; a 4-partition topic with
--records records (default 1,000,000) of 100-200 bytes (lengths and bytes from a seeded RNG, no
key); the Go sink of devservices/grpc_sink.py, which answers every call OK at once.

Measured, in this order:

1. The sink's ceiling, with two load tools at concurrency 64 and 1024 over 2 connections: ghz
   calling the sink's method (a 150-byte BytesValue, which the sink ignores), and the sink
   binary's own lean load mode (`grpc-sink -load`: raw 150-byte requests, no message
   reflection), which on this machine drives the sink several times harder than ghz. The best
   rate of either is "the ceiling".
2. The hand-written dispatcher (bench/dispatch_handwritten.py: confluent-kafka + grpc.aio, same
   metadata, no routing) over the whole topic at each --inflight.
3. The job (`./spark-submit.sh --once`, SPARK_MASTER local[8]: one task slot per partition of
   the source and of the retry tier, so the tier's batches run beside the source's, as the
   replication bench gives MirrorMaker 2 tasks.max = partitions) at max_inflight_messages 64 and
   1024; a retry tier and a DLQ configured but unused.
4. The job at inflight 64 against a sink that answers every 20th call RESOURCE_EXHAUSTED (5%):
   those records go to the retry tier (delay 0) and back until OK.

Records/s for the dispatchers is what the sink saw: calls between its first and its last call
(`GET /stats`), so JVM and Spark start-up are left out, as in the replication bench. For the
job, `source_records_per_s` is also given: the source topic's records over the time its batches
took to dispatch them (from the job's log), each record resolved (committed, or written to the
tier). For the 5% run, records/s is source records over the whole span until the last retry was
answered, and `source_records_per_s` compares like with like with the all-OK run. The job's
launch-to-exit time is reported too. Latency: ghz's own; the hand-written dispatcher's per
call; the job's from dispatch_stats (the merged KLL sketches). Results go to
docs/benchmarks/dispatch-<UTC time>-<commit>.json (bench._common.write_result) and
var/bench/dispatch-bench-result.json.
Nothing here asserts a duration; the exit status is 1 only if a run lost or failed records.
Environment: BENCH_CHANNELS (gRPC channels per executor, 4), BENCH_TIER_TRIGGER_SECONDS (the
retry tier's trigger, the job's default when unset: the profile in docs/benchmarks.md varies
it), BENCH_SPARK_MASTER, BENCH_DRIVER_MEMORY, BENCH_SPARK_SUBMIT_ARGS.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import random
import re
import shutil
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench._common import write_latest, write_result
from core.paths import ROOT
from devservices.grpc_sink import GrpcSink, bench_proto, install_ghz, install_sink, start_sink
from devservices.kafka import start_cluster
from testing.conf import write_conf_dir
from testing.delta_files import read_append_only
from testing.topic_data import Record, produce_records

BENCH_DIR = ROOT / "var" / "bench" / "dispatch"
RESULT_PATH = ROOT / "var" / "bench" / "dispatch-bench-result.json"
GROUP, TOPIC = "bench", "bench"
METHOD = f"/kafka.consumerproxy.{GROUP}/{TOPIC}"


def say(text: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {text}", flush=True)


def make_records(n: int, partitions: int, seed: int = 42) -> list[Record]:
    rng = random.Random(seed)
    now = int(time.time() * 1000)
    return [
        Record(i % partitions, None, rng.randbytes(rng.randint(100, 200)), now) for i in range(n)
    ]


def ghz(sink: GrpcSink, work: Path, concurrency: int, total: int) -> dict[str, Any]:
    call = bench_proto(work / "bench.proto", GROUP, TOPIC)
    data = json.dumps(base64.b64encode(b"x" * 150).decode())  # BytesValue maps to a JSON string
    done = subprocess.run(
        [
            str(install_ghz()),
            "--insecure",
            "--proto",
            str(work / "bench.proto"),
            "--call",
            call,
            "-d",
            data,
            "-c",
            str(concurrency),
            "-n",
            str(total),
            "--connections",
            "2",
            "-O",
            "json",
            sink.address,
        ],
        capture_output=True,
        text=True,
        timeout=1800,
        check=True,
    )
    report = json.loads(done.stdout)
    lat = {d["percentage"]: d["latency"] / 1e6 for d in report.get("latencyDistribution") or []}
    return {
        "tool": "ghz",
        "concurrency": concurrency,
        "calls": report["count"],
        "records_per_s": report["rps"],
        "latency_p50_ms": lat.get(50),
        "latency_p99_ms": lat.get(99),
        "errors": sum(
            (report.get("statusCodeDistribution") or {}).get(k, 0) for k in ("Unavailable",)
        ),
    }


def go_load(sink: GrpcSink, concurrency: int, total: int) -> dict[str, Any]:
    done = subprocess.run(
        [
            str(install_sink()),
            "-load",
            "-target",
            sink.address,
            "-method",
            METHOD,
            "-n",
            str(total),
            "-c",
            str(concurrency),
            "-connections",
            "2",
            "-size",
            "150",
        ],
        capture_output=True,
        text=True,
        timeout=1800,
        check=True,
    )
    report = json.loads(done.stdout.strip().splitlines()[-1])
    return {
        "tool": "grpc-sink -load (lean Go client)",
        "concurrency": concurrency,
        "calls": report["calls"],
        "records_per_s": report["calls_per_s"],
        "latency_p50_ms": report["latency_p50_ms"],
        "latency_p99_ms": report["latency_p99_ms"],
        "errors": report["errors"],
    }


def handwritten(bootstrap: str, sink: GrpcSink, records: int, concurrency: int) -> dict[str, Any]:
    sink.reset()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.dispatch_handwritten",
            "--bootstrap-servers",
            bootstrap,
            "--topic",
            TOPIC,
            "--target",
            sink.address,
            "--method",
            METHOD,
            "--records",
            str(records),
            "--concurrency",
            str(concurrency),
        ],
        capture_output=True,
        text=True,
        timeout=3600,
        check=True,
        cwd=ROOT,
    )
    own = json.loads(done.stdout.strip().splitlines()[-1])
    seen = sink.stats()
    seconds = (seen["last_ns"] - seen["first_ns"]) / 1e9
    return {
        "tool": "hand-written (confluent-kafka + grpc.aio)",
        "concurrency": concurrency,
        "calls": seen["calls"],
        "records_per_s": seen["calls"] / seconds if seconds > 0 else 0.0,
        "own_records_per_s": own["records_per_s"],
        "latency_p50_ms": own["latency_p50_ms"],
        "latency_p99_ms": own["latency_p99_ms"],
        "failed": own["failed"],
    }


def job_group(group_id: str, sink: GrpcSink, inflight: int) -> dict[str, Any]:
    return {
        "jobGroupId": group_id,
        "type": "JOB_TYPE_KAFKA_CONSUMER_TO_RPC_DISPATCHER",
        "flowControl": {"maxInflightMessages": inflight},
        # A consumer group of its own: each run reads the whole topic, where a run in the
        # bench's group would start where the one before committed.
        "kafkaConsumerTaskGroup": {
            "cluster": "local",
            "topic": TOPIC,
            "consumerGroup": f"{GROUP}-{group_id}",
        },
        "rpcDispatcherTaskGroup": {
            "uri": f"dns:///{sink.address}",
            "procedure": METHOD,
            "rpcTimeoutMs": 10000,
            "dlqTopic": f"{TOPIC}-dlq",
        },
        "retryConfig": {
            "retryEnabled": True,
            "retryQueues": [
                {"retryQueueTopic": f"{TOPIC}-r1", "processingDelayMs": 0, "maxRetryCount": 20}
            ],
        },
        "extension": {
            "@type": "type.googleapis.com/uatu.v1.JobOptions",
            "dispatch": {
                "channels": int(os.environ.get("BENCH_CHANNELS", "4")),
                # 0 = the job's default (5 s); the profile of the 5% run varies it.
                "tierTriggerSeconds": int(os.environ.get("BENCH_TIER_TRIGGER_SECONDS", "0")),
            },
        },
    }


def run_job(
    work: Path, conf: Path, sink: GrpcSink, group_id: str, inflight: int, records: int, master: str
) -> dict[str, Any]:
    sink.reset()
    path = work / f"{group_id}.json"
    path.write_text(json.dumps(job_group(group_id, sink, inflight)))
    env = {
        **os.environ,
        "SPARK_MASTER": master,
        "UATU_DRIVER_MEMORY": os.environ.get("BENCH_DRIVER_MEMORY", "4g"),
        "UATU_SPARK_SUBMIT_ARGS": os.environ.get("BENCH_SPARK_SUBMIT_ARGS", ""),
    }
    started = time.monotonic()
    with (work / f"{group_id}.log").open("w") as log:
        status = subprocess.run(
            [str(ROOT / "spark-submit.sh"), str(path), "--once", "--conf-dir", str(conf)],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            timeout=7200,
            check=False,
        ).returncode
    wall = time.monotonic() - started
    seen = sink.stats()
    seconds = (seen["last_ns"] - seen["first_ns"]) / 1e9
    stats = job_stats(work / "wh" / "dispatch_stats", group_id)
    source_records, source_seconds = source_batches(work / f"{group_id}.log")
    return {
        "tool": "dispatcher job",
        "concurrency": inflight,
        "exit_status": status,
        "calls": seen["calls"],
        "failed_calls": seen["failed"],
        "records_per_s": records / seconds if seconds > 0 else 0.0,
        "calls_per_s": seen["calls"] / seconds if seconds > 0 else 0.0,
        "dispatch_seconds": seconds,
        "source_records_per_s": source_records / source_seconds if source_seconds else None,
        "source_dispatch_seconds": source_seconds,
        "launch_to_exit_seconds": wall,
        **stats,
    }


_BATCH_LINE = re.compile(r"uatu\.dispatch: (\S+) batch \d+: (\d+) records in ([\d.]+) s")


def source_batches(log: Path) -> tuple[int, float]:
    """Records of the source topic's batches and the seconds their dispatch took, from the job's
    log lines (`<topic> batch N: R records in S s (stats ...)`)."""
    records, seconds = 0, 0.0
    for topic, n, s in _BATCH_LINE.findall(log.read_text(errors="replace")):
        if topic == TOPIC:
            records += int(n)
            seconds += float(s)
    return records, seconds


def job_stats(path: Path, group_id: str) -> dict[str, Any]:
    """Totals and merged latency quantiles of a run's dispatch_stats rows."""
    from datasketches import kll_doubles_sketch

    totals: dict[str, Any] = {}
    merged = None
    for row in read_append_only(path):
        if row["job_group_id"] != group_id:
            continue
        for name in ("committed", "retried", "dlq", "attempts", "redelivered"):
            totals[name] = totals.get(name, 0) + (row[name] or 0)
        totals["peak_inflight"] = max(totals.get("peak_inflight", 0), row["peak_inflight"] or 0)
        if row["latency_kll_sketch"]:
            sketch = kll_doubles_sketch.deserialize(bytes(row["latency_kll_sketch"]))
            if merged is None:
                merged = sketch
            else:
                merged.merge(sketch)
    if merged is not None:
        totals["latency_p50_ms"] = merged.get_quantile(0.5)
        totals["latency_p99_ms"] = merged.get_quantile(0.99)
    return totals


def git_commit() -> str:
    return subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=False
    ).stdout.strip()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--inflight", type=int, nargs="+", default=[64, 1024])
    parser.add_argument("--spark-master", default=os.environ.get("BENCH_SPARK_MASTER", "local[8]"))
    parser.add_argument("--skip-ghz", action="store_true")
    parser.add_argument("--skip-handwritten", action="store_true")
    parser.add_argument("--skip-retry-run", action="store_true")
    args = parser.parse_args(argv)

    install_sink()
    install_ghz()
    shutil.rmtree(BENCH_DIR, ignore_errors=True)
    BENCH_DIR.mkdir(parents=True)
    results: dict[str, Any] = {
        "benchmark": "dispatch",
        "commit": git_commit(),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {"cpus": os.cpu_count(), "load_average_at_start": os.getloadavg()},
        "records": args.records,
        "partitions": args.partitions,
        "spark_master": args.spark_master,
        "runs": [],
    }
    failures = 0
    kafka = start_cluster(BENCH_DIR / "kafka", heap="1g")
    sinks: list[GrpcSink] = []
    try:
        kafka.create_topic(TOPIC, args.partitions, 1)
        kafka.create_topic(f"{TOPIC}-r1", args.partitions, 1)
        kafka.create_topic(f"{TOPIC}-dlq", 1, 1)
        say(f"producing {args.records} records of 100-200 bytes to {args.partitions} partitions")
        produce_records(kafka.bootstrap_servers, TOPIC, make_records(args.records, args.partitions))
        conf = write_conf_dir(
            BENCH_DIR / "conf", kafka.bootstrap_servers, BENCH_DIR / "wh", BENCH_DIR / "ck"
        )
        sink = start_sink(BENCH_DIR / "sink")
        sinks.append(sink)
        if not args.skip_ghz:
            for c in (64, 1024):
                say(f"ghz at concurrency {c}")
                run = ghz(sink, BENCH_DIR, c, 100_000)
                results["runs"].append(run)
                say(f"  {run['records_per_s']:,.0f} calls/s")
                say(f"grpc-sink -load at concurrency {c}")
                run = go_load(sink, c, 500_000)
                results["runs"].append(run)
                say(f"  {run['records_per_s']:,.0f} calls/s")
        if not args.skip_handwritten:
            for c in args.inflight:
                say(f"hand-written dispatcher at concurrency {c}")
                run = handwritten(kafka.bootstrap_servers, sink, args.records, c)
                results["runs"].append(run)
                failures += run["calls"] != args.records
                say(f"  {run['records_per_s']:,.0f} records/s")
        for c in args.inflight:
            say(f"dispatcher job at max_inflight_messages {c}")
            run = run_job(BENCH_DIR, conf, sink, f"job-{c}", c, args.records, args.spark_master)
            results["runs"].append(run)
            failures += run["exit_status"] != 0 or run.get("committed") != args.records
            say(f"  {run['records_per_s']:,.0f} records/s, {run['launch_to_exit_seconds']:.0f} s")
        if not args.skip_retry_run:
            failing = start_sink(BENCH_DIR / "sink-5pct", fail_every=20)
            sinks.append(failing)
            c = args.inflight[0]
            say(f"dispatcher job at {c}, 5% of calls RESOURCE_EXHAUSTED")
            run = run_job(
                BENCH_DIR, conf, failing, f"job-5pct-{c}", c, args.records, args.spark_master
            )
            run["tool"] = "dispatcher job, 5% RESOURCE_EXHAUSTED"
            results["runs"].append(run)
            failures += run["exit_status"] != 0 or run.get("committed") != args.records
            say(f"  {run['records_per_s']:,.0f} source records/s")
    finally:
        for s in sinks:
            s.stop()
        kafka.stop()
    results["ratios"] = ratios(results["runs"], args.inflight)
    report(results)
    results["machine"]["load_average_at_end"] = os.getloadavg()
    RESULT_PATH.parent.mkdir(parents=True, exist_ok=True)
    write_latest(RESULT_PATH, results)
    out = write_result("dispatch", results, args, argv=argv)
    say(f"results in {out} and {RESULT_PATH}")
    return 1 if failures else 0


def ratios(runs: list[dict[str, Any]], inflight: list[int]) -> dict[str, Any]:
    def rate(tool: str, c: int | None = None) -> float | None:
        found = [
            r["records_per_s"]
            for r in runs
            if r["tool"].startswith(tool) and (c is None or r["concurrency"] == c)
        ]
        return max(found) if found else None

    by_tool = {"ghz": rate("ghz"), "grpc-sink -load": rate("grpc-sink -load")}
    found = [r for r in by_tool.values() if r]
    ceiling = max(found) if found else None
    out: dict[str, Any] = {
        "sink_ceiling_records_per_s": ceiling,
        "sink_ceiling_ghz_records_per_s": by_tool["ghz"],
        "sink_ceiling_go_load_records_per_s": by_tool["grpc-sink -load"],
    }
    for c in inflight:
        job = next(
            (
                r["records_per_s"]
                for r in runs
                if r["tool"] == "dispatcher job" and r["concurrency"] == c
            ),
            None,
        )
        hand = rate("hand-written", c)
        out[f"job_{c}_vs_handwritten"] = job / hand if job and hand else None
        out[f"job_{c}_vs_ceiling"] = job / ceiling if job and ceiling else None
    retry = next((r for r in runs if "5%" in r["tool"]), None)
    if retry is not None:
        ok = next(
            (
                r["records_per_s"]
                for r in runs
                if r["tool"] == "dispatcher job" and r["concurrency"] == retry["concurrency"]
            ),
            None,
        )
        out["job_5pct_vs_all_ok"] = retry["records_per_s"] / ok if ok else None
        ok_source = next(
            (
                r.get("source_records_per_s")
                for r in runs
                if r["tool"] == "dispatcher job" and r["concurrency"] == retry["concurrency"]
            ),
            None,
        )
        if ok_source and retry.get("source_records_per_s"):
            out["job_5pct_vs_all_ok_source_topic"] = retry["source_records_per_s"] / ok_source
    return out


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def report(results: dict[str, Any]) -> None:
    print()
    print(f"{'run':<48} {'conc':>5} {'records/s':>12} {'p50 ms':>8} {'p99 ms':>8}")
    for r in results["runs"]:
        p50, p99 = (_ms(r.get(k)) for k in ("latency_p50_ms", "latency_p99_ms"))
        print(
            f"{r['tool']:<48} {r['concurrency']:>5} {r['records_per_s']:>12,.0f} {p50:>8} {p99:>8}"
        )
    print()
    for name, v in results["ratios"].items():
        print(f"{name:<40} {v if v is None else round(v, 3)}")


if __name__ == "__main__":
    sys.exit(main())
