"""ImageHistogram (the LeRobot writer's camera statistics) counts exactly what a bincount per channel counts, on
lerobot's downsampled frames, through PIL's histogram or the numpy fallback."""
from __future__ import annotations

import numpy as np
import pytest

from robo_ray.formats.lerobot.video_encode import ImageHistogram, downsample, rgb_frame


def _bincount(frames: list[np.ndarray], channels: int) -> np.ndarray:
    ref = np.zeros((channels, 256), np.int64)
    for x in frames:
        small = downsample(x)
        for c in range(channels):
            ref[c] += np.bincount(small[:, :, c].ravel(), minlength=256)
    return ref


@pytest.mark.parametrize("shape", [(128, 128, 3), (480, 640, 3), (301, 17, 3), (240, 320, 1), (90, 60, 2)])
def test_counts_equal_a_bincount_per_channel(shape: tuple[int, int, int]) -> None:
    rng = np.random.default_rng(sum(shape))
    frames = [rng.integers(0, 256, shape, dtype=np.uint8) for _ in range(3)]
    frames.append(frames[0][::-1, ::-1])  # a strided view (as a flipped or downsampled frame is)
    h = ImageHistogram(shape[2])
    for f in frames:
        h.add(f)
    assert h.frames == 4
    np.testing.assert_array_equal(h.hist, _bincount(frames, shape[2]))


def test_rgb_frame_holds_the_pixels() -> None:
    rng = np.random.default_rng(0)
    a = rng.integers(0, 256, (48, 64, 3), dtype=np.uint8)
    np.testing.assert_array_equal(rgb_frame(a).to_ndarray(format="rgb24"), a)
    strided = a[:, ::2]  # not C-contiguous rows: copied
    np.testing.assert_array_equal(rgb_frame(strided).to_ndarray(format="rgb24"), strided)


def test_batches_of_mixed_sizes_and_past_the_batch_limit(monkeypatch) -> None:
    monkeypatch.setattr(ImageHistogram, "BATCH_BYTES", 100_000)  # a few frames per batch
    rng = np.random.default_rng(7)
    shapes = [(64, 48, 3), (64, 48, 3), (30, 40, 3), (64, 48, 3)] * 5 + [(600, 200, 3)]  # the last downsampled
    frames = [rng.integers(0, 256, s, dtype=np.uint8) for s in shapes]
    h = ImageHistogram(3)
    for k, f in enumerate(frames):
        h.add(f)
        if k == 7:  # reading the counts mid-way counts what is pending, adding goes on after
            np.testing.assert_array_equal(h.hist, _bincount(frames[:8], 3))
    np.testing.assert_array_equal(h.hist, _bincount(frames, 3))
    st = h.stats()
    assert st["count"].tolist() == [len(frames)] and st["mean"].shape == (3, 1, 1)
    other = ImageHistogram(3)
    other.add(frames[0])
    other.merge(h.hist, h.frames)
    np.testing.assert_array_equal(other.hist, _bincount([frames[0], *frames], 3))


FORKED_CHILD_COUNTS = """
import os, sys, time
import numpy as np
from robo_ray.formats.lerobot.video_encode import ImageHistogram
rng = np.random.default_rng(3)
frames = [rng.integers(0, 256, (40, 30, 3), dtype=np.uint8) for _ in range(3)]
want = sum(np.stack([np.bincount(f[:, :, c].ravel(), minlength=256) for c in range(3)]) for f in frames)
parent = ImageHistogram(3)
parent.add(frames[0])
_ = parent.hist  # the parent's counting thread exists now
pid = os.fork()
if pid == 0:
    h = ImageHistogram(3)
    for f in frames:
        h.add(f)
    os._exit(0 if np.array_equal(h.hist, want) else 2)
_, status = os.waitpid(pid, 0)
print(os.waitstatus_to_exitcode(status))
"""


def test_a_forked_child_counts_with_its_own_thread() -> None:
    """The counting thread does not survive a fork: a child that counts must not wait for it forever. (In a fresh
    process: a fork of the test process, with its other threads, tests more than this.)"""
    import subprocess
    import sys

    try:
        out = subprocess.run([sys.executable, "-c", FORKED_CHILD_COUNTS], capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        raise AssertionError("the forked child hung counting its histogram") from None
    assert out.returncode == 0 and out.stdout.strip() == "0", (out.stdout, out.stderr[-2000:])
