"""A minimal, deterministic `tf.train.Example` encoder: features written in sorted key order, so the same
episode always serializes to the same bytes (protobuf map order is otherwise unspecified; DESIGN §10).

An example is built as a list of *segments*: byte strings and `BytesSpool`s (camera frames that may live on a
scratch file), so a 20,000-frame episode is framed and written without ever being assembled in memory. Every
length prefix is computed from segment sizes; `encode_example` joins them for small examples and tests.
"""
from __future__ import annotations

from typing import Any, Iterator, Protocol, Sequence, Union

import numpy as np

from robo_ray.spool import BytesSpool
from robo_ray.formats.rlds.varint import read_varint as _read_varint
from robo_ray.formats.rlds.varint import read_varint_from
from robo_ray.formats.rlds.varint import varint as _varint

FeatureValue = Union[np.ndarray, Sequence[bytes], BytesSpool]
Segment = Union[bytes, BytesSpool]


def segments_size(segments: Sequence[Segment]) -> int:
    return sum(s.size if isinstance(s, BytesSpool) else len(s) for s in segments)


def _prefixed(field: int, segments: list[Segment]) -> list[Segment]:
    """A length-delimited field whose payload is `segments`."""
    return [_varint((field << 3) | 2) + _varint(segments_size(segments)), *segments]


def _len_field(field: int, payload: bytes) -> bytes:
    return _varint((field << 3) | 2) + _varint(len(payload)) + payload


def _packed_int64(values: np.ndarray) -> bytes:
    v = np.asarray(values).reshape(-1)
    if v.dtype == np.bool_ or (v.size and v.min() >= 0 and v.max() < 128):
        return v.astype(np.uint8).tobytes()
    return b"".join(_varint(int(x)) for x in v.astype(np.int64))


def feature_segments(value: FeatureValue) -> list[Segment]:
    """bytes sequence / spool -> BytesList; float array -> FloatList (float32); int/bool array -> Int64List."""
    if isinstance(value, BytesSpool):
        return _prefixed(1, [value])
    if isinstance(value, np.ndarray) and value.dtype.kind in "fc":
        payload = np.ascontiguousarray(value, dtype="<f4").tobytes()
        return [_len_field(2, _len_field(1, payload) if payload else b"")]
    if isinstance(value, np.ndarray) and value.dtype.kind in "biu":
        payload = _packed_int64(value)
        return [_len_field(3, _len_field(1, payload) if payload else b"")]
    items = [v.encode("utf-8") if isinstance(v, str) else bytes(v) for v in value]
    return [_len_field(1, b"".join(_len_field(1, b) for b in items))]


def encode_feature(value: FeatureValue) -> bytes:
    return _join(feature_segments(value))


def example_segments(features: dict[str, FeatureValue]) -> list[Segment]:
    """{flat key: values} -> the segments of a serialized tf.train.Example, keys sorted."""
    entries: list[Segment] = []
    for key in sorted(features):
        entry = [_len_field(1, key.encode("utf-8")), *_prefixed(2, feature_segments(features[key]))]
        entries += _prefixed(1, entry)
    return _prefixed(1, entries)


def encode_example(features: dict[str, FeatureValue]) -> bytes:
    """{flat key: values} -> serialized tf.train.Example (in memory), keys sorted."""
    return _join(example_segments(features))


def _join(segments: Sequence[Segment]) -> bytes:
    return b"".join(s if isinstance(s, bytes) else b"".join(s.chunks()) for s in segments)


def coalesced_chunks(segments: Sequence[Segment], block: int = 1 << 20) -> Iterator[bytes]:
    """The segments' bytes in order, small byte strings merged into blocks of about `block` bytes."""
    buf = bytearray()
    for seg in segments:
        if isinstance(seg, BytesSpool):
            if buf:
                yield bytes(buf)
                buf.clear()
            yield from seg.chunks()
        elif len(seg) >= block:
            if buf:
                yield bytes(buf)
                buf.clear()
            yield seg
        else:
            buf += seg
            if len(buf) >= block:
                yield bytes(buf)
                buf.clear()
    if buf:
        yield bytes(buf)


# ---- decoding (validation without TensorFlow) ------------------------------------------------------------------
def _fields(buf: bytes) -> list[tuple[int, int, bytes | int]]:
    out: list[tuple[int, int, bytes | int]] = []
    pos = 0
    while pos < len(buf):
        tag, pos = _read_varint(buf, pos)
        field, wire = tag >> 3, tag & 7
        if wire == 2:
            n, pos = _read_varint(buf, pos)
            out.append((field, wire, buf[pos:pos + n]))
            pos += n
        elif wire == 0:
            v, pos = _read_varint(buf, pos)
            out.append((field, wire, v))
        elif wire == 5:
            out.append((field, wire, buf[pos:pos + 4]))
            pos += 4
        elif wire == 1:
            out.append((field, wire, buf[pos:pos + 8]))
            pos += 8
        else:
            raise ValueError(f"unsupported wire type {wire}")
    return out


def iter_bytes_list(payload: bytes) -> Iterator[bytes]:
    for f, _, p in _fields(payload):
        if f == 1:
            yield p  # type: ignore[misc]


def _decode_ints(payload: bytes) -> np.ndarray:
    ints: list[int] = []
    for f, w, p in _fields(payload):
        if f != 1:
            continue
        if w == 2:
            pos = 0
            while pos < len(p):  # type: ignore[arg-type]
                v, pos = _read_varint(p, pos)  # type: ignore[arg-type]
                ints.append(v)
        else:
            ints.append(int(p))  # type: ignore[arg-type]
    return np.array(ints, dtype=np.uint64).astype(np.int64) if ints else np.zeros(0, np.int64)


def _decode_feature(buf: bytes) -> np.ndarray | list[bytes]:
    for field, _, payload in _fields(buf):
        assert isinstance(payload, bytes)
        if field == 1:
            return list(iter_bytes_list(payload))
        if field == 2:
            vals = [np.frombuffer(p, "<f4") for f, _, p in _fields(payload) if f == 1]  # type: ignore[arg-type]
            return np.concatenate(vals) if vals else np.zeros(0, np.float32)
        if field == 3:
            return _decode_ints(payload)
    return []


def decode_example(data: bytes) -> dict[str, np.ndarray | list[bytes]]:
    """Parse a serialized tf.train.Example (for validation without TensorFlow)."""
    out: dict[str, np.ndarray | list[bytes]] = {}
    for field, _, features in _fields(data):
        if field != 1:
            continue
        for f2, _, entry in _fields(features):  # type: ignore[arg-type]
            if f2 != 1:
                continue
            key, value = "", b""
            for f3, _, p in _fields(entry):  # type: ignore[arg-type]
                if f3 == 1:
                    key = p.decode("utf-8")  # type: ignore[union-attr]
                elif f3 == 2:
                    value = p  # type: ignore[assignment]
            out[key] = _decode_feature(value)
    return out


# ---- streaming decode (records too large to hold: long episodes) ------------------------------------------------
class SparseBytes:
    """A BytesList seen as a stream: its length, and the few items kept (first, middle, last)."""

    def __init__(self) -> None:
        self.count = 0
        self.kept: dict[int, bytes] = {}

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, i: int) -> bytes:
        if i < 0:
            i += self.count
        if i not in self.kept:
            raise IndexError(f"item {i} of {self.count} was not kept while streaming")
        return self.kept[i]


class _Reader(Protocol):
    remaining: int

    def read(self, n: int) -> bytes: ...


def _stream_len_field(r: _Reader) -> tuple[int, int]:
    """(field number, payload length) of the next field, which must be length-delimited."""
    tag = read_varint_from(r.read)
    if tag & 7 != 2:
        raise ValueError(f"unexpected wire type {tag & 7} in a tf.train.Example")
    return tag >> 3, read_varint_from(r.read)


def _stream_bytes_list(r: _Reader, size: int, steps: int | None) -> SparseBytes:
    out = SparseBytes()
    end = r.remaining - size
    keep = {0} | ({steps // 2} if steps else set())
    last = b""
    while r.remaining > end:
        _, n = _stream_len_field(r)
        item = r.read(n)
        if out.count in keep:
            out.kept[out.count] = item
        last = item
        out.count += 1
    if out.count:
        out.kept[out.count - 1] = last
    return out


def decode_example_stream(r: _Reader, big: int = 16 << 20) -> dict[str, Any]:
    """Parse a tf.train.Example read from `r` (a RecordStream) without holding it: features up to `big` bytes are
    decoded as by `decode_example`; larger BytesLists (camera frames) become SparseBytes."""
    out: dict[str, Any] = {}
    field, size = _stream_len_field(r)
    if field != 1:
        raise ValueError("a tf.train.Example must start with its features")
    end = r.remaining - size
    while r.remaining > end:
        _, entry_size = _stream_len_field(r)
        entry_end = r.remaining - entry_size
        key = ""
        while r.remaining > entry_end:
            f, n = _stream_len_field(r)
            if f == 1:
                key = r.read(n).decode("utf-8")
            elif n <= big or not key:
                out[key] = _decode_feature(r.read(n))
            else:
                kind, inner = _stream_len_field(r)
                if kind != 1:  # numbers: decoded whole (they are what Validate checks and sums)
                    out[key] = _decode_feature(_varint((kind << 3) | 2) + _varint(inner) + r.read(inner))
                    continue
                steps = out.get("steps/is_first")
                out[key] = _stream_bytes_list(r, inner, len(steps) if steps is not None else None)
    return out
