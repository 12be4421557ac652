"""Control-plane errors and the one table that maps every project error to a gRPC status.

A message that names a caller's id shows it through `core.errors.shown` (repr, cut to a
bounded length): an unknown or hostile id (a megabyte, control characters) never comes back
whole in a status message or a log line.
"""

from __future__ import annotations

import grpc

from core.errors import ClusterUnreachable, ConfigError, InvalidJobGroup, UatuError, shown


class JobGroupExists(UatuError):
    def __init__(self, job_group_id: str) -> None:
        super().__init__(f"job group {shown(job_group_id)} already exists")


class JobGroupNotFound(UatuError):
    def __init__(self, job_group_id: str) -> None:
        super().__init__(f"job group {shown(job_group_id)} not found")


class WorkerNotFound(UatuError):
    """A heartbeat from a worker id this control plane has no record of: register again."""

    def __init__(self, worker_id: int) -> None:
        super().__init__(f"worker {worker_id} is not registered")


class StaleWrite(UatuError):
    """A compare-and-swap lost: the record changed since it was read."""

    def __init__(self, job_group_id: str, expected: int, actual: int | None) -> None:
        super().__init__(
            f"job group {shown(job_group_id)} changed concurrently "
            f"(expected version {expected}, found {actual})"
        )


class NotLeader(UatuError):
    """A leader-only call reached a replica that does not lead (or no longer does).

    `leader` is the current leader's advertised address, None while nobody leads.
    """

    def __init__(self, leader: str | None) -> None:
        self.leader = leader
        where = f"the leader is {leader}" if leader else "no leader is elected right now"
        super().__init__(f"not the leader; {where}")


class StoreUnavailable(UatuError):
    """The store (etcd) did not answer, or answered that it cannot serve right now."""

    def __init__(self, endpoint: str, detail: str) -> None:
        self.endpoint = endpoint
        super().__init__(f"store at {endpoint} is unavailable: {detail}")


class LaunchFailed(UatuError):
    """The cluster manager (kubectl, a Spark master) failed a launch, status or cancel call.

    `detail` carries what the tool said (kubectl's stderr), so one line is enough to act on.
    """

    def __init__(self, action: str, handle: str, detail: str) -> None:
        self.action = action
        self.handle = handle
        self.detail = detail
        super().__init__(f"{action} of {handle} failed: {detail}")


class NoWorkerRoom(LaunchFailed):
    """`serve --workers`: no live worker application has room for one more JobGroup; the
    group waits for the next reconcile pass (a worker starting, or a group leaving)."""

    def __init__(self, job_group_id: str, detail: str) -> None:
        super().__init__("placement", job_group_id, detail)


class Unauthenticated(UatuError):
    """An admin call without a valid token or client certificate."""

    def __init__(self, method: str) -> None:
        super().__init__(
            f"{method} needs a bearer token or a client certificate the control plane knows"
        )


class PermissionDenied(UatuError):
    """A known caller whose role does not allow the call (a read-only token on a write)."""

    def __init__(self, principal: str, role: str, method: str) -> None:
        super().__init__(f"{principal!r} (role {role}) may not call {method}")


class WorkerRefused(UatuError):
    """A RegisterWorker or Heartbeat whose worker id and secret match no launch: a worker
    the control plane did not start (and external workers are not allowed), or a forgery."""

    def __init__(self, worker_id: int, reason: str) -> None:
        super().__init__(f"worker {worker_id} refused: {reason}")


class LookupsBusy(UatuError):
    """Every broker-lookup slot is taken by slow clusters; the call is refused at once
    rather than holding a gRPC thread that heartbeats need."""

    def __init__(self, slots: int) -> None:
        super().__init__(f"all {slots} broker lookups are in progress; retry shortly")


class LimitReached(UatuError):
    """A configured cap (groups stored, applications running) would be exceeded."""

    def __init__(self, what: str, limit: int) -> None:
        super().__init__(f"{what} limit of {limit} reached")


# Most specific first: InvalidJobGroup subclasses (unknown cluster, missing topic) included.
GRPC_STATUS: list[tuple[type[Exception], grpc.StatusCode]] = [
    (JobGroupExists, grpc.StatusCode.ALREADY_EXISTS),
    (JobGroupNotFound, grpc.StatusCode.NOT_FOUND),
    (WorkerNotFound, grpc.StatusCode.NOT_FOUND),
    (InvalidJobGroup, grpc.StatusCode.INVALID_ARGUMENT),
    (StaleWrite, grpc.StatusCode.ABORTED),
    (NotLeader, grpc.StatusCode.FAILED_PRECONDITION),
    (ClusterUnreachable, grpc.StatusCode.UNAVAILABLE),
    (LaunchFailed, grpc.StatusCode.UNAVAILABLE),
    (ConfigError, grpc.StatusCode.FAILED_PRECONDITION),
    (StoreUnavailable, grpc.StatusCode.UNAVAILABLE),
    (Unauthenticated, grpc.StatusCode.UNAUTHENTICATED),
    (PermissionDenied, grpc.StatusCode.PERMISSION_DENIED),
    (WorkerRefused, grpc.StatusCode.UNAUTHENTICATED),
    (LookupsBusy, grpc.StatusCode.UNAVAILABLE),
    (LimitReached, grpc.StatusCode.RESOURCE_EXHAUSTED),
]


def grpc_status(error: Exception) -> grpc.StatusCode:
    for kind, code in GRPC_STATUS:
        if isinstance(error, kind):
            return code
    return grpc.StatusCode.INTERNAL
