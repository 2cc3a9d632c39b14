"""sha256 of stored files, streamed in bounded memory, and a reader that hashes while it is parsed."""
from __future__ import annotations

import hashlib
from typing import Any

import fsspec

from robo_ray.storage.reads import open_sequential


class HashingReader:
    """Wraps a binary file so one pass both parses and hashes it: every byte read goes into sha256;
    `hexdigest` first hashes whatever was not read (e.g. after a corrupt record). With `hashing=False` it only
    counts the bytes (`n`) and `hexdigest` returns "" after reading to the end."""

    def __init__(self, f: Any, chunk: int = 4 << 20, hashing: bool = True) -> None:
        self.f, self.chunk = f, chunk
        self._h = hashlib.sha256() if hashing else None
        self.n = 0  # bytes read so far

    def read(self, n: int = -1) -> bytes:
        b = self.f.read(n)
        if self._h is not None:
            self._h.update(b)
        self.n += len(b)
        return b

    def hexdigest(self) -> str:
        while b := self.f.read(self.chunk):
            if self._h is not None:
                self._h.update(b)
            self.n += len(b)
        return self._h.hexdigest() if self._h is not None else ""


def sha256_file(fs: fsspec.AbstractFileSystem, path: str) -> str:
    with open_sequential(fs, path) as f:
        return HashingReader(f).hexdigest()


def hash_file(fs: fsspec.AbstractFileSystem, path: str, keep: bool = False) -> tuple[bytes, str, int]:
    """(the file's bytes when `keep`, else b"", its sha256, its size), streamed unless kept; FileNotFoundError when
    it is missing."""
    if keep:
        raw = fs.cat_file(path)
        return raw, hashlib.sha256(raw).hexdigest(), len(raw)
    with open_sequential(fs, path) as f:
        reader = HashingReader(f)
        return b"", reader.hexdigest(), reader.n


def hash_against(fs: fsspec.AbstractFileSystem, path: str, size: int, digest: str, keep: bool = False
                 ) -> tuple[bytes | None, str, str | None]:
    """(the file's bytes when `keep`, b"" otherwise, or None when it is missing; its sha256; what differs from the
    recorded `size` and `digest`, or None) — a committed file checked against its ledger entry."""
    try:
        raw, got, n = hash_file(fs, path, keep)
    except FileNotFoundError:
        return None, "", None
    if got != digest or n != size:
        return raw, got, (f"sha256 {got[:12]}… ({n} bytes) differs from the ledger's {digest[:12]}… ({size} bytes) "
                          "(modified after conversion)")
    return raw, got, None
