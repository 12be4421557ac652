"""Control-plane errors and the one table that maps every project error to a gRPC status."""

from __future__ import annotations

import grpc

from jobs.common.errors import ClusterUnreachable, ConfigError, InvalidJobGroup, UatuError


class JobGroupExists(UatuError):
    def __init__(self, job_group_id: str) -> None:
        super().__init__(f"job group {job_group_id!r} already exists")


class JobGroupNotFound(UatuError):
    def __init__(self, job_group_id: str) -> None:
        super().__init__(f"job group {job_group_id!r} not found")


class StaleWrite(UatuError):
    """A compare-and-swap lost: the record changed since it was read."""

    def __init__(self, job_group_id: str, expected: int, actual: int | None) -> None:
        super().__init__(
            f"job group {job_group_id!r} changed concurrently "
            f"(expected version {expected}, found {actual})"
        )


# Most specific first: InvalidJobGroup subclasses (unknown cluster, missing topic) included.
GRPC_STATUS: list[tuple[type[Exception], grpc.StatusCode]] = [
    (JobGroupExists, grpc.StatusCode.ALREADY_EXISTS),
    (JobGroupNotFound, grpc.StatusCode.NOT_FOUND),
    (InvalidJobGroup, grpc.StatusCode.INVALID_ARGUMENT),
    (StaleWrite, grpc.StatusCode.ABORTED),
    (ClusterUnreachable, grpc.StatusCode.UNAVAILABLE),
    (ConfigError, grpc.StatusCode.FAILED_PRECONDITION),
]


def grpc_status(error: Exception) -> grpc.StatusCode:
    for kind, code in GRPC_STATUS:
        if isinstance(error, kind):
            return code
    return grpc.StatusCode.INTERNAL
