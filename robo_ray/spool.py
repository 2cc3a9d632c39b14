"""A BytesList feature that does not have to fit in memory: its items (JPEG frames of one camera over one
episode) are kept in memory up to `max_memory` bytes (as they came: no copy), and protobuf-encoded on an anonymous
scratch file beyond (O_TMPFILE on Linux: no name ever appears, nothing to clean up after a crash)."""
from __future__ import annotations

import os
import tempfile
from typing import Any, Iterator

from robo_ray.storage import is_local
from robo_ray.formats.rlds.varint import read_varint_from, varint

DEFAULT_MAX_MEMORY = 32 << 20
_TAG_VALUE = varint((1 << 3) | 2)  # BytesList.value = 1, length-delimited


class BytesSpool:
    """Append-only list of byte strings, stored as the payload of a `tf.train.BytesList`. In memory the items are
    kept as the byte strings they came as (no copy on append, none when read back); past `max_memory` bytes
    everything moves to the scratch file, which takes the appends from then on."""

    def __init__(self, scratch_dir: str | None = None, max_memory: int = DEFAULT_MAX_MEMORY) -> None:
        self._dir = scratch_dir
        self._max_memory = max_memory
        self._parts: list[bytes] = []  # in memory: field head, item, field head, item, ...
        self._file: Any = None  # the anonymous scratch file, once spilled
        self.count = 0
        self.size = 0  # encoded payload bytes

    def append(self, item: bytes) -> None:
        head = _TAG_VALUE + varint(len(item))
        self.count += 1
        self.size += len(head) + len(item)
        if self._file is None:
            self._parts += (head, item)
            if self.size > self._max_memory:
                self._spill()
        else:
            self._file.write(head)
            self._file.write(item)

    def _spill(self) -> None:
        self._file = tempfile.TemporaryFile(dir=self._dir)
        self._file.writelines(self._parts)
        self._parts = []

    def __len__(self) -> int:
        return self.count

    @property
    def on_disk(self) -> bool:
        return self._file is not None

    def chunks(self, block: int = 4 << 20) -> Iterator[bytes]:
        """The encoded payload in order: in memory, the heads and items as they are; from the scratch file, in
        blocks of at most `block` bytes (read from the start)."""
        if self._file is None:
            yield from self._parts
            return
        self._file.seek(0)
        remaining = self.size
        while remaining:
            data = self._file.read(min(block, remaining))
            if not data:
                raise OSError("scratch spool is shorter than what was written")
            remaining -= len(data)
            yield data
        self._file.seek(0, 2)

    def __iter__(self) -> Iterator[bytes]:
        """The byte strings back, one at a time."""
        if self._file is None:
            yield from self._parts[1::2]
            return
        f = self._file
        f.seek(0)
        for _ in range(self.count):
            f.read(len(_TAG_VALUE))
            yield f.read(read_varint_from(f.read))
        f.seek(0, 2)

    def close(self) -> None:
        self._parts = []
        if self._file is not None:
            self._file.close()

    def __enter__(self) -> "BytesSpool":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def spool_for(fs: Any, directory: str) -> BytesSpool:
    """A spool for output going to `directory` on `fs`: its scratch file stays inside a local destination (nothing
    written elsewhere), or in the system temp dir for a remote one. ROBO_RAY_SPOOL_MEMORY overrides the
    in-memory size (tests force the scratch-file path with it)."""
    scratch = None
    if is_local(fs):
        os.makedirs(directory, exist_ok=True)
        scratch = directory
    return BytesSpool(scratch, int(os.environ.get("ROBO_RAY_SPOOL_MEMORY", DEFAULT_MAX_MEMORY)))
