"""A BytesList feature that does not have to fit in memory: its items (JPEG frames of one camera over one
episode) are kept protobuf-encoded in a spooled temporary file, in memory up to `max_memory` bytes and on an
anonymous scratch file beyond (O_TMPFILE on Linux: no name ever appears, nothing to clean up after a crash)."""
from __future__ import annotations

import tempfile
from typing import Iterator

from robo_ray.writers.rlds.varint import varint

DEFAULT_MAX_MEMORY = 32 << 20
_TAG_VALUE = varint((1 << 3) | 2)  # BytesList.value = 1, length-delimited


class BytesSpool:
    """Append-only list of byte strings, stored as the payload of a `tf.train.BytesList`."""

    def __init__(self, scratch_dir: str | None = None, max_memory: int = DEFAULT_MAX_MEMORY) -> None:
        self._file = tempfile.SpooledTemporaryFile(max_size=max_memory, dir=scratch_dir)
        self.count = 0
        self.size = 0  # encoded payload bytes

    def append(self, item: bytes) -> None:
        head = _TAG_VALUE + varint(len(item))
        self._file.write(head)
        self._file.write(item)
        self.count += 1
        self.size += len(head) + len(item)

    def __len__(self) -> int:
        return self.count

    @property
    def on_disk(self) -> bool:
        return bool(getattr(self._file, "_rolled", False))

    def chunks(self, block: int = 4 << 20) -> Iterator[bytes]:
        """The encoded payload, in blocks of at most `block` bytes (reads the spool from the start)."""
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
        """The byte strings back, one at a time (reads the spool from the start)."""
        f = self._file
        f.seek(0)
        for _ in range(self.count):
            f.read(len(_TAG_VALUE))
            n = shift = 0
            while True:
                b = f.read(1)[0]
                n |= (b & 0x7F) << shift
                shift += 7
                if not b & 0x80:
                    break
            yield f.read(n)
        f.seek(0, 2)

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> "BytesSpool":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
