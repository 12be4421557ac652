"""Pure steps of the load generators: the JVM tasks' rows -> `loadgen_stats` rows, and the
one-line-per-interval progress both jobs print, in the terms of Kafka's perf tools.

`kafka-producer-perf-test` prints "N records sent, R records/sec (M MB/sec), A ms avg latency,
X ms max latency." per window and the same with 50th/95th/99th/99.9th percentiles at the end
(latency = send to ack); LOAD_GEN_PRODUCE prints the same per micro-batch and at the end, plus
what it injected. `kafka-consumer-perf-test` prints MB, MB.sec, nMsg, nMsg.sec and the fetch
figures; LOAD_GEN_CONSUME prints those per micro-batch, plus end-to-end latency, lost and
duplicated sequence numbers and fetch-to-batch time. MB is 2^20 bytes, as the tools count.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from datasketches import kll_doubles_sketch

MB = float(1 << 20)


def _utc(ms: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).replace(tzinfo=None)


def stats_rows(
    fold_rows: Iterable[Mapping],
    *,
    labels: tuple[str, str, str],
    batch_id: int,
    batch_time_ms: int,
    window_seconds: int,
    folded_us: int,
) -> list[tuple]:
    """`loadgen_stats` rows (tables.STATS_SCHEMA order) from the fold's rows of one batch.

    `labels` are (job_group_id, cluster, topic); `folded_us` is when the fold's rows reached
    the driver (the end of fetch-to-batch).
    """
    window_ms = window_seconds * 1000
    out = []
    for r in sorted(
        fold_rows, key=lambda r: (r["partition"], r["window_start_ms"], r["generator"] or "")
    ):
        missing = r["missing"] or []
        out.append(
            (
                *labels,
                batch_id,
                _utc(batch_time_ms),
                r["partition"],
                _utc(r["window_start_ms"]),
                _utc(r["window_start_ms"] + window_ms),
                r["generator"],
                r["records"],
                r["bytes"],
                r["records"] / window_seconds,
                r["bytes"] / MB / window_seconds,
                r["first_seq"],
                r["last_seq"],
                r["duplicates"],
                r["lost"],
                [(missing[i], missing[i + 1]) for i in range(0, len(missing), 2)],
                list(r["duplicate_seqs"] or []),
                r["latency_ms_p50"],
                r["latency_ms_p95"],
                r["latency_ms_p99"],
                r["latency_ms_p999"],
                r["latency_ms_max"],
                r["latency_ms_sketch"],
                max(0, (folded_us - r["first_fetch_us"]) // 1000),
            )
        )
    return out


@dataclass
class PendingStats:
    """The fold rows of the batches not yet in `loadgen_stats`, and the newest batch that is
    (-1: none). Saved under the checkpoint after every batch, so rows that a crash kept from
    the table are written by the next run (`to_json` / `from_json`)."""

    flushed_through: int = -1
    batches: list[dict] = field(default_factory=list)  # {batch_id, batch_time_ms, folded_us, rows}

    def add(self, batch_id: int, batch_time_ms: int, folded_us: int, rows: list[dict]) -> bool:
        """Keep a batch's rows; False (nothing kept) for a batch the table already has."""
        if batch_id <= self.flushed_through:
            return False
        self.batches.append(
            {
                "batch_id": batch_id,
                "batch_time_ms": batch_time_ms,
                "folded_us": folded_us,
                "rows": rows,
            }
        )
        return True

    @property
    def last_batch(self) -> int:
        return max((b["batch_id"] for b in self.batches), default=self.flushed_through)

    def table_rows(self, labels: tuple[str, str, str], window_seconds: int) -> list[tuple]:
        out: list[tuple] = []
        for b in self.batches:
            out += stats_rows(
                b["rows"],
                labels=labels,
                batch_id=b["batch_id"],
                batch_time_ms=b["batch_time_ms"],
                window_seconds=window_seconds,
                folded_us=b["folded_us"],
            )
        return out

    def flushed(self) -> None:
        self.flushed_through = self.last_batch
        self.batches = []

    def to_json(self) -> bytes:
        def encode(value: object) -> object:
            if isinstance(value, bytes | bytearray):
                return {"b64": base64.b64encode(value).decode()}
            return value

        batches = [
            {**b, "rows": [{k: encode(v) for k, v in r.items()} for r in b["rows"]]}
            for b in self.batches
        ]
        return json.dumps({"flushed_through": self.flushed_through, "batches": batches}).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> PendingStats:
        def decode(value: object) -> object:
            if isinstance(value, dict) and set(value) == {"b64"}:
                return base64.b64decode(value["b64"])
            return value

        data = json.loads(raw)
        batches = [
            {**b, "rows": [{k: decode(v) for k, v in r.items()} for r in b["rows"]]}
            for b in data["batches"]
        ]
        return cls(flushed_through=data["flushed_through"], batches=batches)


def merged_sketch(sketches: Iterable[bytes | bytearray | None]) -> kll_doubles_sketch | None:
    """One KLL doubles sketch from serialized ones (None when there are none)."""
    merged = None
    for raw in sketches:
        if raw is None:
            continue
        sketch = kll_doubles_sketch.deserialize(bytes(raw))
        if merged is None:
            merged = sketch
        else:
            merged.merge(sketch)
    return merged


def _quantiles(sketch: kll_doubles_sketch | None, ranks: Sequence[float]) -> list[float] | None:
    if sketch is None or sketch.is_empty():
        return None
    return [sketch.get_quantile(q) for q in ranks]


def consume_line(
    fold_rows: Sequence[Mapping],
    batch_id: int,
    interval_s: float,
    folded_us: int,
    batch_ms: int | None = None,
) -> str:
    """kafka-consumer-perf-test's detailed-stats columns for one micro-batch, plus latency,
    loss, duplicates, fetch-to-batch and (when given) the batch's own time, from the start of
    its foreachBatch to its rows written."""
    records = sum(r["records"] for r in fold_rows)
    nbytes = sum(r["bytes"] for r in fold_rows)
    interval_s = max(interval_s, 1e-3)
    line = (
        f"{_utc(folded_us // 1000):%Y-%m-%d %H:%M:%S.%f}"[:-3]
        + f", batch {batch_id}, {nbytes / MB:.4f} MB, {nbytes / MB / interval_s:.4f} MB.sec, "
        f"{records} nMsg, {records / interval_s:.1f} nMsg.sec"
    )
    if records:
        first = min(r["first_fetch_us"] for r in fold_rows)
        last = max(r["last_fetch_us"] for r in fold_rows)
        fetch_s = max((last - first) / 1e6, 1e-3)
        line += (
            f", fetch.time.ms {(last - first) // 1000}, fetch.MB.sec {nbytes / MB / fetch_s:.4f}, "
            f"fetch.nMsg.sec {records / fetch_s:.1f}"
        )
        latency = _quantiles(
            merged_sketch(r["latency_ms_sketch"] for r in fold_rows), (0.5, 0.95, 0.99, 0.999)
        )
        if latency is not None:
            line += ", latency ms p50 {:.1f} p95 {:.1f} p99 {:.1f} p999 {:.1f}".format(*latency)
        duplicates = sum(r["duplicates"] for r in fold_rows)
        lost = sum(r["lost"] for r in fold_rows)
        line += (
            f", lost {lost:+d}, duplicated {duplicates}, "
            f"fetch-to-batch ms {(folded_us - first) // 1000}"
        )
    if batch_ms is not None:
        line += f", batch.time.ms {batch_ms}"
    return line


@dataclass
class ProduceTotals:
    """What this process's producer tasks sent, for the final perf-tool line."""

    records: int = 0
    value_bytes: int = 0
    duplicates: int = 0
    late: int = 0
    untimed: int = 0
    acks: int = 0
    ack_ms_sum: float = 0.0
    ack_ms_max: float = 0.0
    first_send_us: int | None = None
    last_send_us: int | None = None
    # Serialized: a sketch object alive at interpreter exit makes nanobind print leak warnings.
    ack_sketch: bytes | None = None

    def add(self, rows: Sequence[Mapping]) -> None:
        for r in rows:
            if not r["records"]:
                continue
            self.records += r["records"]
            self.value_bytes += r["value_bytes"]
            self.duplicates += r["duplicates"]
            self.late += r["late"]
            self.untimed += r["untimed"]
            self.acks += r["acks"]
            self.ack_ms_sum += r["ack_ms_sum"]
            self.ack_ms_max = max(self.ack_ms_max, r["ack_ms_max"])
            first, last = r["first_send_us"], r["last_send_us"]
            self.first_send_us = (
                first if self.first_send_us is None else min(self.first_send_us, first)
            )
            self.last_send_us = last if self.last_send_us is None else max(self.last_send_us, last)
        sketch = merged_sketch([self.ack_sketch, *(r["ack_ms_sketch"] for r in rows)])
        self.ack_sketch = None if sketch is None else sketch.serialize()

    def summary(self) -> str:
        """ProducerPerformance's final line (the same words and order), over this process's
        sends, then what was injected."""
        span_s = 0.0
        if self.first_send_us is not None and self.last_send_us is not None:
            span_s = (self.last_send_us - self.first_send_us) / 1e6
        rate = self.records / span_s if span_s > 0 else 0.0
        avg = self.ack_ms_sum / self.acks if self.acks else 0.0
        q = _quantiles(merged_sketch([self.ack_sketch]), (0.5, 0.95, 0.99, 0.999)) or [0.0] * 4
        return (
            f"{self.records} records sent, {rate:.6f} records/sec "
            f"({rate * (self.value_bytes / self.records if self.records else 0) / MB:.2f} "
            f"MB/sec), {avg:.2f} ms avg latency, {self.ack_ms_max:.2f} ms max latency, "
            f"{round(q[0])} ms 50th, {round(q[1])} ms 95th, {round(q[2])} ms 99th, "
            f"{round(q[3])} ms 99.9th."
        )


def produce_line(rows: Sequence[Mapping], batch_id: int, interval_s: float) -> str:
    """ProducerPerformance's window line for one micro-batch, plus what it injected."""
    records = sum(r["records"] for r in rows)
    value_bytes = sum(r["value_bytes"] for r in rows)
    acks = sum(r["acks"] for r in rows)
    avg = sum(r["ack_ms_sum"] for r in rows) / acks if acks else 0.0
    worst = max((r["ack_ms_max"] for r in rows), default=0.0)
    interval_s = max(interval_s, 1e-3)
    return (
        f"{records} records sent, {records / interval_s:.1f} records/sec "
        f"({value_bytes / MB / interval_s:.2f} MB/sec), {avg:.1f} ms avg latency, "
        f"{worst:.1f} ms max latency. (batch {batch_id}: "
        f"{sum(r['duplicates'] for r in rows)} duplicates, {sum(r['late'] for r in rows)} late, "
        f"{sum(r['untimed'] for r in rows)} without event time)"
    )
