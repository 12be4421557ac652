"""JobType -> job module, and the full pre-start validation shared by jobs/main.py and the
control plane.

Each job module provides `prepare(group, settings) -> spec` (validation, no Spark),
`source_topic(spec) -> (field, topic, cluster)` and
`run(spec, once=, stop_file=, reporting=) -> int` (reporting: jobs/runtime/reporting.py).
A module may also provide `check(spec)`: broker checks beyond the source topic's existence
(the replication job's destination topic and offsets), run by `--check` and by `run` itself,
and `ensure_source(spec)`: make the source topic exist before it is checked (the availability
job's `__consumer_offsets`, which Kafka creates on first use).
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

from uber.data.kafka.datatransfer.job_group_pb2 import JobGroup

from core.config import Settings
from core.errors import InvalidJobGroup
from core.jobgroup import check_common, job_type_name

JOB_MODULES = {
    "JOB_TYPE_KAFKA_AUDIT": "jobs.audit.job",
    "JOB_TYPE_KAFKA_REPLICATION": "jobs.replication.job",
    "JOB_TYPE_KAFKA_AVAILABILITY": "jobs.availability.job",
}


def validate(group: JobGroup, settings: Settings) -> tuple[ModuleType, Any]:
    """Check every field the job will use; return (job module, its spec). No broker, no Spark."""
    check_common(group, settings.clusters)
    type_name = job_type_name(group)
    if type_name not in JOB_MODULES:
        raise InvalidJobGroup("type", type_name, f"not implemented yet; runs {sorted(JOB_MODULES)}")
    job = importlib.import_module(JOB_MODULES[type_name])
    return job, job.prepare(group, settings)


def check(job: ModuleType, spec: Any) -> None:
    """The job's own broker checks, if it has any (raises InvalidJobGroup and friends)."""
    broker_check = getattr(job, "check", None)
    if broker_check is not None:
        broker_check(spec)


def ensure_source(job: ModuleType, spec: Any) -> None:
    """Let the job create its source topic if the broker makes it on demand."""
    ensure = getattr(job, "ensure_source", None)
    if ensure is not None:
        ensure(spec)
