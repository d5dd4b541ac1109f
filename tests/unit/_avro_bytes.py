"""Reading Avro container bytes in tests, independently of the code under test."""

from __future__ import annotations


def read_long(data: bytes, pos: int) -> tuple[int, int]:
    """The zigzag varint long at ``pos`` and the position after it."""
    shift = z = 0
    while True:
        byte = data[pos]
        pos += 1
        z |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return (z >> 1) ^ -(z & 1), pos
