"""Audit reports from a producing or consuming tier: tally per window, emit `uatu.v1.AuditReport`.

Shared by the client wrappers (`clients/`), the KRP path of the availability job
(`jobs/availability/probes/krp.py`) and the tests; the Java interceptors
(`jvm/src/main/java/dev/uatu/audit/report/`) write the same bytes.

* `dedupe_key(key, value)` is Spark's `xxhash64(key, value)` (seed 42, a null column skipped),
  the audit job's default dedupe key, as a signed 64-bit integer.
* `WindowTally` counts records per (topic, epoch-aligned window of the record timestamp):
  message count, key + value bytes, failed sends, an HLL_8 sketch of the dedupe keys and a
  KLL doubles sketch of latency, in the DataSketches formats Spark's `hll_sketch_agg` and
  `kll_sketch_agg_double` write (so they union with `audit_counts`' sketches).
  `drain()` hands over what was counted since the previous drain and starts afresh.
* `AuditReporter` drains a tally every `report_interval_s` (and at `close`) into one
  AuditReport per (topic, window), numbered 1, 2, 3, ... per reporter instance, and produces
  them to the audit topic (idempotent producer, acks=all). A report whose delivery failed is
  sent again with the same sequence number on the next flush; the aggregation counts a
  (instance_id, sequence) once.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import xxhash
from confluent_kafka import KafkaError, Message, Producer
from datasketches import hll_sketch, kll_doubles_sketch, tgt_hll_type
from uatu.v1 import audit_report_pb2

log = logging.getLogger("uatu.audit_reports")

SPARK_HASH_SEED = 42  # org.apache.spark.sql.catalyst.expressions.XxHash64's seed
DEFAULT_LG_K = 12  # hll_sketch_agg's default lgConfigK
DEFAULT_KLL_K = 200  # kll_sketch_agg_double's default k
TIERS = {
    "SERVICE": audit_report_pb2.TIER_SERVICE,
    "KRP": audit_report_pb2.TIER_KRP,
    "CONSUMER": audit_report_pb2.TIER_CONSUMER,
}
_U64 = 1 << 64
_I63 = 1 << 63
_xxh64 = xxhash.xxh64_intdigest


def dedupe_key(key: bytes | None, value: bytes | None) -> int:
    """Spark's `xxhash64(key, value)`: XXH64 of the key with seed 42, then of the value seeded
    with that; a null (None) column leaves the running hash as it is. Signed 64-bit."""
    h = SPARK_HASH_SEED
    if key is not None:
        h = _xxh64(key, h)
    if value is not None:
        h = _xxh64(value, h)
    return h - _U64 if h >= _I63 else h


def window_start_ms(timestamp_ms: int, window_seconds: int) -> int:
    """Start of the epoch-aligned window of `timestamp_ms` (the audit job's placement)."""
    length = window_seconds * 1000
    return timestamp_ms - timestamp_ms % length


@dataclass
class WindowCounts:
    """What one (topic, window) counted since the last drain."""

    lg_k: int
    message_count: int = 0
    byte_count: int = 0
    failed_count: int = 0
    hll: Any = None  # datasketches.hll_sketch, created on first use
    kll: Any = None  # datasketches.kll_doubles_sketch, created on first latency

    def hll_bytes(self) -> bytes:
        sketch = self.hll if self.hll is not None else hll_sketch(self.lg_k, tgt_hll_type.HLL_8)
        return bytes(sketch.serialize_compact())

    def kll_bytes(self) -> bytes:
        return bytes(self.kll.serialize()) if self.kll is not None else b""


def check_tally_settings(window_seconds: int, lg_k: int) -> None:
    """ValueError naming the setting unless window_seconds > 0 and lg_k is in 4..21."""
    if window_seconds <= 0:
        raise ValueError(f"window_seconds={window_seconds}: must be > 0")
    if not 4 <= lg_k <= 21:
        raise ValueError(f"lg_k={lg_k}: must be in 4..21")


class WindowTally:
    """Per (topic, window) counts of one reporter; thread-safe.

    `add` only queues the record (one list append: it runs in the client's delivery callback
    or poll loop, on the application's path); the hashing and sketching happen in `fold`, which
    `drain` calls on the reporter's thread, and `add` itself once MAX_PENDING records queued.
    """

    MAX_PENDING = 200_000

    def __init__(self, window_seconds: int = 60, lg_k: int = DEFAULT_LG_K) -> None:
        check_tally_settings(window_seconds, lg_k)
        self.window_seconds = window_seconds
        self.lg_k = lg_k
        self._length_ms = window_seconds * 1000
        self._lock = threading.Lock()
        self._windows: dict[tuple[str, int], WindowCounts] = {}
        self._pending: list[tuple[str, bytes | None, bytes | None, int, float | None]] = []

    def _window(self, topic: str, timestamp_ms: int) -> WindowCounts:
        start = timestamp_ms - timestamp_ms % self._length_ms
        counts = self._windows.get((topic, start))
        if counts is None:
            counts = self._windows[(topic, start)] = WindowCounts(self.lg_k)
        return counts

    def add(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        timestamp_ms: int,
        latency_ms: float | None = None,
    ) -> None:
        """Count one record (acknowledged or consumed) placed by its Kafka timestamp."""
        pending = self._pending
        pending.append((topic, key, value, timestamp_ms, latency_ms))
        if len(pending) >= self.MAX_PENDING:
            self.fold()

    def add_failed(self, topic: str, timestamp_ms: int) -> None:
        """Count one send that failed (not in message_count)."""
        with self._lock:
            self._window(topic, timestamp_ms).failed_count += 1

    def fold(self) -> None:
        """Hash and sketch the queued records into their windows."""
        with self._lock:
            pending, self._pending = self._pending, []
            if not pending:
                return
            length = self._length_ms
            latencies: dict[int, list[float]] = {}
            last_key: tuple[str, int] | None = None
            counts = WindowCounts(self.lg_k)
            for topic, key, value, timestamp_ms, latency_ms in pending:
                window = (topic, timestamp_ms - timestamp_ms % length)
                if window != last_key:
                    counts = self._window(topic, timestamp_ms)
                    if counts.hll is None:
                        counts.hll = hll_sketch(self.lg_k, tgt_hll_type.HLL_8)
                    last_key = window
                h = SPARK_HASH_SEED
                if key is not None:
                    h = _xxh64(key, h)
                    counts.byte_count += len(key)
                if value is not None:
                    h = _xxh64(value, h)
                    counts.byte_count += len(value)
                counts.message_count += 1
                counts.hll.update(h - _U64 if h >= _I63 else h)
                if latency_ms is not None:
                    latencies.setdefault(id(counts), []).append(latency_ms)
            by_id = {id(c): c for c in self._windows.values()}
            for ident, values in latencies.items():
                target = by_id[ident]
                if target.kll is None:
                    target.kll = kll_doubles_sketch(DEFAULT_KLL_K)
                target.kll.update(np.asarray(values, dtype=np.float64))

    def drain(self) -> dict[tuple[str, int], WindowCounts]:
        """{(topic, window_start_ms): counts} since the previous drain; the tally restarts."""
        self.fold()
        with self._lock:
            drained, self._windows = self._windows, {}
        return drained


class Tally(Protocol):
    """What `AuditReporter` drains: `WindowTally`, or the interceptor plugin's
    (`clients.native_tally.NativeTally`)."""

    window_seconds: int

    def drain(self) -> dict[tuple[str, int], WindowCounts]: ...


@dataclass(frozen=True)
class ReporterIdentity:
    service: str
    cluster: str  # the audited cluster's name in conf/clusters.yaml
    tier: str = "SERVICE"  # SERVICE, KRP or CONSUMER
    consumer_group: str = ""
    host: str = field(default_factory=socket.gethostname)
    instance_id: str = field(default_factory=lambda: uuid.uuid4().hex)

    def __post_init__(self) -> None:
        if self.tier not in TIERS:
            raise ValueError(f"tier={self.tier!r}: must be one of {sorted(TIERS)}")
        if not self.service or not self.cluster:
            raise ValueError("service and cluster are required")


def build_report(
    identity: ReporterIdentity,
    topic: str,
    window_start: int,
    window_seconds: int,
    counts: WindowCounts,
    sequence: int,
    sent_at_ms: int,
) -> audit_report_pb2.AuditReport:
    """The AuditReport of one (topic, window) increment."""
    return audit_report_pb2.AuditReport(
        reporter=audit_report_pb2.Reporter(
            service=identity.service,
            host=identity.host,
            instance_id=identity.instance_id,
            tier=TIERS[identity.tier],
            consumer_group=identity.consumer_group,
        ),
        cluster=identity.cluster,
        topic=topic,
        window_start_ms=window_start,
        window_seconds=window_seconds,
        message_count=counts.message_count,
        byte_count=counts.byte_count,
        failed_count=counts.failed_count,
        hll_sketch=counts.hll_bytes(),
        latency_kll_sketch=counts.kll_bytes(),
        sequence=sequence,
        sent_at_ms=sent_at_ms,
    )


class AuditReporter:
    """Drains a tally (`WindowTally` or the plugin's) into AuditReports on a timer and at `close`.

    `producer_config` is a librdkafka configuration reaching the audit topic's cluster
    (bootstrap.servers and security settings); the reporter adds idempotence and acks=all.
    `send` replaces producing (tests); it gets (report bytes) and returns nothing.
    """

    def __init__(
        self,
        tally: Tally,
        identity: ReporterIdentity,
        audit_topic: str,
        producer_config: Mapping[str, Any],
        *,
        report_interval_s: float = 10.0,
        start_timer: bool = True,
    ) -> None:
        if report_interval_s <= 0:
            raise ValueError(f"report_interval_s={report_interval_s}: must be > 0")
        self.tally = tally
        self.identity = identity
        self.audit_topic = audit_topic
        self.report_interval_s = report_interval_s
        self._producer = Producer(
            {
                **producer_config,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 50,
            }
        )
        self._sequence = 0
        self._unsent: dict[int, bytes] = {}  # sequence -> report not acknowledged yet
        self._flush_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.reports_sent = 0
        if start_timer:
            self._thread = threading.Thread(
                target=self._run, name=f"audit-reporter-{identity.service}", daemon=True
            )
            self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.report_interval_s):
            try:
                self.flush(timeout_s=self.report_interval_s)
            except Exception:  # the reporter must never take the service down
                log.exception("audit report flush failed; retrying next interval")

    def _delivered(self, sequence: int) -> Callable[[KafkaError | None, Message], None]:
        def done(err: KafkaError | None, _msg: Message) -> None:
            if err is None:
                self._unsent.pop(sequence, None)
                self.reports_sent += 1
            else:
                log.warning("audit report %d not delivered (%s); resent next flush", sequence, err)

        return done

    def flush(self, timeout_s: float = 30.0) -> int:
        """Build reports of everything counted so far, send them (and earlier unsent ones),
        wait up to `timeout_s` for acknowledgements; return how many are still unsent."""
        with self._flush_lock:
            now = time.time_ns() // 1_000_000
            for (topic, start), counts in sorted(self.tally.drain().items()):
                self._sequence += 1
                report = build_report(
                    self.identity,
                    topic,
                    start,
                    self.tally.window_seconds,
                    counts,
                    self._sequence,
                    now,
                )
                self._unsent[self._sequence] = report.SerializeToString()
            for sequence, value in sorted(self._unsent.items()):
                key = f"{self.identity.instance_id}/{sequence}".encode()
                self._producer.produce(
                    self.audit_topic, value, key, on_delivery=self._delivered(sequence)
                )
            self._producer.flush(timeout_s)
            return len(self._unsent)

    def close(self, timeout_s: float = 30.0) -> None:
        """Stop the timer, send the last reports, wait for them and close the producer (whose
        threads would otherwise keep reconnecting to the cluster). Once only: later calls do
        nothing."""
        if self._stop.is_set():
            return
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=timeout_s)
        left = self.flush(timeout_s)
        if left:
            log.error("%d audit report(s) of %s could not be delivered", left, self.identity)
        self._producer.close()
