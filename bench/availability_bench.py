"""Availability job: how fast a dead broker shows in `availability_probes`, and how many
offset commits per second the consumer-lag evaluator gets through.

1. detection (a real job on a real 3-broker cluster). Three KRaft brokers in racks a, b, c
   under var/bench/; the availability job (`jobs.availability.job.AvailabilityJob`,
   NATIVE_PRODUCER) runs in a thread of this process with a stop file, on a local[2]
   SparkSession built like the tests' (`tests/conftest.py`), with the JobGroup's required
   fields only, so every setting is the default: one probe per second to each probe partition,
   10 s probe windows, 5 s ack SLA, 20 s round-trip SLA, a 5 s trigger, topic availability and
   consumer lag on. Once every broker has two healthy windows (every probe produced and read
   back), each trial SIGKILLs one broker (`KafkaCluster.kill_broker`; trial k kills broker 2,
   1, 0, 2, ...) and polls `availability_probes` with spark.read (every 0.5 s, a query
   whenever the Delta log has a new version) for the first row of that broker, window ending
   after the kill, with (a) produce_failed > 0 and (b) produce_success_ratio = 0. Detection =
   when the row became visible - the kill: "visible" is the modification time of the Delta log
   version that added the row's file (found with `_metadata.file_path`), "seen" the poll that
   first returned it. Also reported: the row's window_start - the kill (where the kill fell in
   the window) and the row's visibility - its window_end. The broker is then restarted
   (`KafkaCluster.restart_broker`), and the trial waits for the first window that starts after
   the restart with every probe to it produced and read back (recovery visible - restart
   done). Each trial also lists the job's micro-batches from the kill on, from the query's
   progress records: Spark's durationMs.latestOffset (the Kafka source asking
   `__consumer_offsets`' leaders for their end offsets) and addBatch (the job's foreachBatch,
   which writes the probe rows first). Targets: detection under 30 s. KMinion's round-trip SLA
   (20 s) is shown as a reference only: KMinion is not run here. Job log lines go to
   var/bench/availability-job.log, the process's stderr (Spark, librdkafka) to
   var/bench/availability-stderr.log.

2. throughput (the lag evaluator in process, single thread; Burrow 1.2.1 on the same
   recorded commits in the same run).
   Recording, on a 1-broker cluster: --groups consumer groups (default 200, bench-g000...)
   commit explicit offsets with confluent_kafka (`Consumer.commit(offsets=..., asynchronous=
   True)`, every callback awaited) for every partition of one of --topics topics of
   --partitions partitions (group g reads topic g % topics), one commit per group per round,
   records produced before each round so the heads advance. The groups behave differently
   (g % 10): 0-4 keep up, 5 falls further behind, 6 commits one offset, 7 jumps back now and
   then, 8 stops halfway, 9 keeps up at a random distance, so the rules do real work. Rounds
   go on until --commits commit records are made (default 200,000; --quick 20,000). Then
   `__consumer_offsets` is read back raw from offset 0 (confluent_kafka, every partition: the
   active segment is never compacted) and saved with the head offsets after each round and
   the last offset committed per group/partition to var/bench/commit-stream.bin
   (commit-stream-quick.bin with --quick); `--replay FILE` measures a saved stream again
   without a broker. Replay, single thread, records in commit-time order:

   a. decode only: `offsets_topic.decode` of every record;
   b. decode + record: per batch of --batch-sizes records (default 1,000 and 10,000), what
      `job._evaluate_groups` does before it evaluates: decode, `LagTracker.refresh_heads`
      with the newest recorded heads as of the batch's newest commit, and the job's
      `record_commits` (each commit's head at its time from `HeadHistory.at`,
      `LagTracker.record`, the `consumer_offset_commits` rows). The history is the one the
      job's head sampler fills (every second, kept 5 min), filled beforehand with the
      recorded heads at their times and, before them, older samples up to --head-samples per
      partition (default 300: what a job keeps after 5 minutes; `at` looks through them all);
   c. b + evaluation, two ways: (affected) `LagTracker.evaluate(now, groups=the groups that
      committed in the batch)` in every batch, Burrow's incremental shape; (job) everything
      `_evaluate_groups` does in Python, with the job's functions: in the batches the job
      evaluates (`tracker.status_due`: the first, then the first at least
      `LagSettings.status_interval_ms`, 1 s, of commit time after the last evaluated one;
      "now" is the batch's newest commit time), `evaluate(now)` of every group,
      `job.lagging_partitions`, `job.status_rows` and `job.no_commit_rows`;
   d. one `LagTracker.evaluate(now)` of every group with full windows (median of 5), now
      being the stream's last commit time, and again at the wall clock after the run,
      as Burrow evaluates (most windows then end long ago: other statuses).

   Out of the replay: Spark's Kafka source and the `collect()` of the batch, the head
   sampler's thread and its requests to Kafka, the next-record-time requests, and the Delta
   appends. `HeadHistory.at` alone is timed too (us per call). Each figure is the median of
   --repeats runs, taken round-robin over the variants (best shown too). The replays run
   after the broker is stopped.

   Before that, while the recording's broker still runs (not with --replay: no broker):

   Burrow. --burrow-runs (default 3) cold runs and as many warm ones, alternating, each a
   fresh Burrow 1.2.1 (`devservices.burrow.start_burrow` without its warm-up; one ZooKeeper
   for their own state) with the job's evaluation window (intervals 10, min-distance 0), head
   offsets fetched every second, in-memory storage (4 workers). Caught up: for every group
   and partition, the newest commit in Burrow's storage (GET
   /v3/kafka/<cluster>/consumer/<group>; not /lag, which answers from a 1 s cache) is the
   stream's last commit of it, offset and commit time (`burrow_behind`). The bench polls the
   group list every 0.1 s until every group is listed, then the groups one after another,
   again from the first one behind every 0.1 s; the moment found is at most resolution_s
   late (reported).
   - cold (the figure of the summary): Burrow reads the recorded `__consumer_offsets` from
     the beginning (`start-latest=false`), timed from its log line "starting consumers"
     (its consumer module has its Kafka client and starts one partition consumer per
     partition) to caught up; from its launch too. Commits/s = recorded commits / that time,
     median of the runs. This includes starting the 50 partition consumers one after
     another: each asks for its partition's oldest offset on the connection that carries
     the fetches, so once the partitions started earlier are drained a start waits out a
     fetch's long-poll (sarama's 250 ms). Burrow pays that on every start, and it can be
     much of the time for a small stream.
   - warm: Burrow reads a topic of its own (`offsets-topic`), empty, with as many partitions
     as `__consumer_offsets`; once it lists a commit produced to the partition it starts last
     (every partition consumer running: the start alone, reported), the recorded records
     (same keys and values, each group's in the partition the broker chose for it, in
     order) are produced to that topic from this process, and Burrow is timed from the first
     one produced to caught up (the producing, which overlaps, is reported). This is Burrow
     running, as the job's evaluator runs inside a running job.
   Both include fetching from the broker, decoding and storing each commit with its lag
   against the heads Burrow last fetched, on every core (Go, several goroutines; the broker
   shares the 2 cores). Both exclude evaluation (Burrow evaluates a group when asked),
   timed apart after each cold run: GET /lag of every group, one after another, 5 passes
   right after the evaluator's cache expired (every group evaluated) and 5 at once again
   (answered from the cache: HTTP and JSON only); the median of the paired differences is
   the evaluation alone, to compare with d. at the wall clock (small next to HTTP: noisy).

   e. the job's path with consumption: `__consumer_offsets` read from the beginning with
      confluent_kafka (`consume()` of the largest --batch-sizes, each partition in order)
      into b's work ("record") and c's job work ("job") until every partition's end (found
      before the timer starts); median of --repeats. This is not the job's own Kafka path
      (Spark's Kafka source, a JVM consumer, and the `collect()` to the driver), which is not
      timed here; it shows what reading the records adds, as Burrow's figure includes it.

   Commits/s = commit records / seconds. x Burrow = a row's commits/s / Burrow's cold
   commits/s of this run, x warm the same against the warm run: a.-d. exclude consuming and
   run on one Python thread, Burrow includes it and uses every core, so a. to c. flatter the
   job and e. against warm is the like-for-like pair. The rate published for Burrow in
   linkedin/Burrow#539 (BURROW_PUBLISHED, on another machine) is printed as a labelled
   reference only (x 40k). Checked: the decoded
   commits equal the commits recorded, the broker's committed offsets and the stream's last
   commits equal the recorder's last ones, after every replay and e. run the tracker's newest
   committed offset of every group/partition equals the recorder's last, and every Burrow run
   caught up (within 600 s).

The summary goes to stdout and var/bench/availability-bench-result.json (with the 1, 5 and
15-minute load averages at the start and the end), and a record of the run (commit, machine,
arguments, figures) to
docs/benchmarks/availability-<UTC time>-<commit>.json. Nothing here asserts a duration; the
exit status is 1 only when a check fails or a measurement is missing.
"""

from __future__ import annotations

import bisect
import contextlib
import heapq
import json
import logging
import os
import random
import struct
import sys
import threading
import time
import urllib.parse
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from bench._common import (
    BENCH_DIR,
    bench_parser,
    clean_env,
    median,
    median_or_none,
    now_ms,
    parse_args,
    say,
    seconds_text,
    table_session,
    work_dir,
    write_latest,
    write_result,
)
from devservices.kafka import start_cluster
from jobs.availability.lag.head_sampler import KEEP_MS, REFRESH_S, HeadHistory
from jobs.availability.lag.offsets_topic import (
    OFFSETS_TOPIC,
    OffsetCommit,
    OffsetDeleted,
    UndecodableRecord,
    decode,
)
from jobs.availability.lag.tracker import LagSettings, LagTracker, status_due

RESULT_PATH = BENCH_DIR / "availability-bench-result.json"
JOB_LOG = BENCH_DIR / "availability-job.log"
STDERR_LOG = BENCH_DIR / "availability-stderr.log"
DETECTION_TARGET_S = 30.0
KMINION_ROUNDTRIP_SLA_S = 20.0
BURROW_PUBLISHED = 40_000  # offsets/s on 2 cores, linkedin/Burrow#539: a reference only
PROBE_TOPIC = "bench-probe"
STREAM_MAGIC = b"UATU-COMMIT-STREAM-1\n"
QUICK = {"trials": 1, "commits": 20_000, "burrow_runs": 1}  # --quick

log = logging.getLogger("uatu.bench")


# === Part 1: detection ======================================================================


@dataclass
class Sighting:
    """One availability_probes row as the bench found it."""

    window_start_ms: int
    window_end_ms: int
    probes: int
    produce_failed: int
    produce_success_ratio: float | None
    consume_success_ratio: float | None
    sample_error: str | None
    visible_ms: int | None  # mtime of the Delta log version that added the row's file
    seen_ms: int  # the poll that first returned it


@dataclass
class Trial:
    broker: int
    killed_ms: int
    first_failed: Sighting | None = None
    all_failed: Sighting | None = None
    restart_started_ms: int = 0
    restart_done_ms: int = 0
    recovered: Sighting | None = None
    batches: list[dict[str, Any]] = field(default_factory=list)  # `batch_progress`

    def since_kill(self, s: Sighting | None) -> dict[str, float | None]:
        if s is None:
            return dict.fromkeys(("visible_s", "seen_s", "window_start_s", "after_window_end_s"))
        return {
            "visible_s": None if s.visible_ms is None else (s.visible_ms - self.killed_ms) / 1000,
            "seen_s": (s.seen_ms - self.killed_ms) / 1000,
            "window_start_s": (s.window_start_ms - self.killed_ms) / 1000,
            "after_window_end_s": (
                None if s.visible_ms is None else (s.visible_ms - s.window_end_ms) / 1000
            ),
        }

    def summary(self) -> dict[str, Any]:
        recovery = None
        if self.recovered is not None:
            at = self.recovered.visible_ms or self.recovered.seen_ms
            recovery = (at - self.restart_done_ms) / 1000
        return {
            "broker": self.broker,
            "first_failed": self.since_kill(self.first_failed),
            "all_failed": self.since_kill(self.all_failed),
            "restart_s": (self.restart_done_ms - self.restart_started_ms) / 1000,
            "recovery_visible_s": recovery,
        }


class DeltaLog:
    """File name -> (version, modification time) of the version that added it, read from the
    table's _delta_log JSON commits (cheap to poll, no Spark)."""

    def __init__(self, table: Path) -> None:
        self.log_dir = table / "_delta_log"
        self.added: dict[str, tuple[int, int]] = {}
        self.versions: set[int] = set()

    def refresh(self) -> bool:
        """Read versions not seen yet; True when there were any."""
        if not self.log_dir.is_dir():
            return False
        new = False
        for path in self.log_dir.glob("*.json"):
            if not path.stem.isdigit() or int(path.stem) in self.versions:
                continue
            version = int(path.stem)
            mtime_ms = path.stat().st_mtime_ns // 1_000_000
            for line in path.read_text().splitlines():
                action = json.loads(line)
                if "add" in action:
                    name = Path(urllib.parse.unquote(action["add"]["path"])).name
                    self.added[name] = (version, mtime_ms)
            self.versions.add(version)
            new = True
        return new

    def visible_ms(self, file_path: str) -> int | None:
        name = Path(urllib.parse.unquote(urllib.parse.urlparse(file_path).path)).name
        found = self.added.get(name)
        return found[1] if found else None


class ProbeTable:
    """Polls availability_probes: spark.read whenever the Delta log has a new version."""

    def __init__(self, spark: Any, path: str) -> None:
        self.spark = spark
        self.path = path
        self.log = DeltaLog(Path(path))
        self.rows: list[Sighting] = []
        self._brokers: dict[int, list[Sighting]] = {}
        self._seen: set[tuple[int, int]] = set()

    def poll(self) -> bool:
        """Read the table if it changed; True when it did."""
        if not self.log.refresh():
            return False
        from pyspark.sql import functions as F

        found = (
            self.spark.read.format("delta")
            .load(self.path)
            .where(F.col("broker").isNotNull())
            .select(
                "broker",
                F.expr("unix_millis(window_start)").alias("ws"),
                F.expr("unix_millis(window_end)").alias("we"),
                "probes",
                "produce_failed",
                "produce_success_ratio",
                "consume_success_ratio",
                "sample_error",
                F.col("_metadata.file_path").alias("file"),
            )
            .collect()
        )
        seen_ms = now_ms()
        self.log.refresh()  # the read may have seen a version written since the listing
        for r in found:
            key = (r["broker"], r["ws"])
            if key in self._seen:
                continue
            self._seen.add(key)
            sighting = Sighting(
                r["ws"],
                r["we"],
                r["probes"],
                r["produce_failed"],
                r["produce_success_ratio"],
                r["consume_success_ratio"],
                r["sample_error"],
                self.log.visible_ms(r["file"]),
                seen_ms,
            )
            self._brokers.setdefault(r["broker"], []).append(sighting)
        for rows in self._brokers.values():
            rows.sort(key=lambda s: s.window_start_ms)
        return True

    def of(self, broker: int) -> list[Sighting]:
        return self._brokers.get(broker, [])

    def wait(
        self, what: str, found: Callable[[], Any], timeout_s: float, poll_s: float = 0.5
    ) -> Any:
        """Poll until `found()` returns something; None after `timeout_s` (noted)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.poll()
            result = found()
            if result:
                return result
            time.sleep(poll_s)
        say(f"  NOTE: no {what} within {timeout_s:.0f} s")
        return None


def _healthy(s: Sighting) -> bool:
    return s.produce_success_ratio == 1.0 and s.consume_success_ratio == 1.0


def batch_progress(spark: Any, query_name: str, since_ms: int) -> list[dict[str, Any]]:
    """The job's micro-batches that started at or after `since_ms`, from the query's
    progress records: id, start, duration and where it went (Spark's durationMs: latestOffset
    is the Kafka source asking the brokers for offsets, addBatch the job's foreachBatch)."""
    query = next((q for q in spark.streams.active if q.name == query_name), None)
    batches = []
    for p in query.recentProgress if query is not None else []:
        start = datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00"))
        start_ms = int(start.timestamp() * 1000)
        if start_ms >= since_ms:
            batches.append(
                {
                    "batch": p["batchId"],
                    "start_ms": start_ms,
                    "rows": p.get("numInputRows", 0),
                    "duration_ms": p.get("batchDuration"),
                    "phases_ms": p.get("durationMs", {}),
                }
            )
    return batches


def describe_batch(b: dict[str, Any], since_ms: int) -> str:
    offsets_s = b["phases_ms"].get("latestOffset", 0) / 1000
    add_s = b["phases_ms"].get("addBatch", 0) / 1000
    return (
        f"#{b['batch']} at {(b['start_ms'] - since_ms) / 1000:+.1f} s: "
        f"{(b['duration_ms'] or 0) / 1000:.1f} s (latestOffset {offsets_s:.1f}, "
        f"addBatch {add_s:.1f})"
    )


@contextlib.contextmanager
def stderr_to(path: Path) -> Iterator[None]:
    """Point fd 2 (this process and the JVM it starts) at a file; restore it afterwards."""
    sys.stderr.flush()
    saved = os.dup(2)
    with path.open("ab") as f:
        os.dup2(f.fileno(), 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def availability_spec(workdir: Path, bootstrap: str) -> Any:
    """The job's spec from a JobGroup with the required fields only: every setting default."""
    from google.protobuf import json_format
    from uatu.v1 import job_options_pb2  # noqa: F401  (registers JobOptions)
    from uber.data.kafka.datatransfer.job_group_pb2 import JobGroup

    from core.config import load_settings
    from jobs.availability import job
    from jobs.availability.spec import availability_spec as spec_of
    from testing.conf import write_conf_dir

    conf = write_conf_dir(workdir / "conf", bootstrap, workdir / "wh", workdir / "ck")
    data = {
        "jobGroupId": "bench-availability",
        "type": "JOB_TYPE_KAFKA_AVAILABILITY",
        "kafkaConsumerTaskGroup": {"cluster": "local", "topic": PROBE_TOPIC},
        "availabilityTaskGroup": {"availabilityJobType": "AVAILABILITY_JOB_TYPE_NATIVE_PRODUCER"},
    }
    spec = spec_of(json_format.ParseDict(data, JobGroup()), load_settings(conf, clean_env()))
    job.ensure_source(spec)
    return spec


def detection(trials: int, workdir: Path, late: contextlib.ExitStack) -> dict[str, Any]:
    """3 brokers, the job with default settings, `trials` kills; see the module docstring.

    The brokers are stopped, and stderr given back, when `late` closes: the job's admin client
    and producer stay referenced after the job ends (py4j keeps the foreachBatch function),
    and they retry stopped brokers on stderr twice a second until the process exits.
    """
    from jobs.availability import job

    file_log = logging.FileHandler(JOB_LOG, mode="w")
    file_log.setFormatter(
        logging.Formatter("%(asctime)s.%(msecs)03d %(levelname)s %(name)s: %(message)s", "%X")
    )
    uatu = logging.getLogger("uatu")
    uatu.setLevel(logging.INFO)
    uatu.addHandler(file_log)
    logging.getLogger("py4j").setLevel(logging.WARNING)
    STDERR_LOG.write_bytes(b"")
    result: dict[str, Any] = {"settings": {}, "trials": []}
    status: list[int] = []
    stop_file = workdir / "stop"
    thread: threading.Thread | None = None
    spark = None
    # librdkafka's complaints about the killed broker and Spark's warnings go to the file.
    late.enter_context(stderr_to(STDERR_LOG))
    cluster = start_cluster(workdir / "kafka-3", n_brokers=3, racks=["a", "b", "c"])
    late.callback(cluster.stop)
    say(f"3 brokers up on {cluster.bootstrap_servers} (racks a, b, c); starting Spark")
    try:
        # The job runs in this session too: testing's small local[2] session, as the tests'.
        spark = table_session("uatu-availability-bench", workdir, driver_memory="2g")
        spec = availability_spec(workdir, cluster.bootstrap_servers)
        p = spec.probe
        result["settings"] = {
            "probe_interval_ms": p.interval_ms,
            "probe_window_ms": p.window_ms,
            "ack_sla_ms": p.ack_sla_ms,
            "roundtrip_sla_ms": p.roundtrip_sla_ms,
            "trigger_interval_seconds": spec.trigger_interval_seconds,
            "topic_availability": spec.topic_availability,
            "consumer_lag": spec.consumer_lag,
        }
        say(f"  job settings (all defaults): {result['settings']}")
        started = time.monotonic()
        thread = threading.Thread(
            target=lambda: status.append(
                job.AvailabilityJob(spec).run(once=False, stop_file=str(stop_file))
            ),
            name="availability-job",
        )
        thread.start()
        table = ProbeTable(spark, spec.output.table("availability_probes"))

        def all_healthy() -> bool:
            return all(sum(map(_healthy, table.of(b))) >= 2 for b in range(3))

        if not table.wait("two healthy windows for every broker", all_healthy, 240):
            raise RuntimeError("the job never showed healthy windows; see " + str(JOB_LOG))
        result["startup_to_healthy_s"] = time.monotonic() - started
        say(f"  every broker healthy after {result['startup_to_healthy_s']:.1f} s")
        for k in range(trials):
            if status:
                raise RuntimeError(f"the job stopped (exit {status[0]}); see {JOB_LOG}")
            trial = run_trial(cluster, table, broker=(2 - k) % 3)
            # From the batch running at the kill on.
            trial.batches = [
                b
                for b in batch_progress(spark, spec.query_name, trial.killed_ms - 60_000)
                if b["start_ms"] + (b["duration_ms"] or 0) > trial.killed_ms
            ]
            result["trials"].append({**trial.summary(), "detail": asdict(trial)})
            print_trial(k + 1, trial)
    finally:
        if thread is not None:
            stop_file.touch()
            thread.join(180)
            if thread.is_alive():
                say("  WARNING: the job did not stop within 180 s")
        if spark is not None:
            spark.stop()
        uatu.removeHandler(file_log)
        file_log.close()
    result["job_exit"] = status[0] if status else None
    result["summary"] = detection_summary(result["trials"])
    return result


def run_trial(cluster: Any, table: ProbeTable, broker: int) -> Trial:
    say(f"trial: SIGKILL broker {broker}")
    cluster.kill_broker(broker)
    trial = Trial(broker, now_ms())

    def after_kill(want: Callable[[Sighting], bool]) -> Callable[[], Sighting | None]:
        def find() -> Sighting | None:
            rows = [s for s in table.of(broker) if s.window_end_ms > trial.killed_ms]
            return next((s for s in rows if want(s)), None)

        return find

    trial.first_failed = table.wait(
        "row with produce_failed > 0", after_kill(lambda s: s.produce_failed > 0), 120
    )
    trial.all_failed = table.wait(
        "row with produce_success_ratio = 0",
        after_kill(lambda s: s.produce_success_ratio == 0.0),
        120,
    )
    trial.restart_started_ms = now_ms()
    cluster.restart_broker(broker)
    trial.restart_done_ms = now_ms()
    restart_s = (trial.restart_done_ms - trial.restart_started_ms) / 1000
    say(f"  broker {broker} back after {restart_s:.1f} s")

    def recovered() -> Sighting | None:
        rows = table.of(broker)
        return next(
            (s for s in rows if s.window_start_ms >= trial.restart_started_ms and _healthy(s)),
            None,
        )

    trial.recovered = table.wait("healthy window after the restart", recovered, 180)
    return trial


def print_trial(n: int, trial: Trial) -> None:
    s = trial.summary()
    for label, key in (("produce_failed > 0", "first_failed"), ("success ratio 0", "all_failed")):
        d = s[key]
        say(
            f"  trial {n}, broker {trial.broker}, first row with {label}: visible "
            f"{seconds_text(d['visible_s'])} after the kill (seen by the poll "
            f"{seconds_text(d['seen_s'])}); its window starts "
            f"{seconds_text(d['window_start_s'])} from the kill, visible "
            f"{seconds_text(d.get('after_window_end_s'))} after its end"
        )
    say(
        f"  trial {n}: restart {s['restart_s']:.1f} s, then a healthy window visible "
        f"{seconds_text(s['recovery_visible_s'])} after the broker was back"
    )
    say("  the job's micro-batches from the kill on (start relative to the kill):")
    for b in trial.batches:
        say(f"    {describe_batch(b, trial.killed_ms)}")


def detection_summary(trials: list[dict[str, Any]]) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    for key in ("first_failed", "all_failed"):
        visible = [t[key]["visible_s"] for t in trials if t[key]["visible_s"] is not None]
        missing = len(trials) - len(visible)
        med, worst = median_or_none(visible), max(visible, default=None)
        summary[key] = {
            "visible_s": visible,
            "missing": missing,
            "median_s": med,
            "max_s": worst,
            "median_x_target": med / DETECTION_TARGET_S if med is not None else None,
            "max_x_target": worst / DETECTION_TARGET_S if worst is not None else None,
            "median_x_kminion_sla": med / KMINION_ROUNDTRIP_SLA_S if med is not None else None,
            "max_x_kminion_sla": worst / KMINION_ROUNDTRIP_SLA_S if worst is not None else None,
            "target_met": bool(visible)
            and not missing
            and worst is not None
            and worst < DETECTION_TARGET_S,
        }
    recoveries = [t["recovery_visible_s"] for t in trials if t["recovery_visible_s"] is not None]
    summary["recovery_visible_s"] = {
        "values": recoveries,
        "median_s": median_or_none(recoveries),
        "max_s": max(recoveries, default=None),
    }
    return summary


def print_detection(result: dict[str, Any]) -> None:
    s = result["summary"]
    print(f"\ndetection, {len(result['trials'])} trial(s), default settings {result['settings']}")
    print(
        f"{'first row of the killed broker with':38} {'runs (s)':>22} {'median':>8} {'max':>8}"
        f" {'x 30 s':>7} {'x 20 s':>7}  target < 30 s"
    )
    for key, label in (
        ("first_failed", "produce_failed > 0"),
        ("all_failed", "produce_success_ratio = 0"),
    ):
        d = s[key]
        runs = ", ".join(f"{v:.1f}" for v in d["visible_s"]) + (
            f" +{d['missing']} missing" if d["missing"] else ""
        )
        cells = ["n/a" if d[k] is None else f"{d[k]:.1f}" for k in ("median_s", "max_s")] + [
            "n/a" if d[k] is None else f"{d[k]:.2f}"
            for k in ("median_x_target", "median_x_kminion_sla")
        ]
        verdict = "MET" if d["target_met"] else "NOT MET"
        numbers = f"{cells[0]:>8} {cells[1]:>8} {cells[2]:>7} {cells[3]:>7}"
        print(f"{label:38} {runs:>22} {numbers}  {verdict}")
    r = s["recovery_visible_s"]
    if r["values"]:
        print(
            f"recovery: a healthy window visible {', '.join(f'{v:.1f}' for v in r['values'])} s "
            "after the restarted broker answered"
        )
    print(
        "x 20 s: against KMinion's default round-trip SLA (a published setting, not a run: "
        "KMinion is not run here)"
    )


# === Part 2: the lag evaluator's throughput =================================================


@dataclass
class Recording:
    """A recorded `__consumer_offsets` stream plus what the recorder knows about it."""

    records: list[tuple[bytes, bytes | None, int]]  # key, value, timestamp ms; commit order
    commits: int  # commit records the recorder made (one per partition per commit call)
    last: dict[tuple[str, str, int], int]  # (group, topic, partition) -> last committed offset
    heads: list[tuple[int, dict[tuple[str, int], int]]]  # (ms, head offsets) after each round
    meta: dict[str, Any]

    def save(self, path: Path) -> None:
        header = {
            **self.meta,
            "commits": self.commits,
            "last": [[g, t, p, o] for (g, t, p), o in sorted(self.last.items())],
            "heads": [
                [ms, [[t, p, h] for (t, p), h in sorted(hs.items())]] for ms, hs in self.heads
            ],
        }
        blob = json.dumps(header).encode()
        with path.open("wb") as f:
            f.write(STREAM_MAGIC + struct.pack(">I", len(blob)) + blob)
            f.write(struct.pack(">I", len(self.records)))
            for key, value, ts in self.records:
                size = -1 if value is None else len(value)
                f.write(struct.pack(">qii", ts, len(key), size) + key + (value or b""))

    @classmethod
    def load(cls, path: Path) -> Recording:
        data = path.read_bytes()
        if not data.startswith(STREAM_MAGIC):
            raise ValueError(f"{path} is not a commit stream written by this bench")
        at = len(STREAM_MAGIC)
        (size,) = struct.unpack_from(">I", data, at)
        header = json.loads(data[at + 4 : at + 4 + size])
        at += 4 + size
        (count,) = struct.unpack_from(">I", data, at)
        at += 4
        records: list[tuple[bytes, bytes | None, int]] = []
        for _ in range(count):
            ts, klen, vlen = struct.unpack_from(">qii", data, at)
            at += 16
            key = data[at : at + klen]
            at += klen
            value = None if vlen < 0 else data[at : at + vlen]
            at += max(vlen, 0)
            records.append((key, value, ts))
        last = {(g, t, p): o for g, t, p, o in header.pop("last")}
        heads = [(ms, {(t, p): h for t, p, h in hs}) for ms, hs in header.pop("heads")]
        commits = header.pop("commits")
        return cls(records, commits, last, heads, header)


def record_stream(
    cluster: Any, n_commits: int, n_groups: int, n_topics: int, n_partitions: int
) -> Recording:
    """Make the commits on `cluster` (a fresh 1-broker cluster) and read `__consumer_offsets`
    back."""
    topics = [f"bench-lag-{t}" for t in range(n_topics)]
    for topic in topics:
        cluster.create_topic(topic, n_partitions)
    say(f"broker up on {cluster.bootstrap_servers}; {n_groups} groups commit")
    started = time.monotonic()
    commits, last, heads, rounds = _commit_rounds(
        cluster.bootstrap_servers, topics, n_partitions, n_groups, n_commits
    )
    commit_s = time.monotonic() - started
    say(f"  {commits:,} commit records in {rounds} rounds, {commit_s:.1f} s; reading back")
    started = time.monotonic()
    records = _read_offsets_topic(cluster.bootstrap_servers)
    read_s = time.monotonic() - started
    say(f"  read {len(records):,} records of {OFFSETS_TOPIC} in {read_s:.1f} s")
    meta = {
        "groups": n_groups,
        "topics": n_topics,
        "partitions_per_topic": n_partitions,
        "rounds": rounds,
        "commit_seconds": commit_s,
        "read_seconds": read_s,
        "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    return Recording(records, commits, last, heads, meta)


def on_the_broker(
    workdir: Path,
    cluster: Any,
    rec: Recording,
    batch_size: int,
    repeats: int,
    burrow_runs: int,
    head_samples: int,
) -> tuple[bool, dict[str, Any]]:
    """What part 2 measures while the recording's broker still runs: Burrow's runs, then e.
    (the job's path with consumption); returns (all checks passed, result)."""
    ends = last_commits(rec)
    flat = {(g, t, p): o for g, tps in ends.items() for (t, p), (o, _) in tps.items()}
    ok = flat == rec.last
    if not ok:
        say("  MISMATCH: the stream's last commits != the recorder's last commits")
    result: dict[str, Any] = {"stream_last_equals_recorded": ok}
    if burrow_runs:
        burrow = burrow_throughput(workdir, cluster, rec, ends, burrow_runs)
        ok &= burrow["caught_up_runs"] == burrow["warm_caught_up_runs"] == burrow_runs
        result["burrow"] = burrow
    history, _ = head_history(rec, head_samples)
    modes = (
        ("record", "e. consume + decode + record"),
        ("job", "e. consume + the job's per-batch work (all groups)"),
    )
    # One untimed read first (connections, the broker's first read of the segments), then
    # round-robin over the two modes, as the replays.
    consume_and_process(cluster.bootstrap_servers, rec, history, batch_size, "record")
    runs: dict[str, list[float]] = {mode: [] for mode, _ in modes}
    shape: dict[str, tuple[int, int, int]] = {}
    correct = dict.fromkeys(runs, True)
    for _ in range(repeats):
        for mode, _label in modes:
            seconds, tracker, batches, evaluated, evaluations = consume_and_process(
                cluster.bootstrap_servers, rec, history, batch_size, mode
            )
            runs[mode].append(seconds)
            shape[mode] = (batches, evaluated, evaluations)
            correct[mode] &= tracker.committed() == rec.last
    rows = []
    for mode, label in modes:
        batches, evaluated, evaluations = shape[mode]
        row = _rate_row(
            label, f"consume-{mode}", batch_size, rec.commits, runs[mode], batches, evaluated
        )
        row["evaluations"] = evaluations
        row["committed_offsets_match"] = correct[mode]
        ok &= correct[mode]
        rows.append(row)
        say(
            f"  {label:50} batch {batch_size:>6,}: {row['median_commits_per_s']:>10,.0f} "
            f"commits/s, {batches} batches"
        )
    result["consume_rates"] = rows
    return ok, result


def _commit_rounds(
    bootstrap: str, topics: list[str], n_partitions: int, n_groups: int, n_commits: int
) -> tuple[int, dict[tuple[str, str, int], int], list[tuple[int, dict[tuple[str, int], int]]], int]:
    """Produce, snapshot the heads, let every group commit; until n_commits records."""
    rng = random.Random(7)
    per_round = 10  # records produced to every partition per round
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    outcomes = {"done": 0, "errors": 0}
    first_error: list[str] = []

    def on_commit(err: KafkaError | None, _partitions: list[TopicPartition]) -> None:
        outcomes["done"] += 1
        if err is not None:
            outcomes["errors"] += 1
            first_error.append(str(err))

    groups = [f"bench-g{g:03d}" for g in range(n_groups)]
    consumers = [
        Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": name,
                "enable.auto.commit": False,
                "on_commit": on_commit,
            }
        )
        for name in groups
    ]
    _find_coordinators(consumers, topics[0])
    head = {(t, p): 0 for t in topics for p in range(n_partitions)}
    last: dict[tuple[str, str, int], int] = {}
    heads: list[tuple[int, dict[tuple[str, int], int]]] = []
    issued = commits = rounds = 0
    rounds_planned = -(-n_commits // (n_groups * n_partitions))  # before the stoppers stop
    try:
        while commits < n_commits:
            for (topic, partition), _ in head.items():
                for _ in range(per_round):
                    producer.produce(topic, b"x" * 64, partition=partition)
            producer.flush(30)
            for tp in head:
                head[tp] += per_round
            heads.append((now_ms(), dict(head)))
            for g, (name, consumer) in enumerate(zip(groups, consumers, strict=True)):
                topic = topics[g % len(topics)]
                offsets = []
                for p in range(n_partitions):
                    offset = _next_offset(
                        g % 10,
                        rounds,
                        rounds_planned,
                        head[(topic, p)],
                        last.get((name, topic, p)),
                        rng,
                    )
                    if offset is not None:
                        offsets.append(TopicPartition(topic, p, offset))
                if not offsets:
                    continue
                consumer.commit(offsets=offsets, asynchronous=True)
                issued += 1
                for committed in offsets:
                    last[(name, committed.topic, committed.partition)] = committed.offset
                commits += len(offsets)
                if commits >= n_commits:
                    break
            rounds += 1
            _serve(consumers, outcomes, issued, backlog=4 * n_groups)
        _serve(consumers, outcomes, issued, backlog=0)
        if outcomes["errors"]:
            raise RuntimeError(f"{outcomes['errors']} async commits failed: {first_error[0]}")
        _check_committed(consumers, groups, last)
    finally:
        for consumer in consumers:
            consumer.close()
        producer.flush(10)
    return commits, last, heads, rounds


def _find_coordinators(consumers: list[Consumer], topic: str) -> None:
    """Ask every group's coordinator for its offsets until it answers: on a fresh broker
    `__consumer_offsets` is created by the first such request and its partitions load for a
    moment, and an async commit sent meanwhile fails with NOT_COORDINATOR (not retried)."""
    starting = {
        KafkaError.NOT_COORDINATOR,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
    }
    deadline = time.monotonic() + 60
    for consumer in consumers:
        while True:
            try:
                consumer.committed([TopicPartition(topic, 0)], timeout=10)
                break
            except KafkaException as e:
                if e.args[0].code() not in starting or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)


def _next_offset(
    kind: int, rnd: int, rounds: int, head: int, previous: int | None, rng: random.Random
) -> int | None:
    """The offset a group of this kind commits this round; None: it does not commit."""
    if kind == 5:  # falls further behind: half the production rate
        return head // 2
    if kind == 6:  # stalled on one offset
        return previous if previous is not None else max(head - 5, 0)
    if kind == 7 and rnd % 25 == 12:  # jumps back, then catches up
        return max(head - 60, 0)
    if kind == 8 and rnd >= rounds // 2:  # stopped halfway
        return None
    if kind == 9:
        return head - rng.randint(0, 10)
    return head - rng.randint(0, 2)


def _serve(consumers: list[Consumer], outcomes: dict[str, int], issued: int, backlog: int) -> None:
    """Serve commit callbacks until at most `backlog` async commits are outstanding."""
    deadline = time.monotonic() + 120
    while issued - outcomes["done"] > backlog:
        for consumer in consumers:
            consumer.poll(0)
        if issued - outcomes["done"] > backlog:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{issued - outcomes['done']} commits still unanswered")
            time.sleep(0.005)


def _check_committed(
    consumers: list[Consumer], groups: list[str], last: dict[tuple[str, str, int], int]
) -> None:
    """The broker's committed offsets must be the last ones the recorder committed."""
    wrong = 0
    for name, consumer in zip(groups, consumers, strict=True):
        mine = {(t, p): o for (g, t, p), o in last.items() if g == name}
        tps = [TopicPartition(t, p) for t, p in mine]
        for tp in consumer.committed(tps, timeout=30):
            wrong += tp.offset != mine[(tp.topic, tp.partition)]
    if wrong:
        raise RuntimeError(f"{wrong} group partitions: broker's committed offset != last commit")
    say(f"  broker's committed offsets = the recorder's last commits ({len(last):,} partitions)")


def offsets_topic_ranges(consumer: Consumer) -> dict[int, tuple[int, int]]:
    """(low, high) watermarks of every non-empty partition of the offsets topic."""
    ends = {}
    for p in consumer.list_topics(OFFSETS_TOPIC, timeout=30).topics[OFFSETS_TOPIC].partitions:
        low, high = consumer.get_watermark_offsets(TopicPartition(OFFSETS_TOPIC, p), timeout=30)
        if high > low:
            ends[p] = (low, high)
    return ends


def _read_offsets_topic(bootstrap: str) -> list[tuple[bytes, bytes | None, int]]:
    """Every record of `__consumer_offsets`, merged across partitions by timestamp (each
    partition's own order kept, as the job sees it)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-offsets-reader",
            "enable.auto.commit": False,
        }
    )
    try:
        ends = offsets_topic_ranges(consumer)
        consumer.assign([TopicPartition(OFFSETS_TOPIC, p, low) for p, (low, _) in ends.items()])
        per_partition: dict[int, list[tuple[int, bytes, bytes | None]]] = {p: [] for p in ends}
        done: set[int] = set()
        deadline = time.monotonic() + 300
        while len(done) < len(ends):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{OFFSETS_TOPIC}: partitions {set(ends) - done} not read")
            for m in consumer.consume(10_000, timeout=1):
                if m.error() is not None:
                    continue
                p = m.partition()
                assert p is not None
                per_partition[p].append((m.timestamp()[1], m.key() or b"", m.value()))
                if (m.offset() or 0) + 1 >= ends[p][1]:
                    done.add(p)
    finally:
        consumer.close()
    merged = heapq.merge(*per_partition.values(), key=lambda r: r[0])
    return [(key, value, ts) for ts, key, value in merged]


# --- on the broker, after the recording: Burrow, and the job's path with consumption -------

GroupEnds = dict[str, dict[tuple[str, int], tuple[int, int]]]


def last_commits(rec: Recording) -> GroupEnds:
    """group -> (topic, partition) -> (offset, commit ms) of the last commit the stream holds
    for it (a tombstone removes it): what a reader of the whole stream ends up with."""
    ends: GroupEnds = {}
    for key, value, _ in rec.records:
        try:
            event = decode(key, value)
        except UndecodableRecord:
            continue
        if isinstance(event, OffsetCommit):
            group = ends.setdefault(event.group, {})
            group[(event.topic, event.partition)] = (event.offset, event.commit_ms)
        elif isinstance(event, OffsetDeleted):
            ends.get(event.group, {}).pop((event.topic, event.partition), None)
    return {g: tps for g, tps in ends.items() if tps}


def burrow_behind(
    topics: Any, expected: dict[tuple[str, int], tuple[int, int]]
) -> list[tuple[str, int]]:
    """The partitions of one group whose newest commit in Burrow's storage is not the
    expected (offset, commit ms), sorted. `topics` is the ``topics`` member of Burrow's
    consumer detail (``GET /v3/kafka/<cluster>/consumer/<group>``): topic -> one entry per
    partition, each with ``offsets``, the partition's ring of commits oldest first with
    null for empty slots (``{"offset", "timestamp", "lag"}``); None or missing when Burrow
    has nothing for the group yet."""
    behind = []
    for topic, partition in sorted(expected):
        entries = (topics or {}).get(topic) or []
        entry = entries[partition] if partition < len(entries) else None
        ring = [o for o in ((entry or {}).get("offsets") or []) if o is not None]
        newest = (ring[-1]["offset"], ring[-1]["timestamp"]) if ring else None
        if newest != expected[(topic, partition)]:
            behind.append((topic, partition))
    return behind


def burrow_log_times(log_text: str) -> dict[str, float]:
    """Epoch seconds of the moments the bench reads from Burrow's log (zap JSON lines, ``ts``
    in epoch seconds): ``first_line`` (the process is up) and ``starting_consumers`` (its
    consumer module has its client and starts one partition consumer per partition of the
    offsets topic: the line ``"msg": "starting consumers"``). A moment not logged is
    missing."""
    times: dict[str, float] = {}
    for line in log_text.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if not isinstance(entry, dict) or not isinstance(entry.get("ts"), int | float):
            continue
        times.setdefault("first_line", float(entry["ts"]))
        if entry.get("msg") == "starting consumers":
            times.setdefault("starting_consumers", float(entry["ts"]))
    return times


def offset_commit_record(
    group: str, topic: str, partition: int, offset: int, commit_ms: int
) -> tuple[bytes, bytes]:
    """Key and value of a commit record as a broker writes it to `__consumer_offsets`: key
    version 1 (group, topic, partition), value version 1 (offset, no metadata, commit and
    expire time)."""

    def string(text: str) -> bytes:
        data = text.encode()
        return struct.pack(">h", len(data)) + data

    key = struct.pack(">h", 1) + string(group) + string(topic) + struct.pack(">i", partition)
    value = struct.pack(">hq", 1, offset) + string("") + struct.pack(">qq", commit_ms, commit_ms)
    return key, value


def _burrow_warm_run(
    burrow_dir: Path, cluster: Any, zookeeper: str, rec: Recording, ends: GroupEnds
) -> dict[str, Any]:
    """A warm run: a fresh Burrow reads a topic of its own (`offsets-topic`), empty, with as
    many partitions as `__consumer_offsets`, until it has started every partition consumer
    (a commit record produced to the partition it starts last is listed); then the recorded
    records (same keys and values, each group's in the partition the broker chose for it, in
    their order) are produced to that topic at once, and Burrow is timed from the first one
    produced until it has caught up."""
    from devservices.burrow import BurrowError, BurrowSettings, offsets_partition, start_burrow

    bootstrap = cluster.bootstrap_servers
    topic = f"bench-offsets-copy-{burrow_dir.name}"
    probe = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-warm-burrow"})
    try:
        metadata = probe.list_topics(OFFSETS_TOPIC, timeout=30)
        partitions = len(metadata.topics[OFFSETS_TOPIC].partitions)
        cluster.create_topic(topic, partitions)
        # Every partition must answer for its offsets (have its leader) before Burrow starts:
        # its consumer module gives up on the first one that does not.
        deadline = time.monotonic() + 60
        for p in range(partitions):
            while True:
                try:
                    probe.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
                    break
                except KafkaException:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.2)
    finally:
        probe.close()
    settings = BurrowSettings(intervals=LagSettings().intervals, offsets_topic=topic)
    say(f"  warm Burrow: starting its partition consumers on {topic}, empty")
    burrow = start_burrow(
        burrow_dir, bootstrap, zookeeper, "bench", settings=settings, warm_up=False, timeout=60
    )
    run: dict[str, Any] = {"caught_up": False}
    try:
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
        marker = "bench-warm-marker"
        known_topic, _ = next(iter(next(iter(ends.values()))))
        key, value = offset_commit_record(marker, known_topic, 0, 0, now_ms())
        producer.produce(topic, value, key, partition=partitions - 1)
        producer.flush(30)
        started = None
        deadline = time.monotonic() + 300
        while started is None and time.monotonic() < deadline:
            with contextlib.suppress(BurrowError):
                if marker in burrow.groups():
                    started = time.time()
            time.sleep(0.1)
        consumers = burrow_log_times((burrow.dir / "burrow.out").read_text(errors="replace")).get(
            "starting_consumers"
        )
        run["start_s"] = None if started is None or consumers is None else started - consumers
        if started is None:
            say("  NOTE: the warm Burrow never listed its marker group")
            return run
        partition_of: dict[str, int] = {}
        copies = []  # (key, value, partition), made before the timer starts
        for k, v, _ in rec.records:
            event = decode(k, v)
            if isinstance(event, OffsetCommit | OffsetDeleted):
                if event.group not in partition_of:
                    partition_of[event.group] = offsets_partition(event.group, partitions)
                copies.append((k, v, partition_of[event.group]))
        first = time.time()
        for k, v, partition in copies:
            while True:
                try:
                    producer.produce(topic, v, k, partition=partition)
                    break
                except BufferError:  # the producer's queue is full: let it send
                    producer.poll(0.05)
        producer.flush(120)
        run["produce_s"] = time.time() - first
        done = wait_caught_up(burrow, ends, first, 600)
        run["groups_behind"] = done.groups_behind
        if done.at is not None:
            run.update(
                caught_up=True,
                from_first_produced_s=done.at - first,
                resolution_s=done.at - done.last_behind,
            )
            say(
                f"  warm Burrow: partition consumers started in {seconds_text(run['start_s'])}; "
                f"caught up {run['from_first_produced_s']:.1f} s after the first record produced "
                f"(producing took {run['produce_s']:.1f} s; found within "
                f"{run['resolution_s']:.2f} s)"
            )
    finally:
        burrow.stop()
    return run


def burrow_throughput(
    workdir: Path, cluster: Any, rec: Recording, ends: GroupEnds, runs: int
) -> dict[str, Any]:
    """Burrow 1.2.1 on the recorded stream (see the module docstring, part 2, Burrow): `runs`
    cold runs and `runs` warm ones, alternating, each a fresh Burrow; one ZooKeeper."""
    from devservices.zookeeper import start_zookeeper

    commits = rec.commits
    zookeeper = start_zookeeper(workdir / "zookeeper")
    cold, warm = [], []
    try:
        for k in range(runs):
            cold.append(
                _burrow_run(
                    workdir / f"burrow-{k}",
                    cluster.bootstrap_servers,
                    zookeeper.connect,
                    ends,
                    commits,
                )
            )
            warm.append(
                _burrow_warm_run(
                    workdir / f"burrow-warm-{k}", cluster, zookeeper.connect, rec, ends
                )
            )
    finally:
        zookeeper.stop()
    done = [r for r in cold if r["caught_up"]]
    warm_done = [r for r in warm if r["caught_up"]]
    summary: dict[str, Any] = {
        "runs": cold,
        "warm_runs": warm,
        "caught_up_runs": len(done),
        "warm_caught_up_runs": len(warm_done),
        "median_start_s": median_or_none([r["start_s"] for r in warm if r.get("start_s")]),
    }
    for key in ("from_consumers_s", "from_launch_s", "from_first_group_s"):
        values = [r[key] for r in done if r.get(key) is not None]
        summary[f"median_{key}"] = median_or_none(values)
    typical = summary["median_from_consumers_s"]
    summary["commits_per_s"] = commits / typical if typical else None
    from_launch = summary["median_from_launch_s"]
    summary["commits_per_s_from_launch"] = commits / from_launch if from_launch else None
    warm_s = median_or_none([r["from_first_produced_s"] for r in warm_done])
    summary["median_warm_s"] = warm_s
    summary["median_warm_produce_s"] = median_or_none([r["produce_s"] for r in warm_done])
    summary["commits_per_s_warm"] = commits / warm_s if warm_s else None
    for key in ("fresh_s", "cached_s", "evaluation_only_s"):
        values = [r["evaluation"][key] for r in done if r.get("evaluation")]
        summary[f"evaluation_median_{key}"] = median_or_none(values)
    return summary


@dataclass
class CatchUp:
    """When Burrow's storage held the last commit of every group and partition."""

    at: float | None  # epoch s; None: not within the deadline
    last_behind: float  # the last time a poll found something missing
    first_group: float | None  # when the group list first had a group
    groups_behind: int


def wait_caught_up(burrow: Any, ends: GroupEnds, since: float, timeout_s: float) -> CatchUp:
    """Poll `burrow` until its storage holds the last commits of `ends` (see the module
    docstring: the group list every 0.1 s until every group is listed, then the groups one
    after another, from the first one behind every 0.1 s)."""
    from devservices.burrow import BurrowError

    path = f"/v3/kafka/{burrow.cluster}/consumer"
    pending = dict(ends)
    first_group = None
    last_behind = since
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:  # 1. every group listed (one cheap request)
        try:
            listed = set(burrow.groups())
        except BurrowError:
            listed = set()
        if listed & set(ends) and first_group is None:
            first_group = time.time()
        if set(ends) <= listed:
            break
        last_behind = time.time()
        time.sleep(0.1)
    while pending and time.monotonic() < deadline:  # 2. every group's last commits
        for group in sorted(pending):
            asked = time.time()
            try:
                detail = burrow.get(f"{path}/{urllib.parse.quote(group, safe='')}")
            except BurrowError:
                detail = {}
            if burrow_behind(detail.get("topics"), pending[group]):
                last_behind = asked
                break
            del pending[group]
        if pending:
            time.sleep(0.1)
    at = None if pending else time.time()
    if pending:
        say(f"  NOTE: Burrow did not catch up in {timeout_s:.0f} s ({len(pending)} groups behind)")
    return CatchUp(at, last_behind, first_group, len(pending))


def _burrow_run(
    burrow_dir: Path, bootstrap: str, zookeeper: str, ends: GroupEnds, commits: int
) -> dict[str, Any]:
    """A cold run: a fresh Burrow reads the recorded `__consumer_offsets` from the beginning."""
    from devservices.burrow import BurrowSettings, start_burrow

    settings = BurrowSettings(intervals=LagSettings().intervals, expire_cache_s=1)
    say(f"  Burrow on {bootstrap}: reading {commits:,} recorded commits from {OFFSETS_TOPIC}")
    launched = time.time()
    burrow = start_burrow(
        burrow_dir, bootstrap, zookeeper, "bench", settings=settings, warm_up=False, timeout=60
    )
    run: dict[str, Any] = {"caught_up": False}
    try:
        run["http_up_s"] = time.time() - launched
        done = wait_caught_up(burrow, ends, launched, 600)
        times = burrow_log_times((burrow.dir / "burrow.out").read_text(errors="replace"))
        run["groups_behind"] = done.groups_behind
        if done.at is None:
            return run
        run["caught_up"] = True
        consumers = times.get("starting_consumers")
        run.update(
            from_launch_s=done.at - launched,
            from_consumers_s=None if consumers is None else done.at - consumers,
            from_first_group_s=None if done.first_group is None else done.at - done.first_group,
            resolution_s=done.at - done.last_behind,
            consumers_after_launch_s=None if consumers is None else consumers - launched,
        )
        run["evaluation"] = _burrow_evaluations(burrow, sorted(ends), settings.expire_cache_s)
        say(
            f"  Burrow caught up {seconds_text(run['from_consumers_s'])} after 'starting "
            f"consumers' ({seconds_text(run['from_launch_s'])} after launch, found within "
            f"{run['resolution_s']:.2f} s); /lag of every group "
            f"{run['evaluation']['fresh_s'] * 1000:.0f} ms (cached "
            f"{run['evaluation']['cached_s'] * 1000:.0f} ms)"
        )
    finally:
        burrow.stop()
    return run


def _burrow_evaluations(burrow: Any, groups: list[str], expire_cache_s: int) -> dict[str, Any]:
    """GET /lag of every group, 5 times each way: fresh (after the evaluator's cache
    expired: Burrow evaluates every group) and cached (at once again: HTTP and JSON only)."""
    fresh: list[float] = []
    cached: list[float] = []
    statuses: Counter[str] = Counter()
    partitions: Counter[str] = Counter()
    for _ in range(5):
        time.sleep(expire_cache_s + 0.5)
        for runs in (fresh, cached):
            started = time.perf_counter()
            answers = [burrow.group_status(g, all_partitions=True) for g in groups]
            runs.append(time.perf_counter() - started)
        statuses = Counter(a.get("status") for a in answers)
        partitions = Counter(p.get("status") for a in answers for p in a.get("partitions") or [])
    return {
        "groups": len(groups),
        "group_partitions": sum(partitions.values()),
        "fresh_runs_s": fresh,
        "cached_runs_s": cached,
        "fresh_s": median(fresh),
        "cached_s": median(cached),
        "evaluation_only_s": median(f - c for f, c in zip(fresh, cached, strict=True)),
        "group_statuses": dict(statuses),
        "partition_statuses": dict(partitions),
    }


def consume_and_process(
    bootstrap: str, rec: Recording, history: HeadHistory, batch_size: int, mode: str
) -> tuple[float, LagTracker, int, int, int]:
    """Like `replay`, but the batches come from `__consumer_offsets` on the broker, read from
    the beginning with confluent_kafka (`consume(batch_size)`, each partition in its order)
    until every partition's end as of the start; the watermark requests that find the ends
    are not timed."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-lag-consume",
            "enable.auto.commit": False,
        }
    )
    try:
        ends = offsets_topic_ranges(consumer)
        tracker = LagTracker(LagSettings())
        head_times = [ms for ms, _ in rec.heads]
        evaluations = Evaluations()
        batches = evaluated = 0
        done: set[int] = set()
        deadline = time.monotonic() + 300
        started = time.perf_counter()
        consumer.assign([TopicPartition(OFFSETS_TOPIC, p, low) for p, (low, _) in ends.items()])
        left = sum(high - low for low, high in ends.values())
        while len(done) < len(ends):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{OFFSETS_TOPIC}: partitions {set(ends) - done} not read")
            chunk = []
            # Never more than is left: consume() waits out its timeout for a batch it cannot fill.
            for m in consumer.consume(max(min(batch_size, left), 1), timeout=1):
                if m.error() is not None:
                    continue
                p, offset = m.partition(), m.offset()
                assert p is not None and offset is not None
                chunk.append((m.key() or b"", m.value(), m.timestamp()[1]))
                left -= 1
                if offset + 1 >= ends[p][1]:
                    done.add(p)
            if chunk:
                batches += 1
                evaluated += process_batch(
                    tracker, chunk, rec, history, head_times, mode, evaluations
                )
        seconds = time.perf_counter() - started
    finally:
        consumer.close()
    return seconds, tracker, batches, evaluated, evaluations.count


@dataclass
class Evaluations:
    """The job's `_evaluated_ms` in one replay (or e. run), and how many batches evaluated."""

    last_ms: int | None = None
    count: int = 0


@dataclass
class Replay:
    mode: str
    batch_size: int
    seconds: list[float] = field(default_factory=list)
    commits: int = 0
    batches: int = 0
    groups_evaluated: int = 0  # per run
    correct: bool = True

    def rate(self, seconds: float | None) -> float | None:
        return self.commits / seconds if seconds else None


def decode_all(records: list[tuple[bytes, bytes | None, int]]) -> tuple[float, Counter[str]]:
    kinds: Counter[str] = Counter()
    started = time.perf_counter()
    for key, value, _ in records:
        try:
            event = decode(key, value)
        except UndecodableRecord:
            kinds["undecodable"] += 1
            continue
        kinds[type(event).__name__] += 1
    return time.perf_counter() - started, kinds


def _commits(rec: Recording, n: int) -> list[OffsetCommit]:
    events = (decode(key, value) for key, value, _ in rec.records[:n])
    return [e for e in events if isinstance(e, OffsetCommit)]


def head_history(rec: Recording, samples: int) -> tuple[HeadHistory, int]:
    """The job's `HeadHistory` as its head sampler would have filled it: the recorded heads at
    their times, after `samples` - (recorded ones) older samples one second apart (heads 0,
    before anything was produced), so that every partition holds `samples` of them as in a
    job running for `KEEP_MS` (5 min) with its 1 s refresh. The older samples change no
    commit's head, only how many samples `HeadHistory.at` looks through."""
    history = HeadHistory()
    first_ms, first = rec.heads[0]
    zero = dict.fromkeys(first, 0)
    for k in range(max(samples - len(rec.heads), 0), 0, -1):
        history.add(first_ms - k * 1000, zero)
    for ms, heads in rec.heads:
        history.add(ms, heads)
    return history, max(samples, len(rec.heads))


def replay(
    rec: Recording, history: HeadHistory, batch_size: int, mode: str
) -> tuple[float, LagTracker, int, int, int]:
    """One replay (mode "record", "affected" or "job"); returns seconds, the tracker, the
    number of batches, of group evaluations and of batches that evaluated (mode "job").
    Mirrors `job._evaluate_groups` per batch; the head sampler's thread is replaced by
    `history`, filled beforehand."""
    tracker = LagTracker(LagSettings())
    records = rec.records
    head_times = [ms for ms, _ in rec.heads]
    evaluations = Evaluations()
    batches = evaluated = 0
    started = time.perf_counter()
    for start in range(0, len(records), batch_size):
        batches += 1
        chunk = records[start : start + batch_size]
        evaluated += process_batch(tracker, chunk, rec, history, head_times, mode, evaluations)
    return time.perf_counter() - started, tracker, batches, evaluated, evaluations.count


def process_batch(
    tracker: LagTracker,
    chunk: list[tuple[bytes, bytes | None, int]],
    rec: Recording,
    history: HeadHistory,
    head_times: list[int],
    mode: str,
    evaluations: Evaluations,
) -> int:
    """What `job._evaluate_groups` does with one batch of `__consumer_offsets` records (key,
    value, timestamp ms), in mode "record", "affected" or "job"; returns the number of group
    evaluations. The job's own functions (`record_commits`, `lagging_partitions`,
    `status_rows`, `no_commit_rows`) in the job's order; its I/O is left out (see the module
    docstring)."""
    from jobs.availability.job import (
        lagging_partitions,
        no_commit_rows,
        record_commits,
        status_rows,
    )

    events: list[OffsetCommit | OffsetDeleted] = []
    for key, value, _ in chunk:
        try:
            event = decode(key, value)
        except UndecodableRecord:
            continue
        if event is not None:
            events.append(event)
    batch_ms = max(ts for _, _, ts in chunk)
    commits = [e for e in events if isinstance(e, OffsetCommit)]
    # The job hands these to `HeadSampler.watch` (a Kafka request for new ones only).
    _watch = tracker.topic_partitions() | {(c.topic, c.partition) for c in commits}
    # `HeadHistory.latest()` as of the batch: the newest recorded heads by then.
    at = bisect.bisect_right(head_times, batch_ms) - 1
    tracker.refresh_heads(dict(rec.heads[at][1]) if at >= 0 else {})
    # Every commit is after the job's start here (0): its lag is known once its partition has
    # a head sample.
    record_commits(tracker, history, events, "bench", 0)
    if mode == "affected":
        return len(tracker.evaluate(batch_ms, {c.group for c in commits}))
    if mode == "job":
        if not status_due(evaluations.last_ms, batch_ms, tracker.settings.status_interval_ms):
            return 0
        evaluations.last_ms = batch_ms
        evaluations.count += 1
        evaluated_at = datetime.fromtimestamp(batch_ms / 1000, tz=UTC)
        results = tracker.evaluate(batch_ms)
        lagging = lagging_partitions(results)
        # The job dates these with a Kafka read (next_record_times): left out here, so no
        # time lags.
        _positions = {(t, p): o for (_, t, p), o in lagging.items()}
        rows = status_rows("bench", evaluated_at, results, {})
        # The job lists the cluster's groups (a Kafka request): none here.
        rows += no_commit_rows("bench", evaluated_at, {}, {r.group for r in results})
        return len(results)
    return 0


def throughput(
    rec: Recording,
    batch_sizes: list[int],
    repeats: int,
    head_samples: int,
    broker: dict[str, Any] | None = None,
) -> tuple[bool, dict[str, Any]]:
    """Replays (a)-(d) of the module docstring, with `broker` (`on_the_broker`'s result:
    Burrow and e.) added when the stream was recorded in this run; returns (all checks
    passed, result)."""
    ok = True
    history, kept = head_history(rec, head_samples)
    say(
        f"replaying {len(rec.records):,} records ({rec.commits:,} commits recorded), "
        f"{repeats} run(s) each, single thread; {kept} head samples per partition"
    )
    # What one `HeadHistory.at` costs with that many samples (once per commit in the job).
    probes = [(r.topic, r.partition, r.commit_ms) for r in _commits(rec, 20_000)]
    started = time.perf_counter()
    for topic, partition, commit_ms in probes:
        history.at((topic, partition), commit_ms)
    head_at_us = (time.perf_counter() - started) / len(probes) * 1e6
    say(f"  HeadHistory.at: {head_at_us:.1f} us per call")
    decode_runs = []
    kinds: Counter[str] = Counter()
    for _ in range(repeats):
        seconds, kinds = decode_all(rec.records)
        decode_runs.append(seconds)
    decoded = kinds["OffsetCommit"]
    checks: dict[str, Any] = {
        "decoded_commits": decoded,
        "recorded_commits": rec.commits,
        "decoded_equals_recorded": decoded == rec.commits,
        "record_kinds": dict(kinds),
    }
    if decoded != rec.commits:
        ok = False
        say(f"  MISMATCH: decoded {decoded:,} commits, recorded {rec.commits:,}")
    else:
        say(f"  decoded commits = recorded commits = {decoded:,} (record kinds: {dict(kinds)})")
    rows: list[dict[str, Any]] = [
        _rate_row("a. decode only", "decode", 0, decoded, decode_runs, 0, 0)
    ]
    final_tracker: LagTracker | None = None
    modes = (
        ("record", "b. decode + record"),
        ("affected", "c. + evaluate groups in the batch"),
        ("job", "c. + the job's per-batch work (all groups)"),
    )
    variants = [(size, mode, label) for size in batch_sizes for mode, label in modes]
    runs: dict[tuple[int, str], list[float]] = {(size, mode): [] for size, mode, _ in variants}
    shape: dict[tuple[int, str], tuple[int, int, int]] = {}
    correct = dict.fromkeys(runs, True)
    # Round-robin, so that drift in the machine's load hits every variant alike.
    for _ in range(repeats):
        for size, mode, _label in variants:
            seconds, tracker, batches, evaluated, evaluations = replay(rec, history, size, mode)
            runs[(size, mode)].append(seconds)
            shape[(size, mode)] = (batches, evaluated, evaluations)
            correct[(size, mode)] &= tracker.committed() == rec.last
            final_tracker = tracker
    for size, mode, label in variants:
        batches, evaluated, evaluations = shape[(size, mode)]
        if not correct[(size, mode)]:
            ok = False
            say(f"  MISMATCH: {mode} at {size}: committed offsets != recorder's last")
        row = _rate_row(label, mode, size, decoded, runs[(size, mode)], batches, evaluated)
        row["evaluations"] = evaluations  # batches that evaluated (mode "job")
        row["committed_offsets_match"] = correct[(size, mode)]
        if mode != "record":
            # What the evaluation adds to each batch over decode + record: the median of the
            # differences between runs of the same round.
            paired = zip(runs[(size, mode)], runs[(size, "record")], strict=True)
            extra = median(full - base for full, base in paired)
            row["extra_ms_per_batch"] = extra / batches * 1000
        rows.append(row)
        say(
            f"  {label:45} batch {size:>6,}: {row['median_commits_per_s']:>10,.0f} "
            f"commits/s (best {row['best_commits_per_s']:,.0f}), {batches} batches, "
            f"{evaluated:,} group evaluations per run"
            + (f" in {evaluations} batches" if mode == "job" else "")
        )
    assert final_tracker is not None
    checks["tracker_committed_equals_last"] = all(
        r.get("committed_offsets_match", True) for r in rows
    )
    end_ms = max(ts for _, _, ts in rec.records)
    full = _full_evaluation(final_tracker, end_ms)
    # As Burrow evaluates: at the wall clock, after the run (its statuses differ: the commits
    # are older than their windows' spans by then).
    full["at_wall_clock"] = _full_evaluation(final_tracker, None)
    for label, f in (("stream's end", full), ("wall clock", full["at_wall_clock"])):
        say(
            f"  d. evaluate all {f['groups']} groups ({f['group_partitions']:,} partitions) at "
            f"the {label}: {f['median_s'] * 1000:.1f} ms (best {f['best_s'] * 1000:.1f} ms); "
            f"statuses {f['group_statuses']}, partitions {f['partition_statuses']}"
        )
    burrow = (broker or {}).get("burrow")
    if broker is not None:
        rows.extend(broker["consume_rates"])
        checks["stream_last_equals_recorded"] = broker["stream_last_equals_recorded"]
        checks["tracker_committed_equals_last"] = all(
            r.get("committed_offsets_match", True) for r in rows
        )
    against_burrow(rows, burrow)
    fresh = burrow["evaluation_median_fresh_s"] if burrow else None
    only = burrow["evaluation_median_evaluation_only_s"] if burrow else None
    full["burrow_lag_all_groups_s"] = fresh
    full["burrow_evaluation_only_s"] = only
    ours = full["at_wall_clock"]["median_s"]  # evaluated as Burrow evaluates
    full["burrow_x_ours"] = fresh / ours if fresh else None
    full["burrow_evaluation_only_x_ours"] = only / ours if only and only > 0 else None
    result = {
        "recording": rec.meta,
        "checks": checks,
        "head_samples_per_partition": kept,
        "head_at_us": head_at_us,
        "burrow": burrow,
        "burrow_published_offsets_per_s": BURROW_PUBLISHED,
        "rates": rows,
        "full_evaluation": full,
    }
    return ok, result


def _full_evaluation(tracker: LagTracker, at_ms: int | None) -> dict[str, Any]:
    """Five `tracker.evaluate(at_ms)` of every group (None: the wall clock at each); median."""
    runs = []
    results = []
    for _ in range(5):
        started = time.perf_counter()
        results = tracker.evaluate(now_ms() if at_ms is None else at_ms)
        runs.append(time.perf_counter() - started)
    partitions = sum(r.total_partitions for r in results)
    return {
        "groups": len(results),
        "group_partitions": partitions,
        "median_s": median(runs),
        "best_s": min(runs),
        "groups_per_s": len(results) / median(runs),
        "group_partitions_per_s": partitions / median(runs),
        "group_statuses": dict(Counter(r.status.name for r in results)),
        "partition_statuses": dict(Counter(p.status.name for r in results for p in r.partitions)),
    }


def _rate_row(
    label: str,
    mode: str,
    batch_size: int,
    commits: int,
    runs: list[float],
    batches: int,
    evaluated: int,
) -> dict[str, Any]:
    typical, best = median(runs), min(runs)
    rate = commits / typical
    return {
        "what": label,
        "mode": mode,
        "batch_records": batch_size,
        "runs_s": runs,
        "median_s": typical,
        "median_commits_per_s": rate,
        "best_commits_per_s": commits / best,
        "x_burrow_published_40k": rate / BURROW_PUBLISHED,
        "batches": batches,
        "group_evaluations": evaluated,
    }


def against_burrow(rows: list[dict[str, Any]], burrow: dict[str, Any] | None) -> None:
    """Set every row's ``x_burrow`` (its commits/s over Burrow's cold figure of the same run:
    from "starting consumers") and ``x_burrow_warm`` (over Burrow's warm figure); None when
    Burrow was not measured."""
    for row in rows:
        for key, rate in (
            ("x_burrow", (burrow or {}).get("commits_per_s")),
            ("x_burrow_warm", (burrow or {}).get("commits_per_s_warm")),
        ):
            row[key] = row["median_commits_per_s"] / rate if rate else None


def _times(ratio: float | None) -> str:
    return "n/a" if ratio is None else f"{ratio:.2f}"


def print_throughput(result: dict[str, Any]) -> None:
    c = result["checks"]
    b = result["burrow"]
    print(f"\nlag evaluator, single thread, {c['decoded_commits']:,} commits")
    if b and b["commits_per_s"]:
        print(
            f"Burrow 1.2.1, this run, same stream: {b['commits_per_s']:,.0f} commits/s from "
            f"'starting consumers' to every group's last commit stored "
            f"({b['median_from_consumers_s']:.1f} s, median of {b['caught_up_runs']} run(s)); "
            f"{b['commits_per_s_from_launch']:,.0f}/s from its launch "
            f"({b['median_from_launch_s']:.1f} s)"
        )
    if b and b["commits_per_s_warm"]:
        print(
            f"Burrow warm (its partition consumers started beforehand, on an empty copy topic, "
            f"in {seconds_text(b['median_start_s'])}): {b['commits_per_s_warm']:,.0f} commits/s "
            f"from the first record produced to caught up ({b['median_warm_s']:.1f} s; "
            f"producing took {b['median_warm_produce_s']:.1f} s)"
        )
    else:
        print("Burrow: not measured in this run (--replay, --burrow-runs 0, or it never caught up)")
    print(
        f"{'what':52} {'batch':>7} {'commits/s':>11} {'best':>11} {'x Burrow':>9}"
        f" {'x warm':>7} {'x 40k':>6} {'+ms/batch':>10}"
    )
    for r in result["rates"]:
        batch = f"{r['batch_records']:,}" if r["batch_records"] else ""
        extra = f"{r['extra_ms_per_batch']:.1f}" if "extra_ms_per_batch" in r else ""
        print(
            f"{r['what']:52} {batch:>7} {r['median_commits_per_s']:>11,.0f} "
            f"{r['best_commits_per_s']:>11,.0f} {_times(r.get('x_burrow')):>9} "
            f"{_times(r.get('x_burrow_warm')):>7} "
            f"{r['x_burrow_published_40k']:>6.2f} {extra:>10}"
        )
    f = result["full_evaluation"]
    print(
        f"d. one evaluation of all {f['groups']} groups ({f['group_partitions']:,} partitions): "
        f"{f['median_s'] * 1000:.1f} ms, {f['group_partitions_per_s']:,.0f} partitions/s; at the "
        f"wall clock, as Burrow evaluates: {f['at_wall_clock']['median_s'] * 1000:.1f} ms"
    )
    if b and b.get("evaluation_median_fresh_s") is not None:
        print(
            f"   Burrow, GET /lag of every group: {b['evaluation_median_fresh_s'] * 1000:.1f} ms "
            f"evaluated, {b['evaluation_median_cached_s'] * 1000:.1f} ms from its cache (HTTP "
            f"and JSON only), so the evaluation alone "
            f"{b['evaluation_median_evaluation_only_s'] * 1000:.1f} ms; Burrow / ours at the "
            f"wall clock ({f['at_wall_clock']['median_s'] * 1000:.1f} ms): "
            f"{f['burrow_x_ours']:.2f} with HTTP, {_times(f['burrow_evaluation_only_x_ours'])} "
            "without"
        )
    print(
        "commits/s: median of the runs; x Burrow: against Burrow's commits/s of this run (it "
        "consumes from the broker: compare with the e. rows); x warm: against the warm Burrow; "
        "+ms/batch: what the evaluation adds to each batch, on average (the job evaluates every "
        "group, at most once per second of commit time)"
    )
    print(
        f"x 40k: reference only, Burrow's published {BURROW_PUBLISHED:,}-50,000 offsets/s on 2 "
        "cores (linkedin/Burrow#539, another machine), not measured here"
    )
    print(
        f"checks: decoded = recorded commits: {c['decoded_equals_recorded']}; tracker's committed "
        f"offsets = recorder's last: {c['tracker_committed_equals_last']}"
    )


# === main ===================================================================================


def main(argv: list[str] | None = None) -> int:
    parser = bench_parser("bench.availability_bench", __doc__)
    parser.add_argument("--only", choices=("detection", "throughput"), help="run one part only")
    parser.add_argument("--trials", type=int, default=3, help="broker kills")
    parser.add_argument("--commits", type=int, default=200_000, help="commits to record")
    parser.add_argument("--groups", type=int, default=200, help="consumer groups")
    parser.add_argument("--topics", type=int, default=4, help="topics the groups commit to")
    parser.add_argument("--partitions", type=int, default=8, help="partitions per topic")
    parser.add_argument(
        "--batch-sizes", default="1000,10000", help="records per replayed batch, comma-separated"
    )
    parser.add_argument("--repeats", type=int, default=3, help="replays of each kind; median")
    parser.add_argument(
        "--head-samples",
        type=int,
        default=KEEP_MS // int(REFRESH_S * 1000),
        help="head samples per partition in the replayed HeadHistory (default: what the job "
        "keeps after 5 minutes)",
    )
    parser.add_argument(
        "--burrow-runs", type=int, default=3, help="Burrows reading the recorded stream; median"
    )
    parser.add_argument(
        "--replay", type=Path, help="replay this saved stream, record nothing (no Burrow)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the work dir (brokers' data)")
    args = parse_args(parser, argv, QUICK)
    trials, n_commits = args.trials, args.commits
    batch_sizes = [int(s) for s in args.batch_sizes.split(",") if s]
    stream_path = BENCH_DIR / ("commit-stream-quick.bin" if args.quick else "commit-stream.bin")
    result: dict[str, Any] = {"args": {k: str(v) for k, v in vars(args).items()}}
    ok = True
    with work_dir("availability-", keep=args.keep) as workdir, contextlib.ExitStack() as late:
        say(f"bench dir {workdir}")
        started = time.monotonic()
        result["load_average_at_start"] = os.getloadavg()  # 1, 5 and 15 minutes
        if args.only != "detection":
            broker: dict[str, Any] | None = None
            if args.replay:
                rec = Recording.load(args.replay)
                say(f"loaded {len(rec.records):,} records from {args.replay}; no broker, so no")
                say("  Burrow and no consuming (2e) in this run")
            else:
                cluster = start_cluster(workdir / "kafka-1", n_brokers=1)
                try:
                    rec = record_stream(
                        cluster, n_commits, args.groups, args.topics, args.partitions
                    )
                    rec.save(stream_path)
                    size = stream_path.stat().st_size / 2**20
                    say(f"  saved to {stream_path} ({size:.1f} MiB)")
                    part_ok, broker = on_the_broker(
                        workdir,
                        cluster,
                        rec,
                        max(batch_sizes),
                        args.repeats,
                        args.burrow_runs,
                        args.head_samples,
                    )
                    ok &= part_ok
                finally:
                    cluster.stop()
            part_ok, result["throughput"] = throughput(
                rec, batch_sizes, args.repeats, args.head_samples, broker
            )
            ok &= part_ok
        if args.only != "throughput":
            result["detection"] = detection(trials, workdir, late)
            d = result["detection"]
            ok &= d["job_exit"] == 0 and all(
                d["summary"][k]["missing"] == 0 for k in ("first_failed", "all_failed")
            )
        result["seconds"] = time.monotonic() - started
        result["load_average_at_end"] = os.getloadavg()
        write_latest(RESULT_PATH, result)
        if "throughput" in result:
            print_throughput(result["throughput"])
        if "detection" in result:
            print_detection(result["detection"])
        loads = [f"{result[k][0]:.1f}" for k in ("load_average_at_start", "load_average_at_end")]
        say(f"bench took {result['seconds']:.0f} s; 1-minute load average {' -> '.join(loads)}")
        say(f"result written to {RESULT_PATH}")
        say(f"run recorded in {write_result('availability', result, args, argv=argv)}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
