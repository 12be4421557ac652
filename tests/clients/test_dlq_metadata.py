"""DLQMetadata keys (clients/dlq_metadata.py) against wire bytes encoded by hand here: proto3,
fields in number order, zero values left out, as uForwarder's Java writes them."""

from __future__ import annotations

import pytest

from clients.dlq_metadata import DlqMetadata, decode, encode


def varint(n: int) -> bytes:
    """Base-128, least significant group first (negative int32/int64: two's complement, 64 bit)."""
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | (0x80 if n else 0))
        if not n:
            return bytes(out)


TS = 1_700_000_000_000

VECTORS = [
    (
        DlqMetadata(5, "orders", 2, 300, TS, b"k1", 1),
        b"\x08\x05"  # 1 retry_count = 5
        + b"\x12\x06orders"  # 2 topic
        + b"\x18\x02"  # 3 partition = 2
        + b"\x20\xac\x02"  # 4 offset = 300
        + b"\x28"
        + varint(TS)  # 5 timestamp_ns (milliseconds)
        + b"\x32\x02k1"  # 6 data: the original key
        + b"\x38\x01",  # 7 timeout_count = 1
    ),
    (DlqMetadata(0, "t", 0, 0, 0, None, 0), b"\x12\x01t"),  # zeros and a null key: left out
    (
        DlqMetadata(0, "t", -1, 0, 0, None, 0),  # a negative int32 takes ten bytes
        b"\x12\x01t\x18\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01",
    ),
]


def test_varint_helper() -> None:
    assert varint(300) == b"\xac\x02" and varint(1) == b"\x01" and len(varint(-1)) == 10


@pytest.mark.parametrize(("meta", "wire"), VECTORS)
def test_encode_gives_the_wire_bytes(meta: DlqMetadata, wire: bytes) -> None:
    assert encode(meta) == wire


@pytest.mark.parametrize(("meta", "wire"), VECTORS)
def test_decode_reads_the_wire_bytes(meta: DlqMetadata, wire: bytes) -> None:
    assert decode(wire) == meta


def test_unknown_fields_are_skipped_as_protobuf_does() -> None:
    assert decode(b"\x12\x01t" + b"\x48\x07" + b"\x08\x03") == DlqMetadata(3, "t", 0, 0, 0, None, 0)


@pytest.mark.parametrize("raw", [None, b"", b"\x08\x05", b"\x12\x09short", b"\xff\xff"])
def test_what_is_not_a_dlq_metadata_is_refused(raw: bytes | None) -> None:
    with pytest.raises(ValueError):
        decode(raw)


def test_origin() -> None:
    assert VECTORS[0][0].origin == "orders/2/300"
