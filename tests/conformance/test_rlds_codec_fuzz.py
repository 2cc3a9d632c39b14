"""The tf.train.Example decoder and the TFRecord reader on untrusted bytes (docs/NOTES.md, "The Example decoder on
untrusted bytes").

Every malformed input to decode_example / decode_example_stream / read_records / iter_records must raise
CorruptRecord (a ValueError naming the byte offset): never another exception, a hang or an allocation larger than
the input. A deterministic fuzzer (seeded numpy RNG) mutates valid RLDS-like Examples, structure-aware (fields
duplicated, deleted, reordered, retyped, lengths that lie, unknown fields, alternative encodings) and byte-wise
(bit flips, replaced bytes, cuts at every kind of boundary, inserted / duplicated / deleted spans, huge lengths), and
checks each input against TensorFlow's own parser (`tf.train.Example.FromString`): when we decode, TF must decode
the same values; when TF decodes and we raise, the case is one of the documented stricter rules.
"""
from __future__ import annotations

import io
import re
import struct
import time
import tracemalloc
from collections import Counter
from typing import Any, Callable

import numpy as np
import pytest

from robo_ray.formats.rlds.errors import CorruptRecord
from robo_ray.formats.rlds.example import SparseBytes, decode_example, decode_example_stream, encode_example
from robo_ray.formats.rlds.tfrecord import frame_record, iter_records, masked_crc, read_records
from robo_ray.formats.rlds.varint import read_varint as robo_read_varint
from robo_ray.formats.rlds.varint import read_varint_from, varint

SEED = 20240611
N_EXAMPLES = 12_000  # mutated Examples through decode_example (and TF) per run; a third also through the stream
N_FRAMED = 3_000  # mutated TFRecord files through read_records / iter_records
OFFSET = re.compile(r"at (file )?byte \d+")
OK_TYPES = "float32 / int64 1-D arrays or lists of bytes"


# ---- seeds: valid RLDS-like Examples -----------------------------------------------------------------------------
def _jpeg_like(rng: np.random.Generator, n: int) -> bytes:
    return b"\xff\xd8\xff\xe0\x00\x10JFIF\x00\x01" + rng.bytes(n) + b"\xff\xd9"


def _seed_features(rng: np.random.Generator, i: int) -> dict[str, Any]:
    T = int(rng.integers(1, 5))
    first = np.zeros(T, bool)
    first[0] = True
    f: dict[str, Any] = {
        "steps/action": rng.normal(size=(T, 7)).astype(np.float32),
        "steps/observation/state": rng.normal(size=(T, 8)).astype(np.float32),
        "steps/observation/image": [_jpeg_like(rng, int(rng.integers(4, 80))) for _ in range(T)],
        "steps/is_first": first, "steps/is_last": first[::-1].copy(), "steps/is_terminal": first[::-1].copy(),
        "steps/reward": rng.random(T).astype(np.float32), "steps/discount": np.ones(T, np.float32),
        "steps/language_instruction": ["pick up the red cube".encode()] * T,
        "episode_metadata/episode_id": np.array([i]),
        "episode_metadata/file_path": [b"data/chunk-000/episode_%06d.parquet" % i],
    }
    if i % 3 == 0:  # numbers needing 10-byte varints, special floats, empty lists, a non-ASCII key
        f["steps/big"] = np.array([0, 127, 128, 300, -1, -(2 ** 63), 2 ** 63 - 1][: 2 + i % 6], np.int64)
        f["steps/special"] = np.array([np.nan, np.inf, -np.inf, -0.0, 1e-45], np.float32)
        f["steps/empty_floats"] = np.zeros(0, np.float32)
        f["steps/empty_ints"] = np.zeros(0, np.int64)
        f["steps/empty_bytes"] = []
        f["steps/observation/température"] = rng.normal(size=T).astype(np.float32)
    if i % 4 == 1:  # many keys, a second camera
        for k in range(16):
            f[f"steps/observation/joint_{k:02d}"] = rng.normal(size=T).astype(np.float32)
        f["steps/observation/image_wrist"] = [_jpeg_like(rng, int(rng.integers(4, 40))) for _ in range(T)]
    return f


def _seeds() -> list[bytes]:
    rng = np.random.default_rng(SEED)
    return [encode_example(_seed_features(rng, i)) for i in range(12)]


def read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    """The harness's own varint reader (independent of the code under test); IndexError past the end."""
    result = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7


# ---- the structure of a valid Example, to mutate it field-aware -----------------------------------------------
SCHEMA = {"example": {1: "features"}, "features": {1: "entry"}, "entry": {2: "feature"},
          "feature": {1: "bytes", 2: "floats", 3: "ints"}}


class Node:
    """One field: `children` for a known sub-message, else `raw` (the payload, or the varint/fixed value bytes).
    Trees are shared between mutants: a mutation copies the path to what it changes (`_at`), never a shared node."""

    def __init__(self, field: int, wire: int, kind: str | None, children: list["Node"] | None, raw: bytes) -> None:
        self.field, self.wire, self.kind, self.children, self.raw = field, wire, kind, children, raw
        self.tag: bytes | None = None  # a replaced tag (wire type changed, padded) over a kept payload
        self.length: int | None = None  # a declared length that lies
        self.pad = 0  # extra bytes in the length varint (valid protobuf)
        self.cached: tuple[bytes, np.ndarray, np.ndarray] | None = None

    def shallow(self) -> "Node":
        n = Node(self.field, self.wire, self.kind, self.children, self.raw)
        n.tag, n.length, n.pad = self.tag, self.length, self.pad
        return n

    def encoded(self) -> tuple[bytes, np.ndarray, np.ndarray]:
        """(bytes, field / payload boundaries, length varints as (start, end) rows), relative to the field's start."""
        if self.cached is None:
            out = self.tag if self.tag is not None else varint(self.field << 3 | self.wire)
            if self.wire != 2:
                self.cached = (out + self.raw, np.zeros(1, np.int64), np.zeros((0, 2), np.int64))
            else:
                payload, cuts, lens = self.raw, np.zeros(0, np.int64), np.zeros((0, 2), np.int64)
                if self.children is not None:
                    payload, cuts, lens = serialize_parts(self.children)
                lv = _padded_varint(len(payload) if self.length is None else self.length, self.pad)
                at = len(out) + len(lv)
                self.cached = (out + lv + payload, np.concatenate(([0, at], cuts + at, [at + len(payload)])),
                               np.concatenate(([(len(out), at)], lens + at)))
        return self.cached


def parse_tree(kind: str | None, buf: bytes) -> list[Node]:
    nodes, pos = [], 0
    while pos < len(buf):
        tag, pos = read_varint(buf, pos)
        field, wire = tag >> 3, tag & 7
        if wire == 2:
            n, pos = read_varint(buf, pos)
            payload, pos = buf[pos:pos + n], pos + n
            sub = SCHEMA.get(kind or "", {}).get(field)
            nodes.append(Node(field, 2, sub, parse_tree(sub, payload) if sub else None, payload))
        else:
            size = {1: 8, 5: 4}.get(wire)
            end = read_varint(buf, pos)[1] if size is None else pos + size
            nodes.append(Node(field, wire, None, None, buf[pos:end]))
            pos = end
    return nodes


def _padded_varint(n: int, pad: int) -> bytes:
    v = varint(n)
    return v if not pad else v[:-1] + bytes([v[-1] | 0x80]) + b"\x80" * (pad - 1) + b"\x00"


def serialize_parts(nodes: list[Node]) -> tuple[bytes, np.ndarray, np.ndarray]:
    parts = [nd.encoded() for nd in nodes]
    if not parts:
        return b"", np.zeros(0, np.int64), np.zeros((0, 2), np.int64)
    at = np.cumsum([0] + [len(p[0]) for p in parts[:-1]])
    return (b"".join(p[0] for p in parts), np.concatenate([p[1] + a for p, a in zip(parts, at)]),
            np.concatenate([p[2] + a for p, a in zip(parts, at)]))


def _pick(rng: np.random.Generator, root: list[Node], stop: float = 0.3) -> tuple[tuple[int, ...], str]:
    """A random field by random descent (stopping at each level with probability `stop`; `stop=0`: a leaf):
    (its path, its parent's kind)."""
    path: tuple[int, ...] = ()
    nodes, kind = root, "example"
    while True:
        i = int(rng.integers(0, len(nodes)))
        path, nd = (*path, i), nodes[i]
        if not nd.children or rng.random() < stop:
            return path, kind
        nodes, kind = nd.children, nd.kind or ""


def _at(root: list[Node], path: tuple[int, ...]) -> tuple[list[Node], int, Node]:
    """Copies the nodes on `path` (and their children lists) in `root`, a list the caller owns:
    (the fresh list holding the target, its index, the target's fresh copy)."""
    siblings = root
    for depth, i in enumerate(path):
        node = siblings[i].shallow()
        siblings[i] = node
        if depth == len(path) - 1:
            return siblings, i, node
        node.children = list(node.children or [])
        siblings = node.children
    raise AssertionError("empty path")


INTERESTING = [0x00, 0x01, 0x02, 0x05, 0x07, 0x08, 0x0A, 0x0B, 0x0C, 0x0D, 0x0E, 0x0F, 0x12, 0x1A, 0x7F, 0x80, 0x81,
               0xFF]
HUGE = [2 ** 31 - 1, 2 ** 31, 2 ** 32 - 1, 2 ** 32, 2 ** 40, 2 ** 62, 2 ** 63, 2 ** 64 - 1]


def _unknown_field(rng: np.random.Generator) -> Node:
    field = int(rng.choice([1, 2, 3, 4, 5, 9, 15, 16, 100, 2 ** 29 - 1]))
    wire = int(rng.integers(0, 8))
    raw = {0: varint(int(rng.integers(0, 2 ** 62))), 1: rng.bytes(8), 5: rng.bytes(4)}.get(wire, b"")
    if wire == 2:
        raw = rng.bytes(int(rng.integers(0, 6)))
    if wire in (3, 4, 6, 7):  # a bare group start / end or an invalid wire type, then whatever follows
        n = Node(field, 0, None, None, b"")
        n.tag = varint(field << 3 | wire)
        return n
    return Node(field, wire, None, None, raw)


def _mutate_payload(rng: np.random.Generator, nd: Node, parent_kind: str) -> None:
    """A leaf payload replaced by a plausible wrong one for where it is."""
    choice = int(rng.integers(0, 6))
    if parent_kind == "entry" and nd.field == 1:  # a key
        nd.raw = [b"\xff\xfe", b"\xed\xa0\x80", b"caf\xc3", "schlüssel".encode(), b"", b"steps/action",
                  rng.bytes(3)][int(rng.integers(0, 7))]
    elif parent_kind == "floats":
        nd.raw = nd.raw[:-int(rng.integers(1, 4))] if nd.raw and choice < 3 else nd.raw + rng.bytes(int(rng.integers(1, 8)))
    elif parent_kind == "ints":
        nd.raw = nd.raw + [b"\x80", b"\xff" * 10 + b"\x01", b"\xff" * 9 + b"\x7f", b"\xff" * 9 + b"\x01",
                           b"\x80" * 9 + b"\x02", varint(2 ** 63)][choice]
    else:
        nd.raw = rng.bytes(int(rng.integers(0, 12)))


OPS = ["dup", "delete", "reorder", "unknown", "varint_for_ld", "ld_for_varint", "retag", "payload", "unpack",
       "pad_tag", "pad_len", "lie", "concat", "no_kind", "second_kind"]


def mutate_tree(rng: np.random.Generator, root: list[Node], others: list[list[Node]]) -> str:
    """One structural mutation of `root` (a list the caller owns; shared nodes are copied before they change)."""
    if not root:  # everything was deleted: an empty Example is valid, start again from another seed
        root.extend(others[int(rng.integers(0, len(others)))])
        return "refill"
    path, pkind = _pick(rng, root)
    op = str(rng.choice(OPS))
    if op == "payload":  # a leaf (key, item, packed numbers) given a wrong-for-its-place payload
        p, k = _pick(rng, root, stop=0)
        if _node(root, p).wire == 2 and _node(root, p).children is None:
            _mutate_payload(rng, _at(root, p)[2], k)
        return op
    if op == "unpack":  # the other encoding TF accepts for numbers
        for _ in range(4):
            p, k = _pick(rng, root, stop=0)
            if k in ("floats", "ints"):
                _unpack(_at(root, p)[2], k)
        return op
    if op == "concat":  # a second Example / Features concatenated: TF merges
        other = others[int(rng.integers(0, len(others)))]
        root.extend(other[: int(rng.integers(1, len(other) + 1))])
        return op
    siblings, i, nd = _at(root, path)
    if op == "dup":
        siblings.insert(int(rng.integers(0, len(siblings) + 1)), nd)
    elif op == "delete":
        del siblings[i]
    elif op == "reorder":
        siblings.reverse()
    elif op == "unknown":
        siblings.insert(int(rng.integers(0, len(siblings) + 1)), _unknown_field(rng))
    elif op == "varint_for_ld":  # a varint field spliced where a length-delimited one is expected
        siblings[i] = Node(nd.field, 0, None, None, varint(int(rng.choice([0, 1, 5, 300, 2 ** 40]))))
    elif op == "ld_for_varint":  # a length-delimited field among varints (an unpacked int list) or fixed32s
        if pkind in ("ints", "floats"):
            _unpack(nd, pkind)
        siblings.insert(i, Node(1, 2, None, None, rng.bytes(int(rng.integers(0, 5)))))
    elif op == "retag":  # same payload, another wire type in its tag
        nd.tag = varint(nd.field << 3 | int(rng.integers(0, 8)))
    elif op == "pad_tag":
        v = varint(nd.field << 3 | nd.wire)
        nd.tag = v[:-1] + bytes([v[-1] | 0x80]) + b"\x80" * int(rng.integers(0, 5)) + b"\x00"
    elif op == "pad_len":
        nd.pad = int(rng.integers(1, 4))
    elif op == "lie":  # a nested length off by a little (still inside the record) or by a lot
        size = len(nd.encoded()[0])
        nd.cached = None
        nd.length = max(0, size + int(rng.choice([-3, -2, -1, 1, 2, 3, 7]))) if rng.random() < 0.7 \
            else int(rng.choice(HUGE))
    elif op == "no_kind" and pkind == "entry" and nd.field == 2 and nd.children is not None:
        nd.children = []
    elif op == "second_kind" and nd.kind == "feature" and nd.children is not None:
        nd.children = [*nd.children, Node(int(rng.integers(1, 4)), 2, None, None, b"")]
    return op


def _node(root: list[Node], path: tuple[int, ...]) -> Node:
    nodes = root
    for i in path[:-1]:
        nodes = nodes[i].children or []
    return nodes[path[-1]]


def _unpack(nd: Node, kind: str) -> None:
    """A packed FloatList / Int64List payload node -> the unpacked items (in place, as an unknown-payload node)."""
    if nd.wire != 2 or nd.children is not None:
        return
    if kind == "floats" and len(nd.raw) % 4 == 0:
        nd.tag, nd.wire = b"", 0
        nd.raw = b"".join(b"\x0d" + nd.raw[k:k + 4] for k in range(0, len(nd.raw), 4))
    elif kind == "ints":
        try:
            vals, pos = [], 0
            while pos < len(nd.raw):
                v, pos = read_varint(nd.raw, pos)
                vals.append(v)
        except IndexError:
            return
        nd.tag, nd.wire = b"", 0
        nd.raw = b"".join(b"\x08" + varint(v) for v in vals)


def mutate_bytes(rng: np.random.Generator, data: bytes, cuts: np.ndarray, lens: np.ndarray) -> tuple[bytes, str]:
    b = bytearray(data)
    op = str(rng.choice(["flip", "replace", "cut_boundary", "cut_any", "insert", "duplicate", "delete",
                         "huge_len", "len_plus", "zero_len"]))
    n = len(b)
    at = int(rng.integers(0, n)) if n else 0
    if op == "flip" and n:
        for _ in range(int(rng.integers(1, 4))):
            b[int(rng.integers(0, n))] ^= 1 << int(rng.integers(0, 8))
    elif op == "replace" and n:
        b[at] = int(rng.choice(INTERESTING)) if rng.random() < 0.6 else int(rng.integers(0, 256))
    elif op == "cut_boundary" and len(cuts):
        c = int(cuts[int(rng.integers(0, len(cuts)))]) + int(rng.integers(-1, 2))
        del b[max(0, c):]
    elif op == "cut_any":
        del b[at:]
    elif op == "insert":
        b[at:at] = rng.bytes(int(rng.integers(1, 12))) if rng.random() < 0.5 else bytes(rng.choice(INTERESTING, 3))
    elif op == "duplicate" and n:
        k = int(rng.integers(1, 40))
        b[at:at] = b[at:at + k]
    elif op == "delete" and n:
        del b[at:at + int(rng.integers(1, 20))]
    elif op in ("huge_len", "len_plus", "zero_len") and len(lens):
        s, e = (int(x) for x in lens[int(rng.integers(0, len(lens)))])
        try:
            old = read_varint(bytes(b), s)[0]
        except IndexError:  # an earlier byte mutation moved it
            old = 0
        new = {"huge_len": int(rng.choice(HUGE)), "len_plus": old + int(rng.integers(1, 5)), "zero_len": 0}[op]
        b[s:e] = varint(new) if rng.random() < 0.9 else b"\xff" * 10 + b"\x01"  # or an 11-byte varint
    return bytes(b), op


def mutants(n: int, seed: int) -> list[tuple[bytes, str]]:
    """`n` mutated Examples (bytes, how), deterministic for `seed`."""
    rng = np.random.default_rng(seed)
    trees = [parse_tree("example", s) for s in _seeds()]
    out = []
    for _ in range(n):
        k = int(rng.integers(0, len(trees)))
        root = list(trees[k])
        how = [f"seed{k}"]
        for _ in range(int(rng.integers(0, 4))):
            how.append(mutate_tree(rng, root, trees))
        data, cuts, lens = serialize_parts(root)
        for _ in range(int(rng.integers(0 if len(how) > 1 else 1, 3))):
            data, op = mutate_bytes(rng, data, cuts, lens)
            how.append(op)
        out.append((data, "+".join(how)))
    return out


# ---- oracles ---------------------------------------------------------------------------------------------------
def _ours(fn: Callable[[], dict[str, Any]]) -> tuple[str, Any]:
    try:
        return "ok", fn()
    except CorruptRecord as exc:
        return "corrupt", str(exc)
    except Exception as exc:  # noqa: BLE001 - exactly what the test is about
        return "crash", f"{type(exc).__name__}: {exc}"


def _check_types(d: Any, stream: bool = False) -> str | None:
    if not isinstance(d, dict):
        return f"result is a {type(d).__name__}, not a dict"
    for k, v in d.items():
        if not isinstance(k, str):
            return f"key {k!r} is not a str"
        if isinstance(v, np.ndarray):
            if v.ndim != 1 or v.dtype not in (np.float32, np.int64):
                return f"{k!r}: array {v.dtype} of shape {v.shape}, expected {OK_TYPES}"
        elif isinstance(v, list):
            if not all(type(x) is bytes for x in v):
                return f"{k!r}: list of {sorted({type(x).__name__ for x in v})}, expected {OK_TYPES}"
        elif not (stream and isinstance(v, SparseBytes)):
            return f"{k!r}: {type(v).__name__}, expected {OK_TYPES}"
    return None


def _tf_parse() -> Callable[[bytes], dict[str, Any] | None]:
    import tensorflow as tf  # the project's [tf] extra (installed by `make test`)
    from google.protobuf.message import DecodeError

    @np.errstate(invalid="ignore")  # signalling NaNs widened to float64
    def parse(data: bytes) -> dict[str, Any] | None:
        try:
            ex = tf.train.Example.FromString(data)
        except DecodeError:
            return None
        out: dict[str, Any] = {}
        for k, f in ex.features.feature.items():
            kind = f.WhichOneof("kind")
            out[k] = (list(f.bytes_list.value) if kind == "bytes_list" else
                      np.array(f.float_list.value, np.float64) if kind == "float_list" else
                      np.array(f.int64_list.value, np.int64) if kind == "int64_list" else [])
        return out
    return parse


@np.errstate(invalid="ignore")
def _same(ours: dict[str, Any], ref: dict[str, Any]) -> str | None:
    """None if our decode equals TF's (floats compared bit for bit after the same float32 -> float64 widening)."""
    if set(ours) != set(ref):
        return f"keys differ: ours-only {sorted(set(ours) - set(ref))[:5]}, TF-only {sorted(set(ref) - set(ours))[:5]}"
    for k, v in ours.items():
        r = ref[k]
        if isinstance(v, np.ndarray) and v.dtype == np.float32:
            ok = isinstance(r, np.ndarray) and r.dtype == np.float64 and r.shape == v.shape and \
                np.array_equal(v.astype(np.float64).view(np.uint64), r.view(np.uint64))
        elif isinstance(v, np.ndarray):
            ok = isinstance(r, np.ndarray) and r.dtype == np.int64 and np.array_equal(v, r)
        else:
            ok = isinstance(r, list) and v == r
        if not ok:
            return f"{k!r}: ours {v!r:.120} vs TF {r!r:.120}"
    return None


def _same_stream(stream: dict[str, Any], whole: dict[str, Any]) -> str | None:
    if set(stream) != set(whole):
        return f"keys differ: {sorted(set(stream) ^ set(whole))[:5]}"
    for k, v in stream.items():
        w = whole[k]
        if isinstance(v, SparseBytes):
            if not isinstance(w, list) or len(v) != len(w) or any(v.kept[i] != w[i] for i in v.kept):
                return f"{k!r}: streamed {len(v)} items differ from the whole decode"
        elif isinstance(v, np.ndarray):
            if not (isinstance(w, np.ndarray) and v.dtype == w.dtype and np.array_equal(v.view(np.uint8),
                                                                                      w.view(np.uint8))):
                return f"{k!r}: {v!r:.80} vs {w!r:.80}"
        elif not isinstance(w, list) or v != w:
            return f"{k!r}: {v!r:.80} vs {w!r:.80}"
    return None


def _stream(data: bytes, big: int) -> dict[str, Any]:
    rec = next(iter_records(io.BytesIO(frame_record(data))))
    out = decode_example_stream(rec, big=big)
    rec.finish()
    return out


def _hexdump(data: bytes, limit: int = 1024) -> str:
    h = data[:limit].hex()
    lines = [f"{i // 2:06x}  {h[i:i + 64]}" for i in range(0, len(h), 64)]
    return "\n".join(lines) + (f"\n... ({len(data)} bytes)" if len(data) > limit else "")


def _report(failures: list[tuple[str, str]], total: int) -> str:
    """Counts per kind of failure, then the first input of each kind (its mutations and a hex dump)."""
    kinds = Counter(k for k, _ in failures)
    first = {k: text for k, text in reversed(failures)}
    return (f"{len(failures)} failures over {total} inputs (seed {SEED}): {dict(kinds.most_common())}\n\n"
            + "\n\n".join(first[k] for k, _ in kinds.most_common(8)))


def _category(msg: str) -> str:
    """A message without its numbers and details: what groups failures and stricter-than-TF rejections."""
    return re.sub(r"\d+", "N", OFFSET.sub("", msg)).split(":")[0].strip()[:90]


# ---- the fuzz runs -------------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_fuzz_example_decoder_against_tensorflow() -> None:
    tf_parse = _tf_parse()
    t0 = time.perf_counter()
    cases = mutants(N_EXAMPLES, SEED)
    failures: list[tuple[str, str]] = []
    stricter: Counter[str] = Counter()  # TF decodes, we raise: the documented stricter rules
    outcomes: Counter[str] = Counter()
    streamed = 0
    rng = np.random.default_rng(SEED + 1)
    for n, (data, how) in enumerate(cases):
        def fail(why: str) -> None:
            failures.append((_category(why), f"input {n} ({how}): {why}\n{_hexdump(data)}"))
        kind, ours = _ours(lambda: decode_example(data))
        outcomes[kind] += 1
        if kind == "crash":
            fail(f"decode_example raised {ours}")
            continue
        if kind == "corrupt" and not OFFSET.search(ours):
            fail(f"CorruptRecord message without a byte offset: {ours!r}")
        if kind == "ok" and (why := _check_types(ours)):
            fail(why)
            continue
        ref = tf_parse(data)
        if kind == "ok" and ref is None:
            fail("we decode what TensorFlow rejects")
        elif kind == "ok" and (why := _same(ours, ref)):
            fail(f"decoded values differ from TensorFlow's: {why}")
        elif kind == "corrupt" and ref is not None:
            stricter[_category(ours)] += 1
        if n % 3 == 0:  # a third also through the streaming decoder, with a small `big` so it streams
            streamed += 1
            big = int(rng.choice([0, 8, 32, 100, 400]))
            skind, sres = _ours(lambda: _stream(data, big))
            if skind == "crash":
                fail(f"decode_example_stream(big={big}) raised {sres}")
            elif skind != kind:
                fail(f"decode_example says {kind} ({ours if kind != 'ok' else ''}), the stream (big={big}) says "
                     f"{skind} ({sres if skind != 'ok' else ''})")
            elif skind == "ok" and (why := _check_types(sres, stream=True) or _same_stream(sres, ours)):
                fail(f"stream (big={big}) differs from the whole decode: {why}")
            elif skind == "corrupt" and not OFFSET.search(sres):
                fail(f"stream CorruptRecord message without a byte offset: {sres!r}")
    elapsed = time.perf_counter() - t0
    print(f"\n{len(cases)} mutated Examples ({streamed} also streamed) in {elapsed:.1f} s: {dict(outcomes)}; "
          f"TF decodes but we reject ({sum(stricter.values())}):")
    for cat, c in stricter.most_common():
        print(f"  {c:5d}  {cat}")
    if failures:
        pytest.fail(_report(failures, len(cases)), pytrace=False)
    assert len(cases) >= 10_000 and outcomes["ok"] > 500 and outcomes["corrupt"] > 5_000, outcomes


def _framed_file(rng: np.random.Generator, payloads: list[bytes]) -> tuple[bytes, list[int]]:
    out, cuts = b"", []
    for p in payloads:
        cuts += [len(out), len(out) + 8, len(out) + 12, len(out) + 12 + len(p), len(out) + 16 + len(p)]
        out += frame_record(p)
    return out, cuts


def _mutate_framed(rng: np.random.Generator, data: bytes, cuts: list[int]) -> tuple[bytes, str]:
    b = bytearray(data)
    op = str(rng.choice(["flip", "cut", "length", "length_fixed_crc", "data_crc_fixed", "insert", "delete", "none"]))
    rec = int(rng.integers(0, len(cuts) // 5)) * 5 if cuts else 0
    if op == "flip":
        b[int(rng.integers(0, len(b)))] ^= 1 << int(rng.integers(0, 8))
    elif op == "cut":
        del b[max(0, cuts[int(rng.integers(0, len(cuts)))] + int(rng.integers(-2, 3))):]
    elif op in ("length", "length_fixed_crc"):  # a lying length, with or without a matching header CRC
        h = cuts[rec]
        old = struct.unpack_from("<Q", b, h)[0]
        new = int(rng.choice([0, 1, old - 1, old + 1, old + 4, 2 ** 31, 2 ** 40, 2 ** 64 - 1]))
        struct.pack_into("<Q", b, h, new % 2 ** 64)
        if op == "length_fixed_crc":
            struct.pack_into("<I", b, h + 8, masked_crc(bytes(b[h:h + 8])))
    elif op == "data_crc_fixed":  # corrupted data with a CRC that matches: only the Example decoder can tell
        h, d0, d1 = cuts[rec], cuts[rec + 2], cuts[rec + 3]
        if d1 > d0:
            b[int(rng.integers(d0, d1))] ^= 1 << int(rng.integers(0, 8))
            struct.pack_into("<I", b, d1, masked_crc(bytes(b[d0:d1])))
    elif op == "insert":
        at = int(rng.integers(0, len(b) + 1))
        b[at:at] = rng.bytes(int(rng.integers(1, 9)))
    elif op == "delete":
        at = int(rng.integers(0, len(b)))
        del b[at:at + int(rng.integers(1, 9))]
    return bytes(b), op


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_fuzz_tfrecord_reader() -> None:
    rng = np.random.default_rng(SEED + 2)
    valid, mutated = _seeds(), [d for d, _ in mutants(400, SEED + 3)]
    failures: list[tuple[str, str]] = []
    outcomes: Counter[str] = Counter()
    for n in range(N_FRAMED):
        payloads = [valid[int(rng.integers(0, len(valid)))] if rng.random() < 0.5 else
                    mutated[int(rng.integers(0, len(mutated)))] for _ in range(int(rng.integers(1, 4)))]
        data, op = _mutate_framed(rng, *_framed_file(rng, payloads))
        verify = bool(rng.random() < 0.8)

        def fail(why: str) -> None:
            failures.append((_category(why), f"file {n} ({op}, verify={verify}, {len(payloads)} records): {why}\n"
                             f"{_hexdump(data)}"))

        kind, got = _ours(lambda: list(read_records(io.BytesIO(data), verify)))
        outcomes[f"read_records {kind}"] += 1
        if kind == "crash":
            fail(f"read_records raised {got}")
        elif kind == "corrupt" and not OFFSET.search(got):
            fail(f"CorruptRecord message without a byte offset: {got!r}")
        elif kind == "ok" and not all(type(p) is bytes for p in got):
            fail("read_records yielded something other than bytes")
        elif kind == "ok" and verify and op in ("flip", "insert", "delete", "length") and data != \
                _framed_file(rng, payloads)[0]:
            fail("a damaged frame passed both CRCs")

        def walk() -> list[dict[str, Any]]:  # what Validate does: stream every record, then finish it
            out = []
            for rec in iter_records(io.BytesIO(data), verify):
                out.append(decode_example_stream(rec, big=int(rng.choice([16, 64, 1 << 20]))))
                rec.finish()
            return out
        skind, sgot = _ours(walk)
        outcomes[f"iter_records+stream {skind}"] += 1
        if skind == "crash":
            fail(f"iter_records / decode_example_stream raised {sgot}")
        elif skind == "corrupt" and not OFFSET.search(sgot):
            fail(f"CorruptRecord message without a byte offset: {sgot!r}")
        elif skind == "ok" and kind == "ok":
            for rec_bytes, streamed in zip(got, sgot):
                if (why := _same_stream(streamed, decode_example(rec_bytes))):
                    fail(f"streamed record differs from decode_example: {why}")
    print(f"\n{N_FRAMED} mutated TFRecord files: {dict(outcomes)}")
    if failures:
        pytest.fail(_report(failures, N_FRAMED), pytrace=False)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_fast_parser_agrees_on_what_we_decode() -> None:
    """What tfds / Octo / dlimp read with (tf.io.parse_single_example, TF's fast parser) returns our values on a
    sample of the mutated Examples we decode."""
    import tensorflow as tf

    checked = 0
    for data, how in mutants(1_500, SEED + 4):
        kind, ours = _ours(lambda: decode_example(data))
        if kind != "ok" or "" in ours or not ours:
            continue
        spec = {k: tf.io.VarLenFeature(tf.float32 if isinstance(v, np.ndarray) and v.dtype == np.float32 else
                                       tf.int64 if isinstance(v, np.ndarray) else tf.string) for k, v in ours.items()}
        try:
            got = tf.io.parse_single_example(data, spec)
        except (tf.errors.InvalidArgumentError, UnicodeDecodeError) as exc:  # its message quotes the input,
            # whose invalid UTF-8 surfaces as UnicodeDecodeError
            pytest.fail(f"the fast parser rejects what we decode ({how}): {str(exc)[:200]}\n{_hexdump(data)}")
        for k, v in ours.items():
            t = got[k].values.numpy()
            same = list(t) == v if isinstance(v, list) else np.array_equal(t.view(np.uint8), v.view(np.uint8))
            assert same, f"the fast parser reads {k!r} as {t!r:.100}, we as {v!r:.100} ({how})\n{_hexdump(data)}"
        checked += 1
        if checked >= 150:
            break
    assert checked >= 100


# ---- what the fuzzer found in the old decoder: crashes, silent misreads, errors without an offset ---------
def _L(field: int, payload: bytes) -> bytes:
    return varint(field << 3 | 2) + varint(len(payload)) + payload


def _ex(*entries: bytes) -> bytes:
    return _L(1, b"".join(_L(1, e) for e in entries))


FLOATS = _L(2, _L(1, struct.pack("<f", 1.0)))
FOUND = {  # name: (input, what the old decoder did with it)
    "varint_value": (_ex(_L(1, b"a") + b"\x10\x05"), "entry value is a varint: TypeError"),
    "varint_kind": (_ex(_L(1, b"a") + _L(2, b"\x08\x01")), "Feature kind is a varint: AssertionError"),
    "varint_key": (_ex(b"\x08\x05" + _L(2, FLOATS)), "entry key is a varint: AttributeError"),
    "cut_tag": (_ex(_L(1, b"a") + _L(2, FLOATS[:1])) + b"\x80", "tag cut by the end: IndexError"),
    "bad_utf8_key": (_ex(_L(1, b"\xff\xfe") + _L(2, FLOATS)), "key not UTF-8: UnicodeDecodeError"),
    "cut_packed_varint": (_ex(_L(1, b"a") + _L(2, _L(3, _L(1, b"\x05\x80")))), "packed varint cut: IndexError"),
    "long_varint": (_ex(_L(1, b"a") + _L(2, _L(3, _L(1, b"\xff" * 10 + b"\x01")))),
                    "11-byte varint: OverflowError"),
    "odd_floats": (_ex(_L(1, b"a") + _L(2, _L(2, _L(1, b"\x00\x00\x80")))),
                   "3 bytes of packed floats: numpy's ValueError, no offset"),
    "cut_fixed64": (_ex(_L(1, b"a") + _L(2, FLOATS)) + b"\x29\x00\x00",
                    "fixed64 field cut by the end: accepted silently (TF rejects it)"),
    "nested_lie": (b"\x0a\x0e\x0a\x05" + b"\x0a\x01a\x12\x09" + FLOATS + b"\x00",
                   "a length past its entry's end: misparsed (ValueError 'wire type 7'); the stream accepted it"),
    "huge_len": (_ex(_L(1, b"a") + b"\x12" + varint(2 ** 62) + FLOATS),
                 "a value declaring 2**62 bytes: accepted silently, the length ignored"),
    "two_kinds": (_ex(_L(1, b"a") + _L(2, _L(1, _L(1, b"x")) + FLOATS)),
                  "a Feature with two lists: the bytes list returned, TensorFlow (protobuf) returns the floats"),
    "group": (b"\x2b\x2c" + _ex(_L(1, b"a") + _L(2, FLOATS)),
              "a group: ValueError without an offset (protobuf skips it, TF's fast parser rejects it)"),
    "padded_tag": (b"\x8a\x00" + _ex(_L(1, b"a") + _L(2, FLOATS))[1:],
                   "a padded tag: accepted (protobuf reads the features, TF's fast parser skips them)"),
}


@pytest.mark.parametrize("name", sorted(FOUND))
def test_found_cases_raise_corrupt_record(name: str) -> None:
    data = FOUND[name][0]
    for fn in (lambda: decode_example(data), lambda: _stream(data, 0), lambda: _stream(data, 1 << 20)):
        with pytest.raises(CorruptRecord, match=OFFSET.pattern):
            fn()


def test_valid_alternatives_decode_like_tensorflow() -> None:
    """Encodings TF accepts that our encoder never writes: unpacked lists, value before key, unknown Example fields,
    padded lengths, concatenated Examples (merged, last key wins), a feature with no kind."""
    unpacked_f = _L(2, b"".join(b"\x0d" + struct.pack("<f", x) for x in (1.5, -2.0)))
    unpacked_i = _L(3, b"\x08\x05\x08" + varint(-3))
    data = (b"\x08\x07\x11" + b"\x00" * 8 + b"\x1d\x00\x00\x00\x00" + _L(9, b"zz")
            + _ex(_L(2, unpacked_f) + _L(1, b"f"), _L(1, b"i") + _L(2, unpacked_i), _L(1, b"none") + _L(2, b""))
            + b"\x0a\x80\x00" + _ex(_L(1, b"i") + _L(2, _L(3, _L(1, b"\x2a")))))
    out = decode_example(data)
    assert out["f"].tolist() == [1.5, -2.0] and out["f"].dtype == np.float32
    assert out["i"].tolist() == [42] and out["none"] == []
    assert _stream(data, 0)["i"].tolist() == [42]
    one = decode_example(data[:-len(_ex(_L(1, b"i") + _L(2, _L(3, _L(1, b"\x2a")))))])
    assert one["i"].tolist() == [5, -3]


def test_huge_declared_lengths_allocate_nothing_big(tmp_path) -> None:
    """Lengths are checked against the bytes left before anything is allocated (decoders), and a record's length
    is never allocated at once (reader, on a real file: FileIO.read(n) allocates n up front)."""
    cases = [FOUND["huge_len"][0], _ex(_L(1, b"a") + b"\x12" + varint(2 ** 31) + FLOATS), b"\x0a" + varint(2 ** 40),
             _ex(_L(1, b"a") + _L(2, b"\x0a" + varint(2 ** 35)))]
    files = []
    for i, data in enumerate([struct.pack("<Q", 2 ** 40) + b"\x00" * 4 + b"x" * 100,
                              struct.pack("<Q", 2 ** 33) + struct.pack("<I", masked_crc(struct.pack("<Q", 2 ** 33)))
                              + b"x" * 100, frame_record(b"x" * 100)[:50]]):
        files.append(tmp_path / f"{i}.tfrecord")
        files[-1].write_bytes(data)
    tracemalloc.start()
    try:
        for data in cases:
            for fn in (lambda: decode_example(data), lambda: _stream(data, 0)):
                with pytest.raises(CorruptRecord):
                    fn()
        for path in files:
            for verify in (True, False):
                with open(path, "rb") as f, pytest.raises(CorruptRecord):
                    list(read_records(f, verify))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 << 20, f"peak allocation {peak} bytes"


@pytest.mark.parametrize("raw", [b"", b"\x80", b"\xff" * 10 + b"\x01", b"\xff" * 9 + b"\x02", b"\x80" * 11])
def test_varint_readers_reject_bad_varints(raw: bytes) -> None:
    with pytest.raises(CorruptRecord):
        robo_read_varint(raw, 0)
    with pytest.raises(CorruptRecord):
        read_varint_from(io.BytesIO(raw).read)
    assert robo_read_varint(b"\xff" * 9 + b"\x01", 0) == (2 ** 64 - 1, 10)
