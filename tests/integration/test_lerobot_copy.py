"""Copied video (issue #28 item 1): LeRobot v2.1 / v3.0 -> LeRobot v3.0 copies the source's packets when the stream
fits, in the project venv (the lerobot 0.6.1 loads are in tests/integration/test_lerobot_copy_compat.py):

1. ../shared/samples/lerobot_v21_h264_1cam and lerobot_v30_av1_2cam: every packet of the output equals the source's
   packet (bytes, keyframe flags), in order; every frame decodes bit-identical to the source's; the ledger and the
   validation report say "copied"; info.json names the copied codec;
2. a generated v3.0 whose episodes (after the first) do not start on a keyframe: the unit's camera is re-encoded
   whole (the copied first episode too), the reason is in the ledger and the report, frames >= 30 dB;
3. `target.options.reencode=true` re-encodes a stream that fits (AV1 output, not the source's packets);
4. damaged sources (a truncated MP4, a missing MP4, an MP4 with a frame too few) are quarantined by name with the
   decoding path's codes, the other episodes are still copied;
5. a generated v2.1 with H.264, AV1 and HEVC cameras: the copied frames bit-identical, the camera statistics present;
6. a copied camera is never decoded by the convert stage (its decoding thread never starts);
7. ORTF (robo-ray's, H.264) -> LeRobot copies the ORTF packets too;
8. LeRobot -> ORTF copies H.264 packets into ORTF's per-episode MP4s and encodes AV1 (ORTF holds H.264);
9. `--actors 2` (Ray) writes the in-process bytes with copied video;
10. an episode whose packets pass video_copy.MEMORY_BYTES goes through its scratch MP4 (LeRobot and ORTF targets):
   the same packets, no scratch file left.
"""
from __future__ import annotations

import io
import json
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest

from robo_ray.config import load_config
from robo_ray.stages.pipeline import run_pipeline
from tests.conftest import psnr, run_cli
from tests.fixtures.lerobot_gen import CameraSpec, DatasetSpec, write_lerobot_dataset

pytestmark = pytest.mark.timeout(600)

FAST = ["validate.tfds_readback=false"]
TOP, WRIST, FRONT = "observation.images.top", "observation.images.wrist", "observation.images.front"


def run(src: Path, dst: Path, *sets: str) -> tuple[int, str]:
    cfg = load_config(None, [*FAST, *sets], **{"source.url": str(src), "target.url": str(dst),
                                               "target.format": "lerobot"})
    err = io.StringIO()
    outcome = run_pipeline(cfg, stderr=err)
    return outcome.exit_code, err.getvalue()


def packets(paths: list[Path]) -> list[tuple[bytes, bool]]:
    out = []
    for p in paths:
        with av.open(str(p)) as c:
            out += [(bytes(k), bool(k.is_keyframe)) for k in c.demux(c.streams.video[0]) if k.dts is not None]
    return out


def frames(paths: list[Path]) -> list[np.ndarray]:
    out = []
    for p in paths:
        with av.open(str(p)) as c:
            out += [f.to_ndarray(format="rgb24") for f in c.decode(c.streams.video[0])]
    return out


def src_videos(src: Path, key: str) -> list[Path]:
    return sorted(p for p in (src / "videos").rglob("*.mp4") if key in p.parts)


def out_videos(out: Path, key: str) -> list[Path]:
    return sorted((out / "videos" / key).rglob("*.mp4"))


def video_summaries(out: Path) -> list[dict]:
    ledger = json.loads((out / "ledger.json").read_text())
    return [s["extra"]["videos"] for s in sorted(ledger["shards"], key=lambda s: s["shard_index"]) if s["filename"]]


def report_line(out: Path, check: str) -> str:
    return next(line for line in (out / "validation_report.md").read_text().splitlines()
                if line.startswith(f"| {check} |"))


@pytest.mark.parametrize("sample,cams", [("lerobot_v21_h264_1cam", ["observation.images.top"]),
                                         ("lerobot_v30_av1_2cam", ["observation.images.top",
                                                                   "observation.images.side"])])
def test_shared_samples_copied_packet_for_packet(shared, tmp_path, sample, cams):
    src, out = shared / "samples" / sample, tmp_path / "out"
    code, err = run(src, out)
    assert code == 0, err
    info = json.loads((out / "meta/info.json").read_text())
    for key in cams:
        s, o = src_videos(src, key), out_videos(out, key)
        src_packets = packets(s)
        assert packets(o) == src_packets and len(src_packets) == info["total_frames"]
        got, want = frames(o), frames(s)
        assert len(got) == len(want) and all(np.array_equal(a, b) for a, b in zip(got, want))
        with av.open(str(s[0])) as c:
            codec = {"libdav1d": "av1"}.get(c.streams.video[0].codec_context.name, c.streams.video[0].codec_context.name)
        assert info["features"][key]["info"]["video.codec"] == codec
        for unit in video_summaries(out):
            assert unit[key]["mode"] == "copy" and unit[key]["reencoded"] == 0 and unit[key]["copied"] >= 1
        assert sum(u[key]["copied"] for u in video_summaries(out)) == info["total_episodes"]
    line = report_line(out, "video copy")
    assert "✅" in line and f"{info['total_episodes']} episodes copied" in line and "0 re-encoded" in line
    assert "PSNR mean 99.0 dB, min 99.0 dB" in report_line(out, "sample images")  # identical: mse 0


def _reencode_long_gop(path: Path, fps: int) -> None:
    """Rewrite a v3.0 MP4 as one H.264 stream with a keyframe at frame 0 only (same frames, same k/fps times)."""
    with av.open(str(path)) as c:
        rgb = [f.to_ndarray(format="rgb24") for f in c.decode(c.streams.video[0])]
    tmp = path.with_suffix(".tmp.mp4")
    with av.open(str(tmp), "w", format="mp4") as out:
        st = out.add_stream("libx264", rate=fps, options={"g": "1000", "bf": "0", "crf": "12", "sc_threshold": "0"})
        st.width, st.height, st.pix_fmt = rgb[0].shape[1], rgb[0].shape[0], "yuv420p"
        st.codec_context.time_base = Fraction(1, fps)
        for k, a in enumerate(rgb):
            f = av.VideoFrame.from_ndarray(a, format="rgb24")
            f.pts, f.time_base = k, Fraction(1, fps)
            for p in st.encode(f):
                out.mux(p)
        for p in st.encode():
            out.mux(p)
    tmp.replace(path)


def test_non_keyframe_start_reencodes_the_units_camera(tmp_path):
    spec = DatasetSpec(version="v3.0", episode_lengths=[9, 8, 7], fps=10, cameras=[CameraSpec(TOP, "h264")])
    src = write_lerobot_dataset(tmp_path / "src", spec)
    (mp4,) = src_videos(src, TOP)
    _reencode_long_gop(mp4, spec.fps)
    code, err = run(src, tmp_path / "out", "plan.min_shards=1")  # one unit: episode 0 copied, then re-encoded
    assert code == 0, err
    out = tmp_path / "out"
    (unit,) = video_summaries(out)
    assert unit[TOP]["mode"] == "encode" and unit[TOP]["copied"] == 0 and unit[TOP]["reencoded"] == 3
    assert "episode 1 does not start on a keyframe" in unit[TOP]["reason"]
    assert "does not start on a keyframe" in report_line(out, "video copy")
    o = out_videos(out, TOP)
    assert packets(o) != packets([mp4])
    with av.open(str(o[0])) as c:  # our encoder (libsvtav1 by default), keyframes where lerobot seeks
        assert c.streams.video[0].codec_context.name in ("libdav1d", "av1")
    got, want = frames(o), frames([mp4])
    assert len(got) == 24 and min(psnr(a, b) for a, b in zip(got, want)) >= 30.0
    assert "✅" in report_line(out, "sample images")


def test_reencode_option_forces_encoding(shared, tmp_path):
    src, out = shared / "samples/lerobot_v21_h264_1cam", tmp_path / "out"
    code, err = run(src, out, "target.options.reencode=true")
    assert code == 0, err
    assert all(u[TOP]["mode"] == "encode" and u[TOP]["reason"] == "target.options.reencode=true"
               for u in video_summaries(out))
    assert not set(packets(out_videos(out, TOP))) & set(packets(src_videos(src, TOP)))
    info = json.loads((out / "meta/info.json").read_text())
    assert info["features"][TOP]["info"]["video.codec"] == "av1"
    assert "0 episodes copied" in report_line(out, "video copy")


def _drop_last_frame(path: Path) -> None:
    """Remux an MP4 without its last packet (one frame too few, every packet intact)."""
    tmp = path.with_suffix(".tmp.mp4")
    with av.open(str(path)) as c, av.open(str(tmp), "w", format="mp4") as out:
        s = c.streams.video[0]
        o = out.add_stream_from_template(s, opaque=True)
        pk = [p for p in c.demux(s) if p.dts is not None]
        for p in pk[:-1]:
            p.stream = o
            out.mux(p)
    tmp.replace(path)


def test_damaged_sources_quarantined_by_name(tmp_path):
    spec = DatasetSpec(version="v2.1", episode_lengths=[10, 11, 12, 13, 9], fps=10,
                       cameras=[CameraSpec(TOP, "h264")])
    src = write_lerobot_dataset(tmp_path / "src", spec)
    vids = src_videos(src, TOP)
    raw = vids[1].read_bytes()
    vids[1].write_bytes(raw[: len(raw) // 2])  # truncated mid-file
    vids[2].unlink()  # missing
    _drop_last_frame(vids[3])  # one frame too few
    code, err = run(src, tmp_path / "out")
    assert code == 3, err  # quarantine -> exit 3
    lines = {int(line.split("episode=")[1].split()[0]): line for line in err.splitlines()
             if line.startswith("quarantined[")}
    assert sorted(lines) == [1, 2, 3], err
    assert lines[1].startswith("quarantined[EP10") and "episode_000001.mp4" in lines[1]
    assert lines[2].startswith("quarantined[EP101]") and "episode_000002.mp4" in lines[2]
    assert lines[3].startswith("quarantined[EP103]") and "episode_000003.mp4" in lines[3]
    out = tmp_path / "out"
    assert sum(u[TOP]["copied"] for u in video_summaries(out)) == 2
    assert packets(out_videos(out, TOP)) == packets([vids[0], vids[4]])


def test_generated_three_codecs_copied_with_stats(tmp_path):
    spec = DatasetSpec(version="v2.1", episode_lengths=[14, 9], fps=15,
                       cameras=[CameraSpec(TOP, "h264"), CameraSpec(WRIST, "av1"), CameraSpec(FRONT, "hevc")])
    src = write_lerobot_dataset(tmp_path / "src", spec)
    out = tmp_path / "out"
    code, err = run(src, out)
    assert code == 0, err
    info = json.loads((out / "meta/info.json").read_text())
    stats = json.loads((out / "meta/stats.json").read_text())
    for key, codec in ((TOP, "h264"), (WRIST, "av1"), (FRONT, "hevc")):
        assert info["features"][key]["info"]["video.codec"] == codec
        got, want = frames(out_videos(out, key)), frames(src_videos(src, key))
        assert len(got) == 23 and all(np.array_equal(a, b) for a, b in zip(got, want))
        mean = np.asarray(stats[key]["mean"]).reshape(3)
        want_mean = np.stack(want).reshape(-1, 3).mean(axis=0) / 255.0
        assert np.allclose(mean, want_mean, atol=0.05), (key, mean, want_mean)  # from the decoded keyframes


def test_copied_cameras_are_never_decoded_by_the_convert_stage(shared, tmp_path, monkeypatch):
    """With a decoding thread per camera forced on, a copied camera's frames are never decoded (the thread starts
    at the writer's first `next`, which never comes); with reencode=true every episode's cameras are decoded."""
    import robo_ray.stages.convert as convert_mod

    started: list[int] = []
    real = convert_mod.UnitConverter._decode_video

    def watched(self, ep, fm, ref):
        started.append(ep.episode_index)
        yield from real(self, ep, fm, ref)

    monkeypatch.setattr(convert_mod.UnitConverter, "_decode_video", watched)
    src = shared / "samples/lerobot_v30_av1_2cam"
    code, err = run(src, tmp_path / "copy", "convert.decode_thread=true")
    assert code == 0, err
    assert not started
    code, err = run(src, tmp_path / "encode", "convert.decode_thread=true", "target.options.reencode=true")
    assert code == 0, err
    assert sorted(started) == [0, 0, 1, 1, 2, 2, 3, 3]


def test_ortf_source_copied(shared, tmp_path):
    """ORTF (written by robo-ray: one H.264 MP4 per episode and camera) -> LeRobot: the ORTF packets are copied."""
    ortf = tmp_path / "ortf"
    cfg = load_config(None, FAST, **{"source.url": str(shared / "samples/lerobot_v21_h264_1cam"),
                                     "target.url": str(ortf), "target.format": "ortf"})
    assert run_pipeline(cfg, stderr=io.StringIO()).exit_code == 0
    out = tmp_path / "out"
    code, err = run(ortf, out)
    assert code == 0, err
    src = sorted((ortf / "videos").rglob("*.mp4"))
    assert len(src) == 3 and packets(out_videos(out, "observation.images.top")) == packets(src)
    assert "3 episodes copied" in report_line(out, "video copy")


def test_lerobot_to_ortf_copies_h264_and_encodes_av1(shared, tmp_path):
    """LeRobot -> ORTF: the H.264 sample's packets are copied into ORTF's per-episode MP4s (frames bit-identical,
    checked by validation), the AV1 sample is encoded (ORTF holds H.264), the reason in the report."""
    def to_ortf(sample: str, out: Path) -> str:
        cfg = load_config(None, FAST, **{"source.url": str(shared / "samples" / sample), "target.url": str(out),
                                         "target.format": "ortf"})
        err = io.StringIO()
        assert run_pipeline(cfg, stderr=err).exit_code == 0, err.getvalue()
        return report_line(out, "video copy")

    line = to_ortf("lerobot_v21_h264_1cam", tmp_path / "h264")
    assert "top: 3 episodes copied" in line and "0 encoded" in line
    src = src_videos(shared / "samples/lerobot_v21_h264_1cam", TOP)
    assert packets(sorted((tmp_path / "h264" / "videos").rglob("*.mp4"))) == packets(src)
    assert "PSNR mean 99.0 dB, min 99.0 dB" in report_line(tmp_path / "h264", "sample images")
    line = to_ortf("lerobot_v30_av1_2cam", tmp_path / "av1")
    assert "top: 0 episodes copied" in line and "4 encoded (codec libdav1d (copied: h264) (4))" in line


def test_long_episode_packets_spill_to_the_scratch_mp4(shared, tmp_path, monkeypatch):
    """Past MEMORY_BYTES (here 3 kB: a few packets in memory, then the scratch MP4) the copy is the same packets."""
    import robo_ray.formats.lerobot.video_copy as vc

    monkeypatch.setattr(vc, "MEMORY_BYTES", 3000)
    spilled: list[bool] = []
    real_end = vc.CopiedVideo.end

    def end(self):
        spilled.append(self.spilled)
        real_end(self)

    monkeypatch.setattr(vc.CopiedVideo, "end", end)
    src = shared / "samples/lerobot_v21_h264_1cam"
    code, err = run(src, tmp_path / "lerobot")
    assert code == 0, err
    cfg = load_config(None, FAST, **{"source.url": str(src), "target.url": str(tmp_path / "ortf"),
                                     "target.format": "ortf"})
    assert run_pipeline(cfg, stderr=io.StringIO()).exit_code == 0
    assert spilled and all(spilled), spilled  # every episode (> 3 kB) went through its scratch MP4
    want = packets(src_videos(src, TOP))
    assert packets(out_videos(tmp_path / "lerobot", TOP)) == want
    assert packets(sorted((tmp_path / "ortf" / "videos").rglob("*.mp4"))) == want
    assert "PSNR mean 99.0 dB, min 99.0 dB" in report_line(tmp_path / "lerobot", "sample images")
    assert not [p for p in tmp_path.rglob("*") if ".tmp-" in p.name], "a scratch MP4 was left behind"


@pytest.mark.slow
def test_two_actors_copy_the_in_process_bytes(tmp_path):
    """`--actors 2` (Ray) writes the bytes the in-process run writes, with copied video (slow: starts Ray)."""
    spec = DatasetSpec(version="v2.1", episode_lengths=[9, 8, 7, 6], fps=10, cameras=[CameraSpec(TOP, "h264")])
    src = write_lerobot_dataset(tmp_path / "src", spec)
    code, err = run(src, tmp_path / "inproc", "plan.min_shards=2")
    assert code == 0, err
    r = run_cli("run", str(src), str(tmp_path / "ray"), "--to", "lerobot", "--actors", "2", "--set",
                "plan.min_shards=2", "--set", "validate.tfds_readback=false", env={"RAY_AUTH_MODE": "disabled"},
                timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    files = [p.relative_to(tmp_path / "inproc") for top in ("data", "meta", "videos")
             for p in sorted((tmp_path / "inproc" / top).rglob("*")) if p.is_file()]
    assert any(str(f).endswith(".mp4") for f in files)
    for f in files:
        assert (tmp_path / "ray" / f).read_bytes() == (tmp_path / "inproc" / f).read_bytes(), f
    assert sum(u[TOP]["copied"] for u in video_summaries(tmp_path / "ray")) == 4
