"""The shared `main` of the local-service tools (kafka_broker, etcd_server, spark_standalone)."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

log = logging.getLogger("uatu.tools")


def run(
    parser: argparse.ArgumentParser, argv: Sequence[str] | None, expected: type[Exception]
) -> int:
    """Parse, log to stderr with timestamps, run the subcommand's `func`; an `expected` error
    is one line on stderr and exit status 1."""
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(message)s", datefmt="%H:%M:%S"
    )
    try:
        return int(args.func(args))
    except expected as e:
        log.error("%s", e)
        return 1
