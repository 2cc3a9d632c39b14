"""Copying a source camera's encoded video into a LeRobot v3.0 unit (no decode, no encode), when it fits.

A camera fits when the source's stream is one lerobot 0.6.1 decodes and seeks as it decodes ours: codec h264, hevc
or AV1, `yuv420p`, the size of the camera's feature, a time base in which one frame is a whole number of ticks,
every frame of the episode at exactly `k / fps` after the first (constant frame rate, the target's fps), and the
episode's first packet a keyframe that is also its first frame shown (lerobot seeks to the keyframe before
`from_timestamp`; a copied episode must not need frames of the previous one). A stream that does not fit is
`NotCopyable` (the camera is re-encoded, the reason goes into the unit's result); a damaged one raises the same
episode errors the decoding path raises (missing file EP101, undecodable EP102, frame count EP103, timestamps
EP104), so it is quarantined by name exactly as before.

`copy_episode` demuxes every packet of the episode's range, checks counts and timestamps against the episode's
steps and keeps the packets (timestamps rebased to start at 0, bytes untouched) in memory (`CopiedVideo`; past
MEMORY_BYTES, a long recording, in a scratch MP4), then decodes what validation samples (the groups of pictures
holding the first / middle / last frame) and a few keyframes for the camera statistics. The unit's MP4 gets the
packets by stream copy (`UnitVideo.append_packets`), like an encoded episode's; no scratch file is written, re-read
and re-demuxed per episode (that was a third of a copy's CPU time).
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Iterator

import av
import numpy as np

from robo_ray.activity import ACTIVITY
from robo_ray.episode import EncodedVideo
from robo_ray.errors import FrameCountMismatch, TimestampMismatch, VideoDecodeError
from robo_ray.formats.lerobot.video_encode import PIX_FMT, ImageHistogram, stats_sample_indices
from robo_ray.images import frame_array
from robo_ray.lfs_pointer import head_of_source, lfs_pointer_note
from robo_ray.stages.sampling import sample_indices

# decoder name -> the codec name info.json's video.codec and a reader report
COPY_CODECS = {"h264": "h264", "hevc": "hevc", "av1": "av1", "libdav1d": "av1", "libaom-av1": "av1"}
STATS_KEYFRAMES = 6  # keyframes of a copied episode decoded alone for the camera statistics (besides validation's)
LOOK_PAST_S = 1.0  # how far past the range's end packets are still read (frames reordered around the boundary)
MEMORY_BYTES = 64 << 20  # a copied episode's packets kept in memory up to this; the rest go to its scratch MP4


class NotCopyable(Exception):
    """The source's stream is intact but does not fit the target as it is: re-encode (the message says why)."""


@dataclass(frozen=True)
class StreamParams:
    """What must be equal for episodes to share one MP4 stream by stream copy."""

    codec: str
    width: int
    height: int
    extradata: bytes

    def differs(self, other: "StreamParams") -> str | None:
        if self == other:
            return None
        what = [n for n in ("codec", "width", "height", "extradata") if getattr(self, n) != getattr(other, n)]
        return f"its {', '.join(what)} differ from the unit's earlier copied episodes"


def _open(enc: EncodedVideo) -> tuple[Any, Any]:
    src = enc.open()
    try:
        return src, av.open(src, "r")
    except (av.error.FFmpegError, OSError, ValueError) as exc:
        note = lfs_pointer_note(head_of_source(src))
        if hasattr(src, "close"):
            src.close()
        raise VideoDecodeError(f"cannot open video {enc.path}: {exc}{note}") from exc


def _check_stream(enc: EncodedVideo, c: Any, fps: Fraction | int, where: str,
                  codecs: dict[str, str]) -> tuple[Any, int, str]:
    """The video stream, frame length in ticks and codec name; damage raises, a misfit is NotCopyable."""
    if not c.streams.video:
        raise VideoDecodeError(f"no video stream in {enc.path} ({where})")
    s = c.streams.video[0]
    cc = s.codec_context
    if cc is None:
        raise VideoDecodeError(f"cannot decode video {enc.path}: no decoder for its codec ({where})")
    if (cc.width, cc.height) != (enc.width, enc.height):
        raise VideoDecodeError(f"{enc.path}: video is {cc.width}x{cc.height}, the source declares "
                               f"{enc.width}x{enc.height} ({where})")
    codec = codecs.get(cc.name)
    if codec is None:
        raise NotCopyable(f"codec {cc.name} (copied: {', '.join(sorted(set(codecs.values())))})")
    if cc.pix_fmt != PIX_FMT:
        raise NotCopyable(f"pixel format {cc.pix_fmt} (copied: {PIX_FMT})")
    ticks = Fraction(1, fps) / s.time_base
    if ticks.denominator != 1:
        raise NotCopyable(f"time base {s.time_base} does not hold 1/{fps} s in whole ticks")
    return s, int(ticks), codec


class CopiedVideo:
    """One camera's copied episode until it goes into the target: its packets in decode order (timestamps rebased
    to start at 0, bytes untouched) in memory, or in the scratch MP4 at `path` once they pass MEMORY_BYTES (a long
    recording: memory stays bounded). The source's container stays open until `close`: its stream is the template
    of the target's stream, its decoder checks the copy."""

    def __init__(self, path: str, src: Any, container: Any, stream: Any) -> None:
        self.path, self.stream = path, stream
        self.params: StreamParams | None = None
        self._src, self._c = src, container
        self._packets: list[Any] = []
        self._bytes = 0
        self._spill: Any = None  # the scratch MP4's output container while the range is read past MEMORY_BYTES
        self._spill_stream: Any = None
        self.spilled = False

    def add(self, p: Any) -> None:
        self._bytes += p.size
        if not self.spilled and self._bytes <= MEMORY_BYTES:
            self._packets.append(p)
            return
        if not self.spilled:
            self.spilled = True
            self._spill = av.open(self.path, "w", format="mp4")
            self._spill_stream = self._spill.add_stream_from_template(self.stream, opaque=True)
            for q in self._packets:
                self._mux_spill(q)
            self._packets = []
        self._mux_spill(p)

    def _mux_spill(self, p: Any) -> None:
        p.stream = self._spill_stream
        self._spill.mux(p)

    def end(self) -> None:
        """The range is read: the scratch MP4 (if any) is complete."""
        if self._spill is not None:
            self._spill.close()
            self._spill = None

    def read(self) -> Iterator[Any]:
        """The packets in decode order, from memory or read back from the scratch MP4. Muxing a packet consumes
        it: the last reader is the one that muxes them (`UnitVideo.append_packets`, `save`)."""
        if not self.spilled:
            yield from self._packets
            return
        with av.open(self.path, "r") as c:
            yield from (p for p in c.demux(c.streams.video[0]) if p.dts is not None)

    def save(self) -> None:
        """Make the MP4 at `path` hold the episode (a per-episode target file)."""
        if self.spilled:
            return
        with av.open(self.path, "w", format="mp4") as out:
            ostream = out.add_stream_from_template(self.stream, opaque=True)
            for p in self._packets:
                p.stream = ostream
                out.mux(p)
        self._packets = []

    def close(self) -> None:
        """Release the packets and the source (the scratch MP4 is the caller's to remove, as any temp)."""
        self._packets = []
        if self._spill is not None:
            try:
                self._spill.close()
            except (av.error.FFmpegError, OSError, ValueError):
                pass
            self._spill = None
        self._c.close()
        if hasattr(self._src, "close"):
            self._src.close()


def copy_episode(tmp: str, enc: EncodedVideo, length: int, fps: Fraction | int, hist: ImageHistogram | None,
                 episode: int, codecs: dict[str, str] = COPY_CODECS, expect: StreamParams | None = None
                 ) -> CopiedVideo:
    """Copy one camera's packets of one episode (see the module docstring; `tmp`: the scratch MP4 of a long one);
    returns them, open (the caller closes it). The camera statistics go into `hist` (None: only validation's
    samples are decoded); `codecs` are the decoders whose streams the target takes; `expect`: the parameters of
    the stream the packets join (others: NotCopyable, checked before anything is read or decoded). Raises
    NotCopyable (re-encode) or an EpisodeError (quarantine)."""
    where = f"episode {episode}"
    src, c = _open(enc)
    cv = CopiedVideo(tmp, src, c, None)
    try:
        s, ticks, codec = _check_stream(enc, c, fps, where, codecs)
        cv.stream = s
        cv.params = StreamParams(codec, s.codec_context.width, s.codec_context.height,
                                 bytes(s.codec_context.extradata or b""))
        differs = expect.differs(cv.params) if expect is not None else None
        if differs:
            raise NotCopyable(f"{where}: {differs}")
        rel, base = _copy_range(cv, enc, c, s, length, where)
        _check_times(enc, rel, base, length, ticks, s.time_base, where)
        _decode_check(cv, enc, rel, length, ticks, hist, where)
    except BaseException:
        cv.close()
        raise
    return cv


def _copy_range(cv: CopiedVideo, enc: EncodedVideo, c: Any, s: Any, length: int,
                where: str) -> tuple[list[tuple[int, bool]], int]:
    """Demux the episode's range into `cv`; returns (pts relative to the first packet, keyframe) in decode order
    and the first packet's pts."""
    tb = s.time_base
    num, den = tb.numerator, tb.denominator  # t = pts * num / den: exact integers, one rounding (no Fraction)
    lo = enc.from_timestamp - enc.tolerance_s
    hi = None if enc.to_timestamp is None else enc.to_timestamp - enc.tolerance_s
    try:
        if enc.from_timestamp > 0:
            c.seek(int(enc.from_timestamp / tb), stream=s, backward=True, any_frame=False)
        out_rel: list[tuple[int, bool]] = []
        base: int | None = None
        for p in c.demux(s):
            if p.dts is None:
                continue
            if p.pts is None:
                raise VideoDecodeError(f"{enc.path}: a packet without a timestamp ({where})")
            t = p.pts * num / den
            if hi is not None and t >= hi:
                if base is not None and (p.is_keyframe or t >= hi + LOOK_PAST_S):
                    break
                continue
            if t < lo:
                continue
            if base is None:
                if not p.is_keyframe:
                    raise NotCopyable(f"{where} does not start on a keyframe (t={t:.4f}s)")
                base = p.pts
            if len(out_rel) > length:
                break  # more frames than steps: counted below, no need to read on
            out_rel.append((p.pts - base, bool(p.is_keyframe)))
            p.pts -= base
            p.dts -= base
            cv.add(p)
            ACTIVITY.beat()
        cv.end()
    except (av.error.FFmpegError, OSError, ValueError) as exc:
        raise VideoDecodeError(f"{enc.path}: reading the packets of {where} failed: {exc}") from exc
    if out_rel and min(r for r, _ in out_rel) != 0:
        raise NotCopyable(f"{where}: a frame shown before its first keyframe (open group of pictures)")
    return out_rel, base or 0


def _check_times(enc: EncodedVideo, rel: list[tuple[int, bool]], base: int, length: int, ticks: int, tb: Fraction,
                 where: str) -> None:
    """As many frames as steps, each at its step's time in the file (damage otherwise, as when decoding), at exactly
    k/fps (else NotCopyable)."""
    if len(rel) != length:
        raise FrameCountMismatch(f"{enc.path}: {where} has {len(rel)} frames in its range "
                                 f"[{enc.from_timestamp:.4f}, {enc.to_timestamp}), the episode has {length} steps")
    pts = sorted(r for r, _ in rel)
    num, den = tb.numerator, tb.denominator
    stamps = enc.timestamps.tolist()
    for k, p in enumerate(pts):
        q = enc.from_timestamp + stamps[k]
        t = (base + p) * num / den
        if abs(t - q) > enc.tolerance_s + 4e-7 * abs(q):
            raise TimestampMismatch(f"{enc.path}: {where} step {k} wants t={q:.4f}s, the frame is at {t:.4f}s "
                                    f"(tolerance {enc.tolerance_s}s)")
    if pts != [k * ticks for k in range(length)]:
        raise NotCopyable(f"{where}: frames not at exactly k/fps (variable frame rate)")


def _wanted(rel: list[tuple[int, bool]], length: int, ticks: int, stats_too: bool) -> tuple[set[int], set[int]]:
    """(validation's samples: first / middle / last frame, up to STATS_KEYFRAMES keyframes spread like lerobot's
    statistics sample when `stats_too`): the frames decoded; the camera statistics are taken from both."""
    keys = sorted(r // ticks for r, key in rel if key)
    stats: set[int] = set()
    if not stats_too:
        return set(sample_indices(length)), stats
    picks = stats_sample_indices(length)
    step = max(1, len(picks) // STATS_KEYFRAMES)
    for i in picks[::step][:STATS_KEYFRAMES]:
        j = bisect.bisect_right(keys, i) - 1
        stats.add(keys[max(j, 0)])
    return set(sample_indices(length)), stats


def _decode_check(cv: CopiedVideo, enc: EncodedVideo, rel: list[tuple[int, bool]], length: int, ticks: int,
                  hist: ImageHistogram | None, where: str) -> None:
    """Decode the copied packets holding the wanted frames (with the source stream's decoder): the whole group of
    pictures of each validation sample, the keyframe alone of each statistics sample; statistics from all of
    them."""
    checks, stats = _wanted(rel, length, ticks, hist is not None)
    want = checks | stats
    gop_of: list[int] = []  # decode-order packet -> group of pictures (starts at a keyframe)
    frames_in: dict[int, set[int]] = {}
    for r, key in rel:
        g = len(frames_in) if key or not gop_of else gop_of[-1]
        gop_of.append(g)
        frames_in.setdefault(g, set()).add(r // ticks)
    whole = {g for g, fr in frames_in.items() if fr & checks}
    feed = [k for k, (r, key) in enumerate(rel) if gop_of[k] in whole or (key and r // ticks in stats)]
    got: dict[int, np.ndarray] = {}
    cc = cv.stream.codec_context
    try:
        cc.thread_count = 1
        todo = iter(feed)
        nxt = next(todo, None)
        for k, p in enumerate(cv.read()):
            if nxt is None:
                break
            if k != nxt:
                continue
            nxt = next(todo, None)
            for f in cc.decode(p):
                _take(f, ticks, want, got)
        for f in cc.decode(None):
            _take(f, ticks, want, got)
    except (av.error.FFmpegError, OSError, ValueError, EOFError) as exc:
        raise VideoDecodeError(f"decode failed in {enc.path} ({where}): {exc}") from exc
    missing = sorted(want - set(got))
    if missing:
        raise VideoDecodeError(f"{enc.path}: {where} frames {missing[:5]} did not decode")
    for i in sorted(want) if hist is not None else ():
        hist.add(got[i])


def _take(f: Any, ticks: int, want: set[int], got: dict[int, np.ndarray]) -> None:
    """Keep a decoded copied frame (frame k at pts k x ticks, rebased) when it is wanted."""
    ACTIVITY.beat()
    if f.pts is None:
        return
    i, off = divmod(f.pts, ticks)
    if off == 0 and i in want:
        got[i] = frame_array(f, "rgb24")
