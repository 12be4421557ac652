"""core/channel.py: one channel to the control plane, one TLS rule, for every caller.

The rule: TLS as soon as any certificate file is given; a certificate and its key come
together. Held against a real gRPC server: a client that was given a certificate never talks
plaintext to it, and the token reaches the server on every call (sync and asyncio).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from core.channel import ClientSecurity, open_aio_channel, open_channel
from core.errors import ConfigError
from jobs.runtime.reporting import ReporterConfig
from testing.tls import TestCA


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> TestCA:
    return TestCA.create(tmp_path_factory.mktemp("pki"))


class _SeenMetadata(grpc.ServerInterceptor):
    def __init__(self) -> None:
        self.tokens: list[str] = []

    def intercept_service(self, continuation, details):  # type: ignore[no-untyped-def]
        self.tokens += [v for k, v in details.invocation_metadata if k == "authorization"]
        return continuation(details)


@pytest.fixture
def plaintext_server() -> Iterator[tuple[str, _SeenMetadata]]:
    seen = _SeenMetadata()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2), interceptors=[seen])
    health_pb2_grpc.add_HealthServicer_to_server(health.HealthServicer(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"127.0.0.1:{port}", seen
    finally:
        server.stop(None).wait()


def _check(channel: grpc.Channel) -> int:
    stub = health_pb2_grpc.HealthStub(channel)
    return stub.Check(health_pb2.HealthCheckRequest(), timeout=5).status


def test_tls_as_soon_as_any_certificate_file_is_given(pki: TestCA) -> None:
    client = pki.issue("client", client=True)
    assert not ClientSecurity().tls
    assert not ClientSecurity(token="t").tls
    assert ClientSecurity(ca=pki.cert_pem).tls
    assert ClientSecurity(cert=client.cert_pem, key=client.key_pem).tls  # system roots
    with pytest.raises(ConfigError, match=r"client cert.*needs the client key"):
        ClientSecurity(cert=client.cert_pem)
    with pytest.raises(ConfigError, match=r"client key.*needs the client cert"):
        ClientSecurity(key=client.key_pem)


def test_a_client_certificate_without_a_ca_never_talks_plaintext(
    pki: TestCA, plaintext_server: tuple[str, _SeenMetadata]
) -> None:
    """The heartbeat reporter once took a certificate without a CA as no TLS at all."""
    target, _ = plaintext_server
    client = pki.issue("client", client=True)
    env = {
        "UATU_CONTROL_PLANE": target,
        "UATU_CONTROL_PLANE_CERT": str(client.cert_pem),
        "UATU_CONTROL_PLANE_KEY": str(client.key_pem),
    }
    config = ReporterConfig.from_env(env)
    assert config is not None and config.security.tls
    with open_channel(target, config.security) as channel, pytest.raises(grpc.RpcError):
        _check(channel)
    with open_channel(target) as channel:  # the same server answers a plaintext client
        assert _check(channel) == health_pb2.HealthCheckResponse.SERVING


def test_the_token_reaches_the_server_on_every_call_sync_and_asyncio(
    plaintext_server: tuple[str, _SeenMetadata],
) -> None:
    target, seen = plaintext_server
    security = ClientSecurity(token="tok-1")
    with open_channel(target, security) as channel:
        _check(channel)
        _check(channel)

    async def aio_check() -> int:
        async with open_aio_channel(target, security) as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            reply = await stub.Check(health_pb2.HealthCheckRequest(), timeout=5)
            return reply.status

    assert asyncio.run(aio_check()) == health_pb2.HealthCheckResponse.SERVING
    assert seen.tokens == ["Bearer tok-1"] * 3


def test_a_token_file_is_read_and_stripped(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("secret-token\n")
    token_file.chmod(0o600)
    security = ClientSecurity.from_files(token_file=token_file)
    assert security.token == "secret-token" and "secret-token" not in repr(security)
