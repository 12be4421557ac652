"""A descriptor fingerprint of every message, enum and service in some protobuf packages.

The fingerprint is what wire compatibility depends on, and nothing else (no comments, file
names, declaration order or options; field options here are only `deprecated`, and even an
explicit `packed` would not break parsing, since parsers accept both encodings):

* message: full name -> its fields sorted by number, each with name, number, label, type,
  type_name (fully qualified, for message and enum fields) and the name of its oneof (or null);
  nested messages (map entries included) and nested enums are entries of their own;
* enum: full name -> its values as [name, number], sorted by number then name;
* service: full name -> its methods sorted by name, each with name, input and output type and
  whether the client and the server stream (a gRPC call's path is /<service>/<method>).

Two ways in, one walker (`fingerprint`), so both sides are computed the same way:

* from .proto files: `grpc_tools.protoc` compiles them to a FileDescriptorSet (`compile_protos`);
* from generated `*_pb2` modules: each module's `DESCRIPTOR.CopyToProto` (`file_protos_of`).

To regenerate the golden of tests/core/test_protos.py from an uForwarder checkout (or from a
bare clone: `git -C <clone> archive <commit> idl/src/main/proto | tar -x -C <checkout>`):

    python -m dev.proto_fingerprint <checkout>/idl/src/main/proto \\
        --package uber.data.kafka.datatransfer --package uber.data.kafka.consumer \\
        --repository uber/uForwarder --commit "$(git -C <checkout> rev-parse HEAD)" \\
        --path-prefix idl/src/main/proto -o tests/core/golden/uforwarder_datatransfer.json

Every .proto file under the root is compiled; the files whose package is one of `--package`
are fingerprinted and listed in the output.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from google.protobuf import descriptor_pb2

FieldPrint = dict[str, Any]
Fingerprint = dict[str, Any]

_LABELS = {
    v: k.removeprefix("LABEL_").lower()
    for k, v in descriptor_pb2.FieldDescriptorProto.Label.items()
}
_TYPES = {
    v: k.removeprefix("TYPE_").lower() for k, v in descriptor_pb2.FieldDescriptorProto.Type.items()
}


def _field(
    message: descriptor_pb2.DescriptorProto, f: descriptor_pb2.FieldDescriptorProto
) -> FieldPrint:
    oneof = message.oneof_decl[f.oneof_index].name if f.HasField("oneof_index") else None
    return {
        "name": f.name,
        "number": f.number,
        "label": _LABELS[f.label],
        "type": _TYPES[f.type],
        "type_name": f.type_name or None,
        "oneof": oneof,
    }


def _enum(e: descriptor_pb2.EnumDescriptorProto) -> list[list[Any]]:
    return [[v.name, v.number] for v in sorted(e.value, key=lambda v: (v.number, v.name))]


def _walk_message(
    prefix: str, m: descriptor_pb2.DescriptorProto, messages: dict[str, Any], enums: dict[str, Any]
) -> None:
    name = f"{prefix}.{m.name}"
    messages[name] = {"fields": [_field(m, f) for f in sorted(m.field, key=lambda f: f.number)]}
    for nested in m.nested_type:
        _walk_message(name, nested, messages, enums)
    for e in m.enum_type:
        enums[f"{name}.{e.name}"] = _enum(e)


def _service(s: descriptor_pb2.ServiceDescriptorProto) -> list[dict[str, Any]]:
    return [
        {
            "name": m.name,
            "input_type": m.input_type,
            "output_type": m.output_type,
            "client_streaming": m.client_streaming,
            "server_streaming": m.server_streaming,
        }
        for m in sorted(s.method, key=lambda m: m.name)
    ]


def fingerprint(
    files: Iterable[descriptor_pb2.FileDescriptorProto], packages: Sequence[str]
) -> Fingerprint:
    """The messages and enums (top-level and nested) and the services of the files in
    `packages`."""
    messages: dict[str, Any] = {}
    enums: dict[str, Any] = {}
    services: dict[str, Any] = {}
    for f in files:
        if f.package not in packages:
            continue
        for m in f.message_type:
            _walk_message(f.package, m, messages, enums)
        for e in f.enum_type:
            enums[f"{f.package}.{e.name}"] = _enum(e)
        for service in f.service:
            services[f"{f.package}.{service.name}"] = _service(service)
    return {
        "messages": dict(sorted(messages.items())),
        "enums": dict(sorted(enums.items())),
        "services": dict(sorted(services.items())),
    }


def compile_protos(root: Path) -> list[descriptor_pb2.FileDescriptorProto]:
    """Every .proto file under `root`, compiled by grpc_tools.protoc (imports resolved against
    `root` and the well-known types grpc_tools ships), as FileDescriptorProtos."""
    import grpc_tools

    well_known = Path(grpc_tools.__file__).parent / "_proto"
    sources = sorted(p.relative_to(root).as_posix() for p in root.rglob("*.proto"))
    if not sources:
        raise SystemExit(f"no .proto files under {root}")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "set.pb"
        cmd = [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"-I{root}",
            f"-I{well_known}",
            f"--descriptor_set_out={out}",
            *sources,
        ]
        subprocess.run(cmd, check=True)
        file_set = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())
    return list(file_set.file)


def file_protos_of(modules: Iterable[ModuleType]) -> list[descriptor_pb2.FileDescriptorProto]:
    """The FileDescriptorProtos of generated `*_pb2` modules."""
    protos = []
    for module in modules:
        proto = descriptor_pb2.FileDescriptorProto()
        module.DESCRIPTOR.CopyToProto(proto)
        protos.append(proto)
    return protos


_LEAF = re.compile(r"[{\[][^{}\[\]]*[}\]]")


def to_json(value: Any) -> str:
    """Indented JSON with each innermost object (a field, a method) on one line, and each
    innermost array too when it is short (an enum value), so a diff shows one line per change."""

    def collapse(match: re.Match[str]) -> str:
        one_line = json.dumps(json.loads(match.group()))
        return one_line if one_line.startswith("{") or len(one_line) <= 100 else match.group()

    return _LEAF.sub(collapse, json.dumps(value, indent=1)) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("proto_root", type=Path, help="folder the .proto imports are relative to")
    parser.add_argument("--package", action="append", required=True, help="repeatable")
    parser.add_argument("--repository", required=True, help="where the files come from")
    parser.add_argument("--commit", required=True, help="the commit the files were read at")
    parser.add_argument("--path-prefix", default="", help="the root's path in the repository")
    parser.add_argument("-o", "--output", type=Path, help="JSON file (default: stdout)")
    args = parser.parse_args(argv)

    files = compile_protos(args.proto_root)
    packages = sorted(set(args.package))
    prefix = f"{args.path_prefix.rstrip('/')}/" if args.path_prefix else ""
    golden = {
        "source": {
            "repository": args.repository,
            "commit": args.commit,
            "files": sorted(prefix + f.name for f in files if f.package in packages),
            "generator": "python -m dev.proto_fingerprint (see its docstring)",
        },
        "packages": packages,
        **fingerprint(files, packages),
    }
    text = to_json(golden)
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
