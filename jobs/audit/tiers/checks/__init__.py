"""One module per cross-tier check. Each reads its inputs and returns the verdict candidate
rows of its windows as values (`audit_verdicts` columns, times as epoch ms), computed by a
pure function of the rows read; `jobs/audit/tiers/verdict_writer.py` decides which become
revisions and writes them. REPLICATION, RETENTION and AVAILABILITY also record their inputs
per batch (`replication_ledger`, `retention_audit`, `availability_audit`; AVAILABILITY has no
verdict).
"""
