"""Build and run the control-plane gRPC server: admin and worker services, health, reflection.

`create_server(address, job_groups, workers, leadership, interceptors=())` returns
`(server, port, health)` without blocking, so tests bind `127.0.0.1:0`. `serve` also
campaigns for leadership and runs the reconciler loop in a thread, blocks until
SIGTERM/SIGINT, then resigns, marks the health service NOT_SERVING and stops with a grace
period so in-flight calls finish.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Sequence
from concurrent import futures

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from uber.data.kafka.datatransfer import master_admin_service_pb2 as admin_pb2
from uber.data.kafka.datatransfer import master_admin_service_pb2_grpc as admin_grpc
from uber.data.kafka.datatransfer import master_worker_service_pb2 as mw_pb2
from uber.data.kafka.datatransfer import master_worker_service_pb2_grpc as mw_grpc

from controlplane.jobgroups import JobGroups
from controlplane.reconciler import Reconciler
from controlplane.service import MasterAdminServicer, MasterWorkerServicer
from controlplane.state.leadership import Leadership
from controlplane.workers import Workers

log = logging.getLogger("uatu.controlplane")

ADMIN_SERVICE = admin_pb2.DESCRIPTOR.services_by_name["MasterAdminService"].full_name
WORKER_SERVICE = mw_pb2.DESCRIPTOR.services_by_name["MasterWorkerService"].full_name


def create_server(
    address: str,
    job_groups: JobGroups,
    workers: Workers,
    leadership: Leadership,
    threads: int = 8,
    interceptors: Sequence[grpc.ServerInterceptor] = (),
) -> tuple[grpc.Server, int, health.HealthServicer]:
    # Interceptors run in list order around every RPC: metrics (controlplane/metrics.py),
    # authentication, ... are added by whoever assembles the server, not wired in here.
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=threads), interceptors=list(interceptors)
    )
    admin_grpc.add_MasterAdminServiceServicer_to_server(
        MasterAdminServicer(job_groups, leadership), server
    )
    mw_grpc.add_MasterWorkerServiceServicer_to_server(MasterWorkerServicer(workers), server)
    health_servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection(
        (
            ADMIN_SERVICE,
            WORKER_SERVICE,
            health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
            reflection.SERVICE_NAME,
        ),
        server,
    )
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
    interceptors: Sequence[grpc.ServerInterceptor] = (),
) -> None:
    """Serve until SIGTERM/SIGINT. Running Spark applications are left running on purpose:
    their launch records are in the store and the next control plane adopts them."""
    server, port, health_servicer = create_server(
        address, job_groups, workers, leadership, interceptors=interceptors
    )
    stopping = threading.Event()

    def request_stop(signum: int, _frame: object) -> None:
        log.info("received %s, stopping", signal.Signals(signum).name)
        stopping.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, request_stop)
    server.start()
    leadership.start()
    log.info("control plane listening on %s (port %d)", address, port)
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
