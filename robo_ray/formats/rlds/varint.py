"""Protobuf base-128 varints."""
from __future__ import annotations

from typing import Callable

from robo_ray.formats.rlds.errors import CorruptRecord


def varint(n: int) -> bytes:
    if n < 0:
        n += 1 << 64
    if n < 0x80:
        return bytes((n,))
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def read_varint(buf: bytes | memoryview, pos: int, end: int | None = None) -> tuple[int, int]:
    """(value, position after it) of the varint at `pos`, which must end before `end` (default: the buffer's end).
    Raises CorruptRecord if it runs past `end` or is longer than 10 bytes / over 64 bits."""
    if end is None:
        end = len(buf)
    if pos < end:
        b = buf[pos]
        if b < 0x80:
            return b, pos + 1
    start = pos
    result = shift = 0
    while pos < end:
        b = buf[pos]
        pos += 1
        if shift == 63 and b > 1:
            raise CorruptRecord(f"varint at byte {start} is longer than 10 bytes or over 64 bits")
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
    raise CorruptRecord(f"varint at byte {start} runs past the end of its message")


def read_varint_from(read: Callable[[int], bytes], at: int | None = None) -> int:
    """A varint read byte by byte from a stream (`read(1)`), for data that is never held whole. Raises
    CorruptRecord (naming byte `at` if given) if the stream ends inside it or it is longer than 10 bytes / over 64
    bits."""
    result = shift = 0
    while True:
        chunk = read(1)
        if not chunk:
            raise CorruptRecord("the data ends inside a varint" + ("" if at is None else f" at byte {at}"))
        b = chunk[0]
        if shift == 63 and b > 1:
            raise CorruptRecord("varint longer than 10 bytes or over 64 bits" + ("" if at is None else
                                                                                  f" at byte {at}"))
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result
        shift += 7
