"""An RLDS Example's decoded values as an episode's arrays, checked against their leaf: numbers (plain, or
tfds' bytes / zlib Tensor encodings), strings, encoded images (recognised by their magic bytes, kept as stored)
and episode-level metadata values; `image_info` reads an encoded image's format and size from its first bytes."""
from __future__ import annotations

import struct
import zlib
from typing import Any

import numpy as np

from robo_ray.errors import DataCorrupt, ImageDecodeError
from robo_ray.formats.rlds.features import Leaf

IMAGE_MAGIC = ((b"\xff\xd8\xff", "jpeg"), (b"\x89PNG\r\n\x1a\n", "png"), (b"GIF8", "gif"), (b"BM", "bmp"))


def image_info(head: bytes) -> tuple[str | None, tuple[int, int, int] | None]:
    """(format, (H, W, C)) from the first bytes of an encoded image (PNG IHDR, JPEG SOF); None when unknown."""
    fmt = next((f for magic, f in IMAGE_MAGIC if head.startswith(magic)), None)
    if fmt == "png" and len(head) >= 26:
        w, h = struct.unpack(">II", head[16:24])
        return fmt, (h, w, {0: 1, 2: 3, 3: 3, 4: 2, 6: 4}.get(head[25], 3))
    if fmt == "jpeg":
        pos = 2
        while pos + 9 < len(head):
            if head[pos] != 0xFF:
                break
            marker = head[pos + 1]
            if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:
                pos += 2
                continue
            seg = struct.unpack(">H", head[pos + 2:pos + 4])[0]
            if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
                h, w = struct.unpack(">HH", head[pos + 5:pos + 9])
                return fmt, (h, w, head[pos + 9] if pos + 9 < len(head) else 3)
            pos += 2 + seg
    return fmt, None



def decode_numbers(leaf: Leaf, value: Any, rows: int, where: str) -> np.ndarray:
    """`rows` values of a numeric leaf, shaped (rows, *shape) in its dtype (DataCorrupt when they do not fit)."""
    per = int(np.prod(leaf.shape)) if leaf.shape else 1
    if leaf.encoding in ("bytes", "zlib"):
        if not isinstance(value, list) or len(value) != rows:
            raise DataCorrupt(f"{where}: feature {leaf.flat_key!r} holds {n_values(value)} encoded values for {rows} "
                              "rows")
        dtype = np.dtype(leaf.dtype).newbyteorder("<")
        size = per * dtype.itemsize
        out = []
        for item in value:
            if leaf.encoding == "zlib":
                d = zlib.decompressobj()
                try:
                    item = d.decompress(item, size + 1)
                except zlib.error as exc:
                    raise DataCorrupt(f"{where}: feature {leaf.flat_key!r}: bad zlib data ({exc})") from exc
            if len(item) != size:
                raise DataCorrupt(f"{where}: feature {leaf.flat_key!r}: an encoded value of {len(item)} bytes, "
                                  f"shape {list(leaf.shape)} {leaf.dtype} needs {size}")
            out.append(np.frombuffer(item, dtype))
        arr = np.stack(out) if out else np.zeros((0, per), dtype)
        return arr.astype(leaf.dtype).reshape((rows, *leaf.shape))
    want = "f" if leaf.dtype.startswith("float") else "i"
    if not isinstance(value, np.ndarray) or (value.size and value.dtype.kind != want):
        raise DataCorrupt(f"{where}: feature {leaf.flat_key!r} is not stored as "
                          f"{'a float' if want == 'f' else 'an int64'} list")
    if value.size != rows * per:
        raise DataCorrupt(f"{where}: feature {leaf.flat_key!r} holds {value.size} values for {rows} rows of shape "
                          f"{list(leaf.shape)}")
    if leaf.dtype == "bool":
        arr = value != 0
    elif leaf.dtype == "uint64":
        arr = value.astype(np.int64).view(np.uint64)
    else:
        arr = value.astype(leaf.dtype)
    return arr.reshape((rows, *leaf.shape))


def n_values(value: Any) -> int:
    """How many values a decoded feature holds (a list of bytes items or an array)."""
    return len(value) if isinstance(value, list) else int(getattr(value, "size", 0))


def decode_strings(leaf: Leaf, value: Any, rows: int, where: str) -> np.ndarray:
    """`rows` strings of a string leaf (UTF-8 decoded; a binary one is kept as bytes), shaped (rows, *shape)."""
    per = int(np.prod(leaf.shape)) if leaf.shape else 1
    if not isinstance(value, list) or len(value) != rows * per:
        raise DataCorrupt(f"{where}: feature {leaf.flat_key!r} holds {n_values(value)} strings for {rows} rows")
    out = np.empty(len(value), dtype=object)
    for i, b in enumerate(value):
        try:
            out[i] = b.decode("utf-8")
        except UnicodeDecodeError:
            out[i] = bytes(b)  # a binary string tensor: kept as bytes, not mangled
    return out.reshape((rows, *leaf.shape))


def image_frames(leaf: Leaf, value: Any, rows: int, where: str) -> list[bytes]:
    """The `rows` encoded frames of an image leaf, as stored (ImageDecodeError for one that is not an image)."""
    if not isinstance(value, list) or len(value) != rows:
        raise DataCorrupt(f"{where}: image {leaf.flat_key!r} has {n_values(value)} frames for {rows} steps")
    for t, b in enumerate(value):
        if not any(b.startswith(magic) for magic, _ in IMAGE_MAGIC):
            raise ImageDecodeError(f"{where}: image {leaf.flat_key!r} step {t} is not an encoded image "
                                   f"({len(b)} bytes starting {bytes(b[:4])!r})")
    return [bytes(b) for b in value]


def metadata_value(arr: np.ndarray, leaf: Leaf) -> Any:
    """An episode-level value as Episode.metadata holds it: a Python scalar, or the array of a non-scalar."""
    if leaf.shape:
        return arr[0]
    v = arr[0]
    if leaf.dtype == "string":
        return v
    return bool(v) if leaf.dtype == "bool" else float(v) if leaf.dtype.startswith("float") else int(v)

