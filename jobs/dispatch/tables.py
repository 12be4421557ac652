"""The dispatcher job's Delta table, `dispatch_stats`, declared once (`DISPATCH_STATS`); the
job appends to it with `jobs.runtime.delta.append_once`. docs/dispatch.md quotes the schema.

One row per micro-batch, topic, partition and window (``extension.dispatch.
stats_window_seconds``, 60 s by default, of wall-clock dispatch time). A window's totals are the
SUM of its rows over batches; its latency quantiles come from merging the sketches
(``kll_merge_agg_double``).

==================================  =========  ===============================================
column                              type       meaning
==================================  =========  ===============================================
job_group_id, cluster               string     the JobGroup and its cluster
source_topic                        string     the JobGroup's topic
topic                               string     the topic these records were read from
tier                                string     main | retry-1, retry-2, ... (by delay) | resq
                                               | dlq (a redrive)
batch_id, batch_time                long, ts   the query's micro-batch and when it was written
partition                           int        partition of `topic`
window_start, window_end            timestamp  [start, end) of the dispatch-time window
records, value_bytes                long       records read, and their value bytes
first_offset, last_offset           long       offsets of the batch's range
redelivered                         long       records of a batch that a crash cut short and
                                               that was dispatched again (at-least-once)
attempts                            long       gRPC calls made (in-memory retries included)
committed                           long       ended: the service answered OK
skipped                             long       ended: ALREADY_EXISTS or the Skip trailer
retried                             long       ended: written (and acknowledged) to a retry tier
dlq                                 long       ended: written to the DLQ
resq                                long       ended: written to the resilience queue
in_memory_retries                   long       calls retried in memory (UNAVAILABLE,
                                               INTERNAL, ... or a RETRY/DLQ with nowhere to go)
timeouts                            long       calls past their deadline (DEADLINE_EXCEEDED, or
                                               UNAVAILABLE past the deadline)
hol_rerouted                        long       records cancelled as head-of-line blocking and
                                               written to the resq or a tier (also counted in
                                               resq / retried)
produce_retries                     long       failed writes to a retry/DLQ/resq topic, retried
undecodable                         long       records of a retry/DLQ/resq topic whose key is no
                                               DLQMetadata (dispatched as original records)
latency_p50_ms/_p95_ms/_p99_ms      double     RPC latency of the calls, from the sketch
latency_kll_sketch                  binary     DataSketches KLL doubles sketch of those latencies
peak_inflight                       int        the most calls in flight at once in the task
inflight_limit                      int        the inflight cap at the end (adaptive: its value)
rate_limited_ms                     double     time records waited for messages/bytes limits
==================================  =========  ===============================================

Each dispatch of a batch is recorded once: the append carries Delta's idempotent-write marker
(txnAppId = the query's id, txnVersion = the batch id). A batch that a crash cut short is
dispatched again on restart, and that dispatch is recorded too, under a marker of its own (the
query's id and the application's), with `redelivered` = its records: rows of the cut-short
attempt, if it wrote any before the crash, stay beside them.
"""

from __future__ import annotations

from pyspark.sql.types import (
    BinaryType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from jobs.dispatch.spec import DispatchSpec
from jobs.runtime.delta import DeltaTableSpec, located

__all__ = ["DISPATCH_STATS", "STATS_SCHEMA", "locations"]

COUNTS = (
    "records",
    "value_bytes",
    "redelivered",
    "attempts",
    "committed",
    "skipped",
    "retried",
    "dlq",
    "resq",
    "in_memory_retries",
    "timeouts",
    "hol_rerouted",
    "produce_retries",
    "undecodable",
)


def _fields(*specs: tuple[str, object]) -> list[StructField]:
    return [StructField(name, kind, True) for name, kind in specs]  # type: ignore[arg-type]


STATS_SCHEMA = StructType(
    _fields(
        ("job_group_id", StringType()),
        ("cluster", StringType()),
        ("source_topic", StringType()),
        ("topic", StringType()),
        ("tier", StringType()),
        ("batch_id", LongType()),
        ("batch_time", TimestampType()),
        ("partition", IntegerType()),
        ("window_start", TimestampType()),
        ("window_end", TimestampType()),
        ("first_offset", LongType()),
        ("last_offset", LongType()),
        *[(name, LongType()) for name in COUNTS],
        ("latency_p50_ms", DoubleType()),
        ("latency_p95_ms", DoubleType()),
        ("latency_p99_ms", DoubleType()),
        ("latency_kll_sketch", BinaryType()),
        ("peak_inflight", IntegerType()),
        ("inflight_limit", IntegerType()),
        ("rate_limited_ms", DoubleType()),
    )
)


DISPATCH_STATS = DeltaTableSpec(
    name="dispatch_stats",
    description="Kafka to gRPC dispatch: outcomes, latency and flow control per batch, "
    "topic, partition and window",
    schema=STATS_SCHEMA,
)


def locations(spec: DispatchSpec) -> list[tuple[DeltaTableSpec, str]]:
    """The dispatcher's table and where the JobGroup puts it."""
    return located([DISPATCH_STATS], spec.output)
