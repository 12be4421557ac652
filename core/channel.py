"""The one client channel to the control plane, for jobs (heartbeats), the CLI, the clients
and the Airflow provider.

    channel = open_channel("cp.example:8087", ClientSecurity(ca=Path("ca.pem"), token=...))

One TLS rule for every caller: the channel is TLS as soon as any of the CA file, the client
certificate or its key is given (a client certificate without a CA verifies the server
against the system's roots), and plaintext only when none is; a certificate without its key,
or a key without its certificate, is a ConfigError. A token travels as
``authorization: Bearer <token>`` metadata on every call. gRPC's own call credentials refuse
a plaintext channel, so an interceptor adds it instead: a token over plaintext is for loopback
only, which the server enforces for its side (`serve` refuses a non-loopback address without
TLS).

A CLI's token comes from a file: `--token-file`, else $UATU_CONTROL_PLANE_TOKEN_FILE, else
`DEFAULT_TOKEN_FILE` (var/controlplane/admin.token, which `make controlplane` has the control
plane create) when it exists and the target is on this host (`default_token_file`).
"""

from __future__ import annotations

import collections
import ipaddress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import grpc.aio

from core.errors import ConfigError
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
    """How a client proves who it is and checks the server; all optional."""

    ca: Path | None = None  # PEM CA bundle that signed the server's certificate
    token: str | None = field(default=None, repr=False)
    cert: Path | None = None  # client certificate chain (PEM), for mTLS
    key: Path | None = None  # its private key

    def __post_init__(self) -> None:
        if (self.cert is None) != (self.key is None):
            given, missing = ("cert", "key") if self.key is None else ("key", "cert")
            raise ConfigError(
                f"control-plane client {given}", f"needs the client {missing} too (mTLS)"
            )

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

    @property
    def tls(self) -> bool:
        """The one rule: TLS as soon as any certificate file is given."""
        return self.ca is not None or self.cert is not None

    def channel_credentials(self) -> grpc.ChannelCredentials | None:
        if not self.tls:
            return None
        return grpc.ssl_channel_credentials(
            root_certificates=self.ca.read_bytes() if self.ca else None,
            private_key=self.key.read_bytes() if self.key else None,
            certificate_chain=self.cert.read_bytes() if self.cert else None,
        )

    def metadata(self) -> tuple[tuple[str, str], ...]:
        return (("authorization", f"Bearer {self.token}"),) if self.token else ()


class _CallDetails(
    collections.namedtuple(
        "_CallDetails",
        ("method", "timeout", "metadata", "credentials", "wait_for_ready", "compression"),
    ),
    grpc.ClientCallDetails,
):
    pass


def _with(details: Any, extra: tuple[tuple[str, str], ...]) -> _CallDetails:
    return _CallDetails(
        details.method,
        details.timeout,
        [*(details.metadata or ()), *extra],
        details.credentials,
        details.wait_for_ready,
        getattr(details, "compression", None),
    )


class BearerToken(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor):
    """Adds ``authorization: Bearer <token>`` to every unary and server-streaming call."""

    def __init__(self, security: ClientSecurity) -> None:
        self._metadata = security.metadata()

    def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        return continuation(_with(details, self._metadata), request)

    def intercept_unary_stream(self, continuation: Any, details: Any, request: Any) -> Any:
        return continuation(_with(details, self._metadata), request)


class _AioBearerToken(grpc.aio.UnaryUnaryClientInterceptor):
    """BearerToken for grpc.aio channels (Airflow's deferrable triggers)."""

    def __init__(self, security: ClientSecurity) -> None:
        self._metadata = security.metadata()

    async def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        metadata = grpc.aio.Metadata(*(details.metadata or ()), *self._metadata)
        return await continuation(details._replace(metadata=metadata), request)


def open_channel(target: str, security: ClientSecurity | None = None) -> grpc.Channel:
    """A channel to `target` (host:port) under the one TLS rule, adding the token if any."""
    security = security or ClientSecurity()
    credentials = security.channel_credentials()
    channel = (
        grpc.secure_channel(target, credentials)
        if credentials is not None
        else grpc.insecure_channel(target)
    )
    if security.token:
        channel = grpc.intercept_channel(channel, BearerToken(security))
    return channel


def open_aio_channel(target: str, security: ClientSecurity | None = None) -> grpc.aio.Channel:
    """`open_channel` for asyncio callers."""
    security = security or ClientSecurity()
    credentials = security.channel_credentials()
    interceptors = [_AioBearerToken(security)] if security.token else None
    if credentials is not None:
        return grpc.aio.secure_channel(target, credentials, interceptors=interceptors)
    return grpc.aio.insecure_channel(target, interceptors=interceptors)
