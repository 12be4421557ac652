"""The fleet bench's last phase: every fleet topic copied by one regex replication JobGroup.

By then the fleet's topics hold a fixed backlog (the producers have stopped). One
``./spark-submit.sh`` streaming KAFKA_REPLICATION selects them with ``extension.topics``
(source-prefix naming; clusters ``src`` and ``dst`` are both the bench's broker, so
``fleet.tNNNN`` is copied to ``src.fleet.tNNNN``, and the copies do not match the pattern).
It is sampled every 5 s (resident memory and CPU of its process tree) until every destination
partition holds as many records as its source, then stopped through its stop file. Then:

* every destination topic exists with its source's partition count and the ``retention.ms``
  the bench gave the sources (one of the configs MirrorMaker 2 syncs);
* every destination partition is read back: the provenance stamps (``uatu.src``,
  core/provenance.py) of its records must be exactly its source partition's offsets
  0, 1, ..., n-1, in that order: each record copied once, in order, none missing.

Nothing here asserts a duration: the figures go into the bench's result.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, OffsetSpec

from bench._common import BENCH_DIR, say, spark_submit_env, wait_for
from bench.process_usage import Usage
from core.paths import ROOT
from core.provenance import latest_stamp

SOURCE_ALIAS = "src"  # the source cluster's name: copies are "src.<topic>"
# A non-default topic config the sources get and their copies must carry.
SYNCED_CONFIG = ("retention.ms", "259200000")
Partition = tuple[str, int]


def replication_group(group_id: str, pattern: str, trigger: int) -> dict[str, Any]:
    return {
        "jobGroupId": group_id,
        "type": "JOB_TYPE_KAFKA_REPLICATION",
        "kafkaConsumerTaskGroup": {"cluster": SOURCE_ALIAS, "consumerGroup": f"{group_id}-cg"},
        "kafkaDispatcherTaskGroup": {"cluster": "dst"},
        "extension": {
            "@type": "type.googleapis.com/uatu.v1.JobOptions",
            "trigger": {"intervalSeconds": trigger},
            "topics": {"pattern": pattern},
            "replication": {"topicNaming": "TOPIC_NAMING_SOURCE_PREFIX"},
        },
    }


def end_offsets(admin: AdminClient, partitions: Sequence[Partition]) -> dict[Partition, int]:
    """The latest offset of each partition (-1 for a topic that does not exist yet)."""
    out: dict[Partition, int] = {}
    for start in range(0, len(partitions), 2000):
        chunk = partitions[start : start + 2000]
        futures = admin.list_offsets({TopicPartition(t, p): OffsetSpec.latest() for t, p in chunk})
        for tp, future in futures.items():
            try:
                out[(tp.topic, tp.partition)] = future.result().offset
            except KafkaException:  # not created yet: not copied yet
                out[(tp.topic, tp.partition)] = -1
    return out


def run_replication(
    workdir: Path,
    conf: Path,
    admin: AdminClient,
    bootstrap: str,
    topics: Sequence[str],
    partitions: int,
    trigger: int,
    driver_memory: str,
) -> dict[str, Any]:
    """Copy `topics` with one pattern JobGroup; the figures and the checks above."""
    sources = [(t, p) for t in topics for p in range(partitions)]
    source_ends = end_offsets(admin, sources)
    total = sum(source_ends.values())
    copies = [(f"{SOURCE_ALIAS}.{t}", p) for t, p in sources]
    group = replication_group("fleet-copy", r"fleet\.t.*", trigger)
    path = workdir / "fleet-copy.json"
    path.write_text(json.dumps(group))
    stop = workdir / "fleet-copy.stop"
    env = spark_submit_env(conf, master="local[2]", driver_memory=driver_memory)
    env["UATU_STOP_FILE"] = str(stop)
    say(f"replication: {len(topics)} topics, {total:,} records, one regex JobGroup")
    started = time.monotonic()
    with (BENCH_DIR / "fleet-copy.log").open("w") as log:
        proc = subprocess.Popen(
            [str(ROOT / "spark-submit.sh"), str(path)], env=env, stdout=log, stderr=log, cwd=ROOT
        )
        usage = Usage([proc.pid])

        def all_copied() -> bool:
            usage.take()
            # A new client each time: one that asked before the copies existed keeps
            # answering that they do not.
            ends = end_offsets(AdminClient({"bootstrap.servers": bootstrap}), copies)
            return all(ends[(f"{SOURCE_ALIAS}.{t}", p)] >= n for (t, p), n in source_ends.items())

        done = wait_for("every record copied", all_copied, 3600)
        figures = usage.result()
        stop.touch()
        proc.wait(600)
    say(f"replication: copied in {done} s; checking every destination partition")
    fresh = AdminClient({"bootstrap.servers": bootstrap})
    copied = sum(max(0, n) for n in end_offsets(fresh, copies).values())
    return {
        "topics": len(topics),
        "records": total,
        "seconds_to_copy_all": done,
        "records_per_second": total / done if done else None,
        "launch_to_done_s": time.monotonic() - started,
        "process_tree": figures,
        "exit_code": proc.returncode,
        "destination_records_over_source": copied - total,
        "destination_topics": check_topics(fresh, topics, partitions),
        "copies": check_copies(bootstrap, source_ends),
    }


def check_topics(admin: AdminClient, topics: Sequence[str], partitions: int) -> dict[str, Any]:
    """Destination topics with the source's partition count and synced config."""
    metadata = admin.list_topics(timeout=60).topics
    copies = [f"{SOURCE_ALIAS}.{t}" for t in topics]
    missing = [c for c in copies if c not in metadata]
    wrong_partitions = [
        c for c in copies if c in metadata and len(metadata[c].partitions) != partitions
    ]
    name, value = SYNCED_CONFIG
    wrong_config = []
    present = [c for c in copies if c in metadata]
    for start in range(0, len(present), 200):
        resources = [ConfigResource("topic", c) for c in present[start : start + 200]]
        for resource, future in admin.describe_configs(resources).items():
            if future.result()[name].value != value:
                wrong_config.append(resource.name)
    return {
        "expected": len(copies),
        "missing": missing[:5] + ([f"... {len(missing)}"] if len(missing) > 5 else []),
        "wrong_partitions": wrong_partitions[:5],
        f"wrong_{name}": wrong_config[:5],
    }


def check_copies(bootstrap: str, source_ends: Mapping[Partition, int]) -> dict[str, Any]:
    """Each destination partition's stamps are exactly 0..n-1 of its source partition."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "fleet-copy-check",
            "enable.auto.commit": False,
            "fetch.max.bytes": 50 * 2**20,
        }
    )
    expected: dict[Partition, int] = {}  # destination partition -> next source offset
    wanted: dict[Partition, Partition] = {}
    for (topic, p), n in source_ends.items():
        if n > 0:
            expected[(f"{SOURCE_ALIAS}.{topic}", p)] = 0
            wanted[(f"{SOURCE_ALIAS}.{topic}", p)] = (topic, p)
    consumer.assign([TopicPartition(t, p, 0) for t, p in expected])
    wrong: list[str] = []
    pending = set(expected)
    read, quiet_since = 0, time.monotonic()
    try:
        while pending and time.monotonic() - quiet_since < 60:
            messages = consumer.consume(10_000, timeout=1.0)
            if messages:
                quiet_since = time.monotonic()
            for m in messages:
                if m.error():
                    continue
                key = (str(m.topic()), int(m.partition() or 0))
                read += 1
                headers = m.headers()
                pairs = headers if isinstance(headers, list) else []
                stamp = latest_stamp([(k, v if isinstance(v, bytes) else None) for k, v in pairs])
                source = wanted[key]
                if stamp is None or (stamp.topic, stamp.partition) != source:
                    wrong.append(f"{key}@{m.offset()}: stamp {stamp}")
                elif stamp.offset != expected[key]:
                    wrong.append(
                        f"{key}@{m.offset()}: source offset {stamp.offset}, "
                        f"expected {expected[key]}"
                    )
                expected[key] = max(expected[key], stamp.offset + 1 if stamp else 0)
                if expected[key] >= source_ends[source]:
                    pending.discard(key)
    finally:
        consumer.close()
    return {
        "partitions_checked": len(expected),
        "records_read": read,
        "partitions_not_read_to_the_end": len(pending),
        "out_of_order_missing_or_twice": len(wrong),
        "first_wrong": wrong[:5],
    }
