"""`python -m controlplane`: run the control plane, or talk to one as an operator.

    python -m controlplane serve [--address 127.0.0.1:8087] [--store var/controlplane.sqlite]
    python -m controlplane add GROUP.json [--state JOB_STATE_CANCELED]
    python -m controlplane get ID | list | set-state ID STATE | update GROUP.json | delete ID
    python -m controlplane scale

Client commands take `--target host:port` (default: the first address of
$UATU_CONTROL_PLANE, the variable the jobs read too, else 127.0.0.1:8087), `--json` and
`--timeout SECONDS` (default 10: the deadline of each call); against a secured control plane
`--ca FILE` (TLS), `--token-file FILE` (a bearer token) and `--cert`/`--key` (mTLS),
defaulting to $UATU_CONTROL_PLANE_CA, $UATU_CONTROL_PLANE_TOKEN_FILE,
$UATU_CONTROL_PLANE_CERT and $UATU_CONTROL_PLANE_KEY. Without a token file, a target on this
host gets the token `make controlplane` created (var/controlplane/admin.token) if it exists.
On error they print the server's message in one line and exit 1 (2 for a bad request); a
call unanswered within --timeout is an error too.

`get` shows the group's version; `update --expected-version N` (and `set-state`, `delete`)
then applies only if nobody changed the group since version N, and says so otherwise.
Without it, `update` and `set-state` apply to the current version, retrying when a
concurrent write lands first.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc
from google.protobuf import json_format
from google.protobuf.message import Message
from uatu.v1 import worker_job_pb2  # noqa: F401  (a job's extension, shown as JSON)
from uber.data.kafka.datatransfer import job_pb2
from uber.data.kafka.datatransfer import master_admin_service_pb2 as admin_pb2
from uber.data.kafka.datatransfer import master_admin_service_pb2_grpc as admin_grpc

from controlplane.service import EXPECTED_VERSION_HEADER, VERSION_HEADER
from core.channel import ClientSecurity, default_token_file, open_channel
from core.config import add_conf_dir_argument, load_settings
from core.errors import UatuError
from core.jobgroup import load_jobgroup
from core.paths import VAR_DIR

if TYPE_CHECKING:  # the client commands do not load the server's modules
    from controlplane.assembly import ServeOptions

DEFAULT_ADDRESS = "127.0.0.1:8087"
DEFAULT_TIMEOUT_SECONDS = 10.0
UNVERSIONED_RETRIES = 3


def default_target(env: Mapping[str, str]) -> str:
    """The first address of UATU_CONTROL_PLANE (host:port[,host:port]), else the default."""
    addresses = [a.strip() for a in env.get("UATU_CONTROL_PLANE", "").split(",") if a.strip()]
    return addresses[0] if addresses else DEFAULT_ADDRESS


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m controlplane", description=__doc__)
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="run the control plane until SIGTERM")
    serve.add_argument("--address", default=DEFAULT_ADDRESS, help="host:port to listen on")
    serve.add_argument(
        "--advertise",
        default=None,
        help="host:port that applications and other replicas reach this one at "
        "(default: --address)",
    )
    serve.add_argument(
        "--app-control-plane",
        default=None,
        help="host:port[,host:port] applications heartbeat to; list every replica when "
        "there are several (default: --advertise)",
    )
    serve.add_argument(
        "--store",
        default=str(VAR_DIR / "controlplane.sqlite"),
        help="SQLite file, or http(s)://HOST:PORT[,...] of every etcd member for several "
        "replicas (default %(default)s)",
    )
    serve.add_argument("--etcd-prefix", default="/uatu", help="etcd key prefix")
    serve.add_argument("--etcd-ca", type=Path, help="CA that signed etcd's certificate (https)")
    serve.add_argument("--etcd-cert", type=Path, help="client certificate for etcd (https)")
    serve.add_argument("--etcd-key", type=Path, help="its private key")
    serve.add_argument("--etcd-user", help="etcd user (etcd auth enabled)")
    serve.add_argument("--etcd-password-file", type=Path, help="file holding its password")
    serve.add_argument(
        "--leader-ttl", type=int, default=5, help="etcd leader lease in seconds (default 5)"
    )
    add_conf_dir_argument(serve)
    serve.add_argument(
        "--launcher",
        default="local",
        choices=("local", "standalone", "kubernetes"),
        help="how Spark applications run (default local: spark-submit.sh on this machine)",
    )
    serve.add_argument(
        "--apps-dir",
        type=Path,
        default=VAR_DIR / "apps",
        help="per-JobGroup folder: JobGroup JSON, stop file, application log",
    )
    serve.add_argument("--spark-master", default=None, help="Spark master for launched jobs")
    serve.add_argument(
        "--standalone-rest-url", default=None, help="standalone master REST URL (port 6066)"
    )
    serve.add_argument(
        "--standalone-rest-token-file",
        type=Path,
        default=None,
        help="file holding a JWS for a REST server behind JWSFilter (docs/security.md)",
    )
    serve.add_argument(
        "--kubernetes-config", type=Path, default=None, help="YAML of KubernetesConfig fields"
    )
    serve.add_argument(
        "--no-reconcile", action="store_true", help="serve the API only; launch nothing"
    )
    serve.add_argument(
        "--metrics-address",
        default=None,
        help="host:port to serve Prometheus /metrics on (gRPC and state metrics; off by "
        "default); :PORT is 127.0.0.1:PORT, 0.0.0.0:PORT every interface",
    )
    security = serve.add_argument_group("security (see docs/security.md)")
    security.add_argument("--tls-cert", type=Path, help="PEM certificate chain: serve TLS")
    security.add_argument("--tls-key", type=Path, help="PEM private key of --tls-cert")
    security.add_argument(
        "--tls-client-ca",
        type=Path,
        help="PEM CA: every caller must present a client certificate it signed (mTLS)",
    )
    security.add_argument(
        "--auth-token-file",
        type=Path,
        help="principals allowed to call the admin API: lines 'ROLE NAME CREDENTIAL' with "
        "ROLE admin|read and CREDENTIAL token:T, token-sha256:HEX or cert:NAME",
    )
    security.add_argument(
        "--admin-token-file",
        type=Path,
        help="file holding one admin bearer token (what the CLI's --token-file reads), "
        "created with a random token, mode 0600, if missing; with or without --auth-token-file",
    )
    security.add_argument(
        "--insecure",
        action="store_true",
        help="allow a non-loopback --address without TLS and authentication",
    )
    security.add_argument(
        "--reflection", action="store_true", help="enable gRPC server reflection (off)"
    )
    security.add_argument(
        "--app-ca", type=Path, help="CA applications verify the control plane with "
        "(default --tls-cert)",
    )  # fmt: skip
    security.add_argument(
        "--app-tls-cert", type=Path, help="client certificate applications present (mTLS)"
    )
    security.add_argument("--app-tls-key", type=Path, help="its private key")
    security.add_argument(
        "--allow-external-workers",
        action="store_true",
        help="admit heartbeats from applications this control plane did not launch (jobs a "
        "scheduler started with UATU_CONTROL_PLANE set); refused by default",
    )
    _add_capacity_arguments(serve)
    timing = serve.add_argument_group("timing (seconds)")
    timing.add_argument("--reconcile-seconds", type=float, default=2.0)
    timing.add_argument(
        "--lease-seconds",
        type=float,
        default=60.0,
        help="an application silent this long is FAILED and relaunched (0 turns it off)",
    )
    timing.add_argument(
        "--startup-seconds", type=float, default=300.0, help="time allowed to a first heartbeat"
    )
    timing.add_argument("--heartbeat-seconds", type=float, default=5.0)
    timing.add_argument("--partition-refresh-seconds", type=float, default=60.0)

    def client(name: str, help_text: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help_text)
        env = os.environ.get
        sub.add_argument("--target", default=default_target(os.environ))
        sub.add_argument("--json", action="store_true", help="print protobuf JSON")
        sub.add_argument(
            "--timeout",
            type=float,
            default=DEFAULT_TIMEOUT_SECONDS,
            help="seconds each call may take, the whole stream for `list` (default %(default)s)",
        )
        sub.add_argument(
            "--ca", type=Path, default=env("UATU_CONTROL_PLANE_CA"), help="TLS: the server's CA"
        )
        sub.add_argument(
            "--token-file",
            type=Path,
            default=env("UATU_CONTROL_PLANE_TOKEN_FILE"),
            help="file holding a bearer token (default $UATU_CONTROL_PLANE_TOKEN_FILE, else "
            "var/controlplane/admin.token if it exists and the target is on this host)",
        )
        sub.add_argument("--cert", type=Path, default=env("UATU_CONTROL_PLANE_CERT"))
        sub.add_argument("--key", type=Path, default=env("UATU_CONTROL_PLANE_KEY"))
        return sub

    add = client("add", "add a JobGroup from its JSON file")
    add.add_argument("jobgroup", type=Path)
    add.add_argument("--state", default="JOB_STATE_RUNNING", choices=job_pb2.JobState.keys())
    update = client("update", "replace a JobGroup's definition (state and jobs are kept)")
    update.add_argument("jobgroup", type=Path)
    client("get", "show one JobGroup and its version").add_argument("id")
    delete = client("delete", "delete a JobGroup")
    delete.add_argument("id")
    set_state = client("set-state", "set a JobGroup's expected state")
    set_state.add_argument("id")
    set_state.add_argument("state", choices=job_pb2.JobState.keys())
    for sub in (update, delete, set_state):
        sub.add_argument(
            "--expected-version",
            type=int,
            default=None,
            help="apply only if the group is still at this version (from `get`)",
        )
    client("list", "list every JobGroup")
    client("scale", "cluster scale status")
    return parser


def _add_capacity_arguments(serve: argparse.ArgumentParser) -> None:
    limits = serve.add_argument_group("limits")
    limits.add_argument("--max-groups", type=int, default=20_000, help="JobGroups stored")
    limits.add_argument("--max-running", type=int, default=200, help="applications running at once")
    pool = serve.add_argument_group("worker pool (docs/controlplane.md, Worker pool)")
    pool.add_argument(
        "--workers",
        type=int,
        default=0,
        help="run JobGroups on this many worker applications, many groups each, instead of "
        "an application per group (default 0: an application per group; local launcher)",
    )
    pool.add_argument(
        "--max-workers",
        type=int,
        default=0,
        help="follow the load with --workers to this many worker applications, as the "
        "RUNNING groups and their traffic need at --worker-capacity (default 0: fixed)",
    )
    pool.add_argument(
        "--worker-capacity",
        type=int,
        default=50,
        help="JobGroups one worker application runs at most (default 50)",
    )
    for unit in ("messages", "bytes"):
        pool.add_argument(
            f"--worker-{unit}-per-sec",
            type=float,
            default=0.0,
            help=f"{unit}/s one worker application carries at most (default 0: no bound)",
        )


def version_of(call: grpc.Call) -> int | None:
    for key, value in call.trailing_metadata() or ():
        if key == VERSION_HEADER:
            return int(value)
    return None


def conditional(version: int | None) -> tuple[tuple[str, str], ...]:
    return () if version is None else ((EXPECTED_VERSION_HEADER, str(version)),)


def run_client(args: argparse.Namespace) -> list[Message]:
    """The command's call(s), each with `--timeout` as its gRPC deadline."""
    token_file = args.token_file or default_token_file(args.target)
    security = ClientSecurity.from_files(
        ca=args.ca, token_file=token_file, cert=args.cert, key=args.key
    )
    deadline = args.timeout
    with open_channel(args.target, security) as channel:
        stub = admin_grpc.MasterAdminServiceStub(channel)
        expected = getattr(args, "expected_version", None)
        if args.command == "add":
            request = admin_pb2.AddJobGroupRequest(
                job_group=load_jobgroup(args.jobgroup),
                job_group_state=job_pb2.JobState.Value(args.state),
            )
            return [stub.AddJobGroup(request, timeout=deadline).group]
        if args.command == "update":
            request = admin_pb2.UpdateJobGroupRequest(job_group=load_jobgroup(args.jobgroup))
            if expected is not None:  # the operator's read: a lost race is theirs to judge
                metadata = conditional(expected)
                return [stub.UpdateJobGroup(request, metadata=metadata, timeout=deadline).group]
            for attempt in range(1, UNVERSIONED_RETRIES + 1):
                _, call = stub.GetJobGroup.with_call(
                    admin_pb2.GetJobGroupRequest(id=request.job_group.job_group_id),
                    timeout=deadline,
                )
                try:
                    metadata = conditional(version_of(call))
                    return [stub.UpdateJobGroup(request, metadata=metadata, timeout=deadline).group]
                except grpc.RpcError as e:
                    if e.code() != grpc.StatusCode.ABORTED or attempt == UNVERSIONED_RETRIES:
                        raise
                    print(f"retrying: {e.details()}", file=sys.stderr)
            raise AssertionError("unreachable")
        if args.command == "get":
            response, call = stub.GetJobGroup.with_call(
                admin_pb2.GetJobGroupRequest(id=args.id), timeout=deadline
            )
            args.shown_version = version_of(call)
            return [response.group]
        if args.command == "delete":
            stub.DeleteJobGroup(
                admin_pb2.DeleteJobGroupRequest(id=args.id),
                metadata=conditional(expected),
                timeout=deadline,
            )
            return []
        if args.command == "set-state":
            request = admin_pb2.UpdateJobGroupStateRequest(
                id=args.id, state=job_pb2.JobState.Value(args.state)
            )
            metadata = conditional(expected)
            return [stub.UpdateJobGroupState(request, metadata=metadata, timeout=deadline).group]
        if args.command == "list":
            return list(stub.GetAllJobGroups(admin_pb2.GetAllJobGroupsRequest(), timeout=deadline))
        return [
            stub.GetClusterScaleStatus(admin_pb2.GetClusterScaleStatusRequest(), timeout=deadline)
        ]


def human(message: Message) -> str:
    """One readable line per JobGroup-like message; other messages as `field: value` pairs."""
    fields: dict[str, Any] = json_format.MessageToDict(message, preserving_proto_field_name=True)
    group = fields.get("job_group", {})
    if group:
        state = fields.get("state") or fields.get("job_group_state") or "JOB_STATE_INVALID"
        source = group.get("kafka_consumer_task_group", {})
        jobs = len(fields.get("jobs", []))
        line = (
            f"{group.get('job_group_id')}  {group.get('type')}  {state}  "
            f"{source.get('cluster')}/{source.get('topic')}"
            + (f"  {jobs} job(s)" if "jobs" in fields else "")
        )
        scale = fields.get("scale_status", {})
        if scale.get("total_messages_per_sec"):
            line += f"  {scale['total_messages_per_sec']:.0f} msg/s"
        for job in fields.get("jobs", []):
            task = job.get("job", {}).get("kafka_consumer_task", {})
            line += (
                f"\n  partition {task.get('partition', 0)}  job {job['job'].get('job_id')}"
                f"  worker {job.get('worker_id', '-')}  offset {task.get('start_offset', '-')}"
            )
            run = job["job"].get("extension", {})  # a worker application's uatu.v1.WorkerJob
            if run.get("last_error"):
                line += f"  {job.get('state', '')}: {run['last_error']}"
        return line
    # Zero-valued fields are omitted by default; a scale status of all zeros is still news.
    full = json_format.MessageToDict(
        message, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )
    return ", ".join(f"{key}: {value}" for key, value in full.items())


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "serve":
        return serve_command(args)
    if not args.timeout > 0:
        print(
            f"error: --timeout: {args.timeout:g} is not a positive number of seconds",
            file=sys.stderr,
        )
        return 2
    try:
        results = run_client(args)
    except UatuError as e:  # a bad local file, before anything was sent
        print(f"error: {e}", file=sys.stderr)
        return e.exit_status
    except grpc.RpcError as e:
        print(rpc_error_line(e, args), file=sys.stderr)
        return 2 if e.code() == grpc.StatusCode.INVALID_ARGUMENT else 1
    for message in results:
        print(json_format.MessageToJson(message, indent=2) if args.json else human(message))
    if getattr(args, "shown_version", None) is not None and not args.json:
        print(f"version {args.shown_version}")
    if args.command == "delete":
        print(f"deleted {args.id}")
    return 0


def rpc_error_line(error: grpc.RpcError, args: argparse.Namespace) -> str:
    """One line for a failed call: the status, the server's message, what to do about it."""
    code = error.code()
    details = (error.details() or "").replace("\n", " ")
    hint = ""
    if code == grpc.StatusCode.ABORTED and getattr(args, "expected_version", None):
        hint = " (someone changed it since you read it: `get` it, re-apply, retry)"
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        details = f"no answer from {args.target} within {args.timeout:g} s"
        hint = " (--timeout SECONDS allows more)"
    return f"error: {code.name}: {details}{hint}"


def serve_options(args: argparse.Namespace) -> ServeOptions:
    """`serve`'s flags as ServeOptions (validated there): every flag named as its field,
    and these few that are not."""
    from controlplane.assembly import ServeOptions
    from controlplane.metrics import metrics_bind

    renamed = {
        "advertise": args.advertise or args.address,
        "app_control_plane": args.app_control_plane or args.advertise or args.address,
        "leader_ttl_seconds": args.leader_ttl,
        "reconcile": not args.no_reconcile,
        "lease_seconds": args.lease_seconds or None,
        "metrics_host": metrics_bind(args.metrics_address)[0] if args.metrics_address else None,
    }
    same = {
        f.name: getattr(args, f.name)
        for f in dataclasses.fields(ServeOptions)
        if f.name not in renamed and hasattr(args, f.name)
    }
    return ServeOptions(**same, **renamed)


def serve_command(args: argparse.Namespace) -> int:
    from controlplane.assembly import assemble
    from controlplane.metrics import install_metrics, metrics_bind
    from controlplane.server import serve

    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        if args.metrics_address:
            metrics_bind(args.metrics_address)  # a bad value: one line, before anything starts
        options = serve_options(args)
        plane = assemble(options, load_settings(args.conf_dir))
    except UatuError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_status
    interceptors = install_metrics(args.metrics_address, plane, options)
    try:
        serve(
            options.address,
            plane.job_groups,
            plane.workers,
            plane.leadership,
            plane.reconciler,
            security=plane.security,
            interceptors=interceptors,
        )
    finally:
        plane.store.close()
    return 0
