"""Zip Python packages for `spark-submit --py-files`.

Usage: python -m dev.pyfiles_zip OUT.zip ROOT:PACKAGE [ROOT:PACKAGE ...]
Each PACKAGE folder under ROOT is stored with paths relative to ROOT (only *.py files).
PACKAGE may also be a top-level module file (e.g. kafkapixy_pb2.py), stored as is.
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
    specs = [(Path(root), package) for root, _, package in (s.partition(":") for s in argv[1:])]
    missing = [str(base / package) for base, package in specs if not (base / package).exists()]
    if missing:
        print(f"pyfiles_zip: not found: {', '.join(missing)}", file=sys.stderr)
        return 1
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for base, package in specs:
            target = base / package
            paths = [target] if target.is_file() else sorted(target.rglob("*.py"))
            for path in paths:
                archive.write(path, path.relative_to(base))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
