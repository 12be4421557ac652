"""One warehouse written by the real jobs, shared by the integration tests of this folder.

`job_warehouse` runs, once per session, in this process on the shared SparkSession:

1. the audit job `--once` on `it-orders` (cluster `local`, 3 partitions of demo data with
   duplicates, late records and records without an event time);
2. the replication job, bounded, `local/it-orders` -> `dest/it-orders` (identity naming) with
   consumer group `it-orders-dr`;
3. the audit job `--once` on the copy `dest/it-orders`: the second tier;
4. the availability job (probes, topic availability, consumer lag) until each of its four
   tables has rows, with one group that commits and one registered group without commits.

So every table the integrations read exists, written by the jobs themselves: audit_counts,
replication_stats, replication_audit, availability_probes, topic_availability,
consumer_offset_commits, consumer_group_status; all but `audit_verdicts` and
`replication_gaps` (`ELSEWHERE`): the cross-tier audit's bounded run costs as much again,
and test_airflow.py runs it (through `spark-submit.sh`) and reads its verdicts with delta-rs.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import Consumer
from google.protobuf import json_format
from uatu.v1 import job_options_pb2  # noqa: F401  (registers JobOptions for `extension`)
from uber.data.kafka.datatransfer.job_group_pb2 import JobGroup

from core.config import load_settings
from integrations.tables import TABLES, find_tables
from jobs import registry
from testing.conf import write_conf_dir
from testing.demo_data import audit_dataset, produce
from testing.polling import wait_for

TOPIC = "it-orders"
REPLICATION_ID = "it-orders-dr"
ELSEWHERE = frozenset({"audit_verdicts", "replication_gaps"})  # of TABLES, not in this warehouse


@dataclass(frozen=True)
class JobWarehouse:
    warehouse: Path
    conf_dir: Path
    sent: Counter
    now_ms: int


def run_group(data: dict, conf_dir: Path, *, once: bool, stop_file: Path | None = None) -> int:
    """Validate and run one JobGroup the way jobs/main.py does, in this process."""
    group = json_format.ParseDict(data, JobGroup())
    job_type, spec = registry.validate(group, load_settings(conf_dir))
    job = job_type.load_runtime()(spec)
    job.ensure_source()
    return job.run(once=once, stop_file=str(stop_file) if stop_file else None)


def audit_group(group_id: str, cluster: str) -> dict:
    return {
        "jobGroupId": group_id,
        "type": "JOB_TYPE_KAFKA_AUDIT",
        "kafkaConsumerTaskGroup": {
            "cluster": cluster,
            "topic": TOPIC,
            "auditMetadata": {
                "auditConfigs": [
                    {"auditType": "AUDIT_TYPE_EXACT_UNIQ", "auditIntervalInSeconds": 60}
                ]
            },
        },
    }


@pytest.fixture(scope="session")
def job_warehouse(spark, kafka, kafka_dest, tmp_path_factory) -> Iterator[JobWarehouse]:
    root = tmp_path_factory.mktemp("job-warehouse")
    conf_dir = write_conf_dir(
        root / "conf",
        kafka.bootstrap_servers,
        root / "warehouse",
        root / "checkpoints",
        more_clusters={
            "dest": {
                "bootstrap_servers": kafka_dest.bootstrap_servers,
                "properties": {"delivery.timeout.ms": "8000", "request.timeout.ms": "5000"},
            }
        },
    )
    kafka.create_topic(TOPIC, partitions=3)
    kafka_dest.create_topic(TOPIC, partitions=3)
    now_ms = int(time.time() * 1000)
    records = audit_dataset(600, partitions=3, now_ms=now_ms)
    produce(kafka.bootstrap_servers, TOPIC, records)
    sent = Counter(r.kind for r in records)
    sent["total"] = len(records)

    assert run_group(audit_group("it-audit-source", "local"), conf_dir, once=True) == 0
    replication = {
        "jobGroupId": REPLICATION_ID,
        "type": "JOB_TYPE_KAFKA_REPLICATION",
        "kafkaConsumerTaskGroup": {"cluster": "local", "topic": TOPIC, "consumerGroup": "it-dr"},
        "kafkaDispatcherTaskGroup": {"cluster": "dest"},  # no topic: identity naming
        "replicationTaskGroup": {"isContinuous": False},
        "extension": {
            "@type": "type.googleapis.com/uatu.v1.JobOptions",
            "trigger": {"intervalSeconds": 1},
        },
    }
    assert run_group(replication, conf_dir, once=False) == 0
    assert run_group(audit_group("it-audit-dest", "dest"), conf_dir, once=True) == 0

    # A registered group with members but no commit: listed as NO_COMMITS, not hidden.
    idle = Consumer(
        {
            "bootstrap.servers": kafka.bootstrap_servers,
            "group.id": "it-idle",
            "enable.auto.commit": False,
        }
    )
    idle.subscribe([TOPIC])
    idle.poll(1)
    availability = {
        "jobGroupId": "it-availability",
        "type": "JOB_TYPE_KAFKA_AVAILABILITY",
        "kafkaConsumerTaskGroup": {"cluster": "local", "topic": "it-probe"},
        "availabilityTaskGroup": {"availabilityJobType": "AVAILABILITY_JOB_TYPE_NATIVE_PRODUCER"},
        "extension": {
            "@type": "type.googleapis.com/uatu.v1.JobOptions",
            "trigger": {"intervalSeconds": 1},
            "availability": {"probeIntervalMs": 200, "probeWindowSeconds": 2,
                             "probeAckSlaMs": 1000, "probeRoundtripSlaMs": 2000},
        },
    }  # fmt: skip
    stop_file = root / "stop-availability"
    status: list[int] = []
    thread = threading.Thread(
        target=lambda: status.append(
            run_group(availability, conf_dir, once=False, stop_file=stop_file)
        )
    )
    thread.start()
    warehouse = root / "warehouse"
    try:
        wait_for(
            lambda: (
                set(find_tables(warehouse)) == set(TABLES) - ELSEWHERE
                and all(DeltaRows.count(path) > 0 for path in find_tables(warehouse).values())
            ),
            180,
            "every table the jobs write, with rows",
            interval_s=2,
        )
        wait_for(lambda: DeltaRows.has_group(warehouse, "it-idle"), 60, "it-idle listed")
    finally:
        stop_file.touch()
        thread.join(180)
        idle.close()
    assert status == [0]
    yield JobWarehouse(warehouse, conf_dir, sent, now_ms)


class DeltaRows:
    @staticmethod
    def count(path: str) -> int:
        from deltalake import DeltaTable

        return DeltaTable(path).count()

    @staticmethod
    def has_group(warehouse: Path, group: str) -> bool:
        from integrations.tables import read

        path = find_tables(warehouse).get("consumer_group_status")
        if path is None:
            return False
        return group in set(read(path, ["group"]).column("group").to_pylist())
