"""MasterAdminService and MasterWorkerService over gRPC: proto in, domain call, proto out.

Optimistic concurrency rides on metadata (`VERSION_HEADER`, `EXPECTED_VERSION_HEADER`), so
uForwarder's request and response messages stay as they are.

Project errors become gRPC statuses in one place (`controlplane.errors.GRPC_STATUS`). A
follower answers every admin call but GetClusterScaleStatus with FAILED_PRECONDITION, whose
message names the leader and whose `google.rpc.PreconditionFailure` detail (type
"not-leader", description = leader host:port) is what uForwarder's master sends.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import wraps
from typing import Any, TypeVar

import grpc
from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status
from uber.data.kafka.datatransfer import master_admin_service_pb2 as admin_pb2
from uber.data.kafka.datatransfer import master_admin_service_pb2_grpc as admin_grpc
from uber.data.kafka.datatransfer import master_worker_service_pb2 as mw_pb2
from uber.data.kafka.datatransfer import master_worker_service_pb2_grpc as mw_grpc

from controlplane.auth import WORKER_SECRET_HEADER
from controlplane.errors import NotLeader, grpc_status
from controlplane.jobgroups import JobGroups
from controlplane.state.leadership import Leadership
from controlplane.workers import Reply, Workers
from core.errors import InvalidJobGroup, UatuError

# Optimistic concurrency without changing uForwarder's messages: every answer about one group
# carries its stored version in trailing metadata, and a write may carry the version it was
# based on; a write based on a version that is no longer current fails with ABORTED.
VERSION_HEADER = "uatu-version"
EXPECTED_VERSION_HEADER = "uatu-expected-version"

Handler = TypeVar("Handler", bound=Callable[..., Any])


def _domain_errors(handler: Handler) -> Handler:
    """Abort the call with the gRPC status of a project error; the message names the field."""

    @wraps(handler)
    def wrapper(self: Any, request: Any, context: grpc.ServicerContext) -> Any:
        try:
            return handler(self, request, context)
        except NotLeader as e:
            context.abort_with_status(not_leader_status(e))
        except UatuError as e:
            context.abort(grpc_status(e), str(e))

    return wrapper  # type: ignore[return-value]


def not_leader_status(error: NotLeader) -> grpc.Status:
    detail = any_pb2.Any()
    detail.Pack(
        error_details_pb2.PreconditionFailure(
            violations=[
                error_details_pb2.PreconditionFailure.Violation(
                    type="not-leader", subject="leader", description=error.leader or ""
                )
            ]
        )
    )
    return rpc_status.to_status(
        status_pb2.Status(code=code_pb2.FAILED_PRECONDITION, message=str(error), details=[detail])
    )


class MasterAdminServicer(admin_grpc.MasterAdminServiceServicer):
    def __init__(self, job_groups: JobGroups, leadership: Leadership) -> None:
        self._groups = job_groups
        self._leadership = leadership

    def _require_leader(self) -> None:
        if not self._leadership.is_leader():
            raise NotLeader(self._leadership.leader())

    @_domain_errors
    def AddJobGroup(self, request, context):
        self._require_leader()
        scale = request.scale_status if request.HasField("scale_status") else None
        added = self._groups.add_versioned(request.job_group, request.job_group_state, scale)
        _send_version(context, added.version)
        return admin_pb2.AddJobGroupResponse(group=added.group)

    @_domain_errors
    def UpdateJobGroup(self, request, context):
        self._require_leader()
        updated = self._groups.update_versioned(request.job_group, _expected_version(context))
        _send_version(context, updated.version)
        return admin_pb2.UpdateJobGroupResponse(group=updated.group)

    @_domain_errors
    def UpdateJobGroupState(self, request, context):
        self._require_leader()
        updated = self._groups.set_state_versioned(
            request.id, request.state, _expected_version(context)
        )
        _send_version(context, updated.version)
        return admin_pb2.UpdateJobGroupStateResponse(group=updated.group)

    @_domain_errors
    def DeleteJobGroup(self, request, context):
        self._require_leader()
        self._groups.delete(request.id, _expected_version(context))
        return admin_pb2.DeleteJobGroupResponse()

    @_domain_errors
    def GetJobGroup(self, request, context):
        self._require_leader()
        found = self._groups.get_versioned(request.id)
        _send_version(context, found.version)
        return admin_pb2.GetJobGroupResponse(group=found.group)

    @_domain_errors
    def GetAllJobGroups(self, request, context):
        self._require_leader()  # before streaming starts, so a follower's error is clean
        return self._all_job_groups()

    def _all_job_groups(self) -> Iterator[admin_pb2.GetAllJobGroupsResponse]:
        for stored in self._groups.all():
            yield admin_pb2.GetAllJobGroupsResponse(
                job_group=stored.job_group,
                job_group_state=stored.state,
                scale_status=stored.scale_status,
            )

    @_domain_errors
    def GetClusterScaleStatus(self, request, context):
        scale = self._groups.cluster_scale()
        return admin_pb2.GetClusterScaleStatusResponse(
            total_jobgroup_count=scale.running_groups,
            total_worker_count=scale.working_workers,
            total_allowed_messages_per_sec=scale.allowed_messages_per_sec,
            total_allowed_bytes_per_sec=scale.allowed_bytes_per_sec,
            total_used_messages_per_sec=scale.used_messages_per_sec,
            total_used_bytes_per_sec=scale.used_bytes_per_sec,
        )


class MasterWorkerServicer(mw_grpc.MasterWorkerServiceServicer):
    def __init__(self, workers: Workers) -> None:
        self._workers = workers

    @_domain_errors
    def RegisterWorker(self, request, context):
        reply = self._workers.register(request.participants.worker, _worker_secret(context))
        return mw_pb2.RegisterWorkerResponse(participants=_participants(reply))

    @_domain_errors
    def Heartbeat(self, request, context):
        reply = self._workers.heartbeat(
            request.participants.worker, request.job_status, _worker_secret(context)
        )
        return mw_pb2.HeartbeatResponse(
            participants=_participants(reply), commands=list(reply.commands)
        )


def _send_version(context: grpc.ServicerContext, version: int) -> None:
    """The stored version of the group in the answer, as an ETag (`uatu-version` metadata)."""
    context.set_trailing_metadata(((VERSION_HEADER, str(version)),))


def _expected_version(context: grpc.ServicerContext) -> int | None:
    """The version a write is conditional on (`uatu-expected-version`), None if unconditional."""
    for key, value in context.invocation_metadata() or ():
        if key == EXPECTED_VERSION_HEADER:
            try:
                return int(value)
            except (TypeError, ValueError):
                raise InvalidJobGroup(EXPECTED_VERSION_HEADER, value, "not a version") from None
    return None


def _worker_secret(context: grpc.ServicerContext) -> str | None:
    for key, value in context.invocation_metadata() or ():
        if key == WORKER_SECRET_HEADER and isinstance(value, str):
            return value
    return None


def _participants(reply: Reply) -> mw_pb2.Participants:
    return mw_pb2.Participants(master=reply.master, worker=reply.worker)
