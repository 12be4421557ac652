"""The client side of the control plane's security: a channel that verifies the server (TLS
with a CA file), presents a client certificate (mTLS) and sends a bearer token.

    channel = open_channel("cp.example:8087", ClientSecurity(ca=Path("ca.pem"), token=...))

The token travels as ``authorization: Bearer <token>`` metadata on every call. gRPC's own
call credentials refuse a plaintext channel, so an interceptor adds it instead: a token over
plaintext is for loopback only, which the server enforces for its side (`serve` refuses a
non-loopback address without TLS).

The token comes from a file: `--token-file`, else $UATU_CONTROL_PLANE_TOKEN_FILE, else
`DEFAULT_TOKEN_FILE` (var/controlplane/admin.token, which `make controlplane` has the control
plane create) when it exists and the target is on this host (`default_token_file`).
"""

from __future__ import annotations

import collections
import ipaddress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from core.paths import VAR_DIR
from core.secret_files import read_secret_file

# The admin token `make controlplane` has its control plane create (serve --admin-token-file).
DEFAULT_TOKEN_FILE = VAR_DIR / "controlplane" / "admin.token"


def is_loopback(address: str) -> bool:
    """True when host:port binds only the loopback interface (127.0.0.0/8, ::1, localhost)."""
    host = address.rpartition(":")[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name, or no host at all (every interface)


def default_token_file(target: str) -> Path | None:
    """DEFAULT_TOKEN_FILE when it exists and `target` is on this host, else None: the local
    control plane's token is never sent to another host."""
    return DEFAULT_TOKEN_FILE if is_loopback(target) and DEFAULT_TOKEN_FILE.is_file() else None


@dataclass(frozen=True)
class ClientSecurity:
    ca: Path | None = None  # PEM CA bundle that signed the server's certificate: TLS on
    token: str | None = None
    cert: Path | None = None  # client certificate chain (PEM), for mTLS
    key: Path | None = None

    @classmethod
    def from_files(
        cls,
        *,
        ca: Path | None = None,
        token_file: Path | None = None,
        cert: Path | None = None,
        key: Path | None = None,
    ) -> ClientSecurity:
        token = read_secret_file(token_file, "token file").strip() if token_file else None
        return cls(ca=ca, token=token or None, cert=cert, key=key)

    def channel_credentials(self) -> grpc.ChannelCredentials | None:
        if self.ca is None and self.cert is None:
            return None
        return grpc.ssl_channel_credentials(
            root_certificates=self.ca.read_bytes() if self.ca else None,
            private_key=self.key.read_bytes() if self.key else None,
            certificate_chain=self.cert.read_bytes() if self.cert else None,
        )


class _CallDetails(
    collections.namedtuple(
        "_CallDetails",
        ("method", "timeout", "metadata", "credentials", "wait_for_ready", "compression"),
    ),
    grpc.ClientCallDetails,
):
    pass


class BearerToken(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor):
    """Adds ``authorization: Bearer <token>`` to every unary and server-streaming call."""

    def __init__(self, token: str) -> None:
        self._header = ("authorization", f"Bearer {token}")

    def _with_token(self, details: Any) -> _CallDetails:
        return _CallDetails(
            details.method,
            details.timeout,
            [*(details.metadata or ()), self._header],
            details.credentials,
            details.wait_for_ready,
            details.compression,
        )

    def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        return continuation(self._with_token(details), request)

    def intercept_unary_stream(self, continuation: Any, details: Any, request: Any) -> Any:
        return continuation(self._with_token(details), request)


def open_channel(target: str, security: ClientSecurity | None = None) -> grpc.Channel:
    security = security or ClientSecurity()
    credentials = security.channel_credentials()
    channel = (
        grpc.secure_channel(target, credentials)
        if credentials is not None
        else grpc.insecure_channel(target)
    )
    if security.token:
        channel = grpc.intercept_channel(channel, BearerToken(security.token))
    return channel
