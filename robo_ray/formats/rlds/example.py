"""A minimal, deterministic `tf.train.Example` encoder: features written in sorted key order, so the same
episode always serializes to the same bytes (protobuf map order is otherwise unspecified; DESIGN §10).

An example is built as a list of *segments*: byte strings and `BytesSpool`s (camera frames that may live on a
scratch file), so a 20,000-frame episode is framed and written without ever being assembled in memory. Every
length prefix is computed from segment sizes; `encode_example` joins them for small examples and tests.

The decoder (`decode_example`, `decode_example_stream`) takes untrusted bytes: anything malformed raises
`CorruptRecord` (a ValueError) naming the byte offset, never another error, a hang or an allocation larger than the
input.
"""
from __future__ import annotations

from typing import Any, Iterator, Protocol, Sequence, Union

import numpy as np

from robo_ray.formats.rlds.spool import BytesSpool
from robo_ray.formats.rlds.errors import CorruptRecord
from robo_ray.formats.rlds.varint import read_varint, read_varint_from
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


# ---- decoding (validation, and reading third-party TFRecords: untrusted bytes) ----------------------------------
# The accepted grammar is what both of TensorFlow's Example parsers accept: the fast one (tf.io.parse_example, what
# tfds / Octo / dlimp read with) and protobuf's (`tf.train.Example.FromString`), with protobuf's values. Anything
# else raises CorruptRecord (docs/NOTES.md, "The Example decoder on untrusted bytes"):
#   Example   fields to the end; each `features` (field 1, length-delimited) adds its entries in order (so several
#             are merged, a repeated key's last value wins); other fields of wire type 0/1/2/5 are skipped;
#             groups (3/4) and wire types 6/7 are rejected.
#   Features  only map entries (field 1, length-delimited).
#   entry     exactly one key (field 1, valid UTF-8) and one value (field 2), in either order; nothing else.
#   Feature   empty (no kind: decoded as an empty list), or exactly one of bytes_list (1) / float_list (2) /
#             int64_list (3).
#   lists     BytesList: only items (field 1, length-delimited). FloatList: one packed field whose length is a
#             multiple of 4, or only fixed32 items. Int64List: one packed field of whole varints, or only varint
#             items. Empty lists are fine.
#   always    tags minimally encoded, < 2**32, field number > 0; varints at most 10 bytes and within 64 bits; every
#             declared length fits in the bytes left in its enclosing message (checked before anything is read).
# One walker reads this grammar from a `_Reader`: bytes in memory (`decode_example`) or a record streamed from its
# file (`decode_example_stream`, which hands entries up to `big` bytes to a walker over memory).
_KINDS = {1: "bytes_list", 2: "float_list", 3: "int64_list"}


class _Reader(Protocol):
    remaining: int

    def read(self, n: int) -> bytes: ...


class _Memory:
    """A `_Reader` over bytes in memory; reads are views, not copies."""

    def __init__(self, data: bytes | bytearray | memoryview) -> None:
        self.mv = memoryview(data).cast("B")
        self.pos = 0
        self.remaining = len(self.mv)

    def read(self, n: int) -> memoryview:
        out = self.mv[self.pos:self.pos + n]
        self.pos += len(out)
        self.remaining -= len(out)
        return out


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


class _Walker:
    """Reads the grammar above from `r`. Positions are `remaining` values of `r` (a message ends where `remaining`
    reaches its `end`); error offsets are `base` + bytes read. With `big` set (streaming), a BytesList over `big`
    bytes becomes a SparseBytes (with `sparse` False: its items, read one at a time) and entries up to `big` bytes are
    read whole and walked in memory."""

    def __init__(self, r: _Reader, big: int | None = None, base: int = 0, sparse: bool = True) -> None:
        self.r, self.big, self.base, self.sparse = r, big, base, sparse
        self.start = r.remaining

    @property
    def pos(self) -> int:
        return self.base + self.start - self.r.remaining

    def fail(self, what: str, at: int | None = None) -> CorruptRecord:
        return CorruptRecord(f"{what} at byte {self.pos if at is None else at}")

    def read(self, n: int, end: int) -> bytes | memoryview:
        """`n` bytes that must lie within the message ending at `end`."""
        if n > self.r.remaining - end:
            raise self.fail(f"a field of {n} bytes runs past the end of its message ({self.r.remaining - end} "
                            f"bytes left)")
        data = self.r.read(n)
        if len(data) != n:
            raise self.fail(f"the data ends inside a field of {n} bytes")
        return data

    def varint(self, end: int, raw: bytearray | None = None) -> int:
        """The varint at the position (its bytes appended to `raw`), within the message ending at `end`."""
        r = self.r
        if type(r) is _Memory and r.remaining > end:  # in memory: the whole varint at once (a JPEG's length: 2-3 B)
            p = r.pos
            try:
                v, q = read_varint(r.mv, p, p + r.remaining - end)
            except CorruptRecord:
                pass  # cut by the message's end or overlong: the byte-wise read below says where
            else:
                r.pos, r.remaining = q, r.remaining - (q - p)
                if raw is not None:
                    raw.extend(r.mv[p:q])
                return v

        def one(n: int) -> bytes | memoryview:
            b = self.read(n, end) if self.r.remaining - end >= n else b""
            if raw is not None:
                raw.extend(b)
            return b
        return read_varint_from(one, self.pos)

    def tag(self, end: int) -> tuple[int, int]:
        """(field, wire type) of the tag at the position."""
        r = self.r
        if type(r) is _Memory and r.remaining > end:  # the usual one-byte tag, valid as it is
            b = r.mv[r.pos]
            if 8 <= b < 0x80 and b & 7 <= 5:
                r.pos += 1
                r.remaining -= 1
                return b >> 3, b & 7
        at = self.pos
        raw = bytearray()
        tag = self.varint(end, raw)
        if len(raw) > 1 and raw[-1] == 0:
            raise self.fail("tag with a padded (non-minimal) varint", at)
        if tag >> 32:
            raise self.fail(f"tag {tag} over 32 bits", at)
        field, wire = tag >> 3, tag & 7
        if field == 0:
            raise self.fail("field number 0", at)
        if wire > 5:
            raise self.fail(f"invalid wire type {wire} (field {field})", at)
        return field, wire

    def length(self, end: int, what: str) -> int:
        """A length-delimited field's length, which must fit in its message."""
        before = self.r.remaining
        n = self.varint(end)
        if n > self.r.remaining - end:
            raise self.fail(f"{what} declares {n} bytes but its message has {self.r.remaining - end} left",
                            self.base + self.start - before)
        return n

    def skip(self, n: int, end: int) -> None:
        while n:
            n -= len(self.read(min(n, 1 << 20), end))

    def example(self, out: dict[str, Any]) -> None:
        while self.r.remaining:
            at = self.pos
            field, wire = self.tag(0)
            if field == 1 and wire == 2:
                self.features(self.length(0, "features"), out)
            elif wire == 0:
                self.varint(0)
            elif wire == 2:
                self.skip(self.length(0, f"unknown field {field}"), 0)
            elif wire in (1, 5):
                size = 8 if wire == 1 else 4
                if self.r.remaining < size:
                    raise self.fail(f"fixed{size * 8} field {field} runs past the end of its message", at)
                self.skip(size, 0)
            else:
                raise self.fail(f"group (wire type {wire}, field {field}): TensorFlow's Example parser rejects "
                                f"groups", at)

    def features(self, size: int, out: dict[str, Any]) -> None:
        end = self.r.remaining - size
        while self.r.remaining > end:
            at = self.pos
            if self.tag(end) != (1, 2):
                raise self.fail("a field in Features, where only map entries may be", at)
            n = self.length(end, "feature map entry")
            if self.big is not None and n <= self.big and not isinstance(self.r, _Memory):
                at = self.pos
                key, value = _Walker(_Memory(self.read(n, end)), self.big, at, self.sparse).entry(n, out)
            else:
                key, value = self.entry(n, out)
            out[key] = value

    def entry(self, size: int, out: dict[str, Any]) -> tuple[str, Any]:
        entry_at = self.pos
        end = self.r.remaining - size
        key: str | None = None
        value: Any = None
        while self.r.remaining > end:
            at = self.pos
            field, wire = self.tag(end)
            if field == 1 and wire == 2 and key is None:
                raw = self.read(self.length(end, "feature key"), end)
                try:
                    key = str(raw, "utf-8")
                except UnicodeDecodeError as exc:
                    raise self.fail(f"feature key is not valid UTF-8 ({exc.reason})", at) from None
            elif field == 2 and wire == 2 and value is None:
                value = self.feature(self.length(end, "feature value"), out)
            else:
                raise self.fail(f"field {field} (wire type {wire}) in a feature map entry, which must hold exactly "
                                f"one key and one value", at)
        if key is None or value is None:
            raise self.fail(f"feature map entry without a {'key' if key is None else 'value'}", entry_at)
        return key, value

    def feature(self, size: int, out: dict[str, Any]) -> Any:
        if not size:
            return []  # a Feature with no kind set
        end = self.r.remaining - size
        at = self.pos
        field, wire = self.tag(end)
        if field not in _KINDS or wire != 2:
            raise self.fail(f"field {field} (wire type {wire}) in a Feature, where a bytes/float/int64 list must be",
                            at)
        n = self.length(end, _KINDS[field])
        if self.r.remaining - n != end:
            raise self.fail("a Feature holds more than one list (TensorFlow's parsers disagree on which wins)",
                            self.pos + n)
        if field == 2:
            return self.numbers(n, 5, "<f4")
        if field == 3:
            return self.numbers(n, 0, "varint")
        if self.big is not None and n > self.big and self.sparse:
            steps = out.get("steps/is_first")
            return self.bytes_list(n, {0} | ({len(steps) // 2} if steps is not None and len(steps) else set()))
        return self.bytes_list(n, None)

    def bytes_list(self, size: int, keep: set[int] | None) -> Any:
        """The items (a list), or with `keep` a SparseBytes holding the items at `keep` and the last one."""
        end = self.r.remaining - size
        items: list[bytes] = []
        sparse = SparseBytes()
        last = b""
        while self.r.remaining > end:
            at = self.pos
            if self.tag(end) != (1, 2):
                raise self.fail("a field in a BytesList, where only items may be", at)
            item = bytes(self.read(self.length(end, "bytes item"), end))
            if keep is None:
                items.append(item)
                continue
            if sparse.count in keep:
                sparse.kept[sparse.count] = item
            last = item
            sparse.count += 1
        if keep is None:
            return items
        if sparse.count:
            sparse.kept[sparse.count - 1] = last
        return sparse

    def numbers(self, size: int, item_wire: int, dtype: str) -> np.ndarray:
        """A FloatList (`item_wire` 5, `dtype` "<f4") or Int64List (0, "varint"): one packed field, or items."""
        end = self.r.remaining - size
        if not size:
            return np.zeros(0, np.float32 if item_wire == 5 else np.int64)
        at = self.pos
        field, wire = self.tag(end)
        if field == 1 and wire == 2:
            n = self.length(end, "packed list")
            if self.r.remaining - n != end:
                raise self.fail("a number list holds more than its packed field", self.pos + n)
            if item_wire == 5 and n % 4:
                raise self.fail(f"packed floats of {n} bytes (not a multiple of 4)", at)
            start = self.pos
            data = self.read(n, end)
            return np.frombuffer(data, "<f4").astype(np.float32) if item_wire == 5 else _varints(data, start)
        values: list[Any] = []
        while True:
            if (field, wire) != (1, item_wire):
                raise self.fail(f"field {field} (wire type {wire}) among the items of a number list", at)
            values.append(self.read(4, end) if item_wire == 5 else self.varint(end))
            if self.r.remaining == end:
                break
            at = self.pos
            field, wire = self.tag(end)
        if item_wire == 5:
            return np.frombuffer(b"".join(values), "<f4").astype(np.float32)
        return np.array(values, dtype=np.uint64).view(np.int64)


def _varints(data: bytes | memoryview, at: int) -> np.ndarray:
    """Packed varints (starting at byte `at`) -> int64 (two's complement of the low 64 bits, as protobuf's int64)."""
    a = np.frombuffer(data, np.uint8)
    if not a.size:
        return np.zeros(0, np.int64)
    if int(a.max()) < 0x80:
        return a.astype(np.int64)
    last = np.flatnonzero(a < 0x80)
    if not last.size or last[-1] != a.size - 1:
        raise CorruptRecord(f"packed varint runs past the end of its list at byte "
                            f"{at + (int(last[-1]) + 1 if last.size else 0)}")
    starts = np.concatenate(([0], last[:-1] + 1))
    lens = last - starts + 1
    long = np.flatnonzero((lens > 10) | ((lens == 10) & (a[last] > 1)))
    if long.size:
        raise CorruptRecord(f"packed varint longer than 10 bytes or over 64 bits at byte {at + int(starts[long[0]])}")
    shifts = (np.arange(a.size) - np.repeat(starts, lens)).astype(np.uint64) * np.uint64(7)
    parts = (a & 0x7F).astype(np.uint64) << shifts
    return np.bitwise_or.reduceat(parts, starts).view(np.int64)


def iter_bytes_list(payload: bytes) -> Iterator[bytes]:
    """The items of a serialized BytesList (raises CorruptRecord if it is malformed)."""
    yield from _Walker(_Memory(payload)).bytes_list(len(payload), None)


def decode_example(data: bytes) -> dict[str, np.ndarray | list[bytes]]:
    """Parse a serialized tf.train.Example: {key: float32 array | int64 array | list of bytes} (an empty list for a
    feature with no kind). Malformed input raises CorruptRecord (a ValueError) saying what and at which byte."""
    out: dict[str, np.ndarray | list[bytes]] = {}
    _Walker(_Memory(data)).example(out)
    return out


def decode_example_stream(r: _Reader, big: int = 16 << 20, sparse: bool = True) -> dict[str, Any]:
    """Parse a tf.train.Example read from `r` (a RecordStream) without holding it: features up to `big` bytes are
    decoded as by `decode_example`; larger BytesLists (camera frames) become SparseBytes, or with `sparse` False
    lists of their items read one at a time (the items are then the only copy of the record's bytes held). The
    Example is all of `r` (read to its end). Malformed input raises CorruptRecord, as `decode_example` does on the
    same bytes."""
    out: dict[str, Any] = {}
    _Walker(r, big, sparse=sparse).example(out)
    return out
