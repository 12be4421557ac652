"""Offset commits read from Kafka's internal `__consumer_offsets` topic: pure decoding, no I/O.

Every commit a consumer group makes is a record there (this is what Burrow reads): the key
names the group, topic and partition, the value holds the offset and the commit time. The
layouts are Kafka's generated `OffsetCommitKey` (versions 0 and 1) and `OffsetCommitValue`
(versions 0 to 4; 4 is a "flexible" version with compact strings and tagged fields). Keys of
version 2 are group metadata (members, assignments), not commits. A record with a null value
is a tombstone: the group deleted that offset.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from core.kafka_admin import OFFSETS_TOPIC

__all__ = ["OFFSETS_TOPIC", "OffsetCommit", "OffsetDeleted", "UndecodableRecord", "decode"]


class UndecodableRecord(ValueError):
    """A `__consumer_offsets` record this decoder does not understand (named by its caller)."""


# NamedTuples, not frozen dataclasses: one is made per record, and they build several times faster.


class OffsetCommit(NamedTuple):
    group: str
    topic: str
    partition: int
    offset: int  # the next offset the group will read
    commit_ms: int  # when the coordinator accepted the commit


class OffsetDeleted(NamedTuple):
    """A tombstone: the group's offset for this partition was deleted or expired."""

    group: str
    topic: str
    partition: int


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def take(self, fmt: str) -> int:
        size = struct.calcsize(fmt)
        if self.at + size > len(self.data):
            raise UndecodableRecord(f"{len(self.data)} bytes end inside a field at byte {self.at}")
        (value,) = struct.unpack_from(fmt, self.data, self.at)
        self.at += size
        return int(value)

    def string(self) -> str:
        return self._text(self.take(">h"))

    def compact_string(self) -> str:
        return self._text(self.uvarint() - 1)

    def uvarint(self) -> int:
        value, shift = 0, 0
        while True:
            byte = self.take(">B")
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value
            shift += 7
            if shift > 28:
                raise UndecodableRecord(f"varint longer than 5 bytes at byte {self.at}")

    def _text(self, length: int) -> str:
        if length < 0:
            return ""  # a null string: metadata may be null
        if self.at + length > len(self.data):
            raise UndecodableRecord(f"a {length}-byte string runs past the record's end")
        text = self.data[self.at : self.at + length].decode("utf-8", errors="replace")
        self.at += length
        return text


def decode(key: bytes | None, value: bytes | None) -> OffsetCommit | OffsetDeleted | None:
    """A commit, a tombstone, or None for group metadata; UndecodableRecord otherwise."""
    if not key:
        raise UndecodableRecord("a record without a key")
    if type(key) is not bytes:
        key = bytes(key)  # Spark hands binary columns over as bytearray, which is not hashable
    names = _KEYS.get(key, _UNSEEN)
    if names is _UNSEEN:
        names = _remember(key)
    if names is None:
        return None  # GroupMetadataKey
    if value is None:
        return _new(OffsetDeleted, names)
    group, topic, partition = names
    # What Kafka 2.1 and later write for a commit without metadata: version 3, 24 bytes.
    if len(value) == _V3_BARE.size:
        version, offset, _, metadata, commit_ms = _V3_BARE.unpack(value)
        if version == 3 and metadata <= 0:  # empty or null (-1): no metadata bytes
            return _new(OffsetCommit, (group, topic, partition, offset, commit_ms))
    offset, commit_ms = _commit_value(value)
    return _new(OffsetCommit, (group, topic, partition, offset, commit_ms))


# A group commits the same few partitions over and over, so most keys were seen before: each
# distinct key is decoded once, kept in a dict (emptied when it reaches _KEYS_KEPT keys).
_KEYS: dict[bytes, tuple[str, str, int] | None] = {}
_KEYS_KEPT = 1 << 16
_UNSEEN = ("", "", -1)  # a sentinel no decoded key is
# NamedTuple(...) goes through a Python-level __new__; tuple.__new__ builds the same object
# several times faster (one per record).
_new = tuple.__new__


def _remember(key: bytes) -> tuple[str, str, int] | None:
    names = _commit_key(key)
    if len(_KEYS) >= _KEYS_KEPT:
        _KEYS.clear()
    _KEYS[key] = names
    return names


def _commit_key(key: bytes) -> tuple[str, str, int] | None:
    """(group, topic, partition) of an `OffsetCommitKey`, None for a `GroupMetadataKey`."""
    keys = _Reader(key)
    key_version = keys.take(">h")
    if key_version == 2:
        return None
    if key_version not in (0, 1):
        raise UndecodableRecord(f"key version {key_version} (known: 0, 1, 2)")
    return keys.string(), keys.string(), keys.take(">i")


_HEAD_V0_TO_V2 = struct.Struct(">hqh")  # version, offset, metadata length
_HEAD_V3 = struct.Struct(">hqih")  # version, offset, leader epoch, metadata length
_V3_BARE = struct.Struct(">hqihq")  # the same, then the commit time: no metadata
_INT64 = struct.Struct(">q")


def _commit_value(value: bytes) -> tuple[int, int]:
    """(offset, commit ms) of an `OffsetCommitValue`. Versions 0 to 3 are unpacked in place
    (the metadata string skipped, not decoded); version 4 and anything malformed go through
    `_Reader`, which names what is wrong."""
    try:
        version = value[1] if value[0] == 0 else -1
        if version == 3:
            _, offset, _, metadata = _HEAD_V3.unpack_from(value)
            return offset, _INT64.unpack_from(value, _HEAD_V3.size + max(metadata, 0))[0]
        if 0 <= version <= 2:
            _, offset, metadata = _HEAD_V0_TO_V2.unpack_from(value)
            return offset, _INT64.unpack_from(value, _HEAD_V0_TO_V2.size + max(metadata, 0))[0]
    except (struct.error, IndexError):
        pass
    values = _Reader(value)
    value_version = values.take(">h")
    if value_version not in (0, 1, 2, 3, 4):
        raise UndecodableRecord(f"value version {value_version} (known: 0 to 4)")
    offset = values.take(">q")
    if value_version >= 3:
        values.take(">i")  # leader epoch
    if value_version == 4:
        values.compact_string()  # metadata
    else:
        values.string()
    return offset, values.take(">q")
