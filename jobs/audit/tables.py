"""The audit job's Delta tables and the exactly-once write of one micro-batch.

`audit_counts` (one row per JobGroup, cluster, topic, partition, audit_type, interval and
window):

======================  =========  =====================================================
column                  type       meaning
======================  =========  =====================================================
job_group_id            string     the audit JobGroup that wrote the row (the table is
                                   partitioned by it: many groups share the table)
cluster, topic          string     the audited cluster and topic (labels)
partition               int        Kafka partition
audit_type              string     AUDIT_TYPE_EXACT_UNIQ or AUDIT_TYPE_APPROX_UNIQ
audit_interval_seconds  int        window length (audit_interval_in_seconds)
window_start/_end       timestamp  epoch-aligned tumbling event-time window [start, end)
message_count           bigint     records placed in the window
unique_count            bigint     exact distinct dedupe keys (EXACT) or HLL estimate
duplicate_count         bigint     message_count - unique_count (EXACT; null for APPROX)
bytes                   bigint     key + value bytes
no_event_time_count     bigint     records without a usable event time (placed by the
                                   Kafka timestamp, else by audit time; still counted)
late_count              bigint     records that arrived after window end + lateness
latency_p50/p95/p99_ms  double     audit time - event time, from the KLL sketch
hll_sketch              binary     DataSketches HLL_8 of the dedupe keys (hll_union)
latency_kll_sketch      binary     DataSketches KLL doubles of latency (kll_merge_agg_double);
                                   null when no record had a usable event time
updated_at              timestamp  audit time of the last batch that touched the row
unique_estimated_count  bigint     EXACT: records whose uniqueness came from the HLL
                                   sketch because the window's keys had expired
                                   (key_retention_seconds); non-zero = unique_count is
                                   partly an estimate. 0 or null otherwise
======================  =========  =====================================================

Exact audits keep their distinct keys under the checkpoint, not in a table
(`jobs/audit/fold.py`), each window's until its end is key_retention_seconds behind the
partition's watermark. A later record of the window adds to message_count as any other; the
uniqueness of a batch's such records is the change of the window's HLL estimate when their
sketch is unioned in, kept within [0, their count]:
`est(union(t.hll, s.hll)) - est(union(t.hll, s.exact_hll_sketch))`, the second sketch being
the window's before those records (`transforms.combine_partials`), so a MERGE of several
batches gives what consecutive MERGEs of them give (unless the bounds cut a batch's change).
duplicate_count stays message_count - unique_count.

Exactly-once: the MERGE of batch N carries Delta's idempotent-write marker (txnAppId = the
streaming query id from the checkpoint, txnVersion = N; `jobs.runtime.delta`), so a batch
replayed after a crash is skipped by a table that already committed it. New keys are computed
against the keys of batches before N only, so a replay recomputes the same unique increments
even when the keys of batch N were written and the counts MERGE was not.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
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

from jobs.audit.spec import AuditSpec
from jobs.audit.transforms import WINDOW_KEY, with_estimate_columns
from jobs.runtime.delta import (
    DeltaTableSpec,
    Writer,
    append_once,
    kll_quantiles,
    located,
    merge_once,
)

# The first part of the audit query's idempotent-write id (`StreamingJob.write_id`), here
# because a pack reads the marker of a query it does not run (jobs/audit/packs.py). Never
# change it: a batch replayed after the change would carry a new id and be written twice.
WRITE_ID_PREFIX = "uatu-audit"

AUDIT_COUNTS = DeltaTableSpec(
    name="audit_counts",
    description="Kafka audit: counts, unique counts and latency per partition and window",
    keys=tuple(WINDOW_KEY),
    partition_by=("job_group_id",),
    writer_column="job_group_id",
    schema=StructType(
        [
            StructField("job_group_id", StringType(), False),
            StructField("cluster", StringType(), False),
            StructField("topic", StringType(), False),
            StructField("partition", IntegerType(), False),
            StructField("audit_type", StringType(), False),
            StructField("audit_interval_seconds", IntegerType(), False),
            StructField("window_start", TimestampType(), False),
            StructField("window_end", TimestampType(), False),
            StructField("message_count", LongType(), False),
            StructField("unique_count", LongType(), False),
            StructField("duplicate_count", LongType(), True),
            StructField("bytes", LongType(), False),
            StructField("no_event_time_count", LongType(), False),
            StructField("late_count", LongType(), False),
            StructField("latency_p50_ms", DoubleType(), True),
            StructField("latency_p95_ms", DoubleType(), True),
            StructField("latency_p99_ms", DoubleType(), True),
            StructField("hll_sketch", BinaryType(), False),
            StructField("latency_kll_sketch", BinaryType(), True),
            StructField("updated_at", TimestampType(), False),
            StructField("unique_estimated_count", LongType(), True),
        ]
    ),
)


def locations(spec: AuditSpec) -> list[tuple[DeltaTableSpec, str]]:
    """The audit job's table and where the JobGroup puts it."""
    return located([AUDIT_COUNTS], spec.output)


_EXACT = "'AUDIT_TYPE_EXACT_UNIQ'"
_MERGED_HLL = "hll_union(t.hll_sketch, s.hll_sketch, true)"
_MERGED_KLL = (
    "CASE WHEN t.latency_kll_sketch IS NULL THEN s.latency_kll_sketch "
    "WHEN s.latency_kll_sketch IS NULL THEN t.latency_kll_sketch "
    "ELSE kll_sketch_merge_double(t.latency_kll_sketch, s.latency_kll_sketch) END"
)
_LATENCY_QUANTILES = {"latency_p50_ms": 0.5, "latency_p95_ms": 0.95, "latency_p99_ms": 0.99}


def _unique(total: str, hll: str) -> str:
    return f"CASE WHEN s.audit_type = {_EXACT} THEN {total} ELSE hll_sketch_estimate({hll}) END"


def _estimated(after: str, before: str) -> str:
    """The unique increment of the partial's records whose window keys had expired: the change
    of the window's HLL estimate from `before` to `after`, kept within [0, their count]."""
    change = f"hll_sketch_estimate({after}) - {before}"
    return (
        "CASE WHEN s.unique_estimated_count > 0 THEN "
        f"greatest(0, least(s.unique_estimated_count, {change})) ELSE 0 END"
    )


# The window before the estimated records: the table's sketch plus the batches' exact part.
_BEFORE_MATCH = (
    "CASE WHEN s.exact_hll_sketch IS NULL THEN hll_sketch_estimate(t.hll_sketch) "
    "ELSE hll_sketch_estimate(hll_union(t.hll_sketch, s.exact_hll_sketch, true)) END"
)
_UNIQUE_MATCH = f"t.unique_count + s.new_unique_count + {_estimated(_MERGED_HLL, _BEFORE_MATCH)}"
_UNIQUE_INSERT = "s.new_unique_count + " + _estimated(
    "s.hll_sketch", "coalesce(hll_sketch_estimate(s.exact_hll_sketch), 0)"
)


def _on_match() -> dict[str, str | Column]:
    """An existing window row (t) plus the batch's partial (s)."""
    return {
        "window_end": "s.window_end",
        "message_count": "t.message_count + s.message_count",
        "unique_count": _unique(_UNIQUE_MATCH, _MERGED_HLL),
        "duplicate_count": (
            f"CASE WHEN s.audit_type = {_EXACT} THEN (t.message_count + s.message_count) "
            f"- ({_UNIQUE_MATCH}) END"
        ),
        "bytes": "t.bytes + s.bytes",
        "no_event_time_count": "t.no_event_time_count + s.no_event_time_count",
        "late_count": "t.late_count + s.late_count",
        **kll_quantiles(F.expr(_MERGED_KLL), "double", _LATENCY_QUANTILES),
        "hll_sketch": _MERGED_HLL,
        "latency_kll_sketch": _MERGED_KLL,
        "updated_at": "s.updated_at",
        "unique_estimated_count": (
            "coalesce(t.unique_estimated_count, 0) + s.unique_estimated_count"
        ),
    }


def _on_insert() -> dict[str, str | Column]:
    """A window the table has no row for yet: the batch's partial (s) as it is."""
    return {
        **{c: f"s.{c}" for c in WINDOW_KEY},
        "window_end": "s.window_end",
        "message_count": "s.message_count",
        "unique_count": _unique(_UNIQUE_INSERT, "s.hll_sketch"),
        "duplicate_count": (
            f"CASE WHEN s.audit_type = {_EXACT} THEN s.message_count - ({_UNIQUE_INSERT}) END"
        ),
        "bytes": "s.bytes",
        "no_event_time_count": "s.no_event_time_count",
        "late_count": "s.late_count",
        **kll_quantiles(F.col("s.latency_kll_sketch"), "double", _LATENCY_QUANTILES),
        "hll_sketch": "s.hll_sketch",
        "latency_kll_sketch": "s.latency_kll_sketch",
        "updated_at": "s.updated_at",
        "unique_estimated_count": "s.unique_estimated_count",
    }


Routes = tuple[tuple[str, str], ...]  # a pack's (topic, JobGroup id), `AuditSpec.routes`


def routed(partials: DataFrame, routes: Routes) -> DataFrame:
    """A pack's partials, each row labelled with the JobGroup of its topic; one group's
    partials (no routes) as they are (the write labels them). A topic without a route gets
    no group, which the table's NOT NULL refuses: the write fails rather than lose it."""
    if not routes:
        return partials
    groups = F.create_map(*(F.lit(x) for route in routes for x in route))
    return partials.withColumn("job_group_id", groups[F.col("topic")])


def _writer(job_group_id: str, routes: Routes) -> Writer:
    return tuple(sorted({group for _, group in routes})) if routes else job_group_id


def writers(job_group_id: str, routes: Routes) -> tuple[str, ...]:
    """The JobGroups whose rows a query's writes touch: a pack's members, else its own."""
    writer = _writer(job_group_id, routes)
    return (writer,) if isinstance(writer, str) else tuple(writer)


def merge_counts(
    partials: DataFrame,
    counts_path: str,
    app_id: str,
    batch_id: int,
    job_group_id: str,
    routes: Routes = (),
) -> None:
    """Fold one batch's partials (with new_unique_count) into `job_group_id`'s rows of
    audit_counts (a pack's: each topic's group's, by `routes`), once per batch: counts add
    up, HLL sketches union, KLL sketches merge and the quantiles are re-read."""
    merge_once(
        with_estimate_columns(partials).transform(routed, routes),
        AUDIT_COUNTS,
        counts_path,
        app_id,
        batch_id,
        update=_on_match(),
        insert=_on_insert(),
        writer=_writer(job_group_id, routes),
    )


def insert_counts(
    partials: DataFrame,
    counts_path: str,
    app_id: str,
    batch_id: int,
    job_group_id: str,
    routes: Routes = (),
) -> None:
    """What `merge_counts` writes into a table without rows (every partial is an insert), as
    a plain append: a MERGE's matching pass costs more than the write itself, most of all in
    a cold JVM (the first batch of a run). Same idempotent-write marker."""
    inserted = (
        with_estimate_columns(partials)
        .transform(routed, routes)
        .alias("s")
        .select(
            *(
                (F.expr(value) if isinstance(value, str) else value).alias(column)
                for column, value in _on_insert().items()
            ),
            *([F.col("s.job_group_id")] if routes else []),
        )
    )
    append_once(
        inserted, AUDIT_COUNTS, counts_path, app_id, batch_id, writer=_writer(job_group_id, routes)
    )
