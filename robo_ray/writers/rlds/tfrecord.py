"""TFRecord framing (FORMATS 1.6): length, masked CRC32C of the length, data, masked CRC32C of the data."""
from __future__ import annotations

import struct
from typing import BinaryIO, Iterator

import crc32c

_MASK_DELTA = 0xA282EAD8


def masked_crc(data: bytes) -> int:
    c = crc32c.crc32c(data)
    return (((c >> 15) | (c << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def frame_record(data: bytes) -> bytes:
    header = struct.pack("<Q", len(data))
    return header + struct.pack("<I", masked_crc(header)) + data + struct.pack("<I", masked_crc(data))


def write_record(f: BinaryIO, data: bytes) -> int:
    """Append one framed record; returns the bytes written."""
    framed = frame_record(data)
    f.write(framed)
    return len(framed)


def read_records(f: BinaryIO, verify: bool = True) -> Iterator[bytes]:
    """Iterate a TFRecord file's payloads, checking both CRCs (raises ValueError on corruption)."""
    while True:
        header = f.read(8)
        if not header:
            return
        if len(header) != 8:
            raise ValueError("truncated record header")
        (length,) = struct.unpack("<Q", header)
        (hcrc,) = struct.unpack("<I", f.read(4))
        if verify and hcrc != masked_crc(header):
            raise ValueError("record length CRC mismatch")
        data = f.read(length)
        tail = f.read(4)
        if len(data) != length or len(tail) != 4:
            raise ValueError("truncated record")
        if verify and struct.unpack("<I", tail)[0] != masked_crc(data):
            raise ValueError("record data CRC mismatch")
        yield data
