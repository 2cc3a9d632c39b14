"""Git LFS pointer files standing in for a dataset's files: a Hugging Face dataset cloned with plain `git clone`
(no git-lfs) has, in place of every parquet and MP4, a ~130-byte text file naming the object. Reading it fails
with a codec or parquet error that says nothing useful; `lfs_pointer_note` turns that into the reason."""
from __future__ import annotations

import re
from typing import Any, Callable

POINTER_MAX_BYTES = 1024  # the spec's pointers are about 130 bytes; anything larger is not one
_POINTER = re.compile(rb"^version https://git-lfs\.github\.com/spec/v1\n(?:[a-z0-9.-]+ [^\n]*\n)*?"
                      rb"oid sha256:([0-9a-f]{64})\nsize (\d+)\n")


def parse_pointer(head: bytes) -> tuple[str, int] | None:
    """(sha256, size) when `head` (a file's first bytes) is a Git LFS pointer, else None."""
    m = _POINTER.match(head[:POINTER_MAX_BYTES])
    return (m.group(1).decode(), int(m.group(2))) if m else None


def lfs_pointer_note(read_head: Callable[[], bytes]) -> str:
    """" (a Git LFS pointer ...)" for a message about an unreadable file when its first bytes (`read_head()`, up to
    POINTER_MAX_BYTES) are a pointer; "" otherwise, and when they cannot be read."""
    try:
        head = read_head()
    except Exception:  # noqa: BLE001 - only a hint for a message that is raised anyway
        return ""
    found = parse_pointer(head or b"")
    if found is None:
        return ""
    return (f" (it is a Git LFS pointer to a {found[1]:,}-byte object, not the file: the dataset was fetched "
            f"without Git LFS; `git lfs pull` in the clone, or download it with huggingface_hub)")


def head_of(fs: Any, path: str) -> Callable[[], bytes]:
    """`read_head` for a file of an fsspec filesystem."""
    return lambda: fs.cat_file(path, start=0, end=POINTER_MAX_BYTES)


def head_of_local(path: str) -> Callable[[], bytes]:
    """`read_head` for a local file."""
    def read() -> bytes:
        with open(path, "rb") as f:
            return f.read(POINTER_MAX_BYTES)
    return read


def head_of_file(f: Any) -> Callable[[], bytes]:
    """`read_head` for an open seekable binary file (it is rewound)."""
    def read() -> bytes:
        f.seek(0)
        return f.read(POINTER_MAX_BYTES)
    return read


def head_of_source(src: Any) -> Callable[[], bytes]:
    """`read_head` for what a reader's `open` gives: a local path or an open binary file."""
    return head_of_local(src) if isinstance(src, str) else head_of_file(src)
