"""A minimal, deterministic `tf.train.Example` encoder: features written in sorted key order, so the same
episode always serializes to the same bytes (protobuf map order is otherwise unspecified; DESIGN §10)."""
from __future__ import annotations

from typing import Sequence, Union

import numpy as np

FeatureValue = Union[np.ndarray, Sequence[bytes]]


def _varint(n: int) -> bytes:
    if n < 0:
        n += 1 << 64
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _len_field(field: int, payload: bytes) -> bytes:
    return _varint((field << 3) | 2) + _varint(len(payload)) + payload


def _packed_int64(values: np.ndarray) -> bytes:
    v = np.asarray(values).reshape(-1)
    if v.dtype == np.bool_ or (v.size and v.min() >= 0 and v.max() < 128):
        return v.astype(np.uint8).tobytes()
    return b"".join(_varint(int(x)) for x in v.astype(np.int64))


def encode_feature(value: FeatureValue) -> bytes:
    """bytes sequence -> BytesList; float array -> FloatList (float32); int/bool array -> Int64List."""
    if isinstance(value, np.ndarray) and value.dtype.kind in "fc":
        payload = np.ascontiguousarray(value, dtype="<f4").tobytes()
        inner = _len_field(1, payload) if payload else b""
        return _len_field(2, inner)
    if isinstance(value, np.ndarray) and value.dtype.kind in "biu":
        payload = _packed_int64(value)
        inner = _len_field(1, payload) if payload else b""
        return _len_field(3, inner)
    items = [v.encode("utf-8") if isinstance(v, str) else bytes(v) for v in value]
    return _len_field(1, b"".join(_len_field(1, b) for b in items))


def encode_example(features: dict[str, FeatureValue]) -> bytes:
    """{flat key: values} -> serialized tf.train.Example, keys sorted."""
    entries = []
    for key in sorted(features):
        entry = _len_field(1, key.encode("utf-8")) + _len_field(2, encode_feature(features[key]))
        entries.append(_len_field(1, entry))
    return _len_field(1, b"".join(entries))


def _read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7


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


def _decode_feature(buf: bytes) -> np.ndarray | list[bytes]:
    for field, _, payload in _fields(buf):
        assert isinstance(payload, bytes)
        if field == 1:
            return [p for f, _, p in _fields(payload) if f == 1]  # type: ignore[misc]
        if field == 2:
            vals = [np.frombuffer(p, "<f4") if w == 2 else np.frombuffer(p, "<f4")
                    for f, w, p in _fields(payload) if f == 1]  # type: ignore[arg-type]
            return np.concatenate(vals) if vals else np.zeros(0, np.float32)
        if field == 3:
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
            arr = np.array(ints, dtype=np.uint64).astype(np.int64) if ints else np.zeros(0, np.int64)
            return arr
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
