"""Secrets out of clusters.yaml (issue 20, item 7): ${env:NAME} and ${file:PATH:KEY}
references, and warnings for secret files others can read."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import yaml

from core.config import load_settings
from core.errors import ConfigError
from core.secret_files import read_secret_file, resolve
from testing.conf import write_conf_dir


def secure_cluster(conf: Path, properties: dict[str, str]) -> None:
    clusters = {
        "clusters": {"local": {"bootstrap_servers": "127.0.0.1:9", "properties": properties}}
    }
    (conf / "clusters.yaml").write_text(yaml.safe_dump(clusters))


SCRAM_LOGIN = "org.apache.kafka.common.security.scram.ScramLoginModule"


def test_references_are_resolved_at_load_time(tmp_path: Path) -> None:
    conf = write_conf_dir(tmp_path / "conf", "127.0.0.1:9", tmp_path / "wh", tmp_path / "ck")
    secrets = conf / "kafka.properties"
    secrets.write_text("# SCRAM login\npassword = s3cr3t\nuser: alice\n")
    secrets.chmod(0o600)
    secure_cluster(
        conf,
        {
            "sasl.jaas.config": f"{SCRAM_LOGIN} required "
            'username="${file:kafka.properties:user}" '
            'password="${file:kafka.properties:password}";',
            "ssl.truststore.password": "${env:TRUSTSTORE_PASSWORD}",
        },
    )
    cluster = load_settings(conf, env={"TRUSTSTORE_PASSWORD": "tp"}).clusters["local"]
    assert cluster.properties["sasl.jaas.config"] == (
        f'{SCRAM_LOGIN} required username="alice" password="s3cr3t";'
    )
    librdkafka = cluster.client_config()  # the same values, translated
    assert (librdkafka["sasl.username"], librdkafka["sasl.password"]) == ("alice", "s3cr3t")
    assert cluster.properties["ssl.truststore.password"] == "tp"


def test_an_unresolvable_reference_names_the_reference_not_a_value(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"\$\{env:NOPE\}: environment variable not set"):
        resolve("${env:NOPE}", "clusters.a.properties.x", tmp_path, env={})
    (tmp_path / "p.properties").write_text("password=hidden\n")
    with pytest.raises(ConfigError, match="no key 'pass'") as raised:
        resolve("${file:p.properties:pass}", "f", tmp_path, env={})
    assert "hidden" not in str(raised.value)


def test_readable_secret_files_are_warned_about(tmp_path: Path, caplog) -> None:
    path = tmp_path / "token"
    path.write_text("t")
    path.chmod(0o644)
    with caplog.at_level(logging.WARNING, logger="uatu.secrets"):
        read_secret_file(path, "token file")
    assert "readable by others (mode 644); chmod 600 it" in caplog.text
    conf = write_conf_dir(tmp_path / "conf", "127.0.0.1:9", tmp_path / "wh", tmp_path / "ck")
    secure_cluster(conf, {"sasl.password": "written-out"})
    (conf / "clusters.yaml").chmod(0o644)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="uatu.config"):
        load_settings(conf)
    assert "clusters.local.properties.sasl.password" in caplog.text
    assert "written-out" not in caplog.text
    (conf / "clusters.yaml").chmod(0o600)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="uatu.config"):
        load_settings(conf)
    assert caplog.text == ""
