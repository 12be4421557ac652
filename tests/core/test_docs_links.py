"""Every relative link in a tracked Markdown file points at a file or folder that exists.

Links are `[text](target)`, `![alt](target)` and `[label]: target` definitions, outside fenced
code blocks and inline code. Targets with a scheme (`https:`, `mailto:`) and pure anchors
(`#section`) are not checked; a `#anchor` after a path is dropped and the path checked. A
target starting with `/` is taken from the repository root, as GitHub does.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from urllib.parse import unquote

import pytest

from core.paths import ROOT

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1")
_INLINE_LINK = re.compile(
    r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)"
)
_DEFINITION = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def relative_links(markdown: str) -> list[tuple[int, str]]:
    """(line number, target) of every relative link outside code."""
    found = []
    fence: str | None = None
    for number, line in enumerate(markdown.splitlines(), start=1):
        opening = _FENCE.match(line)
        if fence is not None:
            if opening and opening.group(1)[0] == fence[0] and len(opening.group(1)) >= len(fence):
                fence = None
            continue
        if opening:
            fence = opening.group(1)
            continue
        text = _INLINE_CODE.sub("", line)
        targets = [m.group(1) for m in _INLINE_LINK.finditer(text)]
        definition = _DEFINITION.match(text)
        if definition:
            targets.append(definition.group(1))
        for target in targets:
            if target.startswith("#") or target.startswith("//") or _SCHEME.match(target):
                continue
            found.append((number, target))
    return found


def broken_links(root: Path, markdown_files: list[str]) -> list[str]:
    broken = []
    for name in markdown_files:
        path = root / name
        for number, target in relative_links(path.read_text(encoding="utf-8")):
            relative = unquote(target.split("#", 1)[0].split("?", 1)[0])
            if not relative:
                continue
            resolved = (
                root / relative.lstrip("/") if relative.startswith("/") else path.parent / relative
            )
            if not resolved.exists():
                broken.append(f"{name}:{number}: {target}")
    return broken


def tracked_markdown() -> list[str]:
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z", "--", "*.md"],
            cwd=ROOT,
            capture_output=True,
            check=True,
            timeout=60,
        ).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        pytest.skip(f"not a git checkout: {e}")
    return [name for name in out.decode().split("\0") if name]


def test_every_relative_link_in_tracked_markdown_resolves() -> None:
    files = tracked_markdown()
    assert "README.md" in files
    assert broken_links(ROOT, files) == []


def test_a_broken_link_is_reported_and_code_is_not_read_as_links(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "core").mkdir()
    (tmp_path / "docs" / "page.md").write_text(
        "See [the core](../core) and [this page](page.md#top), [a site](https://example.org),\n"
        "[an anchor](#top), ![a picture](img/missing.png) and [root](/core).\n"
        "`[not a link](nowhere.md)`\n"
        "```\n"
        "[inside a fence](nowhere.md)\n"
        "```\n"
        "[gone]: ../gone.md\n"
    )
    assert broken_links(tmp_path, ["docs/page.md"]) == [
        "docs/page.md:2: img/missing.png",
        "docs/page.md:7: ../gone.md",
    ]
