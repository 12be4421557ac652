"""Pure helpers: Kafka source options, the audit spec's derived values, jar pruning."""

from __future__ import annotations

from pathlib import Path
from types import MappingProxyType

from core.config import ClusterConfig, Settings
from core.jobgroup import parse_jobgroup
from dev.prune_jars import artifact_of, jars_to_remove
from jobs.audit.spec import audit_spec
from jobs.runtime.kafka_source import RANGE_FETCH_CONFIG, kafka_read_options, range_consumer_config

SASL = ClusterConfig(
    "secure",
    "b1:9093,b2:9093",
    MappingProxyType({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN"}),
)


def test_kafka_read_options_pass_client_properties_through():
    options = kafka_read_options(
        SASL,
        "orders",
        starting_offsets="latest",
        read_committed=True,
        max_offsets_per_trigger=5000,
        group_id_prefix="audit-cg",
        include_headers=True,
    )
    assert options == {
        "kafka.bootstrap.servers": "b1:9093,b2:9093",
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "PLAIN",
        "subscribe": "orders",
        "startingOffsets": "latest",
        "failOnDataLoss": "true",
        "includeHeaders": "true",
        "kafka.isolation.level": "read_committed",
        "maxOffsetsPerTrigger": "5000",
        "groupIdPrefix": "audit-cg",
    }


def test_kafka_read_options_defaults_are_lossless():
    options = kafka_read_options(SASL, "orders")
    assert options["startingOffsets"] == "earliest"
    assert options["failOnDataLoss"] == "true"
    assert "maxOffsetsPerTrigger" not in options
    assert "kafka.isolation.level" not in options


def test_range_consumers_read_by_assignment_and_never_skip_lost_offsets():
    config = range_consumer_config(SASL, read_committed=True)
    assert config == {
        **RANGE_FETCH_CONFIG,
        "bootstrap.servers": "b1:9093,b2:9093",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",
        "enable.auto.commit": "false",
        "isolation.level": "read_committed",
        "auto.offset.reset": "none",
    }
    assert "group.id" not in config
    uncommitted = range_consumer_config(SASL, read_committed=False)
    assert uncommitted["isolation.level"] == "read_uncommitted"


def test_the_clusters_own_fetch_settings_win():
    tuned = ClusterConfig("tuned", "b:9092", MappingProxyType({"max.poll.records": "500"}))
    config = range_consumer_config(tuned, read_committed=False)
    assert config["max.poll.records"] == "500"
    assert config["fetch.max.bytes"] == RANGE_FETCH_CONFIG["fetch.max.bytes"]


def spec_for(group_json: str):
    settings = Settings(
        conf_dir=Path("conf"),
        warehouse="/wh",
        checkpoints="/ck",
        clusters=MappingProxyType({"secure": SASL}),
    )
    return audit_spec(parse_jobgroup(group_json), settings)


def test_audit_spec_defaults_and_flow_control():
    spec = spec_for(
        """{"jobGroupId": "g1", "type": "JOB_TYPE_KAFKA_AUDIT",
            "flowControl": {"messagesPerSec": 250.5},
            "kafkaConsumerTaskGroup": {"cluster": "secure", "topic": "orders",
              "autoOffsetResetPolicy": "AUTO_OFFSET_RESET_POLICY_LATEST",
              "auditMetadata": {"auditConfigs": [
                {"auditType": "AUDIT_TYPE_APPROX_UNIQ", "auditIntervalInSeconds": 600}]}},
            "auditTaskGroup": {"topic": "orders-logical"}}"""
    )
    assert spec.event_time.source == "kafka_timestamp"
    assert spec.dedupe_key.source == "key_and_value"
    assert spec.hll_lg_config_k == 12
    assert spec.source.starting_offsets == "latest"
    assert spec.audited_cluster == "secure"
    assert spec.audited_topic == "orders-logical"
    assert spec.trigger_interval_seconds == 10
    assert spec.max_offsets_per_trigger() == 2505  # 250.5 records/s x 10 s
    assert spec.output.table("audit_counts") == "/wh/audit_counts"
    assert spec.output.checkpoint == "/ck/g1"
    assert not spec.has_exact_audit


def test_artifact_names_and_pruning():
    assert artifact_of("jackson-core-2.13.5.jar") == "jackson-core"
    assert artifact_of("spark-token-provider-kafka-0-10_2.13-4.1.0-preview1.jar") == (
        "spark-token-provider-kafka-0-10_2.13"
    )
    assert artifact_of("jetty-util-9.4.57.v20241219.jar") == "jetty-util"
    candidates = [
        "jackson-core-2.13.5.jar",
        "delta-spark_4.2_2.13-4.4.0.jar",
        "kafka-clients-3.9.2.jar",
    ]
    shipped = ["jackson-core-2.21.2.jar", "spark-core_2.13-4.2.0.jar"]
    assert jars_to_remove(candidates, shipped) == ["jackson-core-2.13.5.jar"]


def test_the_suites_longest_first_list_names_files_that_exist():
    """A renamed test file would silently lose its place at the front of the schedule."""
    from core.paths import ROOT
    from tests.conftest import LONGEST_FIRST

    assert [p for p in LONGEST_FIRST if not (ROOT / p).is_file()] == []
    assert len(set(LONGEST_FIRST)) == len(LONGEST_FIRST)


def test_every_verdict_mutant_still_finds_its_rule():
    """dev/verdict_mutants.py changes text of jobs/audit/tiers/verdicts.py: a mutant whose text
    a refactor moved would no longer test anything. (Not beside the rule tests: the mutants
    run those, and this test would fail for every one of them.)"""
    from dev.verdict_mutants import MUTANTS, RULES

    source = RULES.read_text()
    assert [m.name for m in MUTANTS if source.count(m.original) != 1] == []
