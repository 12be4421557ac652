"""Our generated protos against uForwarder's IDL, message by message.

`golden/uforwarder_datatransfer.json` is the descriptor fingerprint (see dev/proto_fingerprint.py)
of every message, enum and service in uForwarder's .proto files for the packages
`uber.data.kafka.datatransfer` and `uber.data.kafka.consumer`, at the upstream commit and files
recorded in it. `python -m dev.proto_fingerprint` regenerates it from an upstream checkout.

Here the same fingerprint is computed from the `*_pb2` modules `make proto` generates from our
proto/ (build/gen), with no network and no protoc run. Every upstream message, enum and service
must exist in ours with the same fields (name, number, label, type, type name, oneof), values or
methods. Messages, enums and services of ours that upstream does not have must be listed in
`EXTRA_OF_OURS` with a reason.
"""

from __future__ import annotations

import importlib
import json
import pkgutil
import re
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from google.protobuf import descriptor_pb2
from uber.data.kafka.datatransfer import job_group_pb2, job_pb2

from dev.proto_fingerprint import file_protos_of, fingerprint

GOLDEN_PATH = Path(__file__).parent / "golden" / "uforwarder_datatransfer.json"
GOLDEN: dict[str, Any] = json.loads(GOLDEN_PATH.read_text())
PACKAGES = ("uber.data.kafka.consumer", "uber.data.kafka.datatransfer")
KINDS = ("messages", "enums", "services")

# Messages, enums and services of ours (full name) that uForwarder's IDL does not have, each with
# the reason it is allowed. None today: our IDL holds exactly uForwarder's.
EXTRA_OF_OURS: dict[str, str] = {}


def generated_modules() -> list[ModuleType]:
    """Every `*_pb2` module that `make proto` generated for the two packages."""
    modules = []
    for package_name in PACKAGES:
        package = importlib.import_module(package_name)
        for info in pkgutil.iter_modules(package.__path__):
            if info.name.endswith("_pb2"):
                modules.append(importlib.import_module(f"{package_name}.{info.name}"))
    return modules


@pytest.fixture(scope="module")
def ours() -> dict[str, Any]:
    return fingerprint(file_protos_of(generated_modules()), PACKAGES)


def test_golden_names_its_upstream_source() -> None:
    source = GOLDEN["source"]
    assert source["repository"] == "uber/uForwarder"
    assert re.fullmatch(r"[0-9a-f]{40}", source["commit"])
    assert source["files"] and all(f.endswith(".proto") for f in source["files"])
    assert tuple(GOLDEN["packages"]) == PACKAGES


def test_every_generated_module_declares_one_of_the_packages() -> None:
    # A file under these Python packages with another proto package would escape the comparison.
    modules = generated_modules()
    assert len(modules) >= len(GOLDEN["source"]["files"])
    assert {m.__name__: m.DESCRIPTOR.package for m in modules} == {
        m.__name__: m.__name__.rpartition(".")[0] for m in modules
    }


UPSTREAM = [(kind, name) for kind in KINDS for name in GOLDEN[kind]]


def differences(kind: str, upstream: Any, ours: Any) -> list[str]:
    """One line per field (by number), enum value or method that differs."""
    if kind == "messages":
        upstream, ours = upstream["fields"], ours["fields"]
    key = {
        "messages": lambda x: x["number"],
        "enums": lambda x: x[1],
        "services": lambda x: x["name"],
    }[kind]
    up, our = {key(x): x for x in upstream}, {key(x): x for x in ours}
    return [
        f"{k}: uForwarder {up.get(k)} != ours {our.get(k)}"
        for k in sorted(up.keys() | our.keys())
        if up.get(k) != our.get(k)
    ]


@pytest.mark.parametrize(("kind", "name"), UPSTREAM, ids=[name for _, name in UPSTREAM])
def test_upstream_definition_is_ours(ours: dict[str, Any], kind: str, name: str) -> None:
    assert name in ours[kind], f"{kind[:-1]} {name} of uForwarder is missing from proto/"
    diff = differences(kind, GOLDEN[kind][name], ours[kind][name])
    assert not diff, f"{name} differs from uForwarder's:\n" + "\n".join(diff)
    assert ours[kind][name] == GOLDEN[kind][name]


def test_nothing_of_ours_beyond_upstream_unless_listed(ours: dict[str, Any]) -> None:
    extra = {name for kind in KINDS for name in ours[kind] if name not in GOLDEN[kind]}
    assert extra == set(EXTRA_OF_OURS)
    assert all(reason.strip() for reason in EXTRA_OF_OURS.values())


def test_the_golden_is_the_whole_upstream_idl() -> None:
    # 92 messages (map entries included), 11 enums and 2 services at the recorded commit: the
    # golden is uForwarder's whole IDL for the packages, not a sample. Update with the golden.
    assert {k: len(GOLDEN[k]) for k in KINDS} == {"messages": 92, "enums": 11, "services": 2}


# --- The fingerprint sees each property it claims to compare: one change to a copy of our
# --- descriptors changes it.


Files = list[descriptor_pb2.FileDescriptorProto]


def _mutate_field(field: str, attribute: str, value: Any) -> Callable[[Files], None]:
    def mutate(files: Files) -> None:
        message_name, field_name = field.rsplit(".", 1)
        for f in files:
            for m in f.message_type:
                if f"{f.package}.{m.name}" == message_name:
                    target = next(x for x in m.field if x.name == field_name)
                    if attribute == "oneof_index" and value is None:
                        target.ClearField("oneof_index")
                    else:
                        setattr(target, attribute, value)
                    return
        raise AssertionError(f"no field {field}")

    return mutate


def _mutate_enum_value(files: Files) -> None:
    enum = next(e for f in files for e in f.enum_type if e.name == "JobType")
    enum.value[1].number = 99


def _mutate_method(files: Files) -> None:
    service = next(s for f in files for s in f.service if s.name == "MasterAdminService")
    next(m for m in service.method if m.name == "GetAllJobGroups").server_streaming = False


_FIELD_TYPE = descriptor_pb2.FieldDescriptorProto
MUTATIONS: dict[str, Callable[[Files], None]] = {
    "field-number": _mutate_field("uber.data.kafka.datatransfer.JobGroup.type", "number", 20),
    "field-name": _mutate_field("uber.data.kafka.datatransfer.JobGroup.type", "name", "kind"),
    "field-label": _mutate_field(
        "uber.data.kafka.datatransfer.JobGroup.job_group_id", "label", _FIELD_TYPE.LABEL_REPEATED
    ),
    "field-type": _mutate_field(
        "uber.data.kafka.datatransfer.FlowControl.bytes_per_sec", "type", _FIELD_TYPE.TYPE_FLOAT
    ),
    "field-type-name": _mutate_field(
        "uber.data.kafka.datatransfer.JobGroup.flow_control",
        "type_name",
        ".uber.data.kafka.datatransfer.RetryConfig",
    ),
    "oneof-membership": _mutate_field(
        "uber.data.kafka.datatransfer.AuditConfig.cross_dc_audit_config", "oneof_index", None
    ),
    "enum-value": _mutate_enum_value,
    "rpc-streaming": _mutate_method,
}


@pytest.mark.parametrize("mutate", MUTATIONS.values(), ids=list(MUTATIONS))
def test_the_fingerprint_sees_each_property(mutate: Callable[[Files], None]) -> None:
    files = file_protos_of(generated_modules())
    before = fingerprint(files, PACKAGES)
    mutate(files)
    assert fingerprint(files, PACKAGES) != before


# --- The generated code itself puts those numbers on the wire.


def test_wire_bytes_are_stable() -> None:
    """A JobGroup serialises to the bytes its field numbers dictate (hand-encoded)."""
    group = job_group_pb2.JobGroup(job_group_id="a", type=job_pb2.JOB_TYPE_KAFKA_AUDIT)
    # field 1, wire type 2 (len) = 0x0a, len 1, 'a'; field 2, varint = 0x10, value 2.
    assert group.SerializeToString() == b"\x0a\x01a\x10\x02"
