"""The round-trip prober: a sender thread and a receiver thread around a `ProbeLedger`.

Every `interval_ms` the sender sends one probe to each probe partition; the receiver reads
the probe topic back. Each side talks to Kafka natively (librdkafka) or through kafka-pixy's
gRPC API, as the JobGroup's availability_job_type says:

=================  ==================  ===================================
job type           sends with          reads back with
=================  ==================  ===================================
NATIVE_PRODUCER    librdkafka          librdkafka
PROXY_PRODUCER     kafka-pixy Produce  librdkafka
PROXY_CONSUMER     librdkafka          kafka-pixy ConsumeNAck + Ack
=================  ==================  ===================================

so a proxy job measures the proxy's own half against a native other half. A probe's value is
JSON: the prober's instance id, its sequence number and its send time; several probers can
share a topic and each counts its own probes only.

The prober runs on the Spark driver; clients only ever touch the probe topic.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

from confluent_kafka import (
    OFFSET_END,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient

from core.config import ClusterConfig
from core.faults import FaultInjected, fault_point
from jobs.availability.probes.krp import KrpReports, krp_reports
from jobs.availability.probes.ledger import ProbeLedger, ProbeTarget
from jobs.availability.probes.proxy_client import (
    PixyClient,
    ProxyError,
    ProxyMessage,
    key_for_partition,
)
from jobs.availability.probes.topic import broker_zones, ensure_probe_topic, probe_targets
from jobs.availability.spec import PROXY_TYPES, AvailabilitySpec, ProbeSettings

log = logging.getLogger("uatu.availability")


def probe_value(instance_id: str, seq: int, sent_ms: int) -> bytes:
    return json.dumps({"instance": instance_id, "seq": seq, "sent_ms": sent_ms}).encode()


def parse_probe(value: bytes | None) -> tuple[str, int] | None:
    """(instance id, sequence number) of a probe value; None when it is not one of ours."""
    try:
        data = json.loads(value or b"")
        return str(data["instance"]), int(data["seq"])
    except (ValueError, TypeError, KeyError):
        return None


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def sendable_targets(
    targets: Sequence[ProbeTarget], assigned: set[int], down_brokers: frozenset[int]
) -> list[ProbeTarget]:
    """The targets to probe this round: those whose partition the receiver reads, and those
    whose broker is down (not in the cluster's metadata) even when it cannot read them.

    The receiver reads a partition from its end as of when it first could look the end up: a
    partition just added for a new broker, or one whose end it failed to get, rounds or seconds
    later. A probe sent to it before then would never be read back and would count as lost
    though nothing was lost, so a live broker's partition waits for the receiver. A down
    broker's partition is probed anyway: its failed produces are what shows the broker down."""
    return [t for t in targets if t.partition in assigned or t.broker in down_brokers]


class Sender(Protocol):
    def send(
        self, target: ProbeTarget, value: bytes, sent_ms: int, done: Callable[[str | None], None]
    ) -> None:
        """Send one probe (sent at `sent_ms`, as its value says); call `done(None)` on
        acknowledgement, `done(error)` on failure."""

    def serve(self, timeout_s: float) -> None:
        """Wait up to `timeout_s`, delivering outcomes meanwhile."""

    def topic_changed(self, partition_count: int) -> None:
        """The probe topic now has this many partitions."""

    def close(self) -> None: ...


class Receiver(Protocol):
    assigned: set[int]  # the partitions it reads (probes sent to them from now on are read)

    def assign(self, partitions: Sequence[int]) -> None:
        """Read these partitions too (from their end); a group consumer may ignore it."""

    def receive(self, timeout_s: float) -> list[bytes]:
        """Probe values read since the last call (waits up to `timeout_s` for one)."""

    def close(self) -> None: ...


class NativeSender:
    """librdkafka producer, acks=all; a probe not acknowledged within the ack SLA fails."""

    def __init__(self, cluster: ClusterConfig, topic: str, ack_sla_ms: int) -> None:
        self.topic = topic
        self.producer = Producer(
            {
                **cluster.client_config(),
                "acks": "all",
                "linger.ms": 0,
                "message.timeout.ms": ack_sla_ms,
                # Retries would turn a broker's failure into a late success or a duplicate
                # inside the SLA; the probes should see the failure.
                "enable.idempotence": False,
                # Leaders move when brokers die; the probes should follow within seconds.
                "topic.metadata.refresh.interval.ms": 10_000,
            }
        )
        self.known_partitions: set[int] = set()

    def send(
        self, target: ProbeTarget, value: bytes, sent_ms: int, done: Callable[[str | None], None]
    ) -> None:
        def delivered(err: KafkaError | None, _msg: Message) -> None:
            done(None if err is None else err.str())

        if target.partition not in self.known_partitions:
            # librdkafka fails a record for a partition it has not seen in its metadata at
            # once, and would not look again for minutes: a partition just added needs this.
            metadata = self.producer.list_topics(self.topic, timeout=5)
            self.known_partitions = set(metadata.topics[self.topic].partitions)
        try:
            self.producer.produce(
                self.topic, value, partition=target.partition, on_delivery=delivered
            )
        except Exception as e:  # any refusal is a failed probe
            done(f"produce refused: {e}")

    def serve(self, timeout_s: float) -> None:
        self.producer.poll(timeout_s)

    def topic_changed(self, partition_count: int) -> None:
        pass  # `send` refreshes the metadata itself when it meets a partition it does not know

    def close(self, flush_timeout_s: float = 5) -> None:
        """Wait up to `flush_timeout_s` for the probes in flight, fail the rest (their `done`
        gets librdkafka's purge error) and close the producer, whose threads would otherwise
        keep reconnecting to the cluster for as long as anything holds the sender."""
        self.producer.flush(flush_timeout_s)
        self.producer.purge()  # close() would wait for them up to the ack SLA
        self.producer.close()


class ProxySender:
    """kafka-pixy's Produce in synchronous mode, from a thread pool so that a broker that
    hangs holds up its own probes only. kafka-pixy cannot be told a partition: the key is
    chosen so that its hash partitioner picks the target's (`key_for_partition`). With `krp`,
    every call's outcome is counted for the KRP-tier audit reports (`krp.py`)."""

    def __init__(
        self, client: PixyClient, topic: str, ack_sla_ms: int, krp: KrpReports | None = None
    ) -> None:
        self.client = client
        self.topic = topic
        self.timeout_s = ack_sla_ms / 1000
        self.krp = krp
        self.partition_count = 0
        self.pool = ThreadPoolExecutor(max_workers=32, thread_name_prefix="probe-proxy")

    def send(
        self, target: ProbeTarget, value: bytes, sent_ms: int, done: Callable[[str | None], None]
    ) -> None:
        key = key_for_partition(target.partition, self.partition_count)
        krp = self.krp

        def produce() -> None:
            try:
                partition, _ = self.client.produce(self.topic, key, value, self.timeout_s)
            except ProxyError as e:
                if krp is not None:
                    krp.failed(sent_ms)
                done(str(e))
                return
            if krp is not None:
                krp.acknowledged(key, value, sent_ms, now_ms())
            wrong = partition != target.partition
            done(f"kafka-pixy wrote to partition {partition}" if wrong else None)

        self.pool.submit(produce)

    def serve(self, timeout_s: float) -> None:
        time.sleep(timeout_s)  # outcomes arrive from the pool's threads

    def topic_changed(self, partition_count: int) -> None:
        self.partition_count = partition_count

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)
        if self.krp is not None:  # after the last Produce call returned: its outcome counts
            self.krp.close()


class NativeReceiver:
    """librdkafka consumer assigned every probe partition from its end; never commits."""

    def __init__(self, cluster: ClusterConfig, topic: str, group_id: str) -> None:
        self.topic = topic
        self.consumer = Consumer(
            {
                **cluster.client_config(),
                "group.id": group_id,
                "enable.auto.commit": False,
                "fetch.wait.max.ms": 100,
            }
        )
        self.assigned: set[int] = set()

    def assign(self, partitions: Sequence[int]) -> None:
        """Read new partitions from their current end, so only probes sent from now on count."""
        new = sorted(set(partitions) - self.assigned)
        if not new:
            return
        fault_point("availability.probe_partitions_new")  # core/faults.py: tests only
        self.consumer.list_topics(self.topic, timeout=10)  # learn new partitions' leaders
        start = []
        for p in new:
            try:
                fault_point("availability.probe_end_offset")  # core/faults.py: tests only
                _, high = self.consumer.get_watermark_offsets(
                    TopicPartition(self.topic, p), timeout=5
                )
            except (KafkaException, FaultInjected) as e:
                # Its leader is down or unknown yet: tried again next round; meanwhile only a
                # down broker's partition is probed (sendable_targets), and those probes fail.
                log.info("probe partition %s[%d] not readable yet: %s", self.topic, p, e)
                continue
            start.append(TopicPartition(self.topic, p, high if high >= 0 else OFFSET_END))
        if start:
            self.consumer.incremental_assign(start)
            self.assigned.update(tp.partition for tp in start)

    def receive(self, timeout_s: float) -> list[bytes]:
        messages = self.consumer.consume(num_messages=500, timeout=timeout_s)
        return [m.value() or b"" for m in messages if m.error() is None]

    def close(self) -> None:
        self.consumer.close()


class ProxyReceiver:
    """kafka-pixy's ConsumeNAck for a group of this prober's own, acknowledging each probe
    with the next call.

    A group new to kafka-pixy would start at the end of each partition at some moment after
    its first request, missing the probes sent before; so the group's offsets are committed
    at the partitions' ends (natively) before kafka-pixy first sees it."""

    def __init__(
        self, client: PixyClient, cluster: ClusterConfig, topic: str, group_id: str
    ) -> None:
        self.client = client
        self.topic = topic
        self.group_id = group_id
        self.committer = Consumer(
            {**cluster.client_config(), "group.id": group_id, "enable.auto.commit": False}
        )
        self.assigned: set[int] = set()
        self.unacked: ProxyMessage | None = None

    def assign(self, partitions: Sequence[int]) -> None:
        new = sorted(set(partitions) - self.assigned)
        if not new:
            return
        ends = []
        for p in new:
            _, high = self.committer.get_watermark_offsets(TopicPartition(self.topic, p), timeout=5)
            ends.append(TopicPartition(self.topic, p, max(high, 0)))
        self.committer.commit(offsets=ends, asynchronous=False)
        self.assigned.update(new)

    def receive(self, timeout_s: float) -> list[bytes]:
        # kafka-pixy long-polls (consumer.long_polling_timeout) whatever the timeout here.
        message = self.client.consume(self.topic, self.group_id, self.unacked, timeout_s + 10)
        # A call that found nothing still applied the ack it carried.
        self.unacked = message
        return [] if message is None else [message.value]

    def close(self) -> None:
        if self.unacked is not None:
            self.client.ack(self.group_id, self.unacked, 5)
        self.committer.close()


@dataclass
class ProbeLoop:
    """Runs a sender and a receiver in two daemon threads until `stop`."""

    ledger: ProbeLedger
    sender: Sender
    receiver: Receiver
    interval_ms: int
    # Replaced as a whole when coverage changes; both threads read it every round.
    targets: list[ProbeTarget]
    malformed: int = 0
    # The targets' brokers missing from the cluster's metadata (see sendable_targets).
    down_brokers: frozenset[int] = frozenset()

    def start(self) -> None:
        self._stopping = threading.Event()
        self.crash: BaseException | None = None
        self._threads = [
            threading.Thread(target=self._guarded(self._send_loop), name="probe-sender"),
            threading.Thread(target=self._guarded(self._receive_loop), name="probe-receiver"),
        ]
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._stopping.set()
        for thread in self._threads:
            thread.join(30)
        self.sender.close()
        self.receiver.close()

    def _guarded(self, loop: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                loop()
            except BaseException as e:
                # Kept for the micro-batch to raise: a prober that died must fail the job,
                # not leave it writing no probe rows.
                self.crash = e
                log.exception("%s died", threading.current_thread().name)

        return run

    def _send_loop(self) -> None:
        next_round = time.monotonic()
        while not self._stopping.is_set():
            for target in sendable_targets(self.targets, self.receiver.assigned, self.down_brokers):
                sent = now_ms()
                seq = self.ledger.send(target, sent)
                value = probe_value(self.ledger.instance_id, seq, sent)
                self.sender.send(target, value, sent, self._done(seq))
            next_round += self.interval_ms / 1000
            # Outcomes are delivered while waiting for the next round.
            while (left := next_round - time.monotonic()) > 0 and not self._stopping.is_set():
                self.sender.serve(min(left, 0.2))
            if next_round < time.monotonic() - 1:
                next_round = time.monotonic()  # fell behind (a long stall): do not burst

    def _done(self, seq: int) -> Callable[[str | None], None]:
        def done(error: str | None) -> None:
            if error is None:
                self.ledger.acked(seq, now_ms())
            else:
                self.ledger.failed(seq, error)

        return done

    def _receive_loop(self) -> None:
        while not self._stopping.is_set():
            try:
                self.receiver.assign([t.partition for t in self.targets])
                values = self.receiver.receive(0.2)
            except Exception as e:  # a failed read shows as lost probes
                log.warning("probe receiver: %s", e)
                time.sleep(0.5)
                continue
            received = now_ms()
            for value in values:
                probe = parse_probe(value)
                if probe is None:
                    self.malformed += 1
                    continue
                self.ledger.received(probe[0], probe[1], received)


@dataclass
class Prober:
    """One prober instance: keeps the probe topic covered and the probe loop running."""

    cluster: ClusterConfig
    topic: str
    settings: ProbeSettings
    instance_id: str
    sender: Sender
    receiver: Receiver
    _zones: dict[int, str | None] = field(default_factory=dict)
    _strays_logged: tuple[int, int] = (0, 0)

    def start(self, admin: AdminClient) -> None:
        self.ledger = ProbeLedger(
            self.instance_id,
            self.settings.window_ms,
            self.settings.ack_sla_ms,
            self.settings.roundtrip_sla_ms,
        )
        self.loop = ProbeLoop(
            self.ledger, self.sender, self.receiver, self.settings.interval_ms, []
        )
        self.refresh(admin)
        # Assigned before the first probe is sent, so the first probes are read back too.
        self.receiver.assign([t.partition for t in self.loop.targets])
        self.loop.start()
        log.info(
            "prober %s: one probe every %d ms to each of %s",
            self.instance_id,
            self.settings.interval_ms,
            ", ".join(
                f"{self.topic}[{t.partition}] (broker {t.broker}, zone {t.zone})"
                for t in self.loop.targets
            ),
        )

    def refresh(self, admin: AdminClient) -> None:
        """Cover new brokers and pick up zones; called every trigger."""
        assignment = ensure_probe_topic(
            admin, self.cluster, self.topic, self.settings.replication_factor
        )
        live = broker_zones(admin)
        self._zones.update(live)  # a dead broker keeps its last known zone
        targets = probe_targets(assignment, self._zones)
        self.loop.down_brokers = frozenset(t.broker for t in targets if t.broker not in live)
        if targets != self.loop.targets:
            self.sender.topic_changed(len(assignment))
            self.loop.targets = targets

    def take_final(self, now: int) -> list[dict[str, Any]]:
        """The rows of every probe window now final; raises if a probe thread died."""
        if self.loop.crash is not None:
            raise RuntimeError(f"prober {self.instance_id} stopped") from self.loop.crash
        rows = self.ledger.take_final(now)
        strays = (self.ledger.late_copies, self.loop.malformed)
        if strays != self._strays_logged:
            self._strays_logged = strays
            log.warning(
                "prober %s: %d copies read after their window was written, "
                "%d values on the probe topic that are not probes (totals so far)",
                self.instance_id,
                *strays,
            )
        return rows

    def stop(self) -> None:
        self.loop.stop()


def build_prober(spec: AvailabilitySpec) -> Prober:
    """The prober for the job's availability_job_type (the table of the module docstring),
    with KRP reports when PROXY_PRODUCER probes have a krp_audit_topic (`krp.py`)."""
    instance_id = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    group_id = f"uatu-probe-{instance_id}"
    cluster, topic, ack_sla_ms = spec.cluster, spec.probe_topic, spec.probe.ack_sla_ms
    proxy = None
    if spec.probe_type in PROXY_TYPES:
        assert cluster.proxy_grpc_address is not None  # checked by availability_spec
        proxy = PixyClient(cluster.proxy_grpc_address, cluster.proxy_cluster)
    sender: Sender
    receiver: Receiver
    if proxy is not None and spec.probe_type == "AVAILABILITY_JOB_TYPE_PROXY_PRODUCER":
        sender = ProxySender(proxy, topic, ack_sla_ms, krp_reports(spec, instance_id))
    else:
        sender = NativeSender(cluster, topic, ack_sla_ms)
    if proxy is not None and spec.probe_type == "AVAILABILITY_JOB_TYPE_PROXY_CONSUMER":
        receiver = ProxyReceiver(proxy, cluster, topic, group_id)
    else:
        receiver = NativeReceiver(cluster, topic, group_id)
    return Prober(cluster, topic, spec.probe, instance_id, sender, receiver)
