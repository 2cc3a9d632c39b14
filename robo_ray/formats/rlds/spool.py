"""A BytesList feature that does not have to fit in memory (JPEG frames of one camera over one episode): the
neutral spool (robo_ray/spool.py) holding the items protobuf-framed as a `tf.train.BytesList` payload."""
from __future__ import annotations

from typing import Iterator

from robo_ray.formats.rlds.varint import read_varint_from, varint
from robo_ray.spool import DEFAULT_MAX_MEMORY, Spool

_TAG_VALUE = varint((1 << 3) | 2)  # BytesList.value = 1, length-delimited


class BytesSpool(Spool):
    """Append-only list of byte strings, stored as the payload of a `tf.train.BytesList` (`chunks()`, `size`)."""

    def __init__(self, scratch_dir: str | None = None, max_memory: int = DEFAULT_MAX_MEMORY) -> None:
        super().__init__(scratch_dir, max_memory)
        self.count = 0

    def append(self, item: bytes) -> None:
        self.count += 1
        self.write(_TAG_VALUE + varint(len(item)), item)

    def __len__(self) -> int:
        return self.count

    def __iter__(self) -> Iterator[bytes]:
        """The byte strings back, one at a time."""
        if not self.on_disk:
            yield from self.pieces[1::2]
            return
        with self.reading() as read:
            for _ in range(self.count):
                read(len(_TAG_VALUE))
                yield read(read_varint_from(read))
