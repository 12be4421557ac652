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
* reaches it through core/channel.py's one channel, TLS as soon as `UATU_CONTROL_PLANE_CA`
  (the CA file that signed the control plane's certificate) or `UATU_CONTROL_PLANE_CERT`/`_KEY`
  (a client certificate, when it demands mTLS) is set,
* turns a CANCEL command for one of its own jobs (its cluster and topic) into a graceful
  stop (`stop_requested`); a CANCEL naming any other job is logged and ignored.

The statuses are `jobs/runtime/progress.py`'s; before the first micro-batch of a restarted
query they come from the checkpoint (`checkpoint_files.OffsetLog.committed_progress`): Spark
reports no offsets until it has new data to read.

Without `UATU_CONTROL_PLANE` nothing here runs: a job started by a scheduler with plain
`spark-submit.sh` never needs a control plane. A control plane that is down never stops a job
either; heartbeats are retried and their failures logged.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from pyspark.sql import SparkSession
from uber.data.kafka.datatransfer import master_worker_service_pb2 as mw_pb2
from uber.data.kafka.datatransfer import master_worker_service_pb2_grpc as mw_grpc
from uber.data.kafka.datatransfer import worker_pb2
from uber.data.kafka.datatransfer.job_status_pb2 import JobStatus

from core.channel import ClientSecurity, open_channel
from core.errors import ConfigError
from jobs.runtime.checkpoint_files import read_offset_log
from jobs.runtime.progress import JobIdentity, ProgressListener

log = logging.getLogger("uatu.heartbeat")

WORKER_SECRET_HEADER = "uatu-worker-secret"


@dataclass(frozen=True)
class ReporterConfig:
    addresses: tuple[str, ...]
    worker_id: int = 0
    interval_seconds: float = 5.0
    timeout_seconds: float = 2.0
    secret: str = field(default="", repr=False)
    security: ClientSecurity = field(default_factory=ClientSecurity)

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
        files: dict[str, Path | None] = {}
        for name in ("UATU_CONTROL_PLANE_CA", "UATU_CONTROL_PLANE_CERT", "UATU_CONTROL_PLANE_KEY"):
            value = env.get(name, "").strip() or None
            if value is not None and not os.path.isfile(value):
                raise ConfigError(name, f"{value!r} is not a readable file")
            files[name] = Path(value) if value else None
        if (files["UATU_CONTROL_PLANE_CERT"] is None) != (files["UATU_CONTROL_PLANE_KEY"] is None):
            raise ConfigError("UATU_CONTROL_PLANE_CERT", "needs UATU_CONTROL_PLANE_KEY too")
        return cls(
            addresses=addresses,
            worker_id=_number(env, "UATU_WORKER_ID", "0", int, minimum=0),
            interval_seconds=_number(env, "UATU_HEARTBEAT_SECONDS", "5", float, minimum=0.1),
            # A job the control plane did not launch makes its own up (trust on first use).
            secret=env.get("UATU_WORKER_SECRET") or secrets.token_urlsafe(32),
            security=ClientSecurity(
                ca=files["UATU_CONTROL_PLANE_CA"],
                cert=files["UATU_CONTROL_PLANE_CERT"],
                key=files["UATU_CONTROL_PLANE_KEY"],
            ),
        )


def _number(env: Mapping[str, str], name: str, default: str, kind: type, minimum: float):
    raw = env.get(name, default)
    try:
        value = kind(raw)
    except ValueError:
        raise ConfigError(name, f"{raw!r} is not a number") from None
    if value < minimum:
        raise ConfigError(name, f"{raw!r} must be at least {minimum}")
    return value


def _node(address: str, node_id: int = 0) -> worker_pb2.Node:
    host, _, port = address.rpartition(":")
    return worker_pb2.Node(id=node_id, host=host, port=int(port))


class ControlPlaneLink:
    """The conversation with the control plane: register once, then heartbeat statuses and
    take the commands of the reply. Follows redirects to listed addresses only, tries the
    next address on UNAVAILABLE, registers again on NOT_FOUND or UNAUTHENTICATED. Used by
    one thread at a time (a job's heartbeat thread, a worker application's loop)."""

    def __init__(self, config: ReporterConfig, ui_port: int = 0) -> None:
        self.config = config
        self._target = config.addresses[0]
        self._worker = worker_pb2.Node(id=config.worker_id, host=socket.gethostname(), port=ui_port)
        self._registered = False
        # Monotonic time at which the last heartbeat the control plane answered was sent: a
        # worker fences itself (stops its queries) when it grows older than its lease allows.
        # The send time, not the answer's: the control plane renewed the lease somewhere in
        # between, so a slow answer must not stretch the fence past the lease.
        self.last_success = time.monotonic()

    @property
    def worker_id(self) -> int:
        return self._worker.id if self._registered else 0

    def beat(self, statuses: Sequence[JobStatus]) -> Sequence[mw_pb2.Command]:
        """One heartbeat (registering first when needed); the reply's commands, none when
        the call failed (logged) or was redirected."""
        try:
            return self._beat(statuses)
        except grpc.RpcError as e:
            self._on_error(e)
            return ()

    def _beat(self, statuses: Sequence[JobStatus]) -> Sequence[mw_pb2.Command]:
        metadata = ((WORKER_SECRET_HEADER, self.config.secret),)
        with open_channel(self._target, self.config.security) as channel:
            stub = mw_grpc.MasterWorkerServiceStub(channel)
            participants = worker_participants(self._target, self._worker)
            if not self._registered:
                reply = stub.RegisterWorker(
                    mw_pb2.RegisterWorkerRequest(participants=participants),
                    timeout=self.config.timeout_seconds,
                    metadata=metadata,
                )
                if self._redirected(reply.participants.master):
                    return ()
                self._worker.CopyFrom(reply.participants.worker)
                self._registered = True
                log.info("registered with %s as worker %d", self._target, self._worker.id)
                participants = worker_participants(self._target, self._worker)
            sent = time.monotonic()
            response = stub.Heartbeat(
                mw_pb2.HeartbeatRequest(participants=participants, job_status=statuses),
                timeout=self.config.timeout_seconds,
                metadata=metadata,
            )
        log.debug(
            "heartbeat to %s: %d job statuses, %d commands back",
            self._target, len(statuses), len(response.commands),
        )  # fmt: skip
        if self._redirected(response.participants.master):
            return ()
        self.last_success = sent
        return response.commands

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


class Heartbeater:
    """Registers this application and heartbeats its listener's statuses in a daemon thread;
    a CANCEL for the application's own job sets `stop_requested`."""

    def __init__(
        self,
        config: ReporterConfig,
        listener: ProgressListener,
        ui_port: int = 0,
        on_stop: Callable[[], None] = lambda: None,
    ):
        """`on_stop` is what `stop` undoes besides the loop: `Reporting.start` removes its
        listener from the session there (`jobs.runtime.session.listening` says why)."""
        self.config = config
        self.listener = listener
        self.link = ControlPlaneLink(config, ui_port)
        self.stop_requested = threading.Event()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="uatu-heartbeat", daemon=True)
        self._on_stop = on_stop

    @property
    def worker_id(self) -> int:
        return self.link.worker_id

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """End the loop and the listener's part in the session; the listener's statuses stay
        readable for a last `beat_once`."""
        self._stopped.set()
        self._thread.join(timeout=self.config.timeout_seconds + 1)
        self._on_stop()

    def beat_once(self) -> None:
        """One heartbeat from the caller's thread (after `stop`: a run's last word); a failure
        is logged, as in the loop."""
        self._take(self.link.beat(self.listener.statuses()))

    def _loop(self) -> None:
        while not self._stopped.is_set():
            self.beat_once()
            self._stopped.wait(self.config.interval_seconds)

    def _take(self, commands: Sequence[mw_pb2.Command]) -> None:
        for command in commands:
            if command.type != mw_pb2.COMMAND_TYPE_CANCEL_JOB or self.stop_requested.is_set():
                continue
            task = command.job.kafka_consumer_task
            identity = self.listener.identity
            if (task.cluster, task.topic) != (identity.cluster, identity.topic):
                log.warning(
                    "ignoring CANCEL for %s/%s: not this application's job",
                    task.cluster, task.topic,
                )  # fmt: skip
                continue
            log.info("control plane sent CANCEL for job %d; stopping", command.job.job_id)
            self.stop_requested.set()


@dataclass(frozen=True)
class Reporting:
    """Validated before Spark starts (main.py); `run_query` starts it with the query."""

    config: ReporterConfig
    identity: JobIdentity

    def start(
        self,
        spark: SparkSession,
        query_name: str,
        checkpoint: str,
        record_bytes: Callable[[], float] | None = None,
    ) -> Heartbeater:
        """`record_bytes` gives the byte rates for a query whose batches do not read their own
        rows (the replication job): the mean record size of its last batch."""
        committed = read_offset_log(spark, checkpoint).committed_progress()
        listener = ProgressListener(query_name, self.identity, committed, record_bytes)
        spark.streams.addListener(listener)
        return self._heartbeat(spark, listener, lambda: spark.streams.removeListener(listener))

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
        listener = ProgressListener(query_name, self.identity, dict(committed or {}), record_bytes)
        return self._heartbeat(spark, listener)

    def _heartbeat(
        self,
        spark: SparkSession,
        listener: ProgressListener,
        on_stop: Callable[[], None] = lambda: None,
    ) -> Heartbeater:
        ui = spark.sparkContext.uiWebUrl or ""
        port = ui.rpartition(":")[2]
        heartbeater = Heartbeater(
            self.config, listener, int(port) if port.isdigit() else 0, on_stop
        )
        heartbeater.start()
        return heartbeater


def worker_participants(master_address: str, worker: worker_pb2.Node) -> mw_pb2.Participants:
    return mw_pb2.Participants(master=_node(master_address), worker=worker)
