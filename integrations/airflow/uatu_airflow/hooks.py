"""`UatuControlPlaneHook`: the control plane's gRPC admin API (uForwarder's MasterAdminService).

Connection (type `uatu_control_plane`): host and port of the control plane. Extras, all
optional, for a control plane that requires them (the authentication issue adds them there):

* `ca_cert`, `client_cert`, `client_key`: PEM file paths; any of them switches to TLS (the
  control plane's one channel rule, core/channel.py);
* `token`: sent as `authorization: Bearer <token>` metadata on every call;
* `timeout`: seconds per call (default 10).

Without a connection id, `target` (host:port) and the same keywords can be given directly.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from airflow.sdk import BaseHook
from google.protobuf import json_format
from uatu.v1 import job_options_pb2  # noqa: F401  (registers JobOptions for `extension`)
from uber.data.kafka.datatransfer import job_pb2
from uber.data.kafka.datatransfer import master_admin_service_pb2 as admin_pb2
from uber.data.kafka.datatransfer import master_admin_service_pb2_grpc as admin_grpc
from uber.data.kafka.datatransfer.job_group_pb2 import JobGroup, StoredJobGroup

from core.channel import ClientSecurity, open_aio_channel, open_channel


@dataclass(frozen=True)
class ControlPlaneSettings:
    target: str
    ca_cert: str | None = None
    client_cert: str | None = None
    client_key: str | None = None
    token: str | None = None
    timeout: float = 10.0

    def security(self) -> ClientSecurity:
        def path(value: str | None) -> Path | None:
            return Path(value) if value else None

        return ClientSecurity(
            ca=path(self.ca_cert),
            token=self.token,
            cert=path(self.client_cert),
            key=path(self.client_key),
        )


def load_group(source: str | dict | JobGroup) -> JobGroup:
    """A JobGroup from a JSON file path, a dict in the protobuf JSON mapping, or itself."""
    if isinstance(source, JobGroup):
        return source
    data = (
        source if isinstance(source, dict) else __import__("json").loads(Path(source).read_text())
    )
    return json_format.ParseDict(data, JobGroup())


class UatuControlPlaneHook(BaseHook):
    conn_name_attr = "uatu_conn_id"
    default_conn_name = "uatu_control_plane_default"
    conn_type = "uatu_control_plane"
    hook_name = "uatu-spark control plane"

    def __init__(self, uatu_conn_id: str | None = None, target: str | None = None, **tls: Any):
        super().__init__()
        self.uatu_conn_id = uatu_conn_id
        self._target = target
        self._tls = tls

    def settings(self) -> ControlPlaneSettings:
        if self._target:
            return ControlPlaneSettings(self._target, **self._tls)
        conn = self.get_connection(self.uatu_conn_id or self.default_conn_name)
        extra = conn.extra_dejson
        return ControlPlaneSettings(
            target=f"{conn.host}:{conn.port}",
            ca_cert=extra.get("ca_cert"),
            client_cert=extra.get("client_cert"),
            client_key=extra.get("client_key"),
            token=extra.get("token") or conn.password or None,
            timeout=float(extra.get("timeout", 10)),
        )

    def channel(self, *, aio: bool = False) -> Any:
        """A gRPC channel (grpc.aio's for triggers), TLS when the connection has certificates,
        the token on every call."""
        s = self.settings()
        opened = open_aio_channel if aio else open_channel
        return opened(s.target, s.security())

    def _call(self, method: str, request: Any) -> Any:
        s = self.settings()
        with self.channel() as channel:
            stub = admin_grpc.MasterAdminServiceStub(channel)
            return getattr(stub, method)(request, timeout=s.timeout)

    def get_group(self, job_group_id: str) -> StoredJobGroup | None:
        try:
            return self._call("GetJobGroup", admin_pb2.GetJobGroupRequest(id=job_group_id)).group
        except grpc.RpcError as e:
            if e.code() == grpc.StatusCode.NOT_FOUND:  # type: ignore[attr-defined]
                return None
            raise

    def submit(self, group: JobGroup) -> StoredJobGroup:
        """Add the JobGroup, or update its definition if it exists; expected state RUNNING."""
        if self.get_group(group.job_group_id) is None:
            request = admin_pb2.AddJobGroupRequest(
                job_group=group, job_group_state=job_pb2.JOB_STATE_RUNNING
            )
            return self._call("AddJobGroup", request).group
        self._call("UpdateJobGroup", admin_pb2.UpdateJobGroupRequest(job_group=group))
        request = admin_pb2.UpdateJobGroupStateRequest(
            id=group.job_group_id, state=job_pb2.JOB_STATE_RUNNING
        )
        return self._call("UpdateJobGroupState", request).group

    def set_state(self, job_group_id: str, state: str) -> StoredJobGroup:
        request = admin_pb2.UpdateJobGroupStateRequest(
            id=job_group_id, state=job_pb2.JobState.Value(state)
        )
        return self._call("UpdateJobGroupState", request).group

    @staticmethod
    def running(group: StoredJobGroup) -> bool:
        """Every job of the group has been heard from by a worker (a heartbeat arrived)."""
        return bool(group.jobs) and all(j.worker_id for j in group.jobs)

    def test_connection(self) -> tuple[bool, str]:
        try:
            self._call("GetClusterScaleStatus", admin_pb2.GetClusterScaleStatusRequest())
        except grpc.RpcError as e:
            return False, f"{e.code().name}: {e.details()}"  # type: ignore[attr-defined]
        return True, "control plane answered"
