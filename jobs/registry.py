"""The JobTypes this product runs: one typed record each, and the pre-start validation that
`jobs/main.py` and the control plane share.

A `JobType` names its spec builder, `prepare(group, settings) -> spec`: pure validation of
the JobGroup into an immutable spec, with no broker and no Spark, so the control plane may
import this module (and the `jobs/<type>/spec.py` modules it names) without pyspark. Every
spec answers the `JobSpec` protocol below.

The runtime side of a JobType (session, tables, query: a `jobs.runtime.template.StreamingJob`)
is `load_runtime()`, which imports the job's entry module; `jobs/main.py` calls it, and a
worker application (`jobs/worker/`), which may run any JobType, loads them all
(`every_runtime`).

A JobType whose groups need different runtimes names a `variant`: `JOB_TYPE_KAFKA_AUDIT` runs
counting audits (EXACT_UNIQ, APPROX_UNIQ: `jobs/audit/`) and cross-tier audits (the six other
AuditTypes: `jobs/audit/tiers/`), picked from the group's audit configs (`AUDIT_VARIANTS`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from uber.data.kafka.datatransfer.job_group_pb2 import JobGroup

from core.config import Settings
from core.errors import InvalidJobGroup
from core.jobgroup import check_common, job_type_name, refuse_unread
from core.spec import JobSpec
from jobs.audit.spec import READS as AUDIT_READS
from jobs.audit.spec import audit_spec
from jobs.audit.tiers.spec import READS as TIER_AUDIT_READS
from jobs.audit.tiers.spec import audit_kind, tier_audit_spec
from jobs.availability.spec import READS as AVAILABILITY_READS
from jobs.availability.spec import availability_spec
from jobs.dispatch.spec import READS as DISPATCH_READS
from jobs.dispatch.spec import dispatch_spec
from jobs.loadgen.spec import CONSUME_READS, PRODUCE_READS, consume_spec, produce_spec
from jobs.replication.spec import READS as REPLICATION_READS
from jobs.replication.spec import replication_spec_now

if TYPE_CHECKING:
    from jobs.runtime.template import StreamingJob


@dataclass(frozen=True)
class JobType:
    """One uForwarder JobType this product runs."""

    name: str  # uber.data.kafka.datatransfer.JobType value name
    summary: str
    prepare: Callable[[JobGroup, Settings], Any]  # returns the job's JobSpec
    load_runtime: Callable[[], type[StreamingJob[Any]]]
    # The JobGroup fields its runs read (paths, or their parents); any other field set is
    # refused (core.jobgroup.refuse_unread), never silently ignored.
    reads: frozenset[str]
    # The record that runs a given group, when groups of this type need different runtimes.
    variant: Callable[[JobGroup], JobType] | None = None

    def for_group(self, group: JobGroup) -> JobType:
        return self.variant(group) if self.variant is not None else self


def _audit_runtime() -> type[StreamingJob[Any]]:
    from jobs.audit.job import AuditJob

    return AuditJob


def _tier_audit_runtime() -> type[StreamingJob[Any]]:
    from jobs.audit.tiers.job import TierAuditJob

    return TierAuditJob


def _replication_runtime() -> type[StreamingJob[Any]]:
    from jobs.replication.job import ReplicationJob

    return ReplicationJob


def _dispatch_runtime() -> type[StreamingJob[Any]]:
    from jobs.dispatch.job import DispatchJob

    return DispatchJob


def _availability_runtime() -> type[StreamingJob[Any]]:
    from jobs.availability.job import AvailabilityJob

    return AvailabilityJob


def _loadgen_produce_runtime() -> type[StreamingJob[Any]]:
    from jobs.loadgen.job import LoadGenProduceJob

    return LoadGenProduceJob


def _loadgen_consume_runtime() -> type[StreamingJob[Any]]:
    from jobs.loadgen.job import LoadGenConsumeJob

    return LoadGenConsumeJob


AUDIT_VARIANTS: Mapping[str, JobType] = {
    "counts": JobType(
        "JOB_TYPE_KAFKA_AUDIT",
        "per topic, partition and window: messages, unique, bytes, lateness -> Delta",
        audit_spec,
        _audit_runtime,
        AUDIT_READS,
    ),
    "tiers": JobType(
        "JOB_TYPE_KAFKA_AUDIT",
        "cross-tier audits: tier reports, XDC, replication, retention, availability -> verdicts",
        tier_audit_spec,
        _tier_audit_runtime,
        TIER_AUDIT_READS,
    ),
}


def _audit_variant(group: JobGroup) -> JobType:
    return AUDIT_VARIANTS[audit_kind(group)]


JOB_TYPES: Mapping[str, JobType] = {
    t.name: t
    for t in (
        dataclasses.replace(AUDIT_VARIANTS["counts"], variant=_audit_variant),
        JobType(
            "JOB_TYPE_KAFKA_REPLICATION",
            "Kafka -> Kafka copy, partition and order kept, no loss, no duplicate",
            replication_spec_now,
            _replication_runtime,
            REPLICATION_READS,
        ),
        JobType(
            "JOB_TYPE_KAFKA_AVAILABILITY",
            "round-trip probes per broker and zone, topic availability, consumer-group lag",
            availability_spec,
            _availability_runtime,
            AVAILABILITY_READS,
        ),
        JobType(
            "JOB_TYPE_LOAD_GEN_PRODUCE",
            "traffic of a chosen shape and rate; each record: generator id, sequence, send time",
            produce_spec,
            _loadgen_produce_runtime,
            PRODUCE_READS,
        ),
        JobType(
            "JOB_TYPE_LOAD_GEN_CONSUME",
            "per window and partition: records/s, MB/s, latency, lost and duplicated -> Delta",
            consume_spec,
            _loadgen_consume_runtime,
            CONSUME_READS,
        ),
        JobType(
            "JOB_TYPE_KAFKA_CONSUMER_TO_RPC_DISPATCHER",
            "Kafka -> a gRPC service, uForwarder's retry tiers, DLQ and resilience queue",
            dispatch_spec,
            _dispatch_runtime,
            DISPATCH_READS,
        ),
    )
}


def every_runtime() -> list[type[StreamingJob[Any]]]:
    """The runtime of every JobType and audit variant (importing every job's entry module)."""
    loaders = [*(v.load_runtime for v in AUDIT_VARIANTS.values())]
    loaders += [t.load_runtime for t in JOB_TYPES.values()]
    return [load() for load in dict.fromkeys(loaders)]


def validate(group: JobGroup, settings: Settings) -> tuple[JobType, JobSpec]:
    """Check every field the job will use; return its JobType and spec. No broker, no Spark."""
    check_common(group, settings.clusters)
    type_name = job_type_name(group)
    job_type = JOB_TYPES.get(type_name)
    if job_type is None:
        raise InvalidJobGroup("type", type_name, f"not implemented yet; runs {sorted(JOB_TYPES)}")
    job_type = job_type.for_group(group)
    spec: JobSpec = job_type.prepare(group, settings)
    refuse_unread(group, job_type.reads)
    return job_type, spec
