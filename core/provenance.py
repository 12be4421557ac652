"""The provenance stamp every replicated record carries, and how to read it back.

One header, `uatu.src`, whose value is `<cluster>/<topic>/<partition>/<offset>` in UTF-8
(written by `Provenance.java`). A Kafka topic name has no `/`, so the value parses from the
right even when the cluster name has one. A record copied twice (A -> B -> C) carries one
stamp per hop; the last one describes the latest hop.

The dedupe rule for consumers of a destination other writers also write: drop a record
whose stamped offset is not above the highest seen for its (cluster, topic, partition).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

STAMP = "uatu.src"


class SourceOffset(NamedTuple):
    cluster: str
    topic: str
    partition: int
    offset: int


def parse_stamp(value: bytes) -> SourceOffset:
    """The source a stamp value names; ValueError naming the value when it is not a stamp."""
    text = value.decode("utf-8", errors="replace")
    parts = text.rsplit("/", 3)
    if len(parts) != 4 or not parts[0] or not parts[1]:
        raise ValueError(f"{STAMP} header {text!r} is not <cluster>/<topic>/<partition>/<offset>")
    cluster, topic, partition, offset = parts
    try:
        return SourceOffset(cluster, topic, int(partition), int(offset))
    except ValueError:
        raise ValueError(
            f"{STAMP} header {text!r}: partition and offset must be integers"
        ) from None


def latest_stamp(headers: Sequence[tuple[str, bytes | None]] | None) -> SourceOffset | None:
    """The last `uatu.src` stamp of a record's headers (the latest hop), None without one."""
    for name, value in reversed(headers or ()):
        if name == STAMP and value is not None:
            return parse_stamp(value)
    return None
