"""`python -m integrations.report --warehouse W --out report.html`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from integrations.report import write_report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m integrations.report")
    parser.add_argument("--warehouse", type=Path, default=Path("var/warehouse"))
    parser.add_argument("--out", type=Path, default=Path("report.html"))
    args = parser.parse_args(argv)
    out = write_report(args.warehouse, args.out)
    print(f"report written to {out.resolve()} ({out.stat().st_size // 1024} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
