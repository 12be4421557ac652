"""A cluster's Kafka client settings, written once in the Java client's form, given to
librdkafka in its own form.

`conf/clusters.yaml`'s `properties` go as they are to the Java clients (Spark's Kafka source,
the replication and dispatch sinks). The project's librdkafka clients (the checks before
start, the probes, the group-offset commits) read `librdkafka_form(properties)`, unless the
cluster gives `admin_properties`, which then replace it whole. The translation:

=======================================  =================================================
Java client                              librdkafka
=======================================  =================================================
sasl.jaas.config, PlainLoginModule or    sasl.username, sasl.password
ScramLoginModule (username, password)
sasl.jaas.config, Krb5LoginModule        sasl.kerberos.keytab, sasl.kerberos.principal
(keyTab, principal)
ssl.truststore.location (type PEM)       ssl.ca.location
ssl.truststore.certificates (PEM text)   ssl.ca.pem
ssl.keystore.location (type PEM)         ssl.certificate.location and ssl.key.location
ssl.keystore.location (type PKCS12)      ssl.keystore.location (+ ssl.keystore.password)
ssl.keystore.certificate.chain, .key     ssl.certificate.pem, ssl.key.pem
ssl.endpoint.identification.algorithm    "" (Java's "off") becomes "none"
=======================================  =================================================

A Java-only setting with no librdkafka form (serializers, truststore passwords, JVM security
providers, ...; `JAVA_ONLY`) is left out; every other key goes through unchanged, since most
names are the same in both (security.protocol, sasl.mechanism, client.id, linger.ms, ...). What
librdkafka cannot do is refused with one line naming the field: a JKS store (librdkafka reads
PEM or PKCS#12), another login module. Give `admin_properties` for those. Nothing here logs
or echoes a value: they hold secrets.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from core.errors import ConfigError

JAVA_ONLY = frozenset(
    {
        "sasl.jaas.config", "sasl.login.callback.handler.class",
        "sasl.client.callback.handler.class", "sasl.login.class", "security.providers",
        "ssl.truststore.location", "ssl.truststore.type", "ssl.truststore.password",
        "ssl.truststore.certificates", "ssl.keystore.type", "ssl.keystore.certificate.chain",
        "ssl.keystore.key", "ssl.protocol", "ssl.enabled.protocols", "ssl.provider",
        "ssl.keymanager.algorithm", "ssl.trustmanager.algorithm", "ssl.engine.factory.class",
        "ssl.secure.random.implementation", "key.serializer", "value.serializer",
        "key.deserializer", "value.deserializer", "interceptor.classes", "metric.reporters",
        "partitioner.class", "buffer.memory", "max.block.ms", "default.api.timeout.ms",
        "max.poll.records", "auto.include.jmx.reporter",
    }
)  # fmt: skip
JAVA_ONLY_PREFIXES = ("sasl.login.", "metrics.")

_LOGIN = re.compile(r"^\s*(?P<module>[\w.$]+)\s+(?:required|requisite|sufficient|optional)\b")
_OPTION = re.compile(r'(?P<key>[\w.]+)\s*=\s*(?:"(?P<quoted>(?:[^"\\]|\\.)*)"|(?P<bare>[^\s;]+))')


def librdkafka_form(java: Mapping[str, str], field: str) -> dict[str, str]:
    """`java` (a Java client's properties) as librdkafka properties, by the table of the
    module docstring. Raises ConfigError naming `field`.<key> for what librdkafka cannot do."""
    kept = {
        key: value
        for key, value in java.items()
        if key not in JAVA_ONLY and not key.startswith(JAVA_ONLY_PREFIXES)
    }
    kept.pop("ssl.keystore.location", None)
    kept.pop("ssl.keystore.password", None)
    if kept.get("ssl.endpoint.identification.algorithm") == "":
        kept["ssl.endpoint.identification.algorithm"] = "none"
    return {**kept, **_login(java, field), **_truststore(java, field), **_keystore(java, field)}


def _login(java: Mapping[str, str], field: str) -> dict[str, str]:
    jaas = java.get("sasl.jaas.config")
    if not jaas:
        return {}
    where = f"{field}.sasl.jaas.config"
    login = _LOGIN.match(jaas)
    if login is None:
        raise _refused(where, "not a JAAS login entry")
    module = login.group("module").rsplit(".", 1)[-1]
    options = {
        m.group("key"): m.group("bare") or re.sub(r"\\(.)", r"\1", m.group("quoted") or "")
        for m in _OPTION.finditer(jaas[login.end() :])
    }
    if module in ("PlainLoginModule", "ScramLoginModule"):
        wanted = {"sasl.username": "username", "sasl.password": "password"}
    elif module == "Krb5LoginModule":
        wanted = {"sasl.kerberos.keytab": "keyTab", "sasl.kerberos.principal": "principal"}
    else:
        raise _refused(where, f"{module} has no librdkafka form")
    missing = [option for option in wanted.values() if option not in options]
    if missing:
        raise _refused(where, f"{module} without {', '.join(missing)}")
    return {name: options[option] for name, option in wanted.items()}


def _truststore(java: Mapping[str, str], field: str) -> dict[str, str]:
    found = {}
    if "ssl.truststore.certificates" in java:
        found["ssl.ca.pem"] = java["ssl.truststore.certificates"]
    if "ssl.truststore.location" in java:
        kind = java.get("ssl.truststore.type", "JKS").upper()
        if kind != "PEM":
            raise _refused(
                f"{field}.ssl.truststore.location", f"a {kind} truststore (librdkafka reads PEM)"
            )
        found["ssl.ca.location"] = java["ssl.truststore.location"]
    return found


def _keystore(java: Mapping[str, str], field: str) -> dict[str, str]:
    found = {}
    if "ssl.keystore.certificate.chain" in java:
        found["ssl.certificate.pem"] = java["ssl.keystore.certificate.chain"]
    if "ssl.keystore.key" in java:
        found["ssl.key.pem"] = java["ssl.keystore.key"]
    location = java.get("ssl.keystore.location")
    if location:
        kind = java.get("ssl.keystore.type", "JKS").upper()
        if kind == "PEM":
            found["ssl.certificate.location"] = found["ssl.key.location"] = location
        elif kind == "PKCS12":
            found["ssl.keystore.location"] = location
            if "ssl.keystore.password" in java:
                found["ssl.keystore.password"] = java["ssl.keystore.password"]
        else:
            raise _refused(
                f"{field}.ssl.keystore.location",
                f"a {kind} keystore (librdkafka reads PEM or PKCS12)",
            )
    return found


def _refused(where: str, why: str) -> ConfigError:
    """ConfigError for `where` ("<file>: clusters.<name>.properties.<key>")."""
    path, _, key = where.partition(": ")
    return ConfigError(path, f"{key or where}: {why}; give librdkafka names in admin_properties")
