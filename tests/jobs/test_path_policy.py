"""The site's path policy holds for every JobType (core/spec.py's OutputSpec, core/storage.py).

Every table and checkpoint location a JobGroup may set is refused, with one line naming the
field and the value, when it leaves the site's roots, names a foreign scheme or host, holds
control characters or is another group's checkpoint: through `spark-submit.sh --check` (the
job's entry point, in-process) and through AddJobGroup (a real control plane over gRPC).
Nothing is stored and nothing is written.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from uber.data.kafka.datatransfer import job_pb2
from uber.data.kafka.datatransfer import master_admin_service_pb2 as admin_pb2
from uber.data.kafka.datatransfer import master_admin_service_pb2_grpc as admin_grpc

from controlplane.jobgroups import JobGroups
from controlplane.server import create_server
from controlplane.state.leadership import SoleLeader
from controlplane.state.sqlite import SqliteStore
from controlplane.workers import Workers
from core.config import ClusterConfig, Settings, load_settings
from core.errors import InvalidJobGroup
from jobs import main as job_main
from jobs import registry
from testing.conf import write_conf_dir
from testing.jobgroups import MINIMAL_GROUPS, minimal_group, parse

GROUP_ID = "policy-group"

# What an attacker (or a typo) may put in a location field, and the refusal's words.
HOSTILE = {
    "absolute-outside": ("/etc/uatu", "must be under"),
    "dotdot": ("../../../../etc/uatu", "must be under"),
    "file-uri": ("file:///etc/uatu-ck", "must be under"),
    "foreign-hdfs": ("hdfs://attacker.example:8020/loot", "must be under"),
    "foreign-s3a": ("s3a://attacker-bucket/loot", "must be under"),
    "control-chars": ("ck\n$(id)", "control characters"),
}


def _camel(field: str) -> str:
    head, *rest = field.split("_")
    return head + "".join(word.title() for word in rest)


def _location_fields(kind: str) -> list[str]:
    """The kind's `extension.output` fields: its checkpoint and each table its spec places
    (read from the spec of its minimal group, so a table added later is covered too)."""
    settings = Settings(Path("/"), "/w", "/c", {"local": ClusterConfig("local", "127.0.0.1:9")})
    _, spec = registry.validate(parse(minimal_group(kind, GROUP_ID)), settings)
    return ["checkpoint_path", *(f"{name}_path" for name in sorted(spec.output.tables))]


CASES = [
    pytest.param(kind, field, value, words, id=f"{kind}-{field}-{name}")
    for kind in MINIMAL_GROUPS
    for field in _location_fields(kind)
    for name, (value, words) in HOSTILE.items()
] + [
    pytest.param(
        kind,
        "checkpoint_path",
        "OTHER_GROUP",
        "the group's own folder",
        id=f"{kind}-checkpoint_path-another-groups-checkpoint",
    )
    for kind in MINIMAL_GROUPS
]


@pytest.fixture(scope="module")
def conf_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("policy")
    # Port 9 (discard): nothing answers; every refusal here comes before any broker call.
    return write_conf_dir(root / "conf", "127.0.0.1:9", root / "wh", root / "ck")


def _hostile_group(kind: str, field: str, value: str, conf_dir: Path) -> dict:
    if value == "OTHER_GROUP":
        value = f"{load_settings(conf_dir).checkpoints}/another-group"
    return minimal_group(kind, GROUP_ID, {_camel(field): value})


@pytest.mark.parametrize(("kind", "field", "value", "words"), CASES)
def test_check_refuses_a_location_outside_the_policy(
    tmp_path, conf_dir, capsys, kind, field, value, words
):
    path = tmp_path / "group.json"
    path.write_text(json.dumps(_hostile_group(kind, field, value, conf_dir)))
    status = job_main.main([str(path), "--check", "--conf-dir", str(conf_dir)])
    err = capsys.readouterr().err.strip()
    assert status == 2, err
    assert err.splitlines() == [err]
    assert f"extension.output.{field}=" in err and words in err
    settings = load_settings(conf_dir)
    assert not Path(settings.warehouse).exists() and not Path(settings.checkpoints).exists()


@pytest.fixture(scope="module")
def admin(conf_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    """A real control plane on an ephemeral port; the partition count is a stand-in (no
    group here gets that far)."""
    store = SqliteStore(tmp_path_factory.mktemp("cp") / "cp.sqlite")
    groups = JobGroups(store, load_settings(conf_dir), lambda *_: 2)
    leader = SoleLeader("127.0.0.1:0")
    server, port, _ = create_server("127.0.0.1:0", groups, Workers(store, leader), leader)
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield admin_grpc.MasterAdminServiceStub(channel), store
    finally:
        channel.close()
        server.stop(None).wait()
        store.close()


@pytest.mark.parametrize(("kind", "field", "value", "words"), CASES)
def test_add_job_group_refuses_a_location_outside_the_policy(
    admin, conf_dir, kind, field, value, words
):
    stub, store = admin
    group = parse(_hostile_group(kind, field, value, conf_dir))
    request = admin_pb2.AddJobGroupRequest(
        job_group=group, job_group_state=job_pb2.JOB_STATE_RUNNING
    )
    with pytest.raises(grpc.RpcError) as raised:
        stub.AddJobGroup(request)
    error = raised.value
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT  # type: ignore[attr-defined]
    details = error.details()  # type: ignore[attr-defined]
    assert f"extension.output.{field}=" in details and words in details
    assert "\n" not in details
    assert store.get(GROUP_ID) is None


@pytest.mark.parametrize("kind", list(MINIMAL_GROUPS))
def test_locations_under_the_roots_are_kept_normalised_for_every_kind(conf_dir, kind):
    settings = load_settings(conf_dir)
    wanted = {
        field: f"team-a/./{field.removesuffix('_path')}"
        for field in _location_fields(kind)
        if field != "checkpoint_path"
    }
    output = {_camel(f): v for f, v in wanted.items()}
    output["checkpointPath"] = f"{settings.checkpoints}/{GROUP_ID}/v2/../v3"
    _, spec = registry.validate(parse(minimal_group(kind, GROUP_ID, output)), settings)
    assert spec.output.checkpoint == f"{settings.checkpoints}/{GROUP_ID}/v3"
    assert dict(spec.output.tables) == {
        f.removesuffix("_path"): f"{settings.warehouse}/team-a/{f.removesuffix('_path')}"
        for f in wanted
    }


@pytest.mark.parametrize("kind", list(MINIMAL_GROUPS))
def test_a_table_path_the_kind_does_not_write_is_refused(conf_dir, kind):
    settings = load_settings(conf_dir)
    own = set(_location_fields(kind))
    foreign = next(f for f in ("dispatch_stats_path", "audit_counts_path") if f not in own)
    group = parse(minimal_group(kind, GROUP_ID, {_camel(foreign): "elsewhere"}))
    with pytest.raises(InvalidJobGroup, match=f"extension.output.{foreign}='elsewhere'"):
        registry.validate(group, settings)
