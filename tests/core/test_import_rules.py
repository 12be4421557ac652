"""The import rules of docs/ARCHITECTURE.md (what each room may touch), checked from the code.

Every Python file of a room is parsed; each `import x` / `from x import y` (at any depth,
function-local imports included) is matched against the room's forbidden prefixes. A breach
names the file, the line and the rule. A second test imports the control plane in a fresh
interpreter where pyspark cannot be imported at all.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from core.paths import ROOT


@dataclass(frozen=True)
class Rule:
    room: str  # a folder under the repository root
    never: tuple[str, ...]  # module prefixes it must not import
    allowed: tuple[str, ...] = ()  # exceptions to `never` (more specific prefixes)
    skip: tuple[str, ...] = ()  # files in the room the rule does not cover
    skip_dirs: tuple[str, ...] = ()  # folders in the room the rule does not cover (venvs)


PYSPARK = ("pyspark", "delta")
# One package per job type under jobs/ (the cross-tier audit is part of jobs/audit).
JOB_TYPE_PACKAGES = ("audit", "replication", "availability", "dispatch", "loadgen")
DEV = ("devservices", "testing", "bench", "examples", "tests", "dev")

RULES = (
    Rule("core", never=("jobs", "controlplane", "clients", "integrations", *DEV, *PYSPARK)),
    Rule("jobs", never=("controlplane", "clients", "integrations", *DEV)),
    Rule(
        "controlplane",
        never=("jobs", "clients", "integrations", *DEV, *PYSPARK),
        # The registry and the pure spec modules it names; nothing of the Spark side.
        allowed=(
            "jobs.registry",
            "jobs.audit.spec",
            "jobs.replication.spec",
            "jobs.availability.spec",
            "jobs.availability.lag.rules",
            "jobs.availability.lag.tracker",
            "jobs.availability.lag.offsets_topic",
        ),
    ),
    # The shared runtime knows no job type and no registry: each job type asks it, not the
    # other way round.
    Rule("jobs/runtime", never=("jobs",), allowed=("jobs.runtime",)),
    # A worker application runs every job type through the registry, never one directly.
    Rule(
        "jobs/worker",
        never=("jobs",),
        allowed=("jobs.worker", "jobs.runtime", "jobs.prepare", "jobs.registry"),
    ),
    # A job type never imports another; what two share lives in core/ or jobs/runtime/.
    *(
        Rule(f"jobs/{job_type}", never=("jobs",), allowed=(f"jobs.{job_type}", "jobs.runtime"))
        for job_type in JOB_TYPE_PACKAGES
    ),
    Rule("clients", never=("jobs", "controlplane", *DEV, *PYSPARK)),
    # Integrations read the tables with delta-rs and talk gRPC: no Spark, no server internals.
    Rule(
        "integrations",
        never=("jobs", "controlplane", *DEV, *PYSPARK),
        skip_dirs=("integrations/airflow/.venv",),
    ),
    Rule("devservices", never=("jobs", "controlplane", "clients", "testing", "bench", "examples")),
    Rule("testing", never=("controlplane", "bench", "examples", "tests"), allowed=()),
    # The CDS training run (dev/cds_archive.py) builds its session as the jobs do and makes
    # their Delta writes as a worker's warm-up does.
    Rule(
        "dev",
        never=("jobs", "controlplane", "clients", "devservices", "testing", "bench"),
        allowed=("jobs.runtime.session", "jobs.runtime.warm_up"),
    ),
)

# testing/ may reach jobs only through the session builder, the py4j class handles (and the
# spec/registry layer a JobGroup builder needs); everything else of jobs/ is the code under test.
TESTING_JOBS_ALLOWED = ("jobs.runtime.session", "jobs.runtime.py4j", "jobs.registry")


@dataclass(frozen=True)
class Breach:
    path: str
    line: int
    module: str
    rule: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line} imports {self.module} ({self.rule})"


def imported_names(source: str) -> list[tuple[int, str]]:
    """(line, dotted name) of everything `source` imports: `import a.b` gives a.b, and
    `from a import b` gives a.b (b may be a module of package a, or a name in module a)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return found


def _under(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def breaches(root: Path, rules: tuple[Rule, ...] = RULES) -> list[Breach]:
    found = []
    for rule in rules:
        for path in sorted((root / rule.room).rglob("*.py")):
            relative = path.relative_to(root).as_posix()
            if relative in rule.skip or "_pb2" in path.name:
                continue
            if any(relative.startswith(d + "/") for d in rule.skip_dirs):
                continue
            for line, module in imported_names(path.read_text()):
                if any(_under(module, a) for a in rule.allowed):
                    continue
                for prefix in rule.never:
                    if _under(module, prefix):
                        found.append(Breach(relative, line, module, f"{rule.room}/ never {prefix}"))
                reaches_jobs = rule.room == "testing" and _under(module, "jobs")
                if reaches_jobs and not any(_under(module, a) for a in TESTING_JOBS_ALLOWED):
                    found.append(Breach(relative, line, module, "testing/ reaches jobs/"))
    return sorted(set(found), key=lambda b: (b.path, b.line, b.module))


def test_every_room_keeps_its_import_rules() -> None:
    assert [str(b) for b in breaches(ROOT)] == []


def test_a_broken_rule_is_reported_with_file_line_and_rule(tmp_path: Path) -> None:
    (tmp_path / "controlplane").mkdir()
    (tmp_path / "controlplane" / "bad.py").write_text(
        "import os\n"
        "from jobs.audit.spec import audit_spec\n"  # allowed
        "def f():\n"
        "    from jobs.runtime.session import build_session\n"  # function-local: still a breach
        "    import pyspark.sql\n"
    )
    (tmp_path / "core").mkdir()
    (tmp_path / "core" / "ok.py").write_text("from core.errors import UatuError\n")
    found = breaches(tmp_path)
    assert [str(b) for b in found] == [
        "controlplane/bad.py:4 imports jobs.runtime.session.build_session"
        " (controlplane/ never jobs)",
        "controlplane/bad.py:5 imports pyspark.sql (controlplane/ never pyspark)",
    ]


def test_the_job_type_packages_are_every_package_of_jobs() -> None:
    """A new job type's package is covered by the rules as soon as it exists."""
    packages = {p.parent.name for p in (ROOT / "jobs").glob("*/__init__.py")}
    assert packages == {*JOB_TYPE_PACKAGES, "runtime", "worker"}


def import_graph(root: Path, packages: tuple[str, ...]) -> dict[str, set[str]]:
    """module -> the project modules it imports (every import: top-level, function-local and
    TYPE_CHECKING alike), over the .py files of `packages` under `root`."""
    modules: dict[str, Path] = {}
    for package in packages:
        for path in (root / package).rglob("*.py"):
            if ".venv" in path.parts:
                continue
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path

    def resolve(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        found = {resolve(name) for _, name in imported_names(path.read_text())}
        graph[module] = {m for m in found if m is not None and m != module}
    return graph


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected sets of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for other in sorted(graph.get(module, ())):
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            circle = []
            while True:
                member = stack.pop()
                circle.append(member)
                if member == module:
                    break
            if len(circle) > 1:
                circles.append(sorted(circle))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return circles


PROJECT_PACKAGES = (
    "core", "jobs", "controlplane", "clients", "integrations",
    "devservices", "testing", "dev", "bench", "examples",
)  # fmt: skip


def test_no_module_imports_itself_through_others() -> None:
    assert import_circles(import_graph(ROOT, PROJECT_PACKAGES)) == []


def test_a_circle_through_a_type_checking_import_is_found(tmp_path: Path) -> None:
    """The circle the runtime once had: the template imported the registry for a type hint,
    the registry the job types, and they the template."""
    (tmp_path / "jobs" / "runtime").mkdir(parents=True)
    (tmp_path / "jobs" / "audit").mkdir()
    (tmp_path / "jobs" / "runtime" / "template.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from jobs.registry import X\n"
    )
    (tmp_path / "jobs" / "registry.py").write_text("from jobs.audit.job import AuditJob\n")
    (tmp_path / "jobs" / "audit" / "job.py").write_text("from jobs.runtime import template\n")
    (tmp_path / "jobs" / "audit" / "spec.py").write_text("import core\n")
    assert import_circles(import_graph(tmp_path, ("jobs",))) == [
        ["jobs.audit.job", "jobs.registry", "jobs.runtime.template"]
    ]


def test_the_runtime_and_job_types_keep_to_themselves(tmp_path: Path) -> None:
    (tmp_path / "jobs" / "runtime").mkdir(parents=True)
    (tmp_path / "jobs" / "audit" / "tiers").mkdir(parents=True)
    (tmp_path / "jobs" / "runtime" / "runner.py").write_text("from jobs import registry\n")
    (tmp_path / "jobs" / "audit" / "tiers" / "job.py").write_text(
        "from jobs.audit.tables import AUDIT_COUNTS\n"  # its own job type: allowed
        "from jobs.replication.provenance import STAMP\n"
    )
    found = [str(b) for b in breaches(tmp_path)]
    assert found == [
        "jobs/audit/tiers/job.py:2 imports jobs.replication.provenance.STAMP"
        " (jobs/audit/ never jobs)",
        "jobs/runtime/runner.py:1 imports jobs.registry (jobs/runtime/ never jobs)",
    ]


# Imports every control-plane module and validates one JobGroup of each type, with pyspark
# made unimportable (a None entry in sys.modules makes `import pyspark` raise ImportError).
_WITHOUT_PYSPARK = """
import importlib, pkgutil, sys
for name in ("pyspark", "delta"):
    sys.modules[name] = None
import controlplane
for info in pkgutil.walk_packages(controlplane.__path__, "controlplane."):
    if info.name != "controlplane.__main__":
        importlib.import_module(info.name)
from core.config import ClusterConfig, Settings
from google.protobuf import json_format
from uber.data.kafka.datatransfer.job_group_pb2 import JobGroup
from jobs import registry
settings = Settings(None, "/w", "/c", {"local": ClusterConfig("local", "127.0.0.1:9")})
groups = [
    {"jobGroupId": "a", "type": "JOB_TYPE_KAFKA_AUDIT", "kafkaConsumerTaskGroup": {
        "cluster": "local", "topic": "t", "auditMetadata": {"auditConfigs": [
            {"auditType": "AUDIT_TYPE_APPROX_UNIQ", "auditIntervalInSeconds": 60}]}}},
    {"jobGroupId": "r", "type": "JOB_TYPE_KAFKA_REPLICATION",
     "kafkaConsumerTaskGroup": {"cluster": "local", "topic": "t"},
     "kafkaDispatcherTaskGroup": {"cluster": "local", "topic": "u"}},
    {"jobGroupId": "v", "type": "JOB_TYPE_KAFKA_AVAILABILITY",
     "kafkaConsumerTaskGroup": {"cluster": "local", "topic": "probe"},
     "availabilityTaskGroup": {"availabilityJobType": "AVAILABILITY_JOB_TYPE_NATIVE_PRODUCER"}},
    {"jobGroupId": "p", "type": "JOB_TYPE_LOAD_GEN_PRODUCE",
     "kafkaDispatcherTaskGroup": {"cluster": "local", "topic": "load"}},
    {"jobGroupId": "c", "type": "JOB_TYPE_LOAD_GEN_CONSUME",
     "kafkaConsumerTaskGroup": {"cluster": "local", "topic": "load"}},
    {"jobGroupId": "d", "type": "JOB_TYPE_KAFKA_CONSUMER_TO_RPC_DISPATCHER",
     "kafkaConsumerTaskGroup": {"cluster": "local", "topic": "t", "consumerGroup": "g"},
     "rpcDispatcherTaskGroup": {"uri": "dns:///127.0.0.1:1", "rpcTimeoutMs": 100}},
]
for data in groups:
    job_type, spec = registry.validate(json_format.ParseDict(data, JobGroup()), settings)
    print(job_type.name, spec.required_topic().topic)
assert not any(m == "pyspark" or m.startswith("pyspark.") for m in sys.modules if sys.modules[m])
"""


def test_the_control_plane_imports_and_validates_without_pyspark() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _WITHOUT_PYSPARK],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split("\n")[:6] == [
        "JOB_TYPE_KAFKA_AUDIT t",
        "JOB_TYPE_KAFKA_REPLICATION t",
        "JOB_TYPE_KAFKA_AVAILABILITY __consumer_offsets",
        "JOB_TYPE_LOAD_GEN_PRODUCE load",
        "JOB_TYPE_LOAD_GEN_CONSUME load",
        "JOB_TYPE_KAFKA_CONSUMER_TO_RPC_DISPATCHER t",
    ]


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.room)
def test_each_rule_names_an_existing_room(rule: Rule) -> None:
    assert (ROOT / rule.room).is_dir()
