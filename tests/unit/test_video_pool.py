"""VideoPool: least recently used streams closed first, never one a thread is still decoding, and a source with
more video files than the pool holds converts with every camera decoded in its own thread (it crashed with SIGSEGV
when the pool closed the stream another camera's thread was decoding)."""
from __future__ import annotations

from pathlib import Path

import av
import numpy as np
import pytest

from robo_ray.video import VideoPool
from tests.conftest import convert_in_process
from tests.fixtures.lerobot_gen import CameraSpec, DatasetSpec, write_lerobot_dataset


def _mp4(path: Path, frames: int = 3) -> str:
    with av.open(str(path), "w", format="mp4") as out:
        stream = out.add_stream("libx264", rate=10)
        stream.width, stream.height, stream.pix_fmt = 16, 16, "yuv420p"
        for i in range(frames):
            frame = av.VideoFrame.from_ndarray(np.full((16, 16, 3), 20 * i, np.uint8), format="rgb24")
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
    return str(path)


@pytest.fixture()
def mp4s(tmp_path: Path) -> list[str]:
    return [_mp4(tmp_path / f"{c}.mp4") for c in "abcd"]


def _decode_all(pool: VideoPool, path: str) -> int:
    return sum(1 for _ in pool.get(path, None).window(0.0, None, 0.01))


def test_least_recently_used_stream_is_closed_first(mp4s: list[str]) -> None:
    a, b, c, _ = mp4s
    pool = VideoPool(max_open=2)
    assert _decode_all(pool, a) == 3 and _decode_all(pool, b) == 3
    stream_a = pool.get(a, None)  # a used again: b is now the least recent
    list(stream_a.window(0.0, None, 0.01))
    _decode_all(pool, c)
    assert a in pool and c in pool and b not in pool
    pool.close()


def test_a_stream_being_decoded_is_never_closed(mp4s: list[str]) -> None:
    a, b, c, d = mp4s
    pool = VideoPool(max_open=1)
    decoding = pool.get(a, None).window(0.0, None, 0.01)
    assert next(decoding)[0] == pytest.approx(0.0)  # a is mid-window (another camera's thread, say)
    _decode_all(pool, b)
    assert a in pool, "the pool closed a stream that was still being decoded"
    assert len(list(decoding)) == 2  # a decodes on to its end
    _decode_all(pool, c)  # a's window is over: it may go now
    assert a not in pool and len(pool) == 1
    _decode_all(pool, d)
    pool.close()
    assert len(pool) == 0


def test_more_files_than_the_pool_holds_with_a_decoding_thread_per_camera(tmp_path: Path) -> None:
    """LeRobot v3.0 with one episode per file: 2 cameras x 18 episodes = 36 MP4s, more than the pool's 16."""
    src = tmp_path / "src"
    lengths = [24] * 18
    write_lerobot_dataset(src, DatasetSpec(version="v3.0", episode_lengths=lengths, fps=10, episodes_per_file=1,
                                           cameras=[CameraSpec("observation.images.top", "h264", 64, 64),
                                                    CameraSpec("observation.images.wrist", "h264", 64, 64)]))
    out = tmp_path / "out"
    convert_in_process(src, out, "rlds", "convert.decode_thread=true", "plan.min_shards=1")
    import json

    ledger = json.loads((out / "ledger.json").read_text())
    steps = [int(s) for sh in ledger["shards"] for _, s in sh["episodes"]]
    assert steps == lengths


def test_a_video_refused_for_its_size_is_not_kept_open(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Episodes whose MP4 is not the size info.json declares are quarantined; their streams must not stay leased
    (a leased stream is never closed: one open file per bad episode until the converter closes)."""
    import json

    import robo_ray.stages.convert as convert_mod

    src = tmp_path / "src"
    write_lerobot_dataset(src, DatasetSpec(version="v2.1", episode_lengths=[6] * 5, fps=10,
                                           cameras=[CameraSpec("observation.images.top", "h264", 32, 32)]))
    bad = sorted(src.rglob("episode_00000[0-2].mp4"))
    assert len(bad) == 3
    for p in bad:
        p.unlink()
        _mp4(p, frames=6)  # 16x16, the features say 32x32
    leased_at_get: list[int] = []

    class WatchedPool(VideoPool):
        def get(self, path, open_file):  # type: ignore[override]
            leased_at_get.append(sum(1 for s in self._streams.values() if s.leased))
            return super().get(path, open_file)

    monkeypatch.setattr(convert_mod, "VideoPool", WatchedPool)
    from robo_ray.config import load_config
    from robo_ray.stages.pipeline import run_pipeline

    out = tmp_path / "out"
    outcome = run_pipeline(load_config(None, ["validate.tfds_readback=false", "plan.min_shards=1"],
                                       **{"source.url": str(src), "target.url": str(out), "target.format": "rlds"}))
    assert outcome.exit_code == 3, outcome.message  # done, with quarantined episodes
    ledger = json.loads((out / "ledger.json").read_text())
    assert sorted(int(e) for sh in ledger["shards"] for e, _ in sh["episodes"]) == [3, 4]
    quarantined = [q for sh in ledger["shards"] for q in sh["quarantined"]]
    assert sorted(int(q["episode_index"]) for q in quarantined) == [0, 1, 2]
    assert all("video is 16x16" in q["reason"] for q in quarantined), quarantined
    assert len(leased_at_get) == 5 and max(leased_at_get) == 0, leased_at_get
