"""The cross-tier audit's tables are exactly-once across a failure at every step between two
of its writes (core/faults.py's `tiers.*` points), against truth the test knows.

One group runs SERVICE (reports vs audit_counts), REPLICATION (a copy with three offsets
missing) and AVAILABILITY (samples) on one checkpoint. Its first batch fails at each point in
turn (`fail-first-attempt`: the write before the point is durable, the one after is not, as a
crash there would leave them), the job starting again on its checkpoint after each; the last
run has no fault. The tables must then hold what one uninterrupted run writes: each report
counted once, each verdict revision once, and the LOSS revision with its gap.

The job runs in this process on the test's session (a SIGKILL of a whole application at a
fault point is tests/jobs/audit/test_audit_faults.py's and test_replication_faults.py's).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import functions as F

from core import faults
from core.config import load_settings
from core.errors import EXIT_FAILED, EXIT_OK
from core.provenance import STAMP
from jobs import registry
from testing.conf import write_conf_dir
from testing.jobgroups import parse
from testing.topic_data import Record, produce_records
from tests.jobs.audit.test_tier_audits import (
    OPTIONS,
    audited_produce,
    counting_group,
    past_window,
    run_once,
)

pytestmark = pytest.mark.integration

RECORDS = 40
MISSING = (10, 12)  # source offsets the copy never received (inclusive)
POINTS = (
    "tiers.report_ids_appended",
    "tiers.ledger_appended",
    "tiers.samples_appended",
    "tiers.decision_saved",
    "tiers.verdicts_appended",
)


def tiers_group(group_id: str, reports: str, source: str, copy: str) -> dict[str, Any]:
    checks: list[dict[str, Any]] = [
        {"auditType": "AUDIT_TYPE_SERVICE_AUDIT_AGGREGATION", "auditIntervalInSeconds": 60},
        {
            "auditType": "AUDIT_TYPE_REPLICATION",
            "auditIntervalInSeconds": 60,
            "replicationAuditConfig": {
                "replicationChecks": [
                    {
                        "source": [{"cluster": "local", "topic": source}],
                        "destination": [{"cluster": "local", "topic": copy}],
                    }
                ]
            },
        },
        {"auditType": "AUDIT_TYPE_AVAILABILITY", "auditIntervalInSeconds": 60},
    ]
    return {
        "jobGroupId": group_id,
        "type": "JOB_TYPE_KAFKA_AUDIT",
        "kafkaConsumerTaskGroup": {
            "cluster": "local",
            "topic": reports,
            "auditMetadata": {"auditConfigs": checks},
        },
        "auditTaskGroup": {"cluster": "local", "topic": source},
        "extension": {"@type": OPTIONS, "trigger": {"intervalSeconds": 1}},
    }


def run_with_fault(spark, conf_dir: Path, group: dict[str, Any], point: str | None) -> int:
    """One AvailableNow run of the group in this process, with UATU_FAULT failing the first
    hit of `point` (none: a clean run); its exit status."""
    settings = load_settings(conf_dir)
    job_type, spec = registry.validate(parse(group), settings)
    job = job_type.load_runtime()(spec)
    faults.reset()
    with pytest.MonkeyPatch.context() as env:
        if point is not None:
            env.setenv(faults.ENV, f"{point}:{faults.FAIL_FIRST_ATTEMPT}")
        try:
            job.ensure_tables(spark)
            assert job.before_query(spark) is None
            return job.run_stream(spark, once=True, stop_file=None, reporting=None)
        finally:
            job.close()
            faults.reset()


def test_every_table_is_exactly_once_across_a_failure_at_each_step(spark, kafka, tmp_path):
    name = tmp_path.name[-16:].replace("_", "-").lower()
    source, copy, reports = f"src-{name}", f"copy-{name}", f"audit-{name}"
    for topic in (source, copy, reports):
        kafka.create_topic(topic, partitions=1)
    conf_dir = write_conf_dir(
        tmp_path / "conf", kafka.bootstrap_servers, tmp_path / "wh", tmp_path / "ck"
    )
    warehouse = tmp_path / "wh"
    window = past_window(15)
    records = [(b"k%d" % i, b"v%d" % i, window + 100 * i) for i in range(RECORDS)]
    audited_produce(kafka.bootstrap_servers, source, reports, records)
    first, last = MISSING
    stamped = [
        Record(0, b"k%d" % i, b"v%d" % i, window + 100 * i, ((STAMP, stamp(source, i)),))
        for i in range(RECORDS)
        if not first <= i <= last
    ]
    produce_records(kafka.bootstrap_servers, copy, stamped)
    run_once(spark, conf_dir, counting_group(f"count-{name}", source))

    group = tiers_group(f"tiers-{name}", reports, source, copy)
    statuses = [run_with_fault(spark, conf_dir, group, point) for point in POINTS]
    assert statuses == [EXIT_FAILED] * len(POINTS)
    assert run_with_fault(spark, conf_dir, group, None) == EXIT_OK

    counts = spark.read.format("delta").load(str(warehouse / "tier_counts"))
    assert [(r["tier"], r["message_count"]) for r in counts.collect()] == [("SERVICE", RECORDS)]
    ids = spark.read.format("delta").load(str(warehouse / "tier_report_ids"))
    assert ids.count() == ids.select("instance_id", "sequence").distinct().count()

    verdicts = spark.read.format("delta").load(str(warehouse / "audit_verdicts"))
    rows = verdicts.withColumn("start", F.unix_millis("window_start")).collect()
    assert sorted((r["check_type"], r["start"], r["revision"], r["verdict"]) for r in rows) == [
        ("AUDIT_TYPE_REPLICATION", window, 1, "LOSS"),
        ("AUDIT_TYPE_SERVICE_AUDIT_AGGREGATION", window, 1, "OK"),
    ]
    gaps = spark.read.format("delta").load(str(warehouse / "replication_gaps")).collect()
    assert [(g["partition"], g["first_offset"], g["last_offset"], g["revision"]) for g in gaps] == [
        (0, first, last, 1)
    ]
    ledger = spark.read.format("delta").load(str(warehouse / "replication_ledger"))
    assert ledger.count() == ledger.distinct().count()
    samples = spark.read.format("delta").load(str(warehouse / "availability_audit"))
    assert samples.count() > 0


def stamp(topic: str, offset: int) -> bytes:
    return f"local/{topic}/0/{offset}".encode()
