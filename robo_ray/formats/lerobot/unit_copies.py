"""Per camera of one LeRobot unit: are its episodes copied from the source's encoded stream or re-encoded, and why
(`UnitCopies`). One MP4 stream per camera per unit holds either copied packets (all with the same codec
parameters) or our encoder's: the first episode that cannot be copied turns the camera of the unit to re-encoding,
and the episodes copied before it are re-encoded from the unit's MP4 (its frames are the source's, bit for bit), so
the unit's camera is re-encoded whole (`reencode_video`)."""
from __future__ import annotations

import itertools
import os
from dataclasses import dataclass, replace
from typing import Any, Callable

import av

from robo_ray.episode import Frames
from robo_ray.formats.lerobot.video_copy import CopiedVideo, NotCopyable, StreamParams, copy_episode
from robo_ray.formats.lerobot.video_encode import ImageHistogram, UnitVideo, VideoSettings, encode_episode
from robo_ray.writers.unit_files import remove_file

FORCED = "target.options.reencode=true"
NOT_ENCODED = "the source's frames are not a video the target can take as it is (images, resized or converted)"


@dataclass
class CameraState:
    """One camera of one unit."""

    mode: str = ""  # "" (no episode yet) | "copy" | "encode"
    params: StreamParams | None = None  # of the copied stream
    reason: str | None = None  # why the camera is re-encoded
    copied: int = 0  # episodes appended by copy
    reencoded: int = 0  # episodes appended by encoding
    switch: bool = False  # this episode turns a camera holding copied episodes to re-encoding
    video: CopiedVideo | None = None  # this episode's copied packets (mode "copy"), until they go into the unit

    def summary(self) -> dict[str, Any]:
        return {"mode": self.mode, "codec": self.params.codec if self.mode == "copy" and self.params else None,
                "reason": self.reason, "copied": self.copied, "reencoded": self.reencoded}


class UnitCopies:
    """The copy-or-encode decisions of one unit's cameras (see the module docstring). `decide` changes nothing:
    the sink applies a decision (`apply`) only when its episode goes into the unit, so an episode that fails
    leaves the unit as if it had never been offered."""

    def __init__(self, reencode: bool, fps: int) -> None:
        self.reencode = reencode
        self.fps = fps
        self.cams: dict[str, CameraState] = {}

    def decide(self, key: str, tmp: str, frames: Frames, length: int, hist: ImageHistogram,
               episode: int) -> CameraState:
        """Copy the camera's episode when it fits (`tmp`: its scratch MP4 if it is long); returns the camera's state
        with this episode in (`mode` "copy": its packets in `video`, which the caller appends and closes; "encode":
        the caller encodes it into `tmp`). Damage raises (quarantine)."""
        st = replace(self.cams.get(key, CameraState()), switch=False, video=None)
        if st.mode == "encode":
            return st
        if self.reencode or frames.encoded is None:
            return replace(st, mode="encode", reason=FORCED if self.reencode else NOT_ENCODED)
        try:
            video = copy_episode(tmp, frames.encoded, length, self.fps, hist, episode, expect=st.params)
        except NotCopyable as exc:
            return replace(st, mode="encode", reason=str(exc), switch=st.copied > 0)
        return replace(st, mode="copy", params=video.params, video=video)

    def apply(self, key: str, st: CameraState) -> None:
        """The episode of decision `st` went into the unit (after the switch's re-encoding, when it had one)."""
        st = replace(st, video=None)
        if st.switch:
            st = replace(st, reencoded=st.reencoded + st.copied, copied=0, params=None, switch=False)
        if st.mode == "copy":
            st = replace(st, copied=st.copied + 1)
        else:
            st = replace(st, reencoded=st.reencoded + 1)
        self.cams[key] = st

    def summary(self) -> dict[str, Any]:
        return {k: st.summary() for k, st in self.cams.items()}


def reencode_video(video: UnitVideo, lengths: list[int], new_temp: Callable[[str], str], height: int, width: int,
                   settings: VideoSettings) -> UnitVideo:
    """Re-encode a unit's camera MP4 of copied episodes (`lengths` frames each, back to back) into a new one;
    returns it (open for more episodes). The copied MP4 is closed and removed."""
    video.close()
    path = video.path
    out = UnitVideo(new_temp("-reencoded"), video.fps)
    try:
        with av.open(path, "r") as src:
            s = src.streams.video[0]
            s.codec_context.thread_count = 1
            frames = src.decode(s)
            for n in lengths:
                ep_tmp = new_temp("-episode")
                try:
                    encode_episode(ep_tmp, itertools.islice(frames, n), n, height, width, settings)
                    out.append(ep_tmp, n)
                finally:
                    remove_file(ep_tmp)
    except BaseException:
        out.close()
        remove_file(out.path)
        raise
    remove_file(path)
    return out  # at a path of its own (the MP4 muxer reopens its file by name to move the index first): the
    # unit moves it to the camera's temp when it closes it (`settle`)


def settle(video: UnitVideo, path: str) -> None:
    """Close a unit's camera MP4 and make sure it is at `path` (where the unit publishes it from)."""
    video.close()
    if video.path != path:
        os.replace(video.path, path)
        video.path = path


def _camera_units(key: str, results: list[Any]) -> list[dict[str, Any]]:
    return [v for r in results if (v := ((getattr(r, "extra", None) or {}).get("videos") or {}).get(key))]


def copied_camera_info(info: dict[str, Any], key: str, results: list[Any]) -> dict[str, Any]:
    """info.json's `info` block of a camera whose packets units copied: the copied stream's codec, and no encoder
    settings (g, crf, preset are the source's, not known); unchanged when every unit re-encoded it."""
    codecs = sorted({v["codec"] for v in _camera_units(key, results)
                     if v.get("mode") == "copy" and v.get("copied") and v.get("codec")})
    if not codecs:
        return info
    return {**info, "video.codec": codecs[0], "video.g": None, "video.crf": None, "video.preset": None}


def copy_summary(key: str, results: list[Any]) -> str:
    """One line for the report: how many episodes of the camera were copied / re-encoded, and the reasons."""
    units = _camera_units(key, results)
    copied = sum(int(v.get("copied", 0)) for v in units)
    reencoded = sum(int(v.get("reencoded", 0)) for v in units)
    reasons: dict[str, int] = {}
    for v in units:
        if v.get("reencoded") and v.get("reason"):
            reasons[v["reason"]] = reasons.get(v["reason"], 0) + 1
    why = "; ".join(f"{r} ({n} unit{'s' if n > 1 else ''})" for r, n in list(reasons.items())[:3])
    more = f"; and {len(reasons) - 3} more reasons" if len(reasons) > 3 else ""
    return (f"{key}: {copied} episodes copied (packets as the source encoded them), {reencoded} re-encoded"
            + (f" ({why}{more})" if why else ""))
