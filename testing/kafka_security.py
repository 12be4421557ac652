"""A SASL_SSL listener for the test broker, and the client settings that reach it.

Pure rendering; `devservices.kafka.start_cluster(..., sasl_ssl=SaslSsl)` plugs it into the test
broker (merge_listeners, then create_scram_users). By hand:

    ca = TestCA.create(tmp / "pki")
    sasl = SaslSsl.create(tmp / "sasl", ca, port=free_ports(1)[0])
    extra = sasl.broker_properties()        # merge into server.properties (listener lists
                                            # are merged, see `merge_listeners`)
    format_args = sasl.storage_format_args()  # kafka-storage format: SCRAM users (KRaft)
    clusters_yaml_entry = sasl.cluster_entry("alice", "SCRAM-SHA-512")

The broker listens for SASL_SSL on 127.0.0.1:`port` with a certificate the test CA signed
(PKCS#12 keystore), and accepts SCRAM-SHA-512 users (created at storage format time, as KRaft
does it) and PLAIN users (listed in the listener's JAAS config). `cluster_entry` renders a
clusters.yaml entry whose passwords are `${file:...}` references, in the Java client's form
(`properties`, Spark's Kafka source and the replication sink; the librdkafka clients, the
pre-start checks and the availability probes, read its translation), and with
`librdkafka=True` also in librdkafka's own form (`admin_properties`).
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialAlteration,
    UserScramCredentialUpsertion,
)

from testing.tls import Issued, TestCA

HOST = "127.0.0.1"
LISTENER = "SASL_SSL"
MECHANISMS = ("SCRAM-SHA-512", "PLAIN")


@dataclass(frozen=True)
class SaslSsl:
    directory: Path
    ca: TestCA
    server: Issued
    port: int
    keystore: Path
    keystore_password: str = field(repr=False)
    scram_users: Mapping[str, str] = field(repr=False)  # name -> password
    plain_users: Mapping[str, str] = field(repr=False)

    @classmethod
    def create(
        cls,
        directory: Path,
        ca: TestCA,
        port: int,
        scram_users: Mapping[str, str] | None = None,
        plain_users: Mapping[str, str] | None = None,
    ) -> SaslSsl:
        """A server certificate for 127.0.0.1, its keystore, and users with random passwords
        (or the given ones)."""
        directory.mkdir(parents=True, exist_ok=True)
        server = ca.issue("kafka-broker", hosts=(HOST, "localhost"))
        password = secrets.token_hex(16)
        keystore = server.pkcs12(password, directory / "broker.p12")
        return cls(
            directory,
            ca,
            server,
            port,
            keystore,
            password,
            dict(scram_users or {"alice": secrets.token_hex(12), "admin": secrets.token_hex(12)}),
            dict(plain_users or {"bob": secrets.token_hex(12)}),
        )

    @property
    def bootstrap_servers(self) -> str:
        return f"{HOST}:{self.port}"

    def passwords(self) -> list[str]:
        """Every password this listener knows: what must never show up in argv, logs or
        tables."""
        return [*self.scram_users.values(), *self.plain_users.values(), self.keystore_password]

    def broker_properties(self) -> dict[str, str]:
        """server.properties entries for the listener (without the listener lists; see
        `merge_listeners`)."""
        prefix = f"listener.name.{LISTENER.lower()}"
        plain_users = " ".join(f'user_{u}="{p}"' for u, p in sorted(self.plain_users.items()))
        return {
            "sasl.enabled.mechanisms": ",".join(MECHANISMS),
            f"{prefix}.ssl.keystore.type": "PKCS12",
            f"{prefix}.ssl.keystore.location": str(self.keystore),
            f"{prefix}.ssl.keystore.password": self.keystore_password,
            f"{prefix}.ssl.key.password": self.keystore_password,
            f"{prefix}.ssl.client.auth": "none",
            f"{prefix}.scram-sha-512.sasl.jaas.config": (
                "org.apache.kafka.common.security.scram.ScramLoginModule required;"
            ),
            f"{prefix}.plain.sasl.jaas.config": (
                f"org.apache.kafka.common.security.plain.PlainLoginModule required {plain_users};"
            ),
        }

    def merge_listeners(self, properties: Mapping[str, str]) -> dict[str, str]:
        """`properties` (a broker's server.properties) with the SASL_SSL listener added to
        listeners, advertised.listeners and listener.security.protocol.map."""
        merged = dict(properties)
        address = f"{LISTENER}://{HOST}:{self.port}"
        for key in ("listeners", "advertised.listeners"):
            merged[key] = ",".join(filter(None, (merged.get(key, ""), address)))
        protocols = merged.get("listener.security.protocol.map", "")
        merged["listener.security.protocol.map"] = ",".join(
            filter(None, (protocols, f"{LISTENER}:{LISTENER}"))
        )
        merged.update(self.broker_properties())
        return merged

    def storage_format_args(self) -> list[str]:
        """Arguments for `kafka-storage format` (kafka.tools.StorageTool) that create the
        SCRAM users in a KRaft cluster's bootstrap metadata (Kafka 3.5+)."""
        args = []
        for user, password in sorted(self.scram_users.items()):
            args += ["--add-scram", f"SCRAM-SHA-512=[name={user},password={password}]"]
        return args

    def create_scram_users(self, admin: AdminClient, timeout_s: float = 30.0) -> None:
        """Create the SCRAM users through the Admin API (a running KRaft broker, reached on
        a listener that needs no SCRAM login): the alternative to `storage_format_args`."""
        upserts: list[UserScramCredentialAlteration] = [
            UserScramCredentialUpsertion(
                user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), password.encode()
            )
            for user, password in sorted(self.scram_users.items())
        ]
        for future in admin.alter_user_scram_credentials(upserts).values():
            future.result(timeout=timeout_s)

    def jaas_file(self) -> Path:
        """The same server logins as a JAAS file (KafkaServer section), for a broker started
        with -Djava.security.auth.login.config instead of listener-prefixed properties."""
        users = "\n".join(f'    user_{u}="{p}"' for u, p in sorted(self.plain_users.items()))
        path = self.directory / "kafka_server_jaas.conf"
        path.write_text(
            "KafkaServer {\n"
            "  org.apache.kafka.common.security.scram.ScramLoginModule required;\n"
            "  org.apache.kafka.common.security.plain.PlainLoginModule required\n"
            f"{users};\n"
            "};\n"
        )
        path.chmod(0o600)
        return path

    def secrets_file(self, user: str) -> Path:
        """A properties file holding `user`'s password (0600), for ${file:...} references."""
        password = {**self.plain_users, **self.scram_users}[user]
        path = self.directory / f"{user}.properties"
        path.write_text(f"password={password}\n")
        path.chmod(0o600)
        return path

    def cluster_entry(
        self, user: str, mechanism: str, *, librdkafka: bool = False
    ) -> dict[str, object]:
        """A clusters.yaml entry reaching this listener as `user` with `mechanism`; the
        password is a ${file:...} reference, never written out. The settings are written
        once (Java form) unless `librdkafka` asks for admin_properties too."""
        if mechanism not in MECHANISMS:
            raise ValueError(f"mechanism {mechanism!r} is not one of {MECHANISMS}")
        reference = f"${{file:{self.secrets_file(user)}:password}}"
        module = (
            "org.apache.kafka.common.security.scram.ScramLoginModule"
            if mechanism.startswith("SCRAM")
            else "org.apache.kafka.common.security.plain.PlainLoginModule"
        )
        java = {
            "security.protocol": LISTENER,
            "sasl.mechanism": mechanism,
            "sasl.jaas.config": f'{module} required username="{user}" password="{reference}";',
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.ca.cert_pem),
            "ssl.endpoint.identification.algorithm": "https",
        }
        rdkafka = {
            "security.protocol": LISTENER,
            "sasl.mechanism": mechanism,
            "sasl.username": user,
            "sasl.password": reference,
            "ssl.ca.location": str(self.ca.cert_pem),
            "ssl.endpoint.identification.algorithm": "https",
        }
        entry: dict[str, object] = {"bootstrap_servers": self.bootstrap_servers, "properties": java}
        if librdkafka:
            entry["admin_properties"] = rdkafka
        return entry
