"""`make run`: the audit job end to end on a machine with nothing else running.

1. starts a real single-node Kafka broker (KRaft) under var/demo/kafka on a free port,
2. produces a demo stream to `demo-orders` with duplicates, late records and records without
   a usable event time (testing/demo_data.py), and remembers what it sent,
3. runs `./spark-submit.sh examples/audit-demo.json --once` against it,
4. reads `audit_counts` back from Delta and prints it, with the totals checked against what
   was sent,
5. writes the completeness report (integrations/report) to var/demo/report.html,
6. stops the broker (also on failure or Ctrl-C).
"""

from __future__ import annotations

import argparse
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
from testing.demo_data import audit_dataset, produce

log = logging.getLogger("uatu.demo")

DEMO_DIR = ROOT / "var" / "demo"
JOBGROUP = Path(__file__).resolve().parent / "audit-demo.json"
TOPIC = "demo-orders"
SHOWN_COLUMNS = [
    "audit_type", "partition", "window_start", "message_count", "unique_count",
    "duplicate_count", "no_event_time_count", "late_count", "bytes",
    "latency_p50_ms", "latency_p99_ms",
]  # fmt: skip


def run_audit_job(conf_dir: Path) -> int:
    env = {**os.environ, "UATU_CONF_DIR": str(conf_dir)}
    env.pop("UATU_WAREHOUSE", None)
    env.pop("UATU_CHECKPOINTS", None)
    command = [str(ROOT / "spark-submit.sh"), str(JOBGROUP), "--once"]
    log.info("running: %s", " ".join(command))
    return subprocess.run(command, env=env, check=False).returncode


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
    parser.add_argument("--records", type=int, default=3000, help="distinct records to send")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)

    shutil.rmtree(DEMO_DIR, ignore_errors=True)
    log.info("starting a local Kafka broker in %s", DEMO_DIR / "kafka")
    cluster = start_cluster(DEMO_DIR / "kafka")
    try:
        log.info(
            "broker ready at %s; creating topic %s (3 partitions)", cluster.bootstrap_servers, TOPIC
        )
        cluster.create_topic(TOPIC, partitions=3)
        now_ms = int(time.time() * 1000)
        records = audit_dataset(args.records, partitions=3, now_ms=now_ms)
        sent = Counter(r.kind for r in records)
        sent["total"] = len(records)
        # Duplicates inherit their original's event time, so count by outcome, not by kind.
        sent["untimed_all"] = sum(r.event_ms is None for r in records)
        sent["late_all"] = sum(
            r.event_ms is not None and r.event_ms < now_ms - 3600_000 for r in records
        )
        log.info(
            "producing %d records: %d on time, %d exact duplicates, %d late (2 h old), "
            "%d without a usable event time",
            len(records),
            sent["on_time"],
            sent["duplicate"],
            sent["late"],
            sent["no_event_time"],
        )
        produce(cluster.bootstrap_servers, TOPIC, records)
        conf_dir = write_conf_dir(
            DEMO_DIR / "conf",
            cluster.bootstrap_servers,
            DEMO_DIR / "warehouse",
            DEMO_DIR / "checkpoints",
        )
        status = run_audit_job(conf_dir)
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
