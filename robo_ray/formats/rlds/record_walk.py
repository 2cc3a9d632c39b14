"""The TFRecord shards of an RLDS dataset walked without reading them whole (discover's scan): a record's framing
(12 bytes: length + its CRC) and the protobuf headers of its tf.train.Example, read through ranged reads of one
cached block, so large values (images) are skipped unread."""
from __future__ import annotations

import io
import struct
from typing import Any, BinaryIO, Callable, Iterator

import numpy as np

from robo_ray.formats.rlds.example import decode_example, decode_example_stream
from robo_ray.formats.rlds.tfrecord import STREAM_RECORDS_OVER, iter_records, masked_crc, read_records

MAX_KEY_BYTES = 4096


class Malformed(ValueError):
    """The record is not a readable tf.train.Example (discover falls back to a full parse, then reports it)."""


class Window:
    """Reads at absolute offsets of an open file through one cached block: the walk over a record's headers costs
    a few small reads, and large values (images) are skipped without being read."""

    def __init__(self, f: BinaryIO, size: int, block: int) -> None:
        self.f, self.size, self.block = f, size, block
        self.start, self.buf = 0, b""

    def read(self, pos: int, n: int) -> bytes:
        if pos < self.start or pos + n > self.start + len(self.buf):
            self.f.seek(pos)
            self.buf, self.start = self.f.read(min(max(n, self.block), self.size - pos)), pos
        out = self.buf[pos - self.start:pos - self.start + n]
        if len(out) != n:
            raise Malformed("truncated")
        return out

    def varint(self, pos: int, end: int) -> tuple[int, int]:
        data = self.read(pos, min(10, end - pos))
        result = 0
        for i, b in enumerate(data):
            result |= (b & 0x7F) << (7 * i)
            if not b & 0x80:
                return result, pos + i + 1
        raise Malformed("a varint runs past its message")


def fields(win: Window, pos: int, end: int) -> Iterator[tuple[int, int, int, int]]:
    """(field, wire type, payload offset, payload length) of each field in [pos, end), payloads unread."""
    while pos < end:
        tag, pos = win.varint(pos, end)
        field, wire = tag >> 3, tag & 7
        if wire == 2:
            n, pos = win.varint(pos, end)
        elif wire == 0:
            start = pos
            _, pos = win.varint(pos, end)
            yield field, wire, start, pos - start
            continue
        elif wire in (1, 5):
            n = 8 if wire == 1 else 4
        else:
            raise Malformed(f"unsupported wire type {wire}")
        if pos + n > end:
            raise Malformed("a field runs past its message")
        yield field, wire, pos, n
        pos += n


def entries(win: Window, start: int, end: int) -> Iterator[tuple[bytes, tuple[int, int] | None]]:
    """(key, (offset, length) of its Feature) of each entry of a serialized Example, reading headers only."""
    for f, w, p, n in fields(win, start, end):
        if f != 1 or w != 2:
            continue
        for f2, w2, p2, n2 in fields(win, p, p + n):
            if f2 != 1 or w2 != 2:
                continue
            key, value = None, None
            for f3, w3, p3, n3 in fields(win, p2, p2 + n2):
                if f3 == 1 and w3 == 2:
                    if n3 > MAX_KEY_BYTES:
                        raise Malformed(f"a feature key of {n3} bytes")
                    key = win.read(p3, n3)
                elif f3 == 2 and w3 == 2:
                    value = (p3, n3)
            if key is not None:
                yield key, value


def count_values(win: Window, pos: int, n: int) -> int:
    """How many values one Feature holds: bytes items are counted by their headers (never read), packed floats by
    size, packed varints by their last bytes (the only payload read: 1 byte per bool/small int)."""
    count = 0
    for f, w, p, ln in fields(win, pos, pos + n):
        if w != 2 or f not in (1, 2, 3):
            continue
        for f2, w2, vp, vn in fields(win, p, p + ln):
            if f2 != 1:
                continue
            if f == 2 and w2 == 2:
                if vn % 4:
                    raise Malformed("a packed float list is not a multiple of 4 bytes")
                count += vn // 4
            elif f == 3 and w2 == 2:
                count += int(np.count_nonzero(np.frombuffer(win.read(vp, vn), np.uint8) < 0x80))
            else:
                count += 1
    return count


def first_item(win: Window, pos: int, n: int, limit: int) -> bytes | None:
    """The first `limit` bytes of the first item of a BytesList Feature."""
    for f, w, p, ln in fields(win, pos, pos + n):
        if f == 1 and w == 2:
            for f2, w2, vp, vn in fields(win, p, p + ln):
                if f2 == 1 and w2 == 2:
                    return win.read(vp, min(vn, limit))
    return None



def record_length(win: Window, pos: int, size: int) -> tuple[int, str | None]:
    """(payload length, None) of the record framed at `pos`, or (0, the problem) when its header is truncated, its
    length CRC does not match or the record runs past the end of the file (the rest of the shard is then unread)."""
    if size - pos < 16:
        return 0, "truncated record header"
    head = win.read(pos, 12)
    (n,) = struct.unpack("<Q", head[:8])
    if struct.unpack("<I", head[8:])[0] != masked_crc(head[:8]):
        return 0, "record length CRC mismatch (the rest of the shard is unreadable)"
    if n > size - pos - 16:
        return 0, f"a record of {n} bytes runs past the end of the file"
    return n, None


def verified_payload(framed: bytes) -> bytes:
    """The payload of one framed record, both CRCs checked (ValueError otherwise)."""
    payloads = list(read_records(io.BytesIO(framed)))
    if len(payloads) != 1:
        raise ValueError(f"the byte range holds {len(payloads)} records, not 1")
    return payloads[0]


def record_example(read_range: Callable[[int, int], bytes], open_file: Callable[[], BinaryIO], offset: int,
                   length: int, stream_over: int | None = None) -> dict[str, Any]:
    """The Example of the one record framed in the file's bytes [offset, offset + length), both CRCs checked
    (ValueError otherwise). Up to `stream_over` bytes: one ranged read, parsed in memory. Larger (a long episode's
    frames): parsed as it streams from the file, so the decoded items are the only copy held, not the framed bytes
    and the payload besides (3x the record: 744 MB peak RSS for a 200 MB record, docs/NOTES.md)."""
    stream_over = STREAM_RECORDS_OVER if stream_over is None else stream_over
    if length - 16 <= stream_over:
        return decode_example(verified_payload(read_range(offset, length)))
    with open_file() as f:
        f.seek(offset)
        rec = next(iter_records(f), None)
        if rec is None or rec.length != length - 16:
            raise ValueError(f"the byte range holds a record of {None if rec is None else rec.length + 16} bytes, "
                             f"not {length}")
        flat = decode_example_stream(rec, big=stream_over // 4, sparse=False)
        rec.finish()
    return flat
