"""MasterAdminService over gRPC: proto in, domain call, proto out. Errors map in one place."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import wraps
from typing import Any, TypeVar

import grpc
from uber.data.kafka.datatransfer import master_admin_service_pb2 as admin_pb2
from uber.data.kafka.datatransfer import master_admin_service_pb2_grpc as admin_grpc

from controlplane.errors import grpc_status
from controlplane.jobgroups import JobGroups
from jobs.common.errors import UatuError

Handler = TypeVar("Handler", bound=Callable[..., Any])


def _domain_errors(handler: Handler) -> Handler:
    """Abort the call with the gRPC status of a project error; the message names the field."""

    @wraps(handler)
    def wrapper(self: Any, request: Any, context: grpc.ServicerContext) -> Any:
        try:
            return handler(self, request, context)
        except UatuError as e:
            context.abort(grpc_status(e), str(e))

    return wrapper  # type: ignore[return-value]


class MasterAdminServicer(admin_grpc.MasterAdminServiceServicer):
    def __init__(self, job_groups: JobGroups) -> None:
        self._groups = job_groups

    @_domain_errors
    def AddJobGroup(self, request, context):
        scale = request.scale_status if request.HasField("scale_status") else None
        group = self._groups.add(request.job_group, request.job_group_state, scale)
        return admin_pb2.AddJobGroupResponse(group=group)

    @_domain_errors
    def UpdateJobGroup(self, request, context):
        return admin_pb2.UpdateJobGroupResponse(group=self._groups.update(request.job_group))

    @_domain_errors
    def UpdateJobGroupState(self, request, context):
        group = self._groups.set_state(request.id, request.state)
        return admin_pb2.UpdateJobGroupStateResponse(group=group)

    @_domain_errors
    def DeleteJobGroup(self, request, context):
        self._groups.delete(request.id)
        return admin_pb2.DeleteJobGroupResponse()

    @_domain_errors
    def GetJobGroup(self, request, context):
        return admin_pb2.GetJobGroupResponse(group=self._groups.get(request.id))

    def GetAllJobGroups(
        self, request: Any, context: grpc.ServicerContext
    ) -> Iterator[admin_pb2.GetAllJobGroupsResponse]:
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
            total_used_messages_per_sec=scale.used_messages_per_sec,
            total_used_bytes_per_sec=scale.used_bytes_per_sec,
        )
