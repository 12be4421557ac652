"""testing/kafka_security.py renders a SASL_SSL listener and the clients that reach it; the
broker side waits for devservices (issue 20, item 8). Rendering only, no broker."""

from __future__ import annotations

from pathlib import Path

from core.config import parse_clusters
from testing.kafka_security import SaslSsl
from testing.tls import TestCA


def test_listener_and_client_settings(tmp_path: Path) -> None:
    ca = TestCA.create(tmp_path / "pki")
    sasl = SaslSsl.create(tmp_path / "sasl", ca, port=19093)
    merged = sasl.merge_listeners(
        {
            "listeners": "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
            "advertised.listeners": "PLAINTEXT://127.0.0.1:9092",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        }
    )
    assert merged["listeners"].endswith(",SASL_SSL://127.0.0.1:19093")
    assert merged["advertised.listeners"] == (
        "PLAINTEXT://127.0.0.1:9092,SASL_SSL://127.0.0.1:19093"
    )
    assert merged["listener.security.protocol.map"].endswith(",SASL_SSL:SASL_SSL")
    assert merged["sasl.enabled.mechanisms"] == "SCRAM-SHA-512,PLAIN"
    assert sasl.keystore.exists() and oct(sasl.keystore.stat().st_mode)[-3:] == "600"
    assert sasl.storage_format_args()[0] == "--add-scram"

    for user, mechanism, both in (("alice", "SCRAM-SHA-512", True), ("bob", "PLAIN", False)):
        entry = sasl.cluster_entry(user, mechanism, librdkafka=both)
        assert ("admin_properties" in entry) is both
        assert not any(p in repr(entry) for p in sasl.passwords())  # references only
        cluster = parse_clusters(
            {"clusters": {"s": entry}}, str(tmp_path / "conf" / "clusters.yaml")
        )["s"]
        password = {**sasl.scram_users, **sasl.plain_users}[user]
        assert f'password="{password}"' in cluster.properties["sasl.jaas.config"]
        assert cluster.client_config()["sasl.password"] == password  # given, or translated
        assert cluster.client_config()["ssl.ca.location"] == str(sasl.ca.cert_pem)
        assert cluster.check_client_config()["logger"].name == "uatu.librdkafka"
        assert cluster.encrypted
