"""Append-only bytes that do not have to fit in memory: the pieces appended are kept in memory up to `max_memory`
bytes (as they came: no copy), and on an anonymous scratch file beyond (O_TMPFILE on Linux: no name ever appears,
nothing to clean up after a crash). What the bytes mean is the user's (robo_ray/formats/rlds/spool.py frames a
BytesList in one)."""
from __future__ import annotations

import os
import tempfile
from contextlib import contextmanager
from typing import Any, Callable, Iterator, TypeVar

from robo_ray.storage import is_local

DEFAULT_MAX_MEMORY = 32 << 20
SpoolT = TypeVar("SpoolT", bound="Spool")


class Spool:
    """Append-only byte stream: in memory the pieces are kept as the byte strings they came as (no copy on write,
    none when read back); past `max_memory` bytes everything moves to the scratch file, which takes the writes from
    then on."""

    def __init__(self, scratch_dir: str | None = None, max_memory: int = DEFAULT_MAX_MEMORY) -> None:
        self._dir = scratch_dir
        self._max_memory = max_memory
        self._parts: list[bytes] = []  # in memory: the pieces written, in order
        self._file: Any = None  # the anonymous scratch file, once spilled
        self.size = 0  # bytes written

    def write(self, *pieces: bytes) -> None:
        self.size += sum(len(p) for p in pieces)
        if self._file is None:
            self._parts += pieces
            if self.size > self._max_memory:
                self._spill()
        else:
            self._file.writelines(pieces)

    def _spill(self) -> None:
        self._file = tempfile.TemporaryFile(dir=self._dir)
        self._file.writelines(self._parts)
        self._parts = []

    @property
    def on_disk(self) -> bool:
        return self._file is not None

    @property
    def pieces(self) -> list[bytes]:
        """The pieces written, while in memory (empty once spilled)."""
        return self._parts

    def chunks(self, block: int = 4 << 20) -> Iterator[bytes]:
        """The bytes in order: in memory, the pieces as they are; from the scratch file, in blocks of at most
        `block` bytes (read from the start)."""
        if self._file is None:
            yield from self._parts
            return
        with self.reading() as read:
            remaining = self.size
            while remaining:
                data = read(min(block, remaining))
                if not data:
                    raise OSError("scratch spool is shorter than what was written")
                remaining -= len(data)
                yield data

    @contextmanager
    def reading(self) -> Iterator[Callable[[int], bytes]]:
        """After spilling: the scratch file's `read` from its start (writes go on at its end after)."""
        assert self._file is not None
        self._file.seek(0)
        try:
            yield self._file.read
        finally:
            self._file.seek(0, 2)

    def close(self) -> None:
        self._parts = []
        if self._file is not None:
            self._file.close()

    def __enter__(self: SpoolT) -> SpoolT:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def spool_for(fs: Any, directory: str, kind: type[SpoolT] = Spool) -> SpoolT:  # type: ignore[assignment]
    """A spool (of class `kind`) for output going to `directory` on `fs`: its scratch file stays inside a local
    destination (nothing written elsewhere), or in the system temp dir for a remote one. ROBO_RAY_SPOOL_MEMORY
    overrides the in-memory size (tests force the scratch-file path with it)."""
    scratch = None
    if is_local(fs):
        os.makedirs(directory, exist_ok=True)
        scratch = directory
    return kind(scratch, int(os.environ.get("ROBO_RAY_SPOOL_MEMORY", DEFAULT_MAX_MEMORY)))
