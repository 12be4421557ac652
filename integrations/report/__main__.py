"""`python -m integrations.report --warehouse W --out report.html [--since T] [--until T]`.

Exit 0 with the page written, 2 with one line on bad input (a missing warehouse, a time that
is not ISO 8601)."""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

from integrations.report import MissingWarehouse, TimeRange, write_report


def utc_time(text: str) -> datetime:
    """An ISO 8601 time; one without a zone is UTC."""
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an ISO 8601 time") from None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def hours(text: str) -> timedelta:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of hours")
    return timedelta(hours=value)


def span_of(args: argparse.Namespace, now: datetime) -> TimeRange:
    """--last H is [now - H, now); else [--since, --until)."""
    if args.last is not None:
        return TimeRange(now - args.last, None)
    return TimeRange(args.since, args.until)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m integrations.report",
        description="Write the completeness report: one HTML page from the jobs' Delta "
        "tables (docs/report.md). Times are UTC.",
    )
    parser.add_argument("--warehouse", type=Path, default=Path("var/warehouse"),
                        help="the jobs' warehouse directory (default %(default)s)")  # fmt: skip
    parser.add_argument("--out", type=Path, default=Path("report.html"),
                        help="the page to write (default %(default)s)")  # fmt: skip
    parser.add_argument("--since", type=utc_time, help="first window start shown (ISO 8601)")
    parser.add_argument("--until", type=utc_time, help="windows starting before this time")
    parser.add_argument(
        "--last", type=hours, metavar="HOURS", help="the last HOURS hours (not with --since)"
    )
    args = parser.parse_args(argv)
    if args.last is not None and (args.since or args.until):
        parser.error("--last: give it alone, or --since/--until")
    try:
        out = write_report(args.warehouse, args.out, span_of(args, datetime.now(UTC)))
    except MissingWarehouse as error:
        print(f"report: {error}", file=sys.stderr)
        return 2
    print(f"report written to {out.resolve()} ({out.stat().st_size // 1024} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
