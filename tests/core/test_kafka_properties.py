"""A cluster's settings written once (core/kafka_properties.py): the Java client's form given
to librdkafka in its own. Each row of the translation table, what is refused (one line, the
field named, no value echoed), and real librdkafka taking what the translation gives (and
refusing the Java form itself)."""

from __future__ import annotations

import logging

import pytest
from confluent_kafka import KafkaException, Producer

from core.config import ClusterConfig, parse_clusters
from core.errors import ConfigError
from core.kafka_properties import librdkafka_form
from testing.tls import TestCA

FIELD = "conf/clusters.yaml: clusters.secure.properties"
PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"


def jaas(module: str, **options: str) -> str:
    quoted = " ".join(f'{k}="{v}"' for k, v in options.items())
    return f"{module} required {quoted};"


def test_a_plain_or_scram_login_becomes_username_and_password() -> None:
    for module in (PLAIN, SCRAM):
        java = {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.jaas.config": f'{module} required username="svc" password="p\\"w;d";',
        }
        assert librdkafka_form(java, FIELD) == {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": "svc",
            "sasl.password": 'p"w;d',
        }


def test_a_kerberos_login_becomes_keytab_and_principal() -> None:
    java = {
        "sasl.jaas.config": "com.sun.security.auth.module.Krb5LoginModule required "
        'useKeyTab=true keyTab="/etc/svc.keytab" principal="svc@EXAMPLE.COM";'
    }
    assert librdkafka_form(java, FIELD) == {
        "sasl.kerberos.keytab": "/etc/svc.keytab",
        "sasl.kerberos.principal": "svc@EXAMPLE.COM",
    }


def test_stores_inline_pems_and_the_endpoint_check_translate() -> None:
    java = {
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": "/pki/ca.pem",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": "/pki/client.pem",
        "ssl.key.password": "k",
        "ssl.endpoint.identification.algorithm": "",
    }
    assert librdkafka_form(java, FIELD) == {
        "ssl.ca.location": "/pki/ca.pem",
        "ssl.certificate.location": "/pki/client.pem",
        "ssl.key.location": "/pki/client.pem",
        "ssl.key.password": "k",
        "ssl.endpoint.identification.algorithm": "none",
    }
    pkcs12 = {"ssl.keystore.type": "PKCS12", "ssl.keystore.location": "/pki/c.p12",
              "ssl.keystore.password": "s"}  # fmt: skip
    assert librdkafka_form(pkcs12, FIELD) == {
        "ssl.keystore.location": "/pki/c.p12",
        "ssl.keystore.password": "s",
    }
    inline = {"ssl.truststore.certificates": "CA", "ssl.keystore.certificate.chain": "CERT",
              "ssl.keystore.key": "KEY"}  # fmt: skip
    assert librdkafka_form(inline, FIELD) == {
        "ssl.ca.pem": "CA", "ssl.certificate.pem": "CERT", "ssl.key.pem": "KEY",
    }  # fmt: skip


def test_java_only_settings_are_left_out_and_shared_names_kept() -> None:
    java = {
        "client.id": "audit", "linger.ms": "5", "sasl.mechanism": "PLAIN",
        "key.serializer": "org.apache.kafka.common.serialization.ByteArraySerializer",
        "ssl.truststore.password": "changeit", "ssl.enabled.protocols": "TLSv1.3",
        "sasl.login.refresh.window.factor": "0.8", "metrics.num.samples": "2",
    }  # fmt: skip
    assert librdkafka_form(java, FIELD) == {
        "client.id": "audit", "linger.ms": "5", "sasl.mechanism": "PLAIN",
    }  # fmt: skip


@pytest.mark.parametrize(
    ("java", "line"),
    [
        (
            {"ssl.truststore.location": "/pki/trust.jks", "ssl.truststore.password": "sekrit"},
            "clusters.secure.properties.ssl.truststore.location: a JKS truststore (librdkafka "
            "reads PEM); give librdkafka names in admin_properties",
        ),
        (
            {"ssl.keystore.location": "/pki/k.jks", "ssl.keystore.password": "sekrit"},
            "clusters.secure.properties.ssl.keystore.location: a JKS keystore (librdkafka "
            "reads PEM or PKCS12); give librdkafka names in admin_properties",
        ),
        (
            {"sasl.jaas.config": jaas("x.OAuthBearerLoginModule", token="sekrit")},
            "clusters.secure.properties.sasl.jaas.config: OAuthBearerLoginModule has no "
            "librdkafka form; give librdkafka names in admin_properties",
        ),
        (
            {"sasl.jaas.config": jaas(PLAIN, username="svc")},
            "clusters.secure.properties.sasl.jaas.config: PlainLoginModule without password; "
            "give librdkafka names in admin_properties",
        ),
    ],
)
def test_what_librdkafka_cannot_do_is_one_line_naming_the_field(java, line) -> None:
    with pytest.raises(ConfigError) as refused:
        librdkafka_form(java, FIELD)
    assert str(refused.value) == f"configuration error in conf/clusters.yaml: {line}"
    assert "sekrit" not in str(refused.value)


def test_admin_properties_replace_the_translation_and_a_refusal_comes_at_load() -> None:
    given = ClusterConfig(
        "secure", "b:9093", {"sasl.jaas.config": jaas(PLAIN, username="u", password="p")},
        admin_properties={"sasl.username": "other"},
    )  # fmt: skip
    assert given.client_config() == {"sasl.username": "other", "bootstrap.servers": "b:9093"}
    once = ClusterConfig("secure", "b:9093", given.properties)
    assert once.client_config() == {
        "sasl.username": "u", "sasl.password": "p", "bootstrap.servers": "b:9093",
    }  # fmt: skip
    secure = {"bootstrap_servers": "b:9093", "properties": {"ssl.truststore.location": "/t.jks"}}
    jks = {"clusters": {"secure": secure}}
    with pytest.raises(ConfigError, match=r"clusters\.secure\.properties\.ssl\.truststore"):
        parse_clusters(jks, "conf/clusters.yaml")
    jks["clusters"]["secure"]["admin_properties"] = {"ssl.ca.location": "/ca.pem"}
    assert parse_clusters(jks, "conf/clusters.yaml")["secure"].client_config()["ssl.ca.location"]


def test_real_librdkafka_takes_the_translation_and_refuses_the_java_form(tmp_path) -> None:
    ca = TestCA.create(tmp_path / "pki")
    client = ca.issue("client", client=True)
    java = {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",
        "sasl.jaas.config": jaas(PLAIN, username="svc", password="pw"),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(ca.cert_pem),
        "ssl.keystore.type": "PKCS12",
        "ssl.keystore.location": str(client.pkcs12("pw", tmp_path / "client.p12")),
        "ssl.keystore.password": "pw",
        "ssl.endpoint.identification.algorithm": "https",
        "key.serializer": "org.apache.kafka.common.serialization.ByteArraySerializer",
    }
    quiet = {"bootstrap.servers": "127.0.0.1:1", "logger": logging.getLogger("quiet-test")}
    # librdkafka loads the CA and the PKCS#12 keystore when the client is made.
    producer = Producer({**librdkafka_form(java, FIELD), **quiet})
    assert producer.flush(0) == 0
    with pytest.raises(KafkaException, match="Java JAAS configuration is not supported"):
        Producer({**java, **quiet})
