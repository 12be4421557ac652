"""`make demo-audit-tiers`: did every record make it through every tier?

1. starts a real Kafka broker under var/demo-tiers/kafka; topics `orders` and `orders-copy`
   (2 partitions each) and `uatu-audit`;
2. two services produce to `orders` and report what the broker acknowledged to `uatu-audit`:
   `orders-api` through the Python wrapper (`clients.AuditedProducer`), 600 records in each of
   two 1-minute windows, and `java-api`, a Java KafkaProducer with the audit interceptor
   (`interceptor.classes=dev.uatu.audit.report.AuditProducerInterceptor`), 400 records in the
   window between. The records carry timestamps a few minutes old, so every window is past
   its grace period when the audit runs;
3. copies `orders` to `orders-copy` with the replication job
   (`./spark-submit.sh examples/audit-tiers/replicate.json`, a bounded copy);
4. breaks the copy on purpose: deletes the first 50 records of partition 0 of `orders-copy`
   (a loss) and produces 5 records of partition 1 again (a duplication, as a retried copy
   would);
5. counts `orders` (`count-orders.json`), then runs the cross-tier audit (`tiers.json`:
   SERVICE_AUDIT_AGGREGATION, service -> Kafka; REPLICATION, `orders` -> `orders-copy`);
6. prints `audit_verdicts` (the newest revision of each check and window) and
   `replication_gaps`, and checks them against what steps 2 and 4 did: every service window
   OK, the replication check LOSS in the first window with source offsets 0..49 of partition
   0 missing, DUPLICATION in the window of the records produced again, OK in the other;
7. stops the broker (also on failure or Ctrl-C). Exit status 0 when every check holds.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

from core.paths import ROOT, project_jars
from devservices.kafka import KafkaCluster, start_cluster
from jobs.runtime.session import build_session
from testing.audit_clients import produce_with_interceptor, produce_with_wrapper
from testing.conf import write_conf_dir
from testing.topic_data import Record, produce_records, read_partitions

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("uatu.demo_tiers")

DEMO_DIR = ROOT / "var" / "demo-tiers"
GROUPS = Path(__file__).resolve().parent / "audit-tiers"
TOPIC, COPY, AUDIT_TOPIC = "orders", "orders-copy", "uatu-audit"
PARTITIONS = 2
WINDOW_MS = 60_000
LOST, DUPLICATED = 50, 5  # copies deleted from partition 0; copies produced again on 1
REPLICATION_CHECK = f"replication:local/{TOPIC}->local/{COPY}"


def windows(now_ms: int) -> tuple[int, int, int]:
    """Three consecutive 1-minute windows ending at least three minutes ago (past the default
    grace period of one window)."""
    first = now_ms - 6 * WINDOW_MS
    first -= first % WINDOW_MS
    return first, first + WINDOW_MS, first + 2 * WINDOW_MS


# Runs a JobGroup file's job as `./spark-submit.sh JOBGROUP ARGS...` would, with the
# demo's configuration folder; raises SystemExit unless it exits 0.
JobRunner = Callable[..., None]


def submit_job(jobgroup: Path, conf_dir: Path, *args: str) -> None:
    """The demo's JobRunner: `./spark-submit.sh`, as a scheduler runs a JobGroup."""
    env = {**os.environ, "UATU_CONF_DIR": str(conf_dir)}
    env.pop("UATU_WAREHOUSE", None)
    env.pop("UATU_CHECKPOINTS", None)
    command = [str(ROOT / "spark-submit.sh"), str(jobgroup), *args]
    log.info("running: %s", " ".join(command))
    status = subprocess.run(command, env=env, check=False).returncode
    if status != 0:
        raise SystemExit(f"{jobgroup.name} exited with status {status}")


def break_the_copy(bootstrap: str) -> None:
    """Delete the first LOST copies of partition 0; produce DUPLICATED copies of partition 1
    again, provenance stamp and all."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_records([TopicPartition(COPY, 0, LOST)]).values():
        future.result(timeout=30)
    again = read_partitions(bootstrap, COPY, PARTITIONS)[1][-DUPLICATED:]
    produce_records(
        bootstrap, COPY, [Record(1, r.key, r.value, r.timestamp_ms, r.headers) for r in again]
    )
    log.info(
        "deleted %d copies from %s partition 0; produced %d copies of partition 1 again",
        LOST,
        COPY,
        DUPLICATED,
    )


def expected_verdicts(
    bootstrap: str, spans: tuple[int, int, int]
) -> dict[tuple[str, int], tuple[str, int, int]]:
    """(check, window start) -> (verdict, left count, right count), from the source topic and
    what `break_the_copy` did to its copy."""
    source = read_partitions(bootstrap, TOPIC, PARTITIONS)
    copy = read_partitions(bootstrap, COPY, PARTITIONS)

    def in_window(partitions: dict[int, list[Record]], start: int) -> int:
        return sum(
            start <= r.timestamp_ms < start + WINDOW_MS for rs in partitions.values() for r in rs
        )

    expected = {}
    for start in spans:
        sent, copied = in_window(source, start), in_window(copy, start)
        expected[("service->kafka", start)] = ("OK", sent, sent)
        verdict = "OK" if copied == sent else ("LOSS" if copied < sent else "DUPLICATION")
        expected[(REPLICATION_CHECK, start)] = (verdict, sent, copied)
    return expected


def show_and_check(spark, warehouse: Path, expected: dict) -> bool:
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    verdicts = spark.read.format("delta").load(str(warehouse / "audit_verdicts"))
    newest = (
        verdicts.withColumn(
            "newest",
            F.row_number().over(
                Window.partitionBy("check_name", "window_start").orderBy(F.desc("revision"))
            ),
        )
        .where("newest = 1")
        .drop("newest")
        .orderBy("check_name", "window_start")
    )
    print(f"\naudit_verdicts ({warehouse / 'audit_verdicts'}), newest revision of each window:")
    columns = ["check_name", "window_start", "verdict", "left_count", "right_count",
               "difference", "left_unique", "right_unique", "revision"]  # fmt: skip
    newest.select(*columns).show(50, truncate=False)
    gaps = spark.read.format("delta").load(str(warehouse / "replication_gaps"))
    print("replication_gaps (source offsets that never arrived):")
    gaps.select("source_topic", "partition", "first_offset", "last_offset", "missing_count").show(
        50, truncate=False
    )

    got = {
        (r["check_name"], r["start_ms"]): (r["verdict"], r["left_count"], r["right_count"])
        for r in newest.withColumn("start_ms", F.unix_millis("window_start")).collect()
    }
    gap_rows = [(g["partition"], g["first_offset"], g["last_offset"]) for g in gaps.collect()]
    checks: list[tuple[str, object, object]] = [
        (f"{check} {start}", want, got.get((check, start)))
        for (check, start), want in sorted(expected.items())
    ]
    checks.append(("replication gaps", [(0, 0, LOST - 1)], gap_rows))
    print("check against what the demo did:")
    for name, want, have in checks:
        print(f"  {name:58s} expected {want}  got {have}  {'OK' if want == have else 'MISMATCH'}")
    return all(want == have for _, want, have in checks)


def run_demo(
    cluster: KafkaCluster, spark: SparkSession, work_dir: Path, run_job: JobRunner = submit_job
) -> bool:
    """Steps 1 (the topics) to 6 on a started broker and session, writing conf, warehouse and
    checkpoints under `work_dir`; True when every check holds."""
    warehouse = work_dir / "warehouse"
    bootstrap = cluster.bootstrap_servers
    for topic, partitions in ((TOPIC, PARTITIONS), (COPY, PARTITIONS), (AUDIT_TOPIC, 1)):
        cluster.create_topic(topic, partitions=partitions)
    conf_dir = write_conf_dir(work_dir / "conf", bootstrap, warehouse, work_dir / "checkpoints")
    spans = windows(int(time.time() * 1000))
    w1, w2, w3 = spans
    log.info("orders-api (Python wrapper): 600 records in each of the windows %d, %d", w1, w3)
    first = [(b"o%d" % i, b'{"order": %d}' % i, w1 + 50 * i) for i in range(600)]
    produce_with_wrapper(bootstrap, TOPIC, AUDIT_TOPIC, first)
    log.info("java-api (Java interceptor): 400 records in the window %d", w2)
    java = [(b"j%d" % i, b"{}", w2 + 100 * i) for i in range(400)]
    produce_with_interceptor(spark, bootstrap, TOPIC, AUDIT_TOPIC, java)
    third = [(b"p%d" % i, b'{"order": %d}' % i, w3 + 50 * i) for i in range(600)]
    produce_with_wrapper(bootstrap, TOPIC, AUDIT_TOPIC, third)
    run_job(GROUPS / "replicate.json", conf_dir)
    break_the_copy(bootstrap)
    expected = expected_verdicts(bootstrap, spans)
    run_job(GROUPS / "count-orders.json", conf_dir, "--once")
    run_job(GROUPS / "tiers.json", conf_dir, "--once")
    return show_and_check(spark, warehouse, expected)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--work-dir",
        type=Path,
        default=DEMO_DIR,
        help=f"broker, conf, warehouse and checkpoints (emptied first; default {DEMO_DIR})",
    )
    work_dir = parser.parse_args(argv).work_dir
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)

    shutil.rmtree(work_dir, ignore_errors=True)
    log.info("starting a local Kafka broker in %s", work_dir / "kafka")
    cluster = start_cluster(work_dir / "kafka")
    spark = None
    try:
        spark = build_session(
            "uatu-demo-tiers", master="local[1]", jars=project_jars(),
            conf={"spark.ui.enabled": "false"},
        )  # fmt: skip
        spark.sparkContext.setLogLevel("ERROR")
        matched = run_demo(cluster, spark, work_dir)
    finally:
        if spark is not None:
            spark.stop()
        log.info("stopping the demo broker")
        cluster.stop()
    return 0 if matched else 1


if __name__ == "__main__":
    sys.exit(main())
