"""TFRecord framing (FORMATS 1.6): length, masked CRC32C of the length, data, masked CRC32C of the data.

Records are written from segment chunks (the CRC is computed incrementally, so a record never has to be whole in
memory) and read either whole (`read_records`) or as a stream (`iter_records` -> `RecordStream`). The read side
takes untrusted bytes: anything malformed raises `CorruptRecord` (a ValueError), never another error or a huge
allocation."""
from __future__ import annotations

import os
import struct
from typing import BinaryIO, Iterable, Iterator

import crc32c

from robo_ray.formats.rlds.errors import CorruptRecord

_MASK_DELTA = 0xA282EAD8
# Records (episodes) larger than this are parsed as they stream from their file (Validate, the reader): memory then
# holds the decoded values only, whatever the episode's length. The variable lets tests stream small records.
STREAM_RECORDS_OVER = int(os.environ.get("ROBO_RAY_STREAM_RECORDS_OVER", 64 << 20))


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


_FIRST_READ = 1 << 20  # a declared length is trusted only this far: larger reads grow block by block (x2)
_MAX_BLOCK = 64 << 20


def _left_in(f: BinaryIO) -> int | None:
    """Bytes between the position and the end of a seekable file (None if it cannot tell)."""
    try:
        if not f.seekable():
            return None
        pos = f.tell()
        end = f.seek(0, 2)
        f.seek(pos)
        return end - pos
    except (AttributeError, OSError, ValueError):
        return None


def _read_exact(f: BinaryIO, n: int) -> bytes:
    """Up to `n` bytes (fewer only at the end of the file). However large `n` is (a lying length with
    `verify=False`, or a header whose file was cut), at most about twice what the file holds is allocated: a
    large read is done at once only when the file is seen to hold it, else block by block."""
    parts: list[bytes] = []
    got, block = 0, _FIRST_READ
    if n > _FIRST_READ and (left := _left_in(f)) is not None:
        data = f.read(min(n, left))
        if len(data) == n:
            return data
        parts.append(data)
        got += len(data)
    while got < n:
        data = f.read(min(n - got, block))
        if not data:
            break
        if got == 0 and len(data) == n:
            return data
        parts.append(data)
        got += len(data)
        block = min(block * 2, _MAX_BLOCK)
    return b"".join(parts)


class RecordStream:
    """One record's payload read incrementally; `finish` checks its CRC. Malformed or cut data raises
    CorruptRecord (a ValueError) naming the byte offset in the file."""

    def __init__(self, f: BinaryIO, length: int, verify: bool, offset: int = 0) -> None:
        self._f, self.length, self._verify = f, length, verify
        self.offset = offset  # of the record's header in the file
        self.remaining = length
        self._crc = 0
        self.finished = False

    def _at(self) -> str:
        return f"byte {self.length - self.remaining} of the record at file byte {self.offset}"

    def read(self, n: int) -> bytes:
        if n < 0:
            raise ValueError(f"negative read size {n}")
        if n > self.remaining:
            raise CorruptRecord(f"a field of {n} bytes runs past the end of its record ({self._at()}, "
                                f"{self.remaining} bytes left)")
        data = _read_exact(self._f, n)
        if len(data) != n:
            raise CorruptRecord(f"truncated record: the file ends at {self._at()}, inside a field of {n} bytes "
                                f"(the record's header says {self.length} bytes)")
        self.remaining -= n
        if self._verify:
            self._crc = crc32c.crc32c(data, self._crc)
        return data

    def read_all(self) -> bytes:
        return self.read(self.remaining)

    def finish(self) -> None:
        if self.finished:
            return
        self.finished = True
        while self.remaining:
            self.read(min(self.remaining, 4 << 20))
        tail = _read_exact(self._f, 4)
        if len(tail) != 4:
            raise CorruptRecord(f"truncated record: the file ends inside the data CRC of the record at file byte "
                                f"{self.offset}")
        if self._verify and struct.unpack("<I", tail)[0] != _mask(self._crc):
            raise CorruptRecord(f"record data CRC mismatch (record at file byte {self.offset}, {self.length} bytes)")


def iter_records(f: BinaryIO, verify: bool = True) -> Iterator[RecordStream]:
    """Each record of a TFRecord file as a RecordStream; the caller reads what it needs, then calls finish() (done
    here if it did not). Malformed framing, cut files and CRC mismatches raise CorruptRecord."""
    offset = 0
    while True:
        header = _read_exact(f, 8)
        if not header:
            return
        if len(header) != 8:
            raise CorruptRecord(f"truncated record header at file byte {offset} ({len(header)} of 8 bytes)")
        (length,) = struct.unpack("<Q", header)
        hcrc = _read_exact(f, 4)
        if len(hcrc) != 4:
            raise CorruptRecord(f"truncated record header at file byte {offset} (the length CRC is cut)")
        if verify and struct.unpack("<I", hcrc)[0] != masked_crc(header):
            raise CorruptRecord(f"record length CRC mismatch at file byte {offset}")
        rec = RecordStream(f, length, verify, offset)
        yield rec
        rec.finish()
        offset += 12 + length + 4


def read_records(f: BinaryIO, verify: bool = True) -> Iterator[bytes]:
    """Iterate a TFRecord file's payloads, checking both CRCs (raises CorruptRecord, a ValueError, on corruption)."""
    for rec in iter_records(f, verify):
        data = rec.read_all()
        rec.finish()
        yield data
