"""TFRecord framing (FORMATS 1.6): length, masked CRC32C of the length, data, masked CRC32C of the data.

Records are written from segment chunks (the CRC is computed incrementally, so a record never has to be whole in
memory) and read either whole (`read_records`) or as a stream (`iter_records` -> `RecordStream`)."""
from __future__ import annotations

import struct
from typing import BinaryIO, Iterable, Iterator

import crc32c

_MASK_DELTA = 0xA282EAD8


def _mask(c: int) -> int:
    return (((c >> 15) | (c << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def masked_crc(data: bytes) -> int:
    return _mask(crc32c.crc32c(data))


def frame_record(data: bytes) -> bytes:
    header = struct.pack("<Q", len(data))
    return header + struct.pack("<I", masked_crc(header)) + data + struct.pack("<I", masked_crc(data))


def framed_chunks(length: int, chunks: Iterable[bytes]) -> Iterator[bytes]:
    """One framed record whose `length` payload bytes arrive as `chunks` (raises if they do not add up)."""
    header = struct.pack("<Q", length)
    yield header + struct.pack("<I", masked_crc(header))
    crc = 0
    seen = 0
    for chunk in chunks:
        crc = crc32c.crc32c(chunk, crc)
        seen += len(chunk)
        yield chunk
    if seen != length:
        raise ValueError(f"record payload is {seen} bytes, its header says {length}")
    yield struct.pack("<I", _mask(crc))


def write_record(f: BinaryIO, data: bytes) -> int:
    """Append one framed record; returns the bytes written."""
    framed = frame_record(data)
    f.write(framed)
    return len(framed)


class RecordStream:
    """One record's payload read incrementally; `finish` checks its CRC (raises ValueError on corruption)."""

    def __init__(self, f: BinaryIO, length: int, verify: bool) -> None:
        self._f, self.length, self._verify = f, length, verify
        self.remaining = length
        self._crc = 0

    def read(self, n: int) -> bytes:
        if n > self.remaining:
            raise ValueError("a field runs past the end of its record")
        data = self._f.read(n)
        if len(data) != n:
            raise ValueError("truncated record")
        self.remaining -= n
        if self._verify:
            self._crc = crc32c.crc32c(data, self._crc)
        return data

    def read_all(self) -> bytes:
        return self.read(self.remaining)

    def finish(self) -> None:
        while self.remaining:
            self.read(min(self.remaining, 4 << 20))
        tail = self._f.read(4)
        if len(tail) != 4:
            raise ValueError("truncated record")
        if self._verify and struct.unpack("<I", tail)[0] != _mask(self._crc):
            raise ValueError("record data CRC mismatch")


def iter_records(f: BinaryIO, verify: bool = True) -> Iterator[RecordStream]:
    """Each record of a TFRecord file as a RecordStream; the caller reads what it needs, then calls finish()."""
    while True:
        header = f.read(8)
        if not header:
            return
        if len(header) != 8:
            raise ValueError("truncated record header")
        (length,) = struct.unpack("<Q", header)
        hcrc = f.read(4)
        if len(hcrc) != 4:
            raise ValueError("truncated record header")
        if verify and struct.unpack("<I", hcrc)[0] != masked_crc(header):
            raise ValueError("record length CRC mismatch")
        yield RecordStream(f, length, verify)


def read_records(f: BinaryIO, verify: bool = True) -> Iterator[bytes]:
    """Iterate a TFRecord file's payloads, checking both CRCs (raises ValueError on corruption)."""
    for rec in iter_records(f, verify):
        data = rec.read_all()
        rec.finish()
        yield data
