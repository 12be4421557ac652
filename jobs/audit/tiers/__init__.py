"""Cross-tier audits: the AuditTypes that compare tiers (SERVICE/KRP aggregation, XDC,
REPLICATION) or watch a topic (RETENTION, AVAILABILITY), deciding `audit_verdicts`."""
