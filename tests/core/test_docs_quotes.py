"""Docs that quote a module's docstring quote it as it is.

A table's schema is written once, in `jobs/<type>/tables.py`; the job pages in docs/ quote
its docstring in a fenced block right after a marker line `<!-- quote: PATH -->`. The block
must appear, line for line, in the docstring of the module at PATH (read with `ast`, nothing
is imported), so a schema change that is not copied into the docs fails here.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from core.paths import ROOT

_MARKER = re.compile(r"^<!-- quote: (\S+) -->$")


def quoted_blocks(markdown: str) -> list[tuple[int, str, str]]:
    """(line number of the marker, quoted path, block text) for every marked fenced block."""
    lines = markdown.splitlines()
    found = []
    for i, line in enumerate(lines):
        marker = _MARKER.match(line.strip())
        if not marker:
            continue
        if i + 1 >= len(lines) or not lines[i + 1].startswith("```"):
            found.append((i + 1, marker.group(1), ""))
            continue
        end = next((j for j in range(i + 2, len(lines)) if lines[j].startswith("```")), len(lines))
        found.append((i + 1, marker.group(1), "\n".join(lines[i + 2 : end])))
    return found


def stale_quotes(root: Path, markdown_files: list[Path]) -> list[str]:
    stale = []
    for page in markdown_files:
        for number, quoted, block in quoted_blocks(page.read_text(encoding="utf-8")):
            where = f"{page.relative_to(root).as_posix()}:{number}"
            module = root / quoted
            if not module.is_file():
                stale.append(f"{where}: {quoted} does not exist")
                continue
            docstring = ast.get_docstring(ast.parse(module.read_text(encoding="utf-8"))) or ""
            if not block or block not in docstring:
                stale.append(f"{where}: the block is not in {quoted}'s docstring")
    return stale


def test_quoted_docstrings_match_their_modules() -> None:
    pages = sorted((ROOT / "docs").rglob("*.md"))
    assert sum(len(quoted_blocks(p.read_text(encoding="utf-8"))) for p in pages) >= 3
    assert stale_quotes(ROOT, pages) == []


def test_a_stale_quote_is_reported(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text('"""Table:\n\na  int\nb  string\n"""\n')
    page = tmp_path / "page.md"
    page.write_text(
        "<!-- quote: m.py -->\n```text\na  int\nb  string\n```\n"
        "<!-- quote: m.py -->\n```text\na  long\n```\n"
        "<!-- quote: gone.py -->\n```text\nx\n```\n"
    )
    assert stale_quotes(tmp_path, [page]) == [
        "page.md:6: the block is not in m.py's docstring",
        "page.md:10: gone.py does not exist",
    ]
