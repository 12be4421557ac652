"""Zip Python packages for `spark-submit --py-files`.

Usage: python -m tools.pyfiles_zip OUT.zip ROOT:PACKAGE [ROOT:PACKAGE ...]
Each PACKAGE folder under ROOT is stored with paths relative to ROOT (only *.py files).
"""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    out = Path(argv[0])
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for spec in argv[1:]:
            root, _, package = spec.partition(":")
            base = Path(root)
            for path in sorted((base / package).rglob("*.py")):
                archive.write(path, path.relative_to(base))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
