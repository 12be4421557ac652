"""Fleet scale: one pattern audit over many topics against one application per topic.

On a private 1-broker Kafka (heap 1g) under var/bench/ (its topics are created with a
non-default ``retention.ms``, which the copies of step 6 must carry):

1. --topics topics ``fleet.tNNNN`` of --partitions partitions each, fed --rate records/s per
   topic by one paced producer for the whole run. Records have known keys; every tenth record
   repeats the previous one (same key, value, partition and timestamp), so each
   (topic, partition, window)'s count and distinct count are known without keeping keys.
2. One ``./spark-submit.sh`` streaming KAFKA_AUDIT whose JobGroup selects the topics with
   ``extension.topics.pattern`` (EXACT_UNIQ and APPROX_UNIQ, 60 s windows, trigger
   --trigger-seconds, --driver-memory (2g), local[2]). Sampled every 5 s for --minutes once
   its first batch is written: resident memory of its whole process tree (/proc VmRSS) and
   CPU (utime + stime of the tree) -> mean cores.
3. A third of the way in, --new-topics more topics matching the pattern are created and fed:
   the time from each one's creation to its first row in audit_counts (polled with
   delta-rs, no Spark in this process), against two triggers.
4. The producer stops; once audit_counts holds every record sent (or a deadline), the audit
   is stopped through its stop file. Every (topic, partition, audit type, window) is compared
   with the truth: counts and EXACT distinct counts equal, APPROX within 3 standard errors of
   its sketch (lgK 12: 1.6 %).
5. Today's way, side by side in the same run: --baseline-apps single-topic audits, one
   application each, started at once on topics of the fleet with the same settings, sampled
   the same way for --baseline-minutes. Ratio per topic: memory and CPU of one application
   per topic over the pattern audit's per-topic share (--baseline-apps 0: skipped).
6. Every fleet topic copied by one regex replication JobGroup (bench/fleet_replication.py):
   time and resources to copy the whole backlog, then every destination partition read back
   (each record once, in order) and every destination topic's partitions and synced config
   checked (--no-replication: skipped).

Figures go to stdout, var/bench/fleet-result.json and docs/benchmarks/fleet-<UTC>-<commit>.json;
job logs to var/bench/fleet-*.log. Nothing here asserts a duration.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from bench._common import (
    BENCH_DIR,
    bench_parser,
    parse_args,
    say,
    spark_submit_env,
    wait_for,
    warn_if_jobs_zip_stale,
    work_dir,
    write_latest,
    write_result,
)
from bench.fleet_replication import SOURCE_ALIAS, SYNCED_CONFIG, run_replication
from bench.process_usage import sample
from core.paths import ROOT
from devservices.kafka import start_cluster
from testing.conf import write_conf_dir

WINDOW_S = 60
PREFIX = "fleet.t"
NEW_PREFIX = "fleet.tnew"
HLL_RSE = 1.04 / math.sqrt(2**12)
Key = tuple[str, int, int]  # topic, partition, window start (epoch s)


@dataclass
class Truth:
    """What the producer sent, per (topic, partition, window)."""

    sent: Counter = field(default_factory=Counter)
    repeats: Counter = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def total(self) -> int:
        return sum(self.sent.values())


class FleetProducer(threading.Thread):
    """Sends `rate` records/s to each topic of `topics` (a list that may grow) until stopped."""

    def __init__(self, bootstrap: str, topics: list[str], partitions: int, rate: int) -> None:
        super().__init__(name="fleet-producer", daemon=True)
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "linger.ms": 50,
                # A second of the whole fleet's records, and its first metadata lookups.
                "queue.buffering.max.messages": 1_000_000,
            }
        )
        self.topics, self.partitions, self.rate = topics, partitions, rate
        self.truth = Truth()
        self.stopping = threading.Event()
        self.seq: Counter = Counter()

    def run(self) -> None:
        next_tick = time.monotonic()
        while not self.stopping.is_set():
            now_ms = time.time_ns() // 1_000_000
            for topic in list(self.topics):
                for _ in range(self.rate):
                    self._send(topic, now_ms)
            self.producer.poll(0)
            next_tick += 1.0
            time.sleep(max(0.0, next_tick - time.monotonic()))
        self.producer.flush(60)

    def _send(self, topic: str, now_ms: int) -> None:
        seq = self.seq[topic]
        self.seq[topic] += 1
        repeat = seq % 10 == 9
        original = seq - 1 if repeat else seq
        partition = original % self.partitions
        payload = f"{topic}/{original}".encode()
        while True:
            try:
                self.producer.produce(
                    topic, key=payload, value=payload * 4, partition=partition, timestamp=now_ms
                )
                break
            except BufferError:  # the local queue is full: let it drain, then send
                self.producer.poll(0.1)
            except KafkaException as e:  # a new topic's metadata not here yet
                if e.args[0].code() != KafkaError._UNKNOWN_TOPIC:
                    raise
                self.producer.poll(0.1)
        window = (now_ms // 1000) // WINDOW_S * WINDOW_S
        with self.truth.lock:
            self.truth.sent[(topic, partition, window)] += 1
            self.truth.repeats[(topic, partition, window)] += repeat


BOTH_TYPES = ("AUDIT_TYPE_EXACT_UNIQ", "AUDIT_TYPE_APPROX_UNIQ")


def audit_group(
    group_id: str,
    *,
    pattern: str = "",
    topic: str = "",
    trigger: int,
    audit_types: Sequence[str] = BOTH_TYPES,
    consumer_group: str = "",
) -> dict:
    """The audit JobGroup of the benches: `audit_types` of 60 s windows, from the earliest
    offset, its consumer group `consumer_group` (default: the group's id)."""
    options: dict[str, Any] = {
        "@type": "type.googleapis.com/uatu.v1.JobOptions",
        "trigger": {"intervalSeconds": trigger},
    }
    if pattern:
        options["topics"] = {"pattern": pattern}
    return {
        "jobGroupId": group_id,
        "type": "JOB_TYPE_KAFKA_AUDIT",
        "kafkaConsumerTaskGroup": {
            "cluster": "local",
            "topic": topic,
            "consumerGroup": consumer_group or group_id,
            "autoOffsetResetPolicy": "AUTO_OFFSET_RESET_POLICY_EARLIEST",
            "auditMetadata": {
                "auditConfigs": [
                    {"auditType": t, "auditIntervalInSeconds": WINDOW_S} for t in audit_types
                ]
            },
        },
        "extension": options,
    }


def start_audit(group: dict, workdir: Path, conf: Path, driver_memory: str) -> tuple[Any, Path]:
    path = workdir / f"{group['jobGroupId']}.json"
    path.write_text(json.dumps(group))
    stop = workdir / f"{group['jobGroupId']}.stop"
    env = spark_submit_env(conf, master="local[2]", driver_memory=driver_memory)
    env["UATU_STOP_FILE"] = str(stop)
    log = (BENCH_DIR / f"fleet-{group['jobGroupId']}.log").open("w")
    proc = subprocess.Popen(
        [str(ROOT / "spark-submit.sh"), str(path)], env=env, stdout=log, stderr=log, cwd=ROOT
    )
    return proc, stop


_STATE = re.compile(r"exact keys in memory: ([\d,]+) in (\d+) windows \(([\d.]+) MiB\)")


def key_state(log: Path) -> dict[str, Any]:
    """The exact keys' state the audit's batch lines report (jobs/audit/fold.state_line): the
    largest and the last, and the size of the keys' folder under the checkpoint."""
    states = [
        (int(m.group(1).replace(",", "")), int(m.group(2)), float(m.group(3)))
        for m in _STATE.finditer(log.read_text(errors="replace"))
    ]
    if not states:
        return {}
    largest = max(states, key=lambda s: s[2])
    return {
        "batches": len(states),
        "largest": {"keys": largest[0], "windows": largest[1], "memory_mib": largest[2]},
        "last": {"keys": states[-1][0], "windows": states[-1][1], "memory_mib": states[-1][2]},
    }


def folder_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


# --- the table -------------------------------------------------------------------------------


def read_counts(path: str) -> list[dict[str, Any]]:
    """audit_counts' rows (delta-rs; [] before the table exists)."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        table = DeltaTable(path)
    except TableNotFoundError:
        return []
    columns = ["job_group_id", "topic", "partition", "audit_type", "window_start"]
    columns += ["message_count", "unique_count"]
    return table.to_pyarrow_table(columns=columns).to_pylist()


def compare(
    rows: list[dict[str, Any]],
    truth: Truth,
    group_id: str,
    audit_types: Sequence[str] = BOTH_TYPES,
) -> dict[str, Any]:
    """Windows of `audit_types` exact (counts, EXACT distinct) and APPROX within 3 standard
    errors."""
    mismatched, approx_outside, compared = [], 0, 0
    got: dict[tuple[str, Key], dict] = {}
    for r in rows:
        if r["job_group_id"] != group_id:
            continue
        start = int(r["window_start"].timestamp())
        got[(r["audit_type"], (r["topic"], r["partition"], start))] = r
    for key, sent in truth.sent.items():
        unique = sent - truth.repeats[key]
        for audit_type in audit_types:
            compared += 1
            row = got.get((audit_type, key))
            if row is None or row["message_count"] != sent:
                mismatched.append((audit_type, key, sent, row and row["message_count"]))
            elif audit_type == "AUDIT_TYPE_EXACT_UNIQ" and row["unique_count"] != unique:
                mismatched.append((audit_type, key, unique, row["unique_count"]))
            elif audit_type == "AUDIT_TYPE_APPROX_UNIQ":
                approx_outside += abs(row["unique_count"] - unique) > 3 * HLL_RSE * unique + 1
    extra = sum(1 for _, key in got if key not in truth.sent)
    return {
        "windows_compared": compared,
        "windows_wrong": len(mismatched),
        "first_wrong": [str(m) for m in mismatched[:5]],
        "rows_not_sent": extra,
        "approx_outside_3_sigma": approx_outside,
    }


# --- the run ---------------------------------------------------------------------------------


def create_topics(admin: AdminClient, names: Sequence[str], partitions: int) -> None:
    for start in range(0, len(names), 200):
        futures = admin.create_topics(
            [
                NewTopic(n, partitions, 1, config=dict([SYNCED_CONFIG]))
                for n in names[start : start + 200]
            ]
        )
        for future in futures.values():
            future.result()
    # Created is not yet known to every client: wait until the cluster's metadata lists them
    # all, so the producer never meets an unknown topic.
    wanted = set(names)
    wait_for(
        f"{len(names)} topics in the metadata",
        lambda: wanted <= set(admin.list_topics(timeout=30).topics),
        300,
    )


def bench(args) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    with work_dir("fleet-", keep=args.keep) as workdir:
        cluster = start_cluster(workdir / "kafka", heap="1g")
        try:
            bootstrap = cluster.bootstrap_servers
            conf = write_conf_dir(
                workdir / "conf",
                bootstrap,
                workdir / "wh",
                workdir / "ck",
                more_clusters={
                    name: {"bootstrap_servers": bootstrap} for name in (SOURCE_ALIAS, "dst")
                },
            )
            admin = AdminClient({"bootstrap.servers": bootstrap})
            topics = [f"{PREFIX}{i:04d}" for i in range(args.topics)]
            say(f"creating {len(topics)} topics of {args.partitions} partitions")
            create_topics(admin, topics, args.partitions)
            producer = FleetProducer(bootstrap, topics, args.partitions, args.rate)
            producer.start()
            figures |= run_fleet(args, workdir, conf, admin, producer)
            if args.baseline_apps:
                figures |= run_baseline_beside(args, workdir, conf, bootstrap, topics, figures)
            if args.replication:
                figures["replication"] = run_replication(
                    workdir,
                    conf,
                    admin,
                    bootstrap,
                    list(producer.topics),
                    args.partitions,
                    args.trigger_seconds,
                    args.driver_memory,
                )
        finally:
            cluster.stop()
    return figures


def run_baseline_beside(
    args, workdir: Path, conf: Path, bootstrap: str, topics: list[str], fleet: dict[str, Any]
) -> dict[str, Any]:
    """The baseline (below) and its ratios per topic to the pattern audit's figures."""
    # The fleet's producer has stopped: the baseline's topics get their own, at the same
    # rate, so the one-application-per-topic audits have records to fold.
    feeder = FleetProducer(bootstrap, topics[: args.baseline_apps], args.partitions, args.rate)
    feeder.start()
    try:
        baseline = run_baseline(args, workdir, conf, topics)
    finally:
        feeder.stopping.set()
        feeder.join()
    per_topic = {
        k: fleet["pattern_audit"][k] / fleet["topics_audited"] for k in ("rss_mean_gib", "cores")
    }
    return {
        "baseline": baseline,
        "ratio_memory_per_topic": baseline["rss_mean_gib"]
        / args.baseline_apps
        / per_topic["rss_mean_gib"],
        "ratio_cores_per_topic": baseline["cores"] / args.baseline_apps / per_topic["cores"],
    }


def run_fleet(args, workdir: Path, conf: Path, admin: AdminClient, producer: FleetProducer):
    counts = str(workdir / "wh" / "audit_counts")
    group = audit_group("fleet", pattern=r"fleet\.t.*", trigger=args.trigger_seconds)
    proc, stop = start_audit(group, workdir, conf, args.driver_memory)
    say("pattern audit started; waiting for its first rows")
    first = wait_for("first rows", lambda: bool(read_counts(counts)), 900)
    say(f"first rows after {first} s; sampling for {args.minutes} min")
    third = args.minutes * 60 / 3
    usage_first = sample([proc.pid], third)
    new = [f"{NEW_PREFIX}{i:03d}" for i in range(args.new_topics)]
    created = time.monotonic()
    create_topics(admin, new, args.partitions)
    producer.topics.extend(new)
    seen: dict[str, float] = {}

    def watch_new() -> None:
        while len(seen) < len(new) and time.monotonic() - created < 20 * args.trigger_seconds:
            present = {r["topic"] for r in read_counts(counts)}
            for t in new:
                if t in present and t not in seen:
                    seen[t] = time.monotonic() - created
            time.sleep(2)

    watcher = threading.Thread(target=watch_new, daemon=True)
    watcher.start()
    usage_rest = sample([proc.pid], 2 * third)
    watcher.join()
    producer.stopping.set()
    producer.join()
    total = producer.truth.total
    say(f"producer stopped after {total:,} records; waiting for the audit to count them")
    wait_for(
        "every record counted",
        lambda: (
            sum(
                r["message_count"]
                for r in read_counts(counts)
                if r["audit_type"] == "AUDIT_TYPE_EXACT_UNIQ"
            )
            >= total
        ),
        900,
    )
    stop.touch()
    proc.wait(600)
    delays = sorted(seen.values())
    return {
        "topics_audited": args.topics + args.new_topics,
        "records": total,
        "first_rows_s": first,
        "pattern_audit": {
            "rss_mean_gib": (usage_first["rss_mean_gib"] + 2 * usage_rest["rss_mean_gib"]) / 3,
            "rss_peak_gib": max(usage_first["rss_peak_gib"], usage_rest["rss_peak_gib"]),
            "cores": (usage_first["cores"] + 2 * usage_rest["cores"]) / 3,
        },
        "new_topics_seen": len(seen),
        "new_topic_delay_s": {
            "median": delays[len(delays) // 2] if delays else None,
            "max": delays[-1] if delays else None,
            "two_triggers": 2 * args.trigger_seconds,
        },
        "exit_code": proc.returncode,
        "accuracy": compare(read_counts(counts), producer.truth, "fleet"),
        "exact_key_state": key_state(BENCH_DIR / "fleet-fleet.log"),
        "exact_key_files_mib": folder_bytes(workdir / "ck" / "fleet" / "audit-keys") / 2**20,
    }


def run_baseline(
    args, workdir: Path, conf: Path, topics: list[str], audit_types: Sequence[str] = BOTH_TYPES
) -> dict[str, Any]:
    """One application per topic, as today, for --baseline-apps topics at once."""
    say(f"baseline: {args.baseline_apps} single-topic audits, one application each")
    runs = [
        start_audit(
            audit_group(f"one-{t}", topic=t, trigger=args.trigger_seconds, audit_types=audit_types),
            workdir,
            conf,
            args.driver_memory,
        )
        for t in topics[: args.baseline_apps]
    ]
    counts = str(workdir / "wh" / "audit_counts")
    wait_for(
        "baseline first rows",
        lambda: len({r["job_group_id"] for r in read_counts(counts)}) > args.baseline_apps,
        900,
    )
    usage = sample([proc.pid for proc, _ in runs], args.baseline_minutes * 60)
    for _, stop in runs:
        stop.touch()
    for proc, _ in runs:
        proc.wait(600)
    return usage


def main(argv: list[str] | None = None) -> int:
    parser = bench_parser("bench.fleet_bench", __doc__)
    parser.add_argument("--topics", type=int, default=1000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--rate", type=int, default=10, help="records/s per topic")
    parser.add_argument("--minutes", type=float, default=10)
    parser.add_argument("--new-topics", type=int, default=50)
    parser.add_argument("--trigger-seconds", type=int, default=60)
    parser.add_argument("--baseline-apps", type=int, default=3)
    parser.add_argument("--baseline-minutes", type=float, default=3)
    parser.add_argument(
        "--driver-memory",
        default="2g",
        help="of every job the bench starts (the pattern audit, the baseline, the copy)",
    )
    parser.add_argument(
        "--no-replication",
        dest="replication",
        action="store_false",
        help="skip the last phase (every fleet topic copied by one regex replication)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the work dir")
    args = parse_args(
        parser,
        argv,
        {"topics": 20, "minutes": 2, "new_topics": 4, "baseline_apps": 1, "baseline_minutes": 1},
    )
    warn_if_jobs_zip_stale()
    figures = bench(args)
    say(json.dumps(figures, indent=2, default=str))
    write_latest(BENCH_DIR / "fleet-result.json", figures)
    say(f"result: {write_result('fleet', figures, args)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
