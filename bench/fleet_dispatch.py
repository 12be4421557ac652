"""The worker-pool bench's dispatchers (bench/fleet_pool.py, `--dispatchers`): RPC dispatcher
JobGroups, each of its own fleet topic, to the Go sink of devservices/grpc_sink.py (which
answers every call OK at once), and their truth.

Truth: a dispatcher is at least once (jobs/dispatch/tables.py). So for each group, from its
`dispatch_stats` rows of its main tier: every offset the producer sent to each partition is in
a dispatched range (no gap), every record read ended OK at the sink (`committed`), and the
records read are at least those sent and at most those plus the ones declared redelivered
(a batch cut short by a crash is recorded again with `redelivered` = its records, beside the
rows its first attempt wrote before the crash, if any). The sink's call count is at least the
records sent.

Nothing here asserts a duration: the figures go into the bench's result.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from google.protobuf import json_format
from uber.data.kafka.datatransfer.job_group_pb2 import JobGroup

from bench._common import say
from devservices.grpc_sink import GrpcSink
from testing.delta_files import read_append_only
from testing.jobgroups import minimal_group

# The dispatchers' in-flight calls each, the dispatcher bench's default.
INFLIGHT = 64


def groups(topics: Iterable[str], sink: GrpcSink, trigger_seconds: int) -> list[JobGroup]:
    """The dispatcher group of each topic (`d-<topic>`, a consumer group of its own, from the
    earliest offset) to `sink`."""
    return [dispatcher_group(topic, sink, trigger_seconds) for topic in topics]


def dispatcher_group(topic: str, sink: GrpcSink, trigger_seconds: int) -> JobGroup:
    data = minimal_group(
        "dispatch",
        f"d-{topic}",
        kafkaConsumerTaskGroup={
            "topic": topic,
            "consumerGroup": f"pool-d-{topic}",
            "autoOffsetResetPolicy": "AUTO_OFFSET_RESET_POLICY_EARLIEST",
        },
        rpcDispatcherTaskGroup={"uri": f"dns:///{sink.address}", "rpcTimeoutMs": 10_000},
        flowControl={"maxInflightMessages": INFLIGHT},
    )
    data["extension"] = {
        "@type": "type.googleapis.com/uatu.v1.JobOptions",
        "trigger": {"intervalSeconds": trigger_seconds},
    }
    return json_format.ParseDict(data, JobGroup())


def sent_to(topics: Iterable[str], sent: Mapping[tuple[str, int, int], int]) -> dict:
    """topic -> partition -> records sent, for `topics`, from the producer's truth (records
    per (topic, partition, window)) (pure)."""
    totals: dict[str, dict[int, int]] = {topic: {} for topic in topics}
    for (topic, partition, _), n in sent.items():
        if topic in totals:
            totals[topic][partition] = totals[topic].get(partition, 0) + n
    return totals


def dispatched(rows: Iterable[Mapping[str, Any]], group_id: str, topic: str) -> dict[str, Any]:
    """One group's main-tier totals from `dispatch_stats` rows: records, redelivered,
    committed, and per partition the offset ranges dispatched (pure)."""
    totals = {"records": 0, "redelivered": 0, "committed": 0}
    ranges: dict[int, list[tuple[int, int]]] = {}
    for row in rows:
        if row["job_group_id"] != group_id or row["topic"] != topic or row["tier"] != "main":
            continue
        for name in totals:
            totals[name] += row[name] or 0
        ranges.setdefault(row["partition"], []).append((row["first_offset"], row["last_offset"]))
    return {**totals, "ranges": ranges}


def gaps(ranges: list[tuple[int, int]], sent: int) -> int:
    """Offsets in [0, sent) that no (first, last) range covers (pure)."""
    covered: set[int] = set()
    for first, last in ranges:
        covered.update(range(first, min(last, sent - 1) + 1))
    return sent - len(covered & set(range(sent)))


def once_or_redelivered(got: Mapping[str, Any], sent: int) -> bool:
    """Whether a group's totals (`dispatched`) account for `sent` records: each read once, or
    again only as declared redelivered, and every one read ended OK (pure)."""
    within = sent <= got["records"] <= sent + got["redelivered"]
    return within and got["committed"] == got["records"]


def check(
    warehouse: Path,
    sink: GrpcSink,
    sent: Mapping[str, Mapping[int, int]],
    deadline_s: float = 600,
) -> dict[str, Any]:
    """Wait (to `deadline_s`) until every group of `sent` (topic -> partition -> records the
    producer sent) has dispatched every offset, then compare (the module docstring)."""
    path = warehouse / "dispatch_stats"

    def results() -> dict[str, dict[str, Any]]:
        rows = read_append_only(path) if (path / "_delta_log").is_dir() else []
        return {topic: dispatched(rows, f"d-{topic}", topic) for topic in sent}

    def holes(got: Mapping[str, Any], partitions: Mapping[int, int]) -> int:
        return sum(gaps(got["ranges"].get(p, []), n) for p, n in partitions.items())

    started = time.monotonic()
    seen = results()
    while any(holes(seen[t], sent[t]) for t in sent) and time.monotonic() - started < deadline_s:
        time.sleep(5)
        seen = results()
    wrong = 0
    for topic, partitions in sent.items():
        got, missing = seen[topic], holes(seen[topic], partitions)
        if missing or not once_or_redelivered(got, sum(partitions.values())):
            say(
                f"dispatcher d-{topic}: {got['records']} read, {got['redelivered']} redelivered, "
                f"{got['committed']} OK, {missing} offsets never dispatched; "
                f"sent {dict(partitions)}"
            )
            wrong += 1
    return {
        "dispatchers_checked": len(sent),
        "dispatchers_not_exact": wrong,
        "dispatched_records": sum(seen[t]["records"] for t in sent),
        "redelivered": sum(seen[t]["redelivered"] for t in sent),
        "sink_calls": sink.stats()["calls"],
    }
