"""The probes' book-keeping: what was sent, acknowledged, failed and consumed back, and when a
probe's outcome is final. Pure Python, no clients, no Spark; safe to call from the producer
thread, the consumer thread and the micro-batch at once.

A probe is one record sent to one partition of the probe topic, attributed to the broker that
partition is meant to be led by (its preferred leader) and that broker's zone. Its outcome is
final, and the ledger hands it out once, when it:

* failed to produce (the client reported an error, or no acknowledgement came within the
  ack SLA), or
* was acknowledged and consumed back, or
* was acknowledged and not consumed back within the round-trip SLA of its send time (lost).

Probes are grouped by (window of the send time, broker). A group is handed out as a whole once
every probe in it is final, so a window's row is written once and complete. A copy of a probe
consumed after its group was handed out is counted in `late_copies` (and logged by the job),
never silently dropped.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ProbeTarget:
    """Where a probe goes: a partition of the probe topic, its broker and that broker's zone."""

    partition: int
    broker: int
    zone: str | None


@dataclass
class Probe:
    seq: int
    target: ProbeTarget
    sent_ms: int
    acked_ms: int | None = None
    error: str | None = None
    received_ms: int | None = None  # first copy
    copies: int = 0

    def outcome_known(self, now_ms: int, ack_sla_ms: int, roundtrip_sla_ms: int) -> bool:
        if self.error is not None or self.copies > 0:
            return True
        if self.acked_ms is None:
            return now_ms >= self.sent_ms + ack_sla_ms
        return now_ms >= self.sent_ms + roundtrip_sla_ms

    def row(self, window_ms: int) -> dict[str, Any]:
        """One `PROBE_OUTCOME_DDL` row; a probe never acknowledged counts as a failed produce."""
        acked = self.acked_ms if self.error is None else None
        produced = acked is not None
        start = self.sent_ms - self.sent_ms % window_ms
        return {
            "window_start_ms": start,
            "window_end_ms": start + window_ms,
            "broker": self.target.broker,
            "zone": self.target.zone,
            "partition": self.target.partition,
            "seq": self.seq,
            "sent_ms": self.sent_ms,
            "produced": produced,
            "error": self.error
            if self.error is not None or produced
            else "no acknowledgement within the ack SLA",
            "ack_latency_ms": float(acked - self.sent_ms) if acked is not None else None,
            "copies": self.copies,
            "e2e_latency_ms": (
                float(self.received_ms - self.sent_ms) if self.received_ms is not None else None
            ),
        }


@dataclass
class ProbeLedger:
    """Every probe of one prober (`instance_id`) whose outcome has not been handed out yet."""

    instance_id: str
    window_ms: int
    ack_sla_ms: int
    roundtrip_sla_ms: int
    late_copies: int = 0
    foreign_copies: int = 0  # probes of other probers sharing the topic, ignored
    _next_seq: int = 0
    _open: dict[int, Probe] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def send(self, target: ProbeTarget, sent_ms: int) -> int:
        """Register a probe about to be sent; returns its sequence number."""
        with self._lock:
            seq = self._next_seq
            self._next_seq += 1
            self._open[seq] = Probe(seq, target, sent_ms)
            return seq

    def acked(self, seq: int, acked_ms: int) -> None:
        with self._lock:
            probe = self._open.get(seq)
            if probe is not None and probe.error is None:
                probe.acked_ms = acked_ms

    def failed(self, seq: int, error: str) -> None:
        with self._lock:
            probe = self._open.get(seq)
            if probe is not None and probe.acked_ms is None:
                probe.error = error

    def received(self, instance_id: str, seq: int, received_ms: int) -> None:
        """A probe read back from the topic (any prober's: others' are only counted)."""
        with self._lock:
            if instance_id != self.instance_id:
                self.foreign_copies += 1
                return
            probe = self._open.get(seq)
            if probe is None:
                self.late_copies += 1
                return
            if probe.copies == 0:
                probe.received_ms = received_ms
            probe.copies += 1

    def take_final(self, now_ms: int) -> list[dict[str, Any]]:
        """Rows of every (window, broker) group whose probes are all final; they leave the
        ledger. A group is only final once its window has ended."""
        with self._lock:
            groups: dict[tuple[int, int], list[Probe]] = {}
            for probe in self._open.values():
                key = (probe.sent_ms - probe.sent_ms % self.window_ms, probe.target.broker)
                groups.setdefault(key, []).append(probe)
            rows = []
            for (window_start, _), probes in sorted(groups.items()):
                window_over = now_ms >= window_start + self.window_ms
                if window_over and all(
                    p.outcome_known(now_ms, self.ack_sla_ms, self.roundtrip_sla_ms) for p in probes
                ):
                    for probe in probes:
                        rows.append(probe.row(self.window_ms))
                        del self._open[probe.seq]
            return rows

    def open_count(self) -> int:
        with self._lock:
            return len(self._open)
