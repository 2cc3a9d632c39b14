"""A camera topic's frames for the steps of one episode, read from the bag while the writer takes them: a cursor
over the topic's messages (its own opened bag, seeking by receive time when asked for an earlier message), decoded
raw images as `LazyFrames` (a few at a time), compressed images as their JPEG / PNG bytes on demand. An episode's
frames are never all in memory."""
from __future__ import annotations

from typing import Any, Callable, Iterator, Sequence

import numpy as np

from robo_ray.episode import RawFrames
from robo_ray.errors import DataCorrupt
from robo_ray.formats.hdf5 import LazyFrames
from robo_ray.formats.rosbag.bags import Bag

FRAME_CHUNK = 8  # raw frames decoded at a time


class TopicCursor:
    """Message `j` (receive order) of one topic, decoded by `decode`: read forward; an earlier one reopens the bag
    at its receive time. The last decoded value is kept (a frame repeated over steps is decoded once)."""

    def __init__(self, open_bag: Callable[[], Bag], topic: str, log: np.ndarray, decode: Callable[[Any], Any],
                 where: str, last: int | None = None) -> None:
        self._open_bag, self.topic, self.log, self.decode, self.where = open_bag, topic, log, decode, where
        self.last = len(log) - 1 if last is None else last  # the bag is closed once this message is served
        self._bag: Bag | None = None
        self._gen: Iterator[tuple[str, int, Any]] | None = None
        self._pos = 0  # index of the next message the generator yields
        self._last: tuple[int, Any] | None = None

    def get(self, j: int) -> Any:
        if self._last is not None and self._last[0] == j:
            return self._last[1]
        if self._gen is None or j < self._pos:
            self.close()
            self._bag = self._open_bag()
            start = int(self.log[j])
            self._pos = int(np.searchsorted(self.log, start, side="left"))
            self._gen = self._bag.messages([self.topic], start)
        assert self._bag is not None and self._gen is not None
        while True:
            try:
                _, t, raw = next(self._gen)
            except StopIteration:
                raise DataCorrupt(f"{self.where}: {self.topic} ended before its message {j}") from None
            k, self._pos = self._pos, self._pos + 1
            if k == j:
                value = self.decode(self._bag.deserialize(raw, self.topic))
                self._last = (j, value)
                if j >= self.last:
                    self.close()
                return value

    def close(self) -> None:
        if self._gen is not None:
            self._gen.close()
        if self._bag is not None:
            self._bag.close()
        self._gen, self._bag = None, None


class EncodedFrames(Sequence[bytes]):
    """A compressed-image camera's JPEG / PNG bytes per step, read when asked (iteration streams forward)."""

    def __init__(self, cursor: TopicCursor, index: np.ndarray) -> None:
        self.cursor, self.index = cursor, index

    def __len__(self) -> int:
        return len(self.index)

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        return self.cursor.get(int(self.index[range(len(self))[i]]))

    def __iter__(self) -> Iterator[bytes]:
        try:
            for j in self.index:
                yield self.cursor.get(int(j))
        finally:
            self.cursor.close()


def raw_frames(cursor: TopicCursor, index: np.ndarray, shape: tuple[int, ...], dtype: str) -> RawFrames:
    """A raw-image camera's decoded frames per step, FRAME_CHUNK at a time."""
    def read(a: int, b: int) -> np.ndarray:
        return np.stack([cursor.get(int(j)) for j in index[a:b]])
    h, w, c = shape
    return RawFrames(LazyFrames(len(index), (h, w, c), read, dtype, chunk=FRAME_CHUNK))
