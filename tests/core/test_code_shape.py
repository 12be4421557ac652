"""The house's shape, checked from the code (docs/ARCHITECTURE.md, "One owner per concept").

* **Owners of shared concepts**: the modules that may open Hadoop's file system, a gRPC
  channel, install a signal handler or read the fault variable (`OWNERS`). Everyone else asks
  them. Running Python on executors (a UDF, `mapInPandas`, `.rdd`, ...) has no owner: the
  executors have no Python environment (docs/operations.md, "What each host needs").
* **A size ratchet**: a module stays under 500 lines, a class under 250, a function under 80;
  `OVERSIZED` lists today's exceptions with their size, which may only shrink (an exception
  that grew, or that is no longer needed and still listed, fails).
* **Comments say why, not when or how fast**: no date and no measured figure in a comment or
  docstring (measurements go to docs/benchmarks.md).
* **docs/ARCHITECTURE.md's JobType table** is the registry's.

Each checker runs on a planted tree too, so a test shows it can fail.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from core.paths import ROOT

PRODUCTION = ("core", "jobs", "controlplane", "clients", "integrations")
ROOMS = (*PRODUCTION, "devservices", "testing", "dev", "bench", "examples")


def python_files(root: Path, rooms: tuple[str, ...]) -> Iterator[tuple[str, Path]]:
    for room in rooms:
        for path in sorted((root / room).rglob("*.py")):
            if ".venv" in path.parts or "_pb2" in path.name:
                continue
            yield path.relative_to(root).as_posix(), path


# --- owners ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Owned:
    concept: str
    pattern: re.Pattern[str]  # matched against code with comments and docstrings removed
    owners: frozenset[str]


OWNERS = (
    Owned(
        "Hadoop's file system",
        re.compile(r"getFileSystem\(|hadoop\.fs\.Path\b"),
        frozenset({"jobs/runtime/checkpoint_files.py"}),
    ),
    Owned(
        "a gRPC client channel",
        re.compile(r"\b(insecure|secure|intercept)_channel\("),
        # The control plane's one channel; kafka-pixy's, a different service, its own.
        frozenset({"core/channel.py", "jobs/availability/probes/proxy_client.py"}),
    ),
    Owned(
        "a signal handler",
        re.compile(r"\bsignal\.signal\("),
        # A job's stop requests; the control plane's serve loop.
        frozenset({"jobs/runtime/runner.py", "controlplane/server.py"}),
    ),
    Owned(
        "the fault variable",
        re.compile(r"""["']UATU_(\w*_)?FAULT["']"""),
        frozenset({"core/faults.py"}),
    ),
    Owned(
        "Python on executors",
        re.compile(
            r"\b(pandas_)?udf\b|\budtf\b|\b(mapIn|applyIn)\w+\(|transformWithStateInPandas"
            r"|\bforeachPartition\(|\.rdd\b|\.foreach\(|\bdataSource\.register\("
        ),
        # Nobody: every transform is a JVM expression and foreachBatch runs on the driver, so
        # executors need no Python environment and hosts no venv.
        frozenset(),
    ),
)


def code_only(source: str) -> str:
    """`source` with its comments and docstrings blanked out (line numbers kept)."""
    lines = source.splitlines()
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return source
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            value = body[0].value
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                for i in range(value.lineno - 1, (value.end_lineno or value.lineno)):
                    lines[i] = ""
    return "\n".join(line.split("#", 1)[0] if "#" in line else line for line in lines)


def owner_breaches(root: Path) -> list[str]:
    found = []
    for relative, path in python_files(root, PRODUCTION):
        code = code_only(path.read_text())
        for owned in OWNERS:
            if relative not in owned.owners and owned.pattern.search(code):
                found.append(f"{relative}: {owned.concept} (owned by {sorted(owned.owners)})")
    return found


def test_each_shared_concept_is_touched_by_its_owners_only() -> None:
    assert owner_breaches(ROOT) == []


def test_an_owner_breach_is_found(tmp_path: Path) -> None:
    planted = {
        "jobs/dispatch/checkpoint.py": '"""Reads getFileSystem( in a docstring: not code."""\n'
        "def read(spark, path):\n"
        "    fs = spark._jvm.org.apache.hadoop.fs.Path(path)  # the breach\n"
        "    return os.environ.get('UATU_DISPATCH_FAULT')\n",
        # Python on executors has no owner: a breach wherever it is.
        "jobs/audit/enrich.py": "def enrich(df):\n"
        "    return df.withColumn('n', F.udf(len, 'int')('value'))\n",
        "core/rows.py": "def rows(df):\n    return df.rdd.map(str)\n",
    }
    for relative, code in planted.items():
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_text(code)
    assert owner_breaches(tmp_path) == [
        "core/rows.py: Python on executors (owned by [])",
        "jobs/audit/enrich.py: Python on executors (owned by [])",
        "jobs/dispatch/checkpoint.py: Hadoop's file system "
        "(owned by ['jobs/runtime/checkpoint_files.py'])",
        "jobs/dispatch/checkpoint.py: the fault variable (owned by ['core/faults.py'])",
    ]


# --- sizes -----------------------------------------------------------------------------------

MODULE_LINES, CLASS_LINES, FUNCTION_LINES = 500, 250, 80

# Today's exceptions and their size: each may only shrink, and goes once it fits.
OVERSIZED = {
    "jobs/audit/tiers/spec.py::_checks": 102,
    "jobs/availability/job.py": 609,
    "jobs/availability/lag/tracker.py::LagTracker.evaluate": 91,
    "controlplane/cli.py::build_parser": 172,
    "devservices/_service.py": 591,
    "devservices/kafka.py": 658,
    "bench/audit_clients_bench.py::main": 110,
    "bench/availability_bench.py": 1849,
    "bench/availability_bench.py::detection": 85,
    "bench/availability_bench.py::_burrow_warm_run": 94,
    "bench/availability_bench.py::throughput": 123,
    "bench/availability_bench.py::main": 85,
    "bench/controlplane_bench.py": 877,
    "bench/controlplane_bench.py::table_rows": 93,
    "bench/dispatch_bench.py::main": 86,
    "bench/dispatch_handwritten.py::dispatch": 84,
    "bench/replication_bench.py": 1479,
    "bench/replication_bench.py::summarize": 105,
    "bench/startup_bench.py::main": 99,
    "jvm/src/main/java/dev/uatu/dispatch/PartitionRun.java": 590,
}


def sizes(root: Path) -> dict[str, int]:
    """The size in lines of every module, class and function over its limit."""
    found: dict[str, int] = {}
    for relative, path in python_files(root, ROOMS):
        source = path.read_text()
        if len(source.splitlines()) > MODULE_LINES:
            found[relative] = len(source.splitlines())
        for name, node in _definitions(ast.parse(source)):
            size = (node.end_lineno or node.lineno) - node.lineno + 1
            limit = CLASS_LINES if isinstance(node, ast.ClassDef) else FUNCTION_LINES
            if size > limit:
                found[f"{relative}::{name}"] = size
    for path in sorted((root / "jvm" / "src").rglob("*.java")):
        lines = len(path.read_text().splitlines())
        if lines > MODULE_LINES:
            found[path.relative_to(root).as_posix()] = lines
    return found


def _definitions(tree: ast.AST, prefix: str = "") -> Iterator[tuple[str, ast.AST]]:
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            yield f"{prefix}{node.name}", node
            yield from _definitions(node, f"{prefix}{node.name}.")


def size_breaches(found: dict[str, int], allowed: dict[str, int]) -> list[str]:
    breaches = []
    for name, size in sorted(found.items()):
        if name not in allowed:
            breaches.append(f"{name}: {size} lines, over its limit")
        elif size > allowed[name]:
            breaches.append(f"{name}: {size} lines, grew from {allowed[name]}")
    for name in sorted(set(allowed) - set(found)):
        breaches.append(f"{name}: fits now; remove it from OVERSIZED")
    for name in sorted(set(allowed) & set(found)):
        if found[name] < allowed[name]:
            breaches.append(f"{name}: shrank to {found[name]}; lower OVERSIZED to it")
    return breaches


def test_modules_classes_and_functions_keep_their_size() -> None:
    assert size_breaches(sizes(ROOT), OVERSIZED) == []


def test_the_size_ratchet_only_turns_one_way(tmp_path: Path) -> None:
    (tmp_path / "jobs").mkdir()
    long_function = "def f():\n" + "    x = 1\n" * 90
    (tmp_path / "jobs" / "big.py").write_text(long_function + "\n" * 420)
    found = sizes(tmp_path)
    assert found == {"jobs/big.py": 511, "jobs/big.py::f": 91}
    assert size_breaches(found, {}) == [
        "jobs/big.py: 511 lines, over its limit",
        "jobs/big.py::f: 91 lines, over its limit",
    ]
    assert size_breaches(found, {"jobs/big.py": 600, "jobs/big.py::f": 85, "gone.py": 700}) == [
        "jobs/big.py::f: 91 lines, grew from 85",
        "gone.py: fits now; remove it from OVERSIZED",
        "jobs/big.py: shrank to 511; lower OVERSIZED to it",
    ]


# --- comments --------------------------------------------------------------------------------

_DATE = re.compile(
    r"\b20\d\d-[01]\d(-[0-3]\d)?\b"
    r"|\b(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)[a-z]* \d{1,2},? 20\d\d\b"
)
_FIGURE = re.compile(
    r"\d[\d,.]*\s?-?(ms|s|seconds|minutes|min|%|x|\u00d7|MB|MiB|GB|GiB|kB|KiB|records/s|msg/s"
    r"|MB/s|cores?|core|user-seconds)\b",
    re.IGNORECASE,
)
_MEASURED = re.compile(
    r"\b(measured(?! over)|took|faster than|slower than|beats?|on the bench(mark)?( machine)?"
    r"|bench machine|on this machine|costs about|side by side)\b",
    re.IGNORECASE,
)
_QUOTED = re.compile(r'"[^"]*"|`[^`]*`')


def comment_breaches(root: Path) -> list[str]:
    """Comments and docstrings that carry a date, or a figure beside a word of measuring."""
    found = []
    for relative, line, text in _comments(root):
        bare = _QUOTED.sub("", text)
        if _DATE.search(bare):
            found.append(f"{relative}:{line}: a date: {text.strip()[:100]}")
        elif _MEASURED.search(bare) and _FIGURE.search(bare):
            found.append(f"{relative}:{line}: a measured figure: {text.strip()[:100]}")
    return found


def _comments(root: Path) -> Iterator[tuple[str, int, str]]:
    for relative, path in python_files(root, (*ROOMS, "tests")):
        source = path.read_text()
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type == tokenize.COMMENT:
                yield relative, token.start[0], token.string
        for node in ast.walk(ast.parse(source)):
            body = getattr(node, "body", None)
            if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
                value = body[0].value
                if isinstance(value, ast.Constant) and isinstance(value.value, str):
                    for i, text in enumerate(value.value.splitlines()):
                        yield relative, value.lineno + i, text
    others = [*sorted((root / "jvm" / "src").rglob("*.java")), root / "Makefile"]
    others += [root / "spark-submit.sh", *sorted((root / "dev").rglob("*.sh"))]
    for path in others:
        if not path.exists():
            continue
        marker = "//" if path.suffix == ".java" else "#"
        for number, text in enumerate(path.read_text().splitlines(), start=1):
            stripped = text.strip()
            if stripped.startswith((marker, "*", "/*", "@#")):
                yield path.relative_to(root).as_posix(), number, stripped


def test_comments_say_why_not_when_or_how_fast() -> None:
    assert comment_breaches(ROOT) == []


def test_a_date_or_a_measured_figure_in_a_comment_is_found(tmp_path: Path) -> None:
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "m.py").write_text(
        '"""Parses "2026-11-25 09:33:20" log lines (an example in quotes is fine)."""\n'
        "RETRIES = 10  # found on 2026-11-29\n"
        "CHANNELS = 4  # measured: 4 HTTP/2 connections beat 2 on the 2-core bench machine\n"
        "LG_K = 12  # about 1.6 % standard error: a property of the sketch, not a measure\n"
    )
    assert [b.split(": ", 2)[:2] for b in comment_breaches(tmp_path)] == [
        ["jobs/m.py:2", "a date"],
        ["jobs/m.py:3", "a measured figure"],
    ]


# --- docs/ARCHITECTURE.md --------------------------------------------------------------------


def documented_job_types(text: str) -> set[tuple[str, str, str]]:
    """(JobType, spec builder, runtime) of each row of the JobType table."""
    section = text.split("## The JobType contract", 1)[1].split("\n## ", 1)[0]
    row = re.compile(r"^\| `(JOB_TYPE_\w+)`[^|]*\| `([\w.]+)` \| `([\w.]+)` \|", re.MULTILINE)
    return {match.groups() for match in row.finditer(section)}


def test_the_architecture_page_lists_every_job_type_of_the_registry() -> None:
    from jobs.registry import AUDIT_VARIANTS, JOB_TYPES

    records = [t for t in JOB_TYPES.values() if t.name != "JOB_TYPE_KAFKA_AUDIT"]
    records += list(AUDIT_VARIANTS.values())
    expected = set()
    for record in records:
        runtime = record.load_runtime()
        builder = f"{record.prepare.__module__}.{record.prepare.__name__}"
        expected.add((record.name, builder, f"{runtime.__module__}.{runtime.__name__}"))
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    assert documented_job_types(text) == expected
