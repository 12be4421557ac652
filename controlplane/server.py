"""Build and run the control-plane gRPC server: admin and worker services, health, reflection.

`create_server(address, job_groups, workers, leadership, security=..., interceptors=())`
returns
`(server, port, health)` without blocking, so tests bind `127.0.0.1:0`. `serve` also
campaigns for leadership and runs the reconciler loop in a thread, blocks until
SIGTERM/SIGINT, then resigns, marks the health service NOT_SERVING and stops with a grace
period so in-flight calls finish.

`ServerSecurity` says how callers are let in: TLS (a certificate chain and key), mTLS (a
client CA: every connection must then present a certificate it signed), the auth policy the
interceptor of `controlplane/auth.py` checks on every admin call, and whether server
reflection is on (off unless asked for; it describes every RPC to whoever connects).
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Sequence
from concurrent import futures
from dataclasses import dataclass, field

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from uber.data.kafka.datatransfer import master_admin_service_pb2 as admin_pb2
from uber.data.kafka.datatransfer import master_admin_service_pb2_grpc as admin_grpc
from uber.data.kafka.datatransfer import master_worker_service_pb2 as mw_pb2
from uber.data.kafka.datatransfer import master_worker_service_pb2_grpc as mw_grpc

from controlplane.auth import (
    ADMIN_TOKEN_PRINCIPAL,
    AuthInterceptor,
    AuthPolicy,
    Principal,
    Role,
    admit_token,
)
from controlplane.jobgroups import JobGroups
from controlplane.reconciler import Reconciler
from controlplane.service import MasterAdminServicer, MasterWorkerServicer
from controlplane.state.leadership import Leadership
from controlplane.workers import Workers

log = logging.getLogger("uatu.controlplane")

MAX_REQUEST_BYTES = 2 << 20
ADMIN_SERVICE = admin_pb2.DESCRIPTOR.services_by_name["MasterAdminService"].full_name
WORKER_SERVICE = mw_pb2.DESCRIPTOR.services_by_name["MasterWorkerService"].full_name


@dataclass(frozen=True)
class ServerSecurity:
    """PEM bytes for TLS and mTLS, the admin auth policy, reflection. All off by default: the
    caller (`assembly.ServeOptions`) refuses that on anything but loopback."""

    tls_cert_chain: bytes | None = None
    tls_key: bytes | None = None
    client_ca: bytes | None = None
    policy: AuthPolicy | None = None
    reflection: bool = False
    admin_token: str | None = field(default=None, repr=False)  # --admin-token-file's

    @property
    def tls(self) -> bool:
        return self.tls_cert_chain is not None

    def effective_policy(self) -> AuthPolicy | None:
        """The policy the interceptor enforces: the auth file's; with mTLS and no auth file,
        every certificate the client CA signed is an admin; plus the admin token if any."""
        policy = self.policy
        if policy is None and self.client_ca is not None:
            policy = AuthPolicy(any_certificate=Principal("client-certificate", Role.ADMIN))
        if self.admin_token is not None:
            policy = admit_token(policy, self.admin_token, ADMIN_TOKEN_PRINCIPAL)
        return policy

    def credentials(self) -> grpc.ServerCredentials:
        assert self.tls_cert_chain is not None and self.tls_key is not None
        return grpc.ssl_server_credentials(
            [(self.tls_key, self.tls_cert_chain)],
            root_certificates=self.client_ca,
            require_client_auth=self.client_ca is not None,
        )


def create_server(
    address: str,
    job_groups: JobGroups,
    workers: Workers,
    leadership: Leadership,
    threads: int = 8,
    security: ServerSecurity | None = None,
    interceptors: Sequence[grpc.ServerInterceptor] = (),
) -> tuple[grpc.Server, int, health.HealthServicer]:
    security = security or ServerSecurity()
    policy = security.effective_policy()
    # Interceptors run in list order around every RPC: the caller's (metrics, which count
    # refused calls too) first, then authentication.
    chain = [*interceptors, *([AuthInterceptor(policy)] if policy is not None else [])]
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=threads),
        interceptors=chain,
        # A JobGroup is a few hundred bytes (at most 1 MiB as JSON): refuse 4 MiB requests.
        options=[("grpc.max_receive_message_length", MAX_REQUEST_BYTES)],
    )
    admin_grpc.add_MasterAdminServiceServicer_to_server(
        MasterAdminServicer(job_groups, leadership), server
    )
    mw_grpc.add_MasterWorkerServiceServicer_to_server(MasterWorkerServicer(workers), server)
    health_servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    if security.reflection:
        reflection.enable_server_reflection(
            (
                ADMIN_SERVICE,
                WORKER_SERVICE,
                health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
                reflection.SERVICE_NAME,
            ),
            server,
        )
    if security.tls:
        port = server.add_secure_port(address, security.credentials())
    else:
        port = server.add_insecure_port(address)
    if port == 0:
        raise OSError(f"cannot bind the control plane to {address}")
    for name in ("", ADMIN_SERVICE, WORKER_SERVICE):
        health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    return server, port, health_servicer


def serve(
    address: str,
    job_groups: JobGroups,
    workers: Workers,
    leadership: Leadership,
    reconciler: Reconciler | None = None,
    grace_seconds: float = 10.0,
    security: ServerSecurity | None = None,
    interceptors: Sequence[grpc.ServerInterceptor] = (),
) -> None:
    """Serve until SIGTERM/SIGINT. Running Spark applications are left running on purpose:
    their launch records are in the store and the next control plane adopts them."""
    server, port, health_servicer = create_server(
        address, job_groups, workers, leadership, security=security, interceptors=interceptors
    )
    stopping = threading.Event()

    def request_stop(signum: int, _frame: object) -> None:
        log.info("received %s, stopping", signal.Signals(signum).name)
        stopping.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, request_stop)
    server.start()
    leadership.start()
    security = security or ServerSecurity()
    log.info(
        "control plane listening on %s (port %d; %s, admin auth %s)",
        address, port, "TLS" if security.tls else "plaintext",
        "on" if security.effective_policy() else "OFF",
    )  # fmt: skip
    loop = None
    if reconciler is not None:
        loop = threading.Thread(target=reconciler.run, args=(stopping,), name="reconciler")
        loop.start()
    stopping.wait()
    if reconciler is not None and loop is not None:
        reconciler.wake()
        loop.join()
    leadership.stop()  # resign at once, so a follower need not wait out the lease
    # Tell load balancers first, then let in-flight calls finish within the grace period.
    health_servicer.enter_graceful_shutdown()
    server.stop(grace_seconds).wait()
    log.info("control plane stopped")
