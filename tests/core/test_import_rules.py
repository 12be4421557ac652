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
    Rule("clients", never=("jobs", "controlplane", *DEV, *PYSPARK)),
    # Integrations read the tables with delta-rs and talk gRPC: no Spark, no server internals.
    Rule(
        "integrations",
        never=("jobs", "controlplane", *DEV, *PYSPARK),
        skip_dirs=("integrations/airflow/.venv",),
    ),
    Rule("devservices", never=("jobs", "controlplane", "clients", "testing", "bench", "examples")),
    Rule("testing", never=("controlplane", "bench", "examples", "tests"), allowed=()),
    # The CDS training run (dev/cds_archive.py) builds its session as the jobs do.
    Rule(
        "dev",
        never=("jobs", "controlplane", "clients", "devservices", "testing", "bench"),
        allowed=("jobs.runtime.session",),
    ),
)

# testing/ may reach jobs only through the session builder (and the spec/registry layer a
# JobGroup builder needs); everything else of jobs/ is the code under test.
TESTING_JOBS_ALLOWED = ("jobs.runtime.session", "jobs.registry")


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
