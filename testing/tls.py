"""A throwaway certificate authority for tests: a self-signed CA made in the test, and
server or client certificates it signs, written as PEM files (and PKCS#12 where Java wants a
keystore). Nothing here is for production; keys are 2048-bit RSA for speed and portability.

    ca = TestCA.create(tmp_path / "pki")
    server = ca.issue("server", hosts=("127.0.0.1", "localhost"))
    client = ca.issue("ops-cli", client=True)
    server.cert_pem, server.key_pem, ca.cert_pem     # Paths
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_CA_KEY_USAGE = x509.KeyUsage(
    digital_signature=True, content_commitment=False, key_encipherment=False,
    data_encipherment=False, key_agreement=False, key_cert_sign=True,
    crl_sign=True, encipher_only=False, decipher_only=False,
)  # fmt: skip


@dataclass(frozen=True)
class Issued:
    """One certificate and its key as files (the key file is 0600)."""

    name: str
    cert_pem: Path
    key_pem: Path
    chain_pem: Path  # the certificate followed by the CA's

    def pkcs12(self, password: str, path: Path | None = None) -> Path:
        """The key and chain as a PKCS#12 keystore (Java's default keystore type)."""
        key = serialization.load_pem_private_key(self.key_pem.read_bytes(), None)
        certs = x509.load_pem_x509_certificates(self.chain_pem.read_bytes())
        data = pkcs12.serialize_key_and_certificates(
            self.name.encode(),
            key,  # type: ignore[arg-type]
            certs[0],
            certs[1:],
            serialization.BestAvailableEncryption(password.encode()),
        )
        target = path or self.cert_pem.with_suffix(".p12")
        _write_private(target, data)
        return target


@dataclass(frozen=True)
class TestCA:
    directory: Path
    cert_pem: Path
    key_pem: Path

    __test__ = False  # not a pytest test class, despite its name

    @classmethod
    def create(cls, directory: Path, name: str = "uatu test CA") -> TestCA:
        directory.mkdir(parents=True, exist_ok=True)
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = dt.datetime.now(dt.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(_CA_KEY_USAGE, critical=True)
            .sign(key, hashes.SHA256())
        )
        ca = cls(directory, directory / "ca.pem", directory / "ca-key.pem")
        ca.cert_pem.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_private(ca.key_pem, _key_bytes(key))
        return ca

    def issue(self, name: str, *, hosts: tuple[str, ...] = (), client: bool = False) -> Issued:
        """A certificate for `name` (its CN); `hosts` become DNS or IP SANs (a server's)."""
        ca_key = serialization.load_pem_private_key(self.key_pem.read_bytes(), None)
        ca_cert = x509.load_pem_x509_certificate(self.cert_pem.read_bytes())
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        now = dt.datetime.now(dt.UTC)
        sans: list[x509.GeneralName] = []
        for host in hosts or (name,):
            try:
                sans.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                sans.append(x509.DNSName(host))
        # A server may be its own client (etcd's gateway dials etcd with its server certificate).
        usage = (
            [ExtendedKeyUsageOID.CLIENT_AUTH]
            if client
            else [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
        )
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
            .issuer_name(ca_cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(x509.ExtendedKeyUsage(usage), critical=False)
            .sign(ca_key, hashes.SHA256())  # type: ignore[arg-type]
        )
        pem = cert.public_bytes(serialization.Encoding.PEM)
        issued = Issued(
            name,
            self.directory / f"{name}.pem",
            self.directory / f"{name}-key.pem",
            self.directory / f"{name}-chain.pem",
        )
        issued.cert_pem.write_bytes(pem)
        issued.chain_pem.write_bytes(pem + self.cert_pem.read_bytes())
        _write_private(issued.key_pem, _key_bytes(key))
        return issued


def _key_bytes(key: rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _write_private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
