"""The Python face of the JVM dispatcher (`jvm/src/main/java/dev/uatu/dispatch/`, compiled into
build/uatu-jvm.jar): the configuration the tasks get, the call that dispatches a micro-batch's
ranges, and the few helpers the job and the tests need. See that package's `Dispatch` and
`PartitionRun` for what a task does with a range.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from py4j.protocol import Py4JJavaError
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.classic.dataframe import DataFrame as ClassicDataFrame

from core.errors import ConfigError
from jobs.dispatch.routing import HOL_MIN_ACKED, STATUS_CODES, TRAILER_CODES
from jobs.dispatch.spec import DispatchSpec
from jobs.runtime.kafka_source import range_consumer_config
from jobs.runtime.py4j import java_list, java_map, jvm_package

SOURCE_FORMAT = "dev.uatu.dispatch.DueRangeSource"
PACKAGE = "dev.uatu.dispatch"


def consumer_config(spec: DispatchSpec) -> dict[str, str]:
    """The Java consumer that reads the ranges (and, on the driver, plans them)."""
    return range_consumer_config(spec.source.cluster, read_committed=spec.source.read_committed)


BATCH_BYTES = 256 << 10


def producer_config(spec: DispatchSpec, max_message_bytes: int | None = None) -> dict[str, str]:
    """The producer of the retry, DLQ and resq topics: acks=all, idempotent, and a delivery
    timeout after which the dispatcher itself sends again (retried until acknowledged).

    `max_message_bytes` is the smallest limit of those topics: batches stay under half of it.
    A batch the broker refuses as too large is split by the producer into batches of
    `batch.size`; when that is not smaller than the limit, it splits the same batch again and
    again until its network thread dies of a stack overflow and every later write hangs
    (KAFKA-8202, KAFKA-8350)."""
    batch = BATCH_BYTES if max_message_bytes is None else min(BATCH_BYTES, max_message_bytes // 2)
    return {
        "linger.ms": "5",
        "batch.size": str(batch),
        "delivery.timeout.ms": "120000",
        **spec.source.cluster.java_client_config(),
        "acks": "all",
        "enable.idempotence": "true",
    }


def config_json(
    spec: DispatchSpec,
    share: float = 1.0,
    max_message_bytes: int | None = None,
) -> str:
    """The DispatchConfig of `spec` for the JVM: `share` is this application's executors' part
    of the group's flow control (1.0 for one executor JVM); `max_message_bytes` as in
    `producer_config`."""
    flow, resq = spec.flow, spec.resq_flow
    return json.dumps(
        {
            "job_group_id": spec.job_group_id,
            "cluster": spec.source.cluster.name,
            "consumer_group": spec.source.consumer_group,
            "main_topic": spec.source.topic,
            "procedure": spec.procedure,
            "target": spec.target,
            "rpc_timeout_ms": spec.rpc_timeout_ms,
            "rpc_timeout_limit_ms": spec.rpc_timeout_limit_ms,
            "max_rpc_timeouts": spec.routes.max_rpc_timeouts,
            "dlq_topic": spec.routes.dlq_topic,
            "tiers": [
                {"topic": t.topic, "delay_ms": t.delay_ms, "max_retry_count": t.max_retry_count}
                for t in spec.routes.tiers
            ],
            "resq_topic": spec.routes.resq_topic,
            "messages_per_sec": flow.messages_per_sec * share,
            "bytes_per_sec": flow.bytes_per_sec * share,
            "max_inflight": _share_of(flow.max_inflight, share),
            "resq_own_flow": resq is not None,
            "resq_messages_per_sec": resq.messages_per_sec * share if resq else 0,
            "resq_bytes_per_sec": resq.bytes_per_sec * share if resq else 0,
            "resq_max_inflight": _share_of(resq.max_inflight, share) if resq else 0,
            "adaptive_max_inflight": spec.adaptive_max_inflight,
            "hol_grace_ms": spec.hol_grace_ms,
            "hol_min_acked": HOL_MIN_ACKED,
            "stats_window_ms": spec.stats_window_seconds * 1000,
            "channels": spec.channels,
            "callback_threads": spec.callback_threads,
            "consumer_config": consumer_config(spec),
            "producer_config": producer_config(spec, max_message_bytes),
            "status_codes": {name: code.value for name, code in STATUS_CODES.items()},
            "trailer_codes": {name: code.value for name, code in TRAILER_CODES.items()},
        },
        sort_keys=True,
    )


def _share_of(limit: int, share: float) -> int:
    return 0 if limit <= 0 else max(1, round(limit * share))


def source_options(spec: DispatchSpec, topic: str, delay_ms: int) -> dict[str, str]:
    """Options of the due-range source for one topic (starting/ending offsets come apart)."""
    options = {f"kafka.{k}": v for k, v in consumer_config(spec).items()}
    options.update({"topic": topic, "delayMs": str(delay_ms)})
    if spec.max_records_per_batch:
        options["maxRecordsPerBatch"] = str(spec.max_records_per_batch)
    return options


def offsets_json(topic: str, offsets: Mapping[int, int]) -> str:
    return json.dumps({topic: {str(p): o for p, o in sorted(offsets.items())}})


def dispatch(
    spark: SparkSession, ranges: Sequence[tuple[str, int, int, int]], config: str
) -> DataFrame:
    """Dispatch each (topic, partition, from, until) range in its own Spark task, now, once
    -> summary rows (one per task and stats window) as a local frame."""
    jvm = _jvm(spark)
    java_range = jvm.Range  # one lookup for all the ranges
    java_ranges = java_list(spark, (java_range(*r) for r in ranges))
    return ClassicDataFrame(jvm.Dispatch.dispatch(spark._jsparkSession, java_ranges, config), spark)


def summary_rows(
    spark: SparkSession, ranges: Sequence[tuple[str, int, int, int]], config: str
) -> list[dict[str, Any]]:
    """`dispatch` run once (its one Spark job) -> its summary rows, as dicts: few, one per
    task and stats window."""
    return [row.asDict() for row in dispatch(spark, ranges, config).collect()]


# How long the warm-up's throwaway channel waits for its refused connection.
_WARM_UP_TIMEOUT_MS = 2000


def warm_up_clients(spark: SparkSession) -> None:
    """Build and close a throwaway gRPC channel and Kafka producer in the driver's JVM
    (`GroupRuntime.warmUp`), so that the first groups' `check_clients` do not pay for the
    clients' cold classes. Opens no group's runtime."""
    _jvm(spark).Dispatch.warmUp(_WARM_UP_TIMEOUT_MS)


def check_clients(spark: SparkSession, config: str, cluster: str) -> bool:
    """Build the gRPC channels and the producer on the driver and connect the channels; a
    setting a client refuses is a ConfigError before any record moves. False when the service
    did not accept a connection within 10 s (the job starts anyway and keeps trying)."""
    try:
        return bool(_jvm(spark).Dispatch.check(config))
    except Py4JJavaError as e:
        cause = e.java_exception
        while cause.getCause() is not None:
            cause = cause.getCause()
        raise ConfigError(
            f"clusters.yaml: clusters.{cluster}.properties or the JobGroup's uri",
            f"the dispatcher's Kafka or gRPC client refuses it: {cause.getMessage()}",
        ) from None


def end_offsets(spark: SparkSession, spec: DispatchSpec, topic: str) -> dict[int, int]:
    """The end offsets of `topic` now, as the dispatcher's consumer sees them (the last stable
    offsets with read_committed)."""
    ends = _jvm(spark).Dispatch.endOffsets(java_map(spark, consumer_config(spec)), topic)
    return {int(p): int(o) for p, o in dict(ends).items()}


def close(spark: SparkSession, job_group_id: str) -> None:
    """Close the group's dispatch clients in this (driver) JVM at the end of its run; the other
    groups a worker application runs in the same JVM keep theirs."""
    _jvm(spark).Dispatch.close(job_group_id)


def open_groups(spark: SparkSession) -> list[str]:
    """The JobGroups whose dispatch clients are open in this JVM, sorted."""
    return list(_jvm(spark).Dispatch.openGroups())


def _jvm(spark: SparkSession):  # a py4j package view
    return jvm_package(spark, PACKAGE, "the dispatcher")
