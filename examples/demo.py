"""`make run`: the audit job end to end on a machine with nothing else running.

1. starts a real single-node Kafka broker (KRaft) under var/demo/kafka on a free port,
2. produces the demo stream to `demo-orders` with the load generator:
   `./spark-submit.sh examples/demo-orders-load.json --once`, a LOAD_GEN_PRODUCE JobGroup that
   documents the workload (3,300 JSON records at 1,000 records/s with about 9 % exact
   duplicates, 7 % two hours late and 5 % without a usable event time),
3. reads the topic back with a plain consumer and counts what was sent, by kind, from each
   record's `loadgen` header (generator, sequence number) and its JSON `ts`,
4. runs `./spark-submit.sh examples/audit-demo.json --once` against it,
5. reads `audit_counts` back from Delta and prints it, with the totals checked against what
   was sent,
6. writes the completeness report (integrations/report) to var/demo/report.html,
7. stops the broker (also on failure or Ctrl-C).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from core.paths import ROOT, project_jars
from devservices.kafka import start_cluster
from integrations.report import write_report
from jobs.runtime.session import build_session
from testing.conf import write_conf_dir
from testing.topic_data import iter_messages

log = logging.getLogger("uatu.demo")

DEMO_DIR = ROOT / "var" / "demo"
JOBGROUP = Path(__file__).resolve().parent / "audit-demo.json"
WORKLOAD = Path(__file__).resolve().parent / "demo-orders-load.json"
TOPIC = "demo-orders"
PARTITIONS = 3
LATE_BEFORE_MS = 3600_000  # the workload's late records are two hours behind their send time
SHOWN_COLUMNS = [
    "audit_type", "partition", "window_start", "message_count", "unique_count",
    "duplicate_count", "no_event_time_count", "late_count", "bytes",
    "latency_p50_ms", "latency_p99_ms",
]  # fmt: skip


def run_job(jobgroup: Path, conf_dir: Path) -> int:
    env = {**os.environ, "UATU_CONF_DIR": str(conf_dir)}
    env.pop("UATU_WAREHOUSE", None)
    env.pop("UATU_CHECKPOINTS", None)
    command = [str(ROOT / "spark-submit.sh"), str(jobgroup), "--once"]
    log.info("running: %s", " ".join(command))
    return subprocess.run(command, env=env, check=False).returncode


def count_sent(bootstrap_servers: str, produced_from_ms: int) -> Counter:
    """What the topic holds, by kind: a duplicate repeats its generator's sequence number; a
    record without a usable event time has no numeric `ts`; a late one's `ts` is more than an
    hour before the generator started."""
    sent: Counter = Counter()
    seen: set[tuple[bytes, bytes]] = set()
    for m in iter_messages(bootstrap_servers, TOPIC, PARTITIONS):
        header = dict(m.headers() or {})["loadgen"]
        seq, generator = header[:8], header[16:]  # big-endian sequence number, send time, id
        sent["total"] += 1
        if (generator, seq) in seen:
            sent["duplicate"] += 1
        seen.add((generator, seq))
        ts = json.loads(m.value()).get("ts")
        if not isinstance(ts, int):
            sent["untimed_all"] += 1
        elif ts < produced_from_ms - LATE_BEFORE_MS:
            sent["late_all"] += 1
    return sent


def show_results(warehouse: Path, sent: Counter) -> bool:
    spark = build_session(
        "uatu-demo-show", master="local[1]", jars=project_jars(), conf={"spark.ui.enabled": "false"}
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        table = spark.read.format("delta").load(str(warehouse / "audit_counts"))
        print(f"\naudit_counts ({warehouse / 'audit_counts'}), {table.count()} rows:")
        table.select(*SHOWN_COLUMNS).orderBy("audit_type", "window_start", "partition").show(
            200, truncate=False
        )
        totals = {"message_count", "duplicate_count", "no_event_time_count", "late_count"}
        exact = (
            table.where("audit_type = 'AUDIT_TYPE_EXACT_UNIQ'")
            .agg({column: "sum" for column in totals})
            .collect()[0]
        )
        checks = [
            ("records", sent["total"], exact["sum(message_count)"]),
            ("duplicates", sent["duplicate"], exact["sum(duplicate_count)"]),
            ("without usable event time", sent["untimed_all"], exact["sum(no_event_time_count)"]),
            ("late (two hours old)", sent["late_all"], exact["sum(late_count)"]),
        ]
        print("check against what the demo sent (EXACT_UNIQ totals):")
        for name, want, got in checks:
            verdict = "OK" if want == got else "MISMATCH"
            print(f"  {name:28s} sent {want:6d}  audited {got:6d}  {verdict}")
        return all(want == got for _, want, got in checks)
    finally:
        spark.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)

    shutil.rmtree(DEMO_DIR, ignore_errors=True)
    log.info("starting a local Kafka broker in %s", DEMO_DIR / "kafka")
    cluster = start_cluster(DEMO_DIR / "kafka")
    try:
        log.info(
            "broker ready at %s; creating topic %s (3 partitions)", cluster.bootstrap_servers, TOPIC
        )
        cluster.create_topic(TOPIC, partitions=PARTITIONS)
        conf_dir = write_conf_dir(
            DEMO_DIR / "conf",
            cluster.bootstrap_servers,
            DEMO_DIR / "warehouse",
            DEMO_DIR / "checkpoints",
        )
        produced_from_ms = int(time.time() * 1000)
        log.info("producing the demo stream with the load generator (%s)", WORKLOAD.name)
        status = run_job(WORKLOAD, conf_dir)
        if status != 0:
            log.error("the load generator exited with status %d", status)
            return status
        sent = count_sent(cluster.bootstrap_servers, produced_from_ms)
        log.info(
            "the topic holds %d records: %d exact duplicates, %d late (2 h old), "
            "%d without a usable event time",
            sent["total"],
            sent["duplicate"],
            sent["late_all"],
            sent["untimed_all"],
        )
        status = run_job(JOBGROUP, conf_dir)
        if status != 0:
            log.error("the audit job exited with status %d", status)
            return status
    finally:
        log.info("stopping the demo broker")
        cluster.stop()
    matched = show_results(DEMO_DIR / "warehouse", sent)
    report = write_report(DEMO_DIR / "warehouse", DEMO_DIR / "report.html")
    print(f"\ncompleteness report: {report} (open it in a browser; it works offline)")
    return 0 if matched else 1


if __name__ == "__main__":
    sys.exit(main())
