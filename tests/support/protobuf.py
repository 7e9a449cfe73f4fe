"""Protobuf's wire encoding by hand, for the files an attacker writes without protobuf's
library (which refuses to build them): a varint, a field's key, a length-delimited field."""

from __future__ import annotations


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        out.append(n & 0x7F | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


def key(number: int, wire: int) -> bytes:
    return varint(number << 3 | wire)


def field(number: int, payload: bytes) -> bytes:
    """A length-delimited field, encoded as protobuf would."""
    return key(number, 2) + varint(len(payload)) + payload
