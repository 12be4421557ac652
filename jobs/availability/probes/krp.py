"""KRP-tier audit reports of the PROXY_PRODUCER probes (`extension.availability.krp_audit_topic`).

kafka-pixy is a KRP, a Kafka REST/gRPC proxy: what it says it wrote can be compared with what
Kafka holds, as the services' SERVICE reports are (AUDIT_TYPE_KRP_AUDIT_AGGREGATION,
docs/audit.md). The PROXY_PRODUCER sender tells `KrpReports` the outcome of every Produce call:

* acknowledged: the probe's key and value, counted in `core.audit_reports.WindowTally` (the
  tally the audit clients use: count, key + value bytes, an HLL of the dedupe keys
  `xxhash64(key, value)`, a KLL of the ack latency). A probe kafka-pixy wrote to another
  partition than the one its key was chosen for counts too: it is in Kafka;
* failed (an error, or no answer within the ack SLA): `failed_count`. kafka-pixy may still
  have written it, which the tier audit then sees as more records in Kafka than reported.

Placement: a probe counts in the window of its send time, the `sent_ms` its JSON value
carries. The record's Kafka timestamp is kafka-pixy's clock when it batched the record,
which Produce does not return; so the counting audit of the probe topic places records by
the same field (`extension.audit.event_time` {FIELD_SOURCE_JSON_FIELD, "sent_ms"}) and both
sides put every probe in the same window.

`core.audit_reports.AuditReporter` sends the reports to the audit topic on the job's cluster
every trigger interval and at stop (after the sender's last Produce call returned), as tier
KRP, service `uatu-availability-<job_group_id>`, instance id the prober's. The audit topic is
created (one partition, the broker's default replication) when it is missing.
"""

from __future__ import annotations

import logging

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from core.audit_reports import AuditReporter, ReporterIdentity, WindowTally
from core.config import ClusterConfig
from core.errors import ClusterUnreachable
from core.kafka_admin import ADMIN_TIMEOUT_S, create_topic
from jobs.availability.spec import AvailabilitySpec

log = logging.getLogger("uatu.availability")


class KrpReports:
    """The KRP tally of one prober's Produce calls through kafka-pixy, and its reporter."""

    def __init__(self, topic: str, tally: WindowTally, reporter: AuditReporter) -> None:
        self.topic = topic  # the probe topic
        self.tally = tally
        self.reporter = reporter

    def acknowledged(self, key: bytes, value: bytes, sent_ms: int, acked_ms: int) -> None:
        self.tally.add(self.topic, key, value, sent_ms, float(acked_ms - sent_ms))

    def failed(self, sent_ms: int) -> None:
        self.tally.add_failed(self.topic, sent_ms)

    def close(self) -> None:
        """Send what was counted since the last report and wait for the acknowledgements."""
        self.reporter.close()


def ensure_audit_topic(cluster: ClusterConfig, topic: str) -> None:
    """Create `topic` (one partition, the broker's default replication) unless it exists."""
    admin = AdminClient(cluster.client_config())
    try:
        found = admin.list_topics(topic, timeout=ADMIN_TIMEOUT_S).topics.get(topic)
        if found is not None and found.error is None:
            return
        log.info("creating KRP audit topic %s (1 partition)", topic)
        create_topic(admin, NewTopic(topic, 1))
    except KafkaException as e:
        raise ClusterUnreachable(
            cluster.name, cluster.bootstrap_servers, f"KRP audit topic {topic}: {e}"
        ) from e


def krp_reports(spec: AvailabilitySpec, instance_id: str) -> KrpReports | None:
    """The job's KRP reports (None unless krp_audit_topic is set), its audit topic ensured."""
    if spec.krp is None:
        return None
    ensure_audit_topic(spec.cluster, spec.krp.audit_topic)
    tally = WindowTally(spec.krp.window_seconds)
    identity = ReporterIdentity(
        service=f"uatu-availability-{spec.job_group_id}",
        cluster=spec.cluster.name,
        tier="KRP",
        instance_id=instance_id,
    )
    reporter = AuditReporter(
        tally,
        identity,
        spec.krp.audit_topic,
        spec.cluster.client_config(),
        report_interval_s=spec.trigger_interval_seconds,
    )
    log.info(
        "KRP reports of the probes through kafka-pixy: %d s windows to %s every %d s",
        spec.krp.window_seconds,
        spec.krp.audit_topic,
        spec.trigger_interval_seconds,
    )
    return KrpReports(spec.probe_topic, tally, reporter)
