"""Report a running job to the control plane: MasterWorkerService RegisterWorker + Heartbeat.

A Spark application is one uForwarder "worker". When `UATU_CONTROL_PLANE` is set (the
control plane sets it for every application it launches), the driver

* registers once (proposing `UATU_WORKER_ID`, the id the launcher reserved for it, and
  proving it with `UATU_WORKER_SECRET` in `uatu-worker-secret` metadata on every call; a job
  started without them makes up a secret and gets an id, if the control plane admits
  workers it did not launch),
* then every `UATU_HEARTBEAT_SECONDS` (default 5) sends one JobStatus per Kafka partition:
  read_offset / commit_offset (the end offsets of the last committed micro-batch: Spark
  commits a batch before it reports its progress, so the two are equal), messages_per_sec
  (offset advance per partition between progress events) and bytes_per_sec (that rate times
  the batch's average record size, from the `uatu_source` observed metric),
* follows a redirect when a non-leader answers with another master, but only to an address
  listed in UATU_CONTROL_PLANE (any other is logged and the next listed address tried), tries
  the next address on UNAVAILABLE, registers again on NOT_FOUND (its record expired) or
  UNAUTHENTICATED (a new leader that does not know an external worker),
* talks TLS when `UATU_CONTROL_PLANE_CA` names the CA file that signed the control plane's
  certificate (and presents `UATU_CONTROL_PLANE_CERT`/`_KEY` when it demands mTLS),
* turns a CANCEL command for one of its own jobs (its cluster and topic) into a graceful
  stop (`stop_requested`); a CANCEL naming any other job is logged and ignored.

Before the first micro-batch of a restarted query the statuses come from the checkpoint
(`committed_offsets`): Spark reports no offsets until it has new data to read.

Without `UATU_CONTROL_PLANE` nothing here runs: a job started by a scheduler with plain
`spark-submit.sh` never needs a control plane. A control plane that is down never stops a job
either; heartbeats are retried and their failures logged.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import socket
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

import grpc
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQueryListener
from uber.data.kafka.datatransfer import job_pb2, job_status_pb2, worker_pb2
from uber.data.kafka.datatransfer import master_worker_service_pb2 as mw_pb2
from uber.data.kafka.datatransfer import master_worker_service_pb2_grpc as mw_grpc

from core.errors import ConfigError

log = logging.getLogger("uatu.heartbeat")

SOURCE_METRIC = "uatu_source"


def observe_source(df: DataFrame) -> DataFrame:
    """Attach the `uatu_source` observed metric (records, key+value bytes) to a Kafka frame."""
    size: Column = F.coalesce(F.length("key"), F.lit(0)) + F.coalesce(F.length("value"), F.lit(0))
    return df.observe(SOURCE_METRIC, F.count(F.lit(1)).alias("records"), F.sum(size).alias("bytes"))


WORKER_SECRET_HEADER = "uatu-worker-secret"


@dataclass(frozen=True)
class ReporterConfig:
    addresses: tuple[str, ...]
    worker_id: int = 0
    interval_seconds: float = 5.0
    timeout_seconds: float = 2.0
    secret: str = field(default="", repr=False)
    ca_file: str | None = None  # TLS to the control plane when set
    cert_file: str | None = None  # client certificate, when it demands mTLS
    key_file: str | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> ReporterConfig | None:
        """None when no control plane is configured; ConfigError naming the bad variable."""
        raw = env.get("UATU_CONTROL_PLANE", "").strip()
        if not raw:
            return None
        addresses = tuple(a.strip() for a in raw.split(",") if a.strip())
        for address in addresses:
            host, _, port = address.rpartition(":")
            if not host or not port.isdigit():
                raise ConfigError("UATU_CONTROL_PLANE", f"{address!r} is not host:port")
        files = {}
        for name in ("UATU_CONTROL_PLANE_CA", "UATU_CONTROL_PLANE_CERT", "UATU_CONTROL_PLANE_KEY"):
            value = env.get(name, "").strip() or None
            if value is not None and not os.path.isfile(value):
                raise ConfigError(name, f"{value!r} is not a readable file")
            files[name] = value
        if bool(files["UATU_CONTROL_PLANE_CERT"]) != bool(files["UATU_CONTROL_PLANE_KEY"]):
            raise ConfigError("UATU_CONTROL_PLANE_CERT", "needs UATU_CONTROL_PLANE_KEY too")
        return cls(
            addresses=addresses,
            worker_id=_number(env, "UATU_WORKER_ID", "0", int, minimum=0),
            interval_seconds=_number(env, "UATU_HEARTBEAT_SECONDS", "5", float, minimum=0.1),
            # A job the control plane did not launch makes its own up (trust on first use).
            secret=env.get("UATU_WORKER_SECRET") or secrets.token_urlsafe(32),
            ca_file=files["UATU_CONTROL_PLANE_CA"],
            cert_file=files["UATU_CONTROL_PLANE_CERT"],
            key_file=files["UATU_CONTROL_PLANE_KEY"],
        )

    def channel(self, target: str) -> grpc.Channel:
        if self.ca_file is None:
            return grpc.insecure_channel(target)

        def read(path: str | None) -> bytes | None:
            if path is None:
                return None
            with open(path, "rb") as f:
                return f.read()

        credentials = grpc.ssl_channel_credentials(
            root_certificates=read(self.ca_file),
            private_key=read(self.key_file),
            certificate_chain=read(self.cert_file),
        )
        return grpc.secure_channel(target, credentials)


def _number(env: Mapping[str, str], name: str, default: str, kind: type, minimum: float):
    raw = env.get(name, default)
    try:
        value = kind(raw)
    except ValueError:
        raise ConfigError(name, f"{raw!r} is not a number") from None
    if value < minimum:
        raise ConfigError(name, f"{raw!r} must be at least {minimum}")
    return value


@dataclass(frozen=True)
class JobTemplate:
    """What every per-partition Job of this application shares."""

    type: int
    cluster: str
    topic: str
    consumer_group: str = ""

    def job(self, partition: int) -> job_pb2.Job:
        return job_pb2.Job(
            type=self.type,  # type: ignore[arg-type]
            kafka_consumer_task=job_pb2.KafkaConsumerTask(
                cluster=self.cluster,
                topic=self.topic,
                partition=partition,
                consumer_group=self.consumer_group,
            ),
        )


def end_offsets(progress: Mapping, topic: str) -> dict[int, int]:
    """{partition: end offset} of `topic` in a progress record (all Kafka sources)."""
    offsets: dict[int, int] = {}
    for source in progress.get("sources", []):
        end = source.get("endOffset")
        if isinstance(end, str):
            end = json.loads(end) if end.startswith("{") else None
        if isinstance(end, dict) and isinstance(end.get(topic), dict):
            offsets.update({int(p): int(o) for p, o in end[topic].items()})
    return offsets


def partition_statuses(
    progress: Mapping,
    previous: Mapping | None,
    template: JobTemplate,
    elapsed_seconds: float | None,
    bytes_per_record: float | None = None,
) -> list[job_status_pb2.JobStatus]:
    """One RUNNING JobStatus per partition from two consecutive progress records (pure).

    Rates are the offset advance since `previous` over `elapsed_seconds` (for the first
    record: since the batch's start offsets, over its duration). Byte rates use
    `bytes_per_record`, or else the mean record size of the batch's SOURCE_METRIC.
    """
    now = end_offsets(progress, template.topic)
    if previous is not None and elapsed_seconds:
        before, seconds = end_offsets(previous, template.topic), elapsed_seconds
    else:
        before = _start_offsets(progress, template.topic)
        seconds = max(progress.get("batchDuration", 0) / 1000, 1e-3)
    if bytes_per_record is None:
        metric = (progress.get("observedMetrics") or {}).get(SOURCE_METRIC) or {}
        records, size = metric.get("records") or 0, metric.get("bytes") or 0
        bytes_per_record = size / records if records else 0.0
    statuses = []
    for partition, offset in sorted(now.items()):
        rate = max(offset - before.get(partition, offset), 0) / seconds
        statuses.append(
            job_status_pb2.JobStatus(
                job=template.job(partition),
                state=job_pb2.JOB_STATE_RUNNING,
                kafka_consumer_task_status=job_status_pb2.KafkaConsumerTaskStatus(
                    read_offset=offset,
                    commit_offset=offset,
                    messages_per_sec=rate,
                    bytes_per_sec=rate * bytes_per_record,
                ),
            )
        )
    return statuses


def _start_offsets(progress: Mapping, topic: str) -> dict[int, int]:
    starts = [{**s, "endOffset": s.get("startOffset")} for s in progress.get("sources", [])]
    return end_offsets({"sources": starts}, topic)


def committed_offsets(spark: SparkSession, checkpoint: str) -> dict | None:
    """The end offsets of the checkpoint's last committed batch, shaped as a progress record
    ({"sources": [{"endOffset": ...}, ...]}); None for a new checkpoint.

    Spark's offset log: `offsets/N` holds "v1", the batch metadata, then one line of offset
    JSON per source; `commits/N` exists once batch N is committed.
    """
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    root = jvm.org.apache.hadoop.fs.Path(checkpoint)
    fs = root.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())  # type: ignore[union-attr]
    commits = jvm.org.apache.hadoop.fs.Path(root, "commits")
    if not fs.exists(commits):
        return None
    batches = [
        int(f.getPath().getName())
        for f in fs.listStatus(commits)
        if f.getPath().getName().isdigit()
    ]
    if not batches:
        return None
    stream = fs.open(jvm.org.apache.hadoop.fs.Path(root, f"offsets/{max(batches)}"))
    try:
        text = jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8")
    finally:
        stream.close()
    lines = text.splitlines()[2:]
    return {"sources": [{"endOffset": line} for line in lines if line.startswith("{")]}


class ProgressListener(StreamingQueryListener):
    """Keeps the latest per-partition statuses of one query (events arrive on Spark's thread)."""

    def __init__(
        self,
        query_name: str,
        template: JobTemplate,
        committed: dict | None = None,
        record_bytes: Callable[[], float] | None = None,
    ):
        self.query_name = query_name
        self.template = template
        self.record_bytes = record_bytes
        self._lock = threading.Lock()
        self._last: dict | None = None
        self._statuses: list[job_status_pb2.JobStatus] = []
        if committed:  # a restart: offsets from the checkpoint, no rate yet
            self._statuses = partition_statuses(committed, committed, template, 1.0)

    def onQueryStarted(self, event) -> None:
        pass

    def onQueryProgress(self, event) -> None:
        self.record(json.loads(event.progress.json))

    def record(self, progress: Mapping) -> None:
        """Take the offsets and rates of one progress record of this query (a Spark progress
        event's JSON, or one shaped like it by a job that runs without Spark's engine)."""
        if progress.get("name") != self.query_name:
            return
        if not end_offsets(progress, self.template.topic):
            return  # a trigger without offsets (nothing to read yet): keep what we know
        with self._lock:
            elapsed = _seconds_between(self._last, progress) if self._last else None
            size = self.record_bytes() if self.record_bytes is not None else None
            self._statuses = partition_statuses(progress, self._last, self.template, elapsed, size)
            self._last = dict(progress)

    def onQueryIdle(self, event) -> None:
        with self._lock:  # nothing new to read: the offsets stand, the rates drop to zero
            for status in self._statuses:
                status.kafka_consumer_task_status.messages_per_sec = 0
                status.kafka_consumer_task_status.bytes_per_sec = 0

    def onQueryTerminated(self, event) -> None:
        pass

    def settle(self, committed: dict) -> None:
        """Report the offsets of a checkpoint's last committed batch (`committed_offsets`),
        rates zero: what a run that has stopped its query says last, whatever progress
        events Spark has not delivered yet."""
        if not end_offsets(committed, self.template.topic):
            return
        with self._lock:
            self._statuses = partition_statuses(committed, committed, self.template, 1.0)

    def statuses(self) -> list[job_status_pb2.JobStatus]:
        with self._lock:
            return [_copy(s) for s in self._statuses]


def _seconds_between(earlier: Mapping, later: Mapping) -> float | None:
    try:
        start = datetime.fromisoformat(earlier["timestamp"].replace("Z", "+00:00"))
        end = datetime.fromisoformat(later["timestamp"].replace("Z", "+00:00"))
    except (KeyError, ValueError):
        return None
    seconds = (end - start).total_seconds()
    return seconds if seconds > 0 else None


def _copy(status: job_status_pb2.JobStatus) -> job_status_pb2.JobStatus:
    copied = job_status_pb2.JobStatus()
    copied.CopyFrom(status)
    return copied


def _node(address: str, node_id: int = 0) -> worker_pb2.Node:
    host, _, port = address.rpartition(":")
    return worker_pb2.Node(id=node_id, host=host, port=int(port))


class Heartbeater:
    """Registers this application and heartbeats its listener's statuses in a daemon thread."""

    def __init__(self, config: ReporterConfig, listener: ProgressListener, ui_port: int = 0):
        self.config = config
        self.listener = listener
        self.stop_requested = threading.Event()
        self._stopped = threading.Event()
        self._target = config.addresses[0]
        self._worker = worker_pb2.Node(id=config.worker_id, host=socket.gethostname(), port=ui_port)
        self._registered = False
        self._thread = threading.Thread(target=self._loop, name="uatu-heartbeat", daemon=True)

    @property
    def worker_id(self) -> int:
        return self._worker.id if self._registered else 0

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join(timeout=self.config.timeout_seconds + 1)

    def beat_once(self) -> None:
        """One heartbeat from the caller's thread (after `stop`: a run's last word); a failure
        is logged, as in the loop."""
        try:
            self._beat()
        except grpc.RpcError as e:
            self._on_error(e)

    def _loop(self) -> None:
        while not self._stopped.is_set():
            try:
                self._beat()
            except grpc.RpcError as e:
                self._on_error(e)
            self._stopped.wait(self.config.interval_seconds)

    def _beat(self) -> None:
        metadata = ((WORKER_SECRET_HEADER, self.config.secret),)
        with self.config.channel(self._target) as channel:
            stub = mw_grpc.MasterWorkerServiceStub(channel)
            participants = worker_participants(self._target, self._worker)
            if not self._registered:
                reply = stub.RegisterWorker(
                    mw_pb2.RegisterWorkerRequest(participants=participants),
                    timeout=self.config.timeout_seconds,
                    metadata=metadata,
                )
                if self._redirected(reply.participants.master):
                    return
                self._worker.CopyFrom(reply.participants.worker)
                self._registered = True
                log.info("registered with %s as worker %d", self._target, self._worker.id)
                participants = worker_participants(self._target, self._worker)
            response = stub.Heartbeat(
                mw_pb2.HeartbeatRequest(
                    participants=participants, job_status=self.listener.statuses()
                ),
                timeout=self.config.timeout_seconds,
                metadata=metadata,
            )
        if self._redirected(response.participants.master):
            return
        for command in response.commands:
            if command.type != mw_pb2.COMMAND_TYPE_CANCEL_JOB or self.stop_requested.is_set():
                continue
            task = command.job.kafka_consumer_task
            template = self.listener.template
            if (task.cluster, task.topic) != (template.cluster, template.topic):
                log.warning(
                    "ignoring CANCEL for %s/%s: not this application's job",
                    task.cluster, task.topic,
                )  # fmt: skip
                continue
            log.info("control plane sent CANCEL for job %d; stopping", command.job.job_id)
            self.stop_requested.set()

    def _redirected(self, master: worker_pb2.Node) -> bool:
        leader = f"{master.host}:{master.port}"
        if not master.host or leader == self._target:
            return False
        if leader in self.config.addresses:
            log.info("%s is not the leader; following it to %s", self._target, leader)
            self._target = leader
        else:  # never follow a redirect to an address the launcher did not give us
            log.warning(
                "%s redirects to %s, which UATU_CONTROL_PLANE does not list; trying the next",
                self._target, leader,
            )  # fmt: skip
            self._next_address()
        return True

    def _next_address(self) -> None:
        addresses = self.config.addresses
        index = addresses.index(self._target) if self._target in addresses else -1
        self._target = addresses[(index + 1) % len(addresses)]

    def _on_error(self, error: grpc.RpcError) -> None:
        code = error.code()  # type: ignore[attr-defined]
        if code == grpc.StatusCode.NOT_FOUND:
            log.warning("control plane forgot worker %d; registering again", self._worker.id)
            self._registered = False
        elif code == grpc.StatusCode.UNAUTHENTICATED:
            # A launched worker keeps its reserved id; one that was given an id registers anew.
            self._registered = False
            self._worker.id = self.config.worker_id
        elif code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
            self._next_address()
        log.warning("heartbeat failed (%s): %s", code.name, error.details())  # type: ignore[attr-defined]


@dataclass(frozen=True)
class Reporting:
    """Validated before Spark starts (main.py); `run_query` starts it with the query."""

    config: ReporterConfig
    template: JobTemplate

    def start(
        self,
        spark: SparkSession,
        query_name: str,
        checkpoint: str,
        record_bytes: Callable[[], float] | None = None,
    ) -> Heartbeater:
        """`record_bytes` gives the byte rates for a query whose batches do not read their own
        rows (the replication job): the mean record size of its last batch."""
        listener = ProgressListener(
            query_name, self.template, committed_offsets(spark, checkpoint), record_bytes
        )
        spark.streams.addListener(listener)
        return self._heartbeat(spark, listener)

    def start_fed(
        self,
        spark: SparkSession,
        query_name: str,
        committed: Mapping | None,
        record_bytes: Callable[[], float] | None = None,
    ) -> Heartbeater:
        """Heartbeats for a job that runs without Spark's streaming engine (the continuous
        replication copy): it feeds `heartbeater.listener.record` progress-shaped records
        itself. `committed` (progress-shaped) gives the statuses until the first one."""
        listener = ProgressListener(query_name, self.template, dict(committed or {}), record_bytes)
        return self._heartbeat(spark, listener)

    def _heartbeat(self, spark: SparkSession, listener: ProgressListener) -> Heartbeater:
        ui = spark.sparkContext.uiWebUrl or ""
        port = ui.rpartition(":")[2]
        heartbeater = Heartbeater(self.config, listener, int(port) if port.isdigit() else 0)
        heartbeater.start()
        return heartbeater


def worker_participants(master_address: str, worker: worker_pb2.Node) -> mw_pb2.Participants:
    return mw_pb2.Participants(master=_node(master_address), worker=worker)
