"""KAFKA_AVAILABILITY entry module: round-trip probes and cluster samplers -> Delta
`availability_probes`, `topic_availability`, `consumer_offset_commits` and
`consumer_group_status`.

The probes (`probers`) run on the driver in two threads from start to stop: one probe per
probe partition every probe interval, read back by a consumer, booked in a `ProbeLedger`.
PROXY_PRODUCER probes with a `krp_audit_topic` also send KRP-tier AuditReports of what
kafka-pixy acknowledged to that topic (`probes/krp.py`), every trigger interval and at stop.

Source: the cluster's `__consumer_offsets` topic (every offset commit of every group, as
Burrow reads it), read by Spark's Kafka source from the earliest retained record, united with
Spark's `rate` source, whose ticks make a micro-batch run every trigger interval even when no
group commits (a stopped consumer is exactly when nobody commits).

Every micro-batch, on the driver:
0. the probe windows whose outcome is final -> `availability_probes` (`probes/stats.py`), and the
   probe topic's coverage checked (a new broker gets a partition), unless skipped;
1. metadata snapshot -> `topic_availability` (leader, ISR vs replication factor, offline and
   under-replicated partitions), unless skipped;
2. commits decoded (`lag/offsets_topic.py`) -> the lag windows (`lag/tracker.py`) and
   `consumer_offset_commits`, each commit's lag from the head offset at its time (sampled
   every second by `head_sampler`); every group evaluated with Burrow's rules ->
   `consumer_group_status`, with lag in messages and in time (now - timestamp of the group's
   next unconsumed record), unless skipped. The groups are evaluated at most once per
   `LagSettings.status_interval_ms` (1 s, the head sampler's refresh, or half the trigger
   when that is shorter): a micro-batch that comes sooner after the last evaluated one
   records its commits and writes no status rows. Micro-batches paced by the trigger are all
   evaluated; one that starts early (the second after the start, say) may not be, and the
   next is. Every evaluation covers every group.

Guarantee: each append is idempotent per batch (txnAppId + batch id), so a replayed batch
writes nothing twice; the windows are rebuilt from `consumer_offset_commits` on start, and a
replayed batch records no commit they hold already and leaves the probe windows final by then
to the next batch (`stored_commits`). Probes still open when the job stops are not written.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from core.errors import ClusterUnreachable
from core.faults import fault_point
from core.kafka_admin import ADMIN_TIMEOUT_S, ensure_offsets_topic
from jobs.availability import metrics, tables
from jobs.availability.lag.head_sampler import HeadHistory, HeadSampler
from jobs.availability.lag.offsets_topic import (
    OFFSETS_TOPIC,
    OffsetCommit,
    OffsetDeleted,
    UndecodableRecord,
    decode,
)
from jobs.availability.lag.rules import GroupResult, Status
from jobs.availability.lag.tracker import GroupPartition, LagTracker, status_due
from jobs.availability.probes.probers import Prober, build_prober
from jobs.availability.probes.stats import PROBE_OUTCOME_DDL, probe_window_stats
from jobs.availability.spec import AvailabilitySpec
from jobs.availability.stored_commits import load_windows, replay_batch
from jobs.availability.topic_health import NO_LEADER, PartitionState, partition_availability
from jobs.runtime.delta import append_once, ensure_tables
from jobs.runtime.kafka_source import kafka_read_options
from jobs.runtime.template import StreamingJob, WriteId

log = logging.getLogger("uatu.availability")

QUERY_CONF = {
    # Spark 4.2's AdminClient-based offset reader finds no records in __consumer_offsets (3
    # commits read as 0, by subscribe and by assign); the consumer-based one reads them. The
    # query's own: a worker's other queries keep the first, which joins no consumer group.
    "spark.sql.streaming.kafka.useDeprecatedOffsetFetching": "true",
}


def ensure_source(spec: AvailabilitySpec) -> None:
    """Make the broker create `__consumer_offsets` if no group has used the cluster yet."""
    ensure_offsets_topic(spec.cluster, f"uatu-availability-{spec.job_group_id}")


def build_stream(spark: SparkSession, spec: AvailabilitySpec) -> DataFrame:
    options = kafka_read_options(spec.cluster, OFFSETS_TOPIC, group_id_prefix=spec.query_name)
    # Compaction and retention delete old commits; a monitor reads what is there.
    options["failOnDataLoss"] = "false"
    commits = (
        spark.readStream.format("kafka")
        .options(**options)
        .load()
        .select("key", "value", "partition", "offset")
    )
    ticks = (
        spark.readStream.format("rate")
        .option("rowsPerSecond", 1)
        .load()
        .select(
            F.lit(None).cast("binary").alias("key"),
            F.lit(None).cast("binary").alias("value"),
            F.lit(None).cast("int").alias("partition"),
            F.col("value").alias("offset"),
        )
    )
    return commits.unionByName(ticks)


# --- talking to the cluster (driver side) -------------------------------------------------


def metadata_snapshot(admin: AdminClient) -> tuple[list[PartitionState], list[int]]:
    """Every partition's leader, replicas and ISR, and the ids of the live brokers."""
    metadata = admin.list_topics(timeout=ADMIN_TIMEOUT_S)
    states = [
        PartitionState(
            topic=name,
            partition=p.id,
            leader=p.leader if p.leader >= 0 else NO_LEADER,
            replicas=tuple(p.replicas),
            isr=tuple(p.isrs),
        )
        for name, topic in metadata.topics.items()
        if not name.startswith("__")
        for p in topic.partitions.values()
    ]
    return states, sorted(metadata.brokers)


def next_record_times(
    consumer: Consumer, positions: Iterable[tuple[str, int, int]], timeout_s: float = 1.0
) -> dict[tuple[str, int, int], int]:
    """Timestamp (ms) of the record at each (topic, partition, offset), as far as the broker
    answers within `timeout_s` in all. Groups on one partition are usually at different
    offsets, and a consumer reads a partition from one offset at a time, so the offsets of a
    partition are read in rounds, one per round. A record that is gone (compacted, a
    transaction marker) is dated by the next one the fetch returns."""
    pending: dict[tuple[str, int], list[int]] = {}
    for topic, partition, offset in sorted(set(positions)):
        pending.setdefault((topic, partition), []).append(offset)
    found: dict[tuple[str, int, int], int] = {}
    deadline = time.monotonic() + timeout_s
    while pending and time.monotonic() < deadline:
        reading = {tp: offsets.pop(0) for tp, offsets in pending.items()}
        pending = {tp: offsets for tp, offsets in pending.items() if offsets}
        consumer.assign([TopicPartition(t, p, o) for (t, p), o in reading.items()])
        while reading and time.monotonic() < deadline:
            wait = min(0.5, max(deadline - time.monotonic(), 0.0))
            for message in consumer.consume(num_messages=len(reading), timeout=wait):
                tp = (message.topic(), message.partition())
                if message.error() is None and tp in reading:
                    found[(*tp, reading.pop(tp))] = message.timestamp()[1]
        consumer.unassign()
    return found


# --- rows -----------------------------------------------------------------------------------


# A lookup, not `.name`: Python 3.11 computes an enum member's name through a descriptor, and
# the rows name one status per partition per evaluation.
_STATUS_NAMES = {status: status.name for status in Status}


def record_commits(
    tracker: LagTracker,
    history: HeadHistory,
    events: Iterable[OffsetCommit | OffsetDeleted],
    cluster: str,
    started_ms: int,
    replayed: bool = False,
) -> list[dict[str, Any]]:
    """Step 2's commits, without I/O: a tombstone forgets its window; a commit goes to its
    window (`LagTracker.record`) with its lag, the head at its time (`history`) minus its
    offset, unknown for a commit made before the job started (`started_ms`) or before the
    partition's first head sample; in a `replayed` batch (`stored_commits`), not a commit
    its window holds already (`LagTracker.held`). Returns the `consumer_offset_commits` rows."""
    at = history.at
    record = tracker.record_at
    held = tracker.held
    rows = []
    for event in events:
        if isinstance(event, OffsetDeleted):
            tracker.forget(*event)
            continue
        group, topic, partition, offset, commit_ms = event
        tp = (topic, partition)
        commit = held(group, tp, offset, commit_ms) if replayed else None
        if commit is None:
            # A commit made before the job started is history: its lag back then is unknown.
            head = at(tp, commit_ms) if commit_ms >= started_ms else None
            # max(head - offset, 0), without the call: this runs once per commit.
            lag = None if head is None else head - offset if head > offset else 0
            commit = record(group, tp, offset, commit_ms, lag)
        rows.append(
            {
                "cluster": cluster,
                "group": group,
                "topic": topic,
                "partition": partition,
                "offset": offset,
                "commit_time": _time(commit_ms),
                "lag": commit[2],
            }
        )
    return rows


def lagging_partitions(results: Iterable[GroupResult]) -> dict[GroupPartition, int]:
    """The newest committed offset of every evaluated partition with a current lag above 0:
    where the job looks for the oldest unconsumed record, to date it (`next_record_times`).
    Expired groups (NOTFOUND) have no partitions in their results, so none here."""
    lagging = {}
    for result in results:
        group = result.group
        for topic, partition, _, _, end, current_lag, _, _ in result.partitions:
            if current_lag > 0 and end is not None:
                lagging[(group, topic, partition)] = end.offset
    return lagging


def status_rows(
    cluster: str,
    evaluated_at: datetime,
    results: list[GroupResult],
    time_lags: Mapping[GroupPartition, int],
) -> list[dict[str, Any]]:
    """`consumer_group_status` rows (`tables.CONSUMER_GROUP_STATUS`) from the evaluator's
    results, `time_lags` (ms) by (group, topic, partition) where known."""
    names = _STATUS_NAMES
    rows = []
    for result in results:
        group = result.group
        partitions = []
        max_time_lag = None
        for topic, partition, status, start, end, current_lag, complete, rule in result.partitions:
            time_lag = time_lags.get((group, topic, partition)) if time_lags else None
            if time_lag is not None and (max_time_lag is None or time_lag > max_time_lag):
                max_time_lag = time_lag
            partitions.append(
                {
                    "topic": topic,
                    "partition": partition,
                    "status": names[status],
                    "current_lag": current_lag,
                    "time_lag_ms": time_lag,
                    "complete": complete,
                    "start_offset": start.offset if start else None,
                    "end_offset": end.offset if end else None,
                    "end_commit_time": _time(end.timestamp_ms) if end else None,
                    "rule": rule,
                }
            )
        worst = result.max_lag_partition
        rows.append(
            {
                "cluster": cluster,
                "evaluated_at": evaluated_at,
                "group": group,
                "status": names[result.status],
                "complete": result.complete,
                "total_lag": result.total_lag,
                "max_lag_topic": worst.topic if worst else None,
                "max_lag_partition": worst.partition if worst else None,
                "max_lag": worst.current_lag if worst else None,
                "max_time_lag_ms": max_time_lag,
                "total_partitions": result.total_partitions,
                "partitions": partitions,
                "reason": result.reason,
            }
        )
    return rows


NO_COMMITS = "NO_COMMITS"
OWN_GROUP_PREFIXES = ("uatu-probe-", "uatu-availability-")


def no_commit_rows(
    cluster: str, evaluated_at: datetime, groups: Mapping[str, str], evaluated: set[str]
) -> list[dict[str, Any]]:
    """Rows for the groups the broker lists that have no commit in the lag windows.

    `groups` maps group id -> the coordinator's state (STABLE, EMPTY, ...). Burrow and KMinion
    leave such groups out of their listings (Burrow #451, KMinion #240); here they are listed
    with status NO_COMMITS, no partitions and a reason that says so.
    """
    return [
        {
            "cluster": cluster,
            "evaluated_at": evaluated_at,
            "group": group,
            "status": NO_COMMITS,
            "complete": 0.0,
            "total_lag": None,
            "max_lag_topic": None,
            "max_lag_partition": None,
            "max_lag": None,
            "max_time_lag_ms": None,
            "total_partitions": 0,
            "partitions": [],
            "reason": f"known to the group coordinator ({state}) but no offset commit was read",
        }
        for group, state in sorted(groups.items())
        if group not in evaluated
    ]


def listed_groups(admin: AdminClient) -> dict[str, str]:
    """Every consumer group the cluster's coordinators know, with its state name."""
    result = admin.list_consumer_groups(request_timeout=ADMIN_TIMEOUT_S).result()
    return {g.group_id: g.state.name for g in result.valid}


def _time(ms: int) -> datetime:
    """`ms` as a UTC datetime. Cached: a group's commit of several partitions shares one time,
    and every evaluation dates each partition's newest commit again. A plain dict (emptied
    at _TIMES_KEPT entries), not lru_cache: it is faster, and its entries are no objects for
    the garbage collector to walk."""
    at = _TIMES.get(ms)
    if at is None:
        if len(_TIMES) >= _TIMES_KEPT:
            _TIMES.clear()
        at = _TIMES[ms] = datetime.fromtimestamp(ms / 1000, tz=UTC)
    return at


_TIMES: dict[int, datetime] = {}
_TIMES_KEPT = 1 << 16


# --- the micro-batch ------------------------------------------------------------------------


@dataclass
class AvailabilityBatchWriter:
    """foreachBatch function: sample the cluster, evaluate every group, append the rows."""

    spec: AvailabilitySpec
    tracker: LagTracker
    started_ms: int
    prober: Prober | None = None
    heads: HeadSampler | None = None
    write_id: WriteId | None = None  # set by the job: its idempotent-write id
    replay_batch: int | None = None  # the batch this start runs again (`stored_commits`)
    app_id: str = ""
    _admin: AdminClient | None = None
    _consumer: Consumer | None = None
    _undecodable: int = 0
    _evaluated_ms: int | None = None  # `now` of the last micro-batch that evaluated the groups

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        spark = batch.sparkSession
        assert self.write_id is not None
        self.app_id = self.write_id.of(spark)
        now = datetime.now(tz=UTC)
        admin = self.admin_client()
        if self.prober is not None:
            self._write_probes(spark, batch_id, now)
            fault_point("availability.probes_appended")
        if self.spec.topic_availability:
            states, brokers = metadata_snapshot(admin)
            rows = [
                {"cluster": self.spec.cluster.name, "sampled_at": now, **row}
                for row in partition_availability(states, brokers)
            ]
            frame = spark.createDataFrame(rows, tables.TOPIC_AVAILABILITY.schema)
            path = self.spec.output.table("topic_availability")
            append_once(frame, tables.TOPIC_AVAILABILITY, path, self.app_id, batch_id)
            offline = sum(r["offline"] for r in rows)
            under = sum(r["under_replicated"] for r in rows)
            log.info(
                "batch %d: %d partitions on brokers %s, %d offline, %d under-replicated",
                batch_id,
                len(rows),
                brokers,
                offline,
                under,
            )
            fault_point("availability.topic_availability_appended")
        if self.spec.consumer_lag:
            self._evaluate_groups(batch, batch_id, now)

    def _write_probes(self, spark: SparkSession, batch_id: int, now: datetime) -> None:
        assert self.prober is not None
        try:
            self.prober.refresh(self.admin_client())
        except (KafkaException, ClusterUnreachable) as e:
            # The probes keep going to the partitions known; failing here would blind the
            # monitor exactly when the cluster is in trouble.
            log.warning("probe topic coverage not checked: %s", e)
        if batch_id == self.replay_batch:
            # Its first attempt may have appended probe windows, and then this append would
            # be skipped whole: the windows final now are left for the next batch.
            return
        rows = self.prober.take_final(int(now.timestamp() * 1000))
        if not rows:
            return
        metrics.probes(rows)
        frame = spark.createDataFrame(rows, PROBE_OUTCOME_DDL).transform(
            probe_window_stats,
            self.spec.cluster.name,
            self.spec.probe_type,
            self.spec.zone_isolated,
        )
        append_once(
            frame,
            tables.AVAILABILITY_PROBES,
            self.spec.output.table("availability_probes"),
            self.app_id,
            batch_id,
        )
        failed = sum(not r["produced"] for r in rows)
        lost = sum(r["produced"] and r["copies"] == 0 for r in rows)
        log.info(
            "batch %d: %d probes final, %d failed to produce, %d lost, %d still open",
            batch_id,
            len(rows),
            failed,
            lost,
            self.prober.ledger.open_count(),
        )

    def _evaluate_groups(self, batch: DataFrame, batch_id: int, now: datetime) -> None:
        spark = batch.sparkSession
        records = batch.where(F.col("key").isNotNull()).collect()
        events = []
        for record in records:
            try:
                event = decode(record["key"], record["value"])
            except UndecodableRecord as e:
                # Kept visible, never fatal: one odd record must not blind the monitor.
                self._undecodable += 1
                log.warning(
                    "%s[%d] offset %d: not decoded (%s)",
                    OFFSETS_TOPIC,
                    record["partition"],
                    record["offset"],
                    e,
                )
                continue
            if event is not None:
                events.append(event)
        commits = [e for e in events if isinstance(e, OffsetCommit)]
        assert self.heads is not None
        self.heads.watch(
            self.tracker.topic_partitions() | {(c.topic, c.partition) for c in commits}
        )
        self.tracker.refresh_heads(self.heads.history.latest())
        metrics.topic_offsets(self.spec.cluster.name, self.heads.history.latest())
        now_ms = int(now.timestamp() * 1000)
        replayed = batch_id == self.replay_batch
        history, cluster = self.heads.history, self.spec.cluster.name
        stored = record_commits(self.tracker, history, events, cluster, self.started_ms, replayed)
        if stored:
            frame = spark.createDataFrame(stored, tables.CONSUMER_OFFSET_COMMITS.schema)
            path = self.spec.output.table("consumer_offset_commits")
            append_once(frame, tables.CONSUMER_OFFSET_COMMITS, path, self.app_id, batch_id)
        fault_point("availability.commits_appended")
        if not status_due(self._evaluated_ms, now_ms, self.spec.lag.status_interval_ms):
            assert self._evaluated_ms is not None
            log.info(
                "batch %d: %d commits read; groups evaluated %d ms ago, not again before %d ms",
                batch_id,
                len(commits),
                now_ms - self._evaluated_ms,
                self.spec.lag.status_interval_ms,
            )
            return
        self._evaluated_ms = now_ms
        results = self.tracker.evaluate(now_ms)
        lagging = lagging_partitions(results)
        record_ms = next_record_times(
            self._client_consumer(), [(t, p, o) for (_, t, p), o in lagging.items()]
        )
        time_lags = {
            (g, t, p): max(now_ms - record_ms[(t, p, o)], 0)
            for (g, t, p), o in lagging.items()
            if (t, p, o) in record_ms
        }
        rows = status_rows(self.spec.cluster.name, now, results, time_lags)
        try:
            listed = listed_groups(self.admin_client())
        except KafkaException as e:  # the statuses of the groups with commits still count
            log.warning("consumer groups not listed: %s", e)
            listed = {}
        # The job's own clients (probe receivers, the record reader) are not users' groups.
        listed = {g: state for g, state in listed.items() if not g.startswith(OWN_GROUP_PREFIXES)}
        rows += no_commit_rows(self.spec.cluster.name, now, listed, {r.group for r in results})
        if rows:
            frame = spark.createDataFrame(rows, tables.CONSUMER_GROUP_STATUS.schema)
            path = self.spec.output.table("consumer_group_status")
            append_once(frame, tables.CONSUMER_GROUP_STATUS, path, self.app_id, batch_id)
            metrics.consumer_groups(self.spec.cluster.name, rows)
        fault_point("availability.status_appended")
        log.info(
            "batch %d: %d commits read, %d groups evaluated (%s)%s",
            batch_id,
            len(commits),
            len(results),
            ", ".join(f"{r.group}={r.status.name}" for r in results[:10]),
            f", {self._undecodable} undecodable records so far" if self._undecodable else "",
        )

    def admin_client(self) -> AdminClient:
        if self._admin is None:
            self._admin = AdminClient(self.spec.cluster.client_config())
        return self._admin

    def _client_consumer(self) -> Consumer:
        """Reads single records to date the oldest unconsumed one; never joins a group."""
        if self._consumer is None:
            self._consumer = Consumer(
                {
                    **self.spec.cluster.client_config(),
                    "group.id": f"uatu-availability-{self.spec.job_group_id}",
                    "enable.auto.commit": False,
                    "auto.offset.reset": "earliest",
                }
            )
        return self._consumer

    def close(self) -> None:
        """Close the consumer and let go of every client. Spark's callback server can keep this
        function alive after its query stops (in tests, for the rest of the process), and each
        librdkafka client it still reaches would keep its threads reconnecting to the cluster."""
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
        self._admin = None
        self.prober = None
        self.heads = None


class AvailabilityJob(StreamingJob[AvailabilitySpec]):
    """The availability job in the shared template: probes and samplers around the query."""

    write_id_prefix = "uatu-availability"

    query_conf = QUERY_CONF

    def __init__(self, spec: AvailabilitySpec) -> None:
        super().__init__(spec)
        self._writer: AvailabilityBatchWriter | None = None
        self._prober: Prober | None = None
        self._heads: HeadSampler | None = None

    def ensure_source(self) -> None:
        ensure_source(self.spec)

    def ensure_tables(self, spark: SparkSession) -> None:
        spec = self.spec
        log.info(
            "availability job %s on cluster %s: %s",
            spec.job_group_id,
            spec.cluster.name,
            ", ".join(
                name
                for name, on in (
                    (f"{spec.probe_type} probes on {spec.probe_topic}", spec.probes),
                    ("topic availability", spec.topic_availability),
                    ("consumer lag", spec.consumer_lag),
                )
                if on
            ),
        )
        ensure_tables(spark, tables.locations(spec))

    def before_query(self, spark: SparkSession) -> int | None:
        spec = self.spec
        tracker = LagTracker(spec.lag)
        if spec.consumer_lag:
            loaded = load_windows(spark, spec, tracker)
            log.info(
                "lag windows: %d stored commits replayed from %s",
                loaded,
                spec.output.table("consumer_offset_commits"),
            )
        self._prober = build_prober(spec) if spec.probes else None
        writer = self._writer = AvailabilityBatchWriter(
            spec, tracker, int(time.time() * 1000), self._prober, write_id=self.write_id()
        )
        writer.replay_batch = replay_batch(spark, spec)
        if spec.consumer_lag:
            self._heads = writer.heads = HeadSampler(writer.admin_client())
        if self._prober is not None:
            self._prober.start(writer.admin_client())
        if self._heads is not None:
            self._heads.start()
        return None

    def stream(self, spark: SparkSession) -> DataFrame:
        return build_stream(spark, self.spec)

    def batch_writer(self, spark: SparkSession) -> AvailabilityBatchWriter:
        assert self._writer is not None  # made by before_query, with the samplers it feeds
        return self._writer

    def close(self) -> None:
        if self._prober is not None:
            self._prober.stop()
        if self._heads is not None:
            self._heads.stop()
        if self._writer is not None:
            self._writer.close()
