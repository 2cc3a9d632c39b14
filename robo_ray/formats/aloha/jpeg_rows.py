"""ALOHA's compressed cameras: each frame is the JPEG cv2.imencode wrote, zero-padded to the episode's longest one,
one row of a (T, padded) uint8 dataset; `/compress_len` (n_cams, T) holds each JPEG's length, one row per camera
in the recorder's `camera_names` order (which HDF5 does not keep: the group lists cameras by name).

Colour order: the recorder gave OpenCV the camera's RGB array, which OpenCV encodes as if it were BGR, so the
JPEG's "red" is the camera's blue. Decoding with `colorspace="BGR"` (what cv2.imdecode returns) gives back the
array the recorder had, in RGB.
"""
from __future__ import annotations

from itertools import permutations
from typing import Any

import numpy as np

from robo_ray.errors import DataCorrupt, ImageDecodeError

# The recorders' camera_names (aloha / mobile-aloha TASK_CONFIGS): tried first when matching compress_len rows
RECORDER_ORDER = ("cam_high", "cam_low", "cam_left_wrist", "cam_right_wrist")
EOI = b"\xff\xd9"
MAX_ORDERS = 32  # camera orders tried when matching compress_len rows (4 cameras: all 24 of them)


def jpeg_shape(data: bytes, where: str) -> tuple[int, int]:
    """(height, width) from a JPEG header (nothing decoded)."""
    import simplejpeg

    try:
        h, w, _, _ = simplejpeg.decode_jpeg_header(data)
    except ValueError as exc:
        raise ImageDecodeError(f"{where}: not a JPEG ({exc})") from exc
    return int(h), int(w)


def lengths_table(compress_len: Any, cams: int, steps: int, width: int, where: str) -> np.ndarray:
    """compress_len checked before use: (cams, steps) whole numbers in 4..width (a length beyond its row would
    read past the JPEG: the episode is corrupt)."""
    if tuple(compress_len.shape) != (cams, steps):
        raise DataCorrupt(f"{where}: compress_len has shape {tuple(compress_len.shape)}, expected ({cams}, {steps}) "
                          "(one row per camera, one length per step)")
    lens = np.asarray(compress_len[()], dtype=np.float64)
    bad = ~np.isfinite(lens) | (lens != np.round(lens)) | (lens < 4) | (lens > width)
    if bad.any():
        row, step = (int(v) for v in np.argwhere(bad)[0])
        raise DataCorrupt(f"{where}: compress_len[{row}, {step}] = {lens[row, step]:g} does not fit its JPEG row "
                          f"of {width} bytes")
    return lens.astype(np.int64)


def _ends_jpeg(row: np.ndarray, n: int) -> bool:
    return row[:2].tobytes() == b"\xff\xd8" and row[n - 2:n].tobytes() == EOI and not row[n:].any()


def camera_rows(names: list[str], first: dict[str, np.ndarray], last: dict[str, np.ndarray], lens: np.ndarray,
                where: str) -> dict[str, int]:
    """Which compress_len row is each camera's: the first camera order (the recorder's, then by name, then any)
    under which every camera's first and last frame is a JPEG ending exactly at its length."""
    known = [c for c in RECORDER_ORDER if c in names] + sorted(c for c in names if c not in RECORDER_ORDER)
    tried: list[tuple[str, ...]] = [tuple(known), tuple(sorted(names))]
    for order in permutations(names):
        if len(tried) >= MAX_ORDERS:
            break
        tried.append(order)
    for order in dict.fromkeys(tried):
        if all(_ends_jpeg(first[c], int(lens[r, 0])) and _ends_jpeg(last[c], int(lens[r, -1]))
               for r, c in enumerate(order)):
            return {c: r for r, c in enumerate(order)}
    raise DataCorrupt(f"{where}: compress_len rows match no camera's JPEG rows")


def decode_rows(rows: np.ndarray, lens: np.ndarray, hw: tuple[int, int], where: str, first_step: int) -> np.ndarray:
    """JPEG rows -> (n, H, W, 3) uint8 RGB frames as the recorder had them (OpenCV's colour order undone)."""
    import simplejpeg

    h, w = hw
    out = np.empty((len(rows), h, w, 3), dtype=np.uint8)
    for k, (row, n) in enumerate(zip(rows, lens)):
        try:
            img = simplejpeg.decode_jpeg(row[:int(n)].tobytes(), colorspace="BGR")
        except ValueError as exc:
            raise ImageDecodeError(f"{where}: step {first_step + k}: JPEG undecodable ({exc})") from exc
        if img.shape != (h, w, 3):
            raise DataCorrupt(f"{where}: step {first_step + k}: frame is {img.shape[1]}x{img.shape[0]}, the camera's "
                              f"first frame is {w}x{h}")
        out[k] = img
    return out
