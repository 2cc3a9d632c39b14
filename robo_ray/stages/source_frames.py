"""Source frames of an episode as RGB arrays (16-bit depth: HxWx1 uint16 values), decoded with PyAV
independently of the convert path (Validate)."""
from __future__ import annotations

import numpy as np

from robo_ray.episode import Episode, RawFrames
from robo_ray.images import decode_frame, frame_array
from robo_ray.readers.base import Reader
from robo_ray.storage import is_local
from robo_ray.video import VideoStream


def source_frames(reader: Reader, ep: Episode, key: str, steps: list[int]) -> list[np.ndarray]:
    """HxWxC uint8 frames at the given step indices: the frame whose timestamp matches each step."""
    channels = reader.features[key].shape[2]  # type: ignore[attr-defined]
    dtype = str(reader.features[key].dtype)  # type: ignore[attr-defined]
    if key in ep.images:
        images = ep.images[key]
        if dtype == "uint16" and isinstance(images, RawFrames):  # 16-bit depth: its values, HxWx1
            return [images.array[i].reshape(*images.array.shape[1:3], 1).astype(np.uint16) for i in steps]
        return [decode_frame(images[i], channels, dtype) for i in steps]
    ref = ep.videos[key]
    path = reader.path(ref.path)  # type: ignore[attr-defined]
    opener = None if is_local(reader.fs) else (lambda: reader.open_binary(ref.path))  # type: ignore[attr-defined]
    ts = ep.timestamps if ep.timestamps is not None else np.arange(ep.length) / reader.fps  # type: ignore[attr-defined]
    wanted = {i: ref.from_timestamp + float(ts[i]) for i in steps}
    out: dict[int, np.ndarray] = {}
    half = 0.5 / max(reader.fps, 1)  # type: ignore[attr-defined]
    stream = VideoStream(path, opener, threads=0)
    try:
        # one short forward decode per wanted step (the stream seeks to the keyframe before it when it is far
        # ahead), not the whole window: Validate must not decode the sampled episodes a second time in full
        for i in sorted(wanted, key=wanted.__getitem__):
            for t, frame in stream.window(wanted[i], ref.to_timestamp, half):
                if abs(t - wanted[i]) < half:
                    fmt = "gray" if channels == 1 else "rgb24"
                    arr = frame_array(frame, fmt)
                    out[i] = arr[:, :, None] if arr.ndim == 2 else arr
                break
    finally:
        stream.close()
    missing = [i for i in steps if i not in out]
    if missing:
        raise ValueError(f"{ref.path}: no source frame for steps {missing}")
    return [out[i] for i in steps]
