"""Docstrings and comments name files and modules that exist.

Read from the comments and docstrings of every Python module of the rooms (`ROOMS` of
tests/core/test_code_shape.py), with `ast` and `tokenize` (nothing is imported):

* **A repository path**, backticked or bare, whose first part is a top-level folder of the
  checkout (`jobs/runtime/runner.py`, `docs/audit.md`, `core/`), ending in .py, .md, .java,
  .proto, .json, .yaml or .sh, or a folder's trailing slash: that file or folder exists.
  `build/` and `var/` (made by `make`) are not checked, nor a path with a placeholder in it
  (`<checkpoint>/offsets/`, `tests/*/test_*.py`).
* **A package face**: in an `__init__.py` docstring, a backticked bare name (`tables.py`,
  `report/`) is a module or folder of that package.
* **A dotted name in backticks** that starts with a room (`jobs.audit.tables`,
  ``core.paths.ROOT``, `python -m clients.dlq_list`): the module exists and the name after it,
  if any, is defined at its top level. `dev.uatu.…` names the project's Java
  (jvm/src/main/java, jvm/src/test/java): that class or package exists.

Each finding names the file, the line and the reference.
"""

from __future__ import annotations

import ast
import functools
import io
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

from core.faults import POINTS
from core.paths import ROOT
from tests.core.test_code_shape import ROOMS, python_files

_SUFFIXES = "py|md|java|proto|json|yaml|sh"
_PART = r"[A-Za-z0-9_.-]+"
# A path: parts joined by slashes, ending in a known suffix or a slash. Not preceded by a
# path character or a placeholder's bracket, not followed by more of a path.
_PATH = re.compile(
    rf"(?<![\w./<>{{}}*$~-])((?:{_PART}/)+(?:{_PART}\.(?:{_SUFFIXES})\b)?)(?![\w/*<{{])"
)
_BARE = re.compile(rf"`({_PART}(?:\.py|/))`")
_BACKTICKED = re.compile(r"`{1,2}([^`]+)`{1,2}")
_GENERATED = frozenset({"build", "var"})
_JAVA_ROOTS = ("jvm/src/main/java", "jvm/src/test/java")


def _texts(source: str) -> Iterator[tuple[int, str, bool]]:
    """(line, text, whether it is the module's docstring) of every comment and every line of
    every docstring."""
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string, False
    for node in ast.walk(ast.parse(source)):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            value = body[0].value
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                for i, text in enumerate(value.value.splitlines()):
                    yield value.lineno + i, text, isinstance(node, ast.Module)


@functools.cache
def _top_level_names(module: Path) -> set[str]:
    """Names a module defines at its top level (also under `if` and `try`)."""
    names: set[str] = set()
    pending = list(ast.parse(module.read_text(encoding="utf-8")).body)
    while pending:
        node = pending.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.If | ast.Try):
            pending.extend(node.body + node.orelse + getattr(node, "finalbody", []))
            for handler in getattr(node, "handlers", []):
                pending.extend(handler.body)
    return names


def _python_name_exists(root: Path, parts: list[str]) -> bool:
    """`parts` is a module, a package, or a module's top-level name (a class's or a
    function's own attributes are not followed)."""
    for k in range(len(parts), 0, -1):
        base = root.joinpath(*parts[:k])
        module = base.with_suffix(".py")
        package = base / "__init__.py"
        if module.is_file() or package.is_file():
            rest = parts[k:]
            return not rest or rest[0] in _top_level_names(module if module.is_file() else package)
        if k == len(parts) and base.is_dir():
            return True  # a folder without __init__.py (a namespace package)
    return False


def _java_name_exists(root: Path, parts: list[str]) -> bool:
    """`parts` (dev.uatu....) is a Java package, a class, or a class's member."""
    for java_root in _JAVA_ROOTS:
        base = root / java_root
        for k in range(len(parts), 2, -1):
            candidate = base.joinpath(*parts[:k])
            if candidate.with_suffix(".java").is_file() or (k == len(parts) and candidate.is_dir()):
                return True
    return False


FAULT_POINTS = frozenset(POINTS)


def stale_references(root: Path) -> list[str]:
    folders = {
        p.name
        for p in root.iterdir()
        if p.is_dir() and not p.name.startswith(".") and p.name not in _GENERATED
    }
    rooms = {*ROOMS, "tests"}
    dotted = re.compile(rf"(?<![\w./-])((?:{'|'.join(sorted(rooms))})(?:\.\w+)+)(?!\w)")
    stale: list[str] = []
    for relative, path in python_files(root, ROOMS):
        source = path.read_text(encoding="utf-8")
        found: list[tuple[int, str]] = []
        package_face = path.name == "__init__.py"
        for line, text, module_docstring in _texts(source):
            for match in _PATH.finditer(text):
                target = match.group(1)
                if target.split("/")[0] in folders and not (root / target).exists():
                    found.append((line, target))
            for span in _BACKTICKED.finditer(text):
                for match in dotted.finditer(span.group(1)):
                    parts = match.group(1).split(".")
                    if _python_name_exists(root, parts):
                        continue
                    if parts[:2] == ["dev", "uatu"] and _java_name_exists(root, parts):
                        continue
                    if match.group(1) in FAULT_POINTS:  # a fault point's name, not a module
                        continue
                    found.append((line, match.group(1)))
            if package_face and module_docstring:
                for match in _BARE.finditer(text):
                    if not (path.parent / match.group(1)).exists():
                        found.append((line, match.group(1)))
        stale.extend(f"{relative}:{line}: {target}" for line, target in sorted(set(found)))
    return stale


def test_docstrings_and_comments_name_files_and_modules_that_exist() -> None:
    assert stale_references(ROOT) == []


def test_a_stale_reference_is_found(tmp_path: Path) -> None:
    for folder in ("jobs/audit", "core", "docs", "dev", "jvm/src/main/java/dev/uatu/fold"):
        (tmp_path / folder).mkdir(parents=True)
    (tmp_path / "jvm/src/main/java/dev/uatu/fold/Consumers.java").write_text("class Consumers {}\n")
    (tmp_path / "docs" / "audit.md").write_text("# audit\n")
    (tmp_path / "core" / "__init__.py").write_text("")
    (tmp_path / "core" / "paths.py").write_text("ROOT = 1\n\ndef cds_java_options(): ...\n")
    (tmp_path / "jobs" / "__init__.py").write_text("")
    (tmp_path / "jobs" / "audit" / "__init__.py").write_text(
        '"""The audit: `tables.py`, `tiers/` and `gone.py`."""\n'
    )
    (tmp_path / "jobs" / "audit" / "tables.py").write_text("")
    (tmp_path / "jobs" / "audit" / "job.py").write_text(
        '"""Reads docs/audit.md and `docs/audit_old.md`; builds with `core.paths.ROOT`,\n'
        "``core.paths.cds_java_options`` and `core.paths.jar_dir`, not `core.pathz`; folds in\n"
        "`dev.uatu.fold.Consumers` and `dev.uatu.fold.Gone`; a run's files under\n"
        "`<checkpoint>/offsets/`, var/bench/x.json and tests/*/test_*.py are not checked.\n"
        '"""\n'
        "# see jobs/audit/tables.py and jobs/runtime/ (gone), and README-like text.md\n"
    )
    assert stale_references(tmp_path) == [
        "jobs/audit/__init__.py:1: gone.py",
        "jobs/audit/__init__.py:1: tiers/",
        "jobs/audit/job.py:1: docs/audit_old.md",
        "jobs/audit/job.py:2: core.paths.jar_dir",
        "jobs/audit/job.py:2: core.pathz",
        "jobs/audit/job.py:3: dev.uatu.fold.Gone",
        "jobs/audit/job.py:6: jobs/runtime/",
    ]
