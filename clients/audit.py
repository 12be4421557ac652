"""confluent-kafka Producer and Consumer wrappers that report what they handled, per window.

    from clients import AuditedProducer, AuditSettings

    audit = AuditSettings(service="orders-api", cluster="local", audit_topic="uatu-audit")
    producer = AuditedProducer({"bootstrap.servers": "127.0.0.1:9092"}, audit)
    producer.produce("orders", value=b"...", key=b"42")
    ...
    producer.close()  # flushes the records, then the last audit reports

`AuditedProducer` counts every record the broker acknowledged (tier SERVICE, or KRP for a proxy
tier) by the window of its Kafka timestamp: a record produced without a timestamp has
librdkafka's (the time of `produce`), which the broker stores too, so both place it in the
same window. `AuditedConsumer` counts every record `poll`/`consume` returned (tier CONSUMER,
its group.id as consumer_group). Both hash key + value exactly like the audit job's default
dedupe key (Spark's `xxhash64(key, value)`), keep an HLL sketch of those hashes and a KLL
sketch of latency, and send one `uatu.v1.AuditReport` per (topic, window) every
`report_interval_s` and at `close` (`core.audit_reports`).

They are confluent-kafka's own Producer and Consumer with one librdkafka interceptor plugin
loaded (`clients/audit_interceptor`, through `clients.native_tally`): the counting happens in
librdkafka's threads, so `produce`, `poll` and `consume` are confluent-kafka's methods
unchanged, delivery callbacks included, with no Python call per record added.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, Producer

from clients.native_tally import NativeTally
from core.audit_reports import AuditReporter, ReporterIdentity


@dataclass(frozen=True)
class AuditSettings:
    """Where and how a wrapper reports.

    service: the reporting service's name. cluster: the audited cluster's name as the audit
    jobs know it (conf/clusters.yaml), written into every report. audit_topic: where reports
    go. audit_config: librdkafka settings for the audit topic's cluster (default: the wrapped
    client's bootstrap.servers and security settings). window_seconds: report window length
    (default 60; the audit compares it against windows it divides). lg_k: HLL precision
    (default 12, the audit job's).
    """

    service: str
    cluster: str
    audit_topic: str
    audit_config: Mapping[str, Any] | None = None
    window_seconds: int = 60
    report_interval_s: float = 10.0
    lg_k: int = 12
    tier: str = "SERVICE"


_CONNECTION_KEYS = ("bootstrap.servers", "security.protocol", "client.dns.lookup")


def _audit_client_config(settings: AuditSettings, config: Mapping[str, Any]) -> dict[str, Any]:
    if settings.audit_config is not None:
        return dict(settings.audit_config)
    return {
        k: v for k, v in config.items() if k in _CONNECTION_KEYS or k.startswith(("sasl.", "ssl."))
    }


def _reporter(
    tally: NativeTally, identity: ReporterIdentity, audit: AuditSettings, config: Mapping[str, Any]
) -> AuditReporter:
    """The client's reporter: its tally's reports go to the audit topic every interval."""
    return AuditReporter(
        tally,
        identity,
        audit.audit_topic,
        _audit_client_config(audit, config),
        report_interval_s=audit.report_interval_s,
    )


class AuditedProducer(Producer):
    """A confluent_kafka.Producer that reports the records the broker acknowledged.

    Every acknowledgement is counted, whatever callback the record has; a failed send counts
    as `failed_count`. `tally` is the client's `NativeTally`, `reporter` its `AuditReporter`.
    """

    def __init__(self, config: Mapping[str, Any], audit: AuditSettings) -> None:
        self.tally = NativeTally(audit.window_seconds, audit.lg_k)
        try:
            super().__init__(self.tally.client_config(dict(config)))
            self.reporter = _reporter(
                self.tally,
                ReporterIdentity(audit.service, audit.cluster, audit.tier),
                audit,
                config,
            )
        except BaseException:
            self.tally.close()  # a bad config or identity: the plugin forgets the tally
            raise

    def close(self, timeout_s: float = 30.0) -> None:  # type: ignore[override]
        """Flush the records, then send the last audit reports and wait for them."""
        self.flush(timeout_s)
        self.reporter.close(timeout_s)
        self.tally.close()


class AuditedConsumer(Consumer):
    """A confluent_kafka.Consumer that reports the records poll/consume returned (tier
    CONSUMER, consumer_group = group.id)."""

    def __init__(self, config: Mapping[str, Any], audit: AuditSettings) -> None:
        self.tally = NativeTally(audit.window_seconds, audit.lg_k)
        try:
            super().__init__(self.tally.client_config(dict(config)))
            identity = ReporterIdentity(
                audit.service, audit.cluster, "CONSUMER", consumer_group=str(config["group.id"])
            )
            self.reporter = _reporter(self.tally, identity, audit, config)
        except BaseException:
            self.tally.close()  # a bad config or identity: the plugin forgets the tally
            raise

    def close(self, timeout_s: float = 30.0) -> None:  # type: ignore[override]
        """Close the consumer, then send the last audit reports and wait for them."""
        super().close()
        self.reporter.close(timeout_s)
        self.tally.close()
