"""Long episodes: camera frames spooled (memory, then an anonymous scratch file), records framed from chunks with an
incremental CRC, and parsed back as a stream. Every path must give the bytes of the plain in-memory encoder."""
from __future__ import annotations

import io
import os

import numpy as np
import pytest

from robo_ray.formats.rlds.example import (coalesced_chunks, decode_example, decode_example_stream, encode_example,
                                           example_segments, segments_size)
from robo_ray.formats.rlds.spool import BytesSpool
from robo_ray.formats.rlds.tfrecord import frame_record, framed_chunks, iter_records, read_records

RNG = np.random.default_rng(0)
FRAMES = [RNG.bytes(int(n)) for n in RNG.integers(1, 3000, size=41)]  # 41 "JPEGs" of random sizes


def _features(images: object) -> dict[str, object]:
    return {"steps/is_first": np.array([True] + [False] * 40), "steps/observation/image": images,
            "steps/action": np.arange(41 * 3, dtype=np.float32), "episode_metadata/episode_id": np.array([3])}


@pytest.mark.parametrize("max_memory", [1 << 30, 500])  # all in memory / spilled to the scratch file
def test_spool_encodes_like_a_list(tmp_path, max_memory: int) -> None:
    with BytesSpool(str(tmp_path), max_memory) as spool:
        for f in FRAMES:
            spool.append(f)
        assert spool.on_disk == (max_memory < 1 << 30)
        assert os.listdir(tmp_path) == []  # O_TMPFILE: the scratch file never has a name to leak
        assert list(spool) == FRAMES and len(spool) == len(FRAMES)
        want = encode_example(_features(FRAMES))
        segs = example_segments(_features(spool))
        assert segments_size(segs) == len(want)
        assert b"".join(coalesced_chunks(segs, block=256)) == want
        framed = b"".join(framed_chunks(segments_size(segs), coalesced_chunks(segs)))
    assert framed == frame_record(want)
    assert list(read_records(io.BytesIO(framed))) == [want]


def test_stream_decode_matches_whole_decode() -> None:
    data = encode_example(_features(FRAMES))
    whole = decode_example(data)
    rec = next(iter_records(io.BytesIO(frame_record(data))))
    streamed = decode_example_stream(rec, big=100)  # the 41 frames are streamed, the rest decoded whole
    rec.finish()
    imgs = streamed["steps/observation/image"]
    assert len(imgs) == 41 and {0, 20, 40} == set(imgs.kept)
    assert [imgs[i] for i in (0, 20, 40)] == [FRAMES[0], FRAMES[20], FRAMES[40]]
    with pytest.raises(IndexError):
        imgs[5]
    for key in ("steps/is_first", "steps/action", "episode_metadata/episode_id"):
        np.testing.assert_array_equal(streamed[key], whole[key])


def test_stream_decode_detects_corruption() -> None:
    framed = bytearray(frame_record(encode_example(_features(FRAMES))))
    framed[len(framed) // 2] ^= 0x01  # one bit inside a frame
    rec = next(iter_records(io.BytesIO(bytes(framed))))
    decode_example_stream(rec, big=100)
    with pytest.raises(ValueError, match="CRC"):
        rec.finish()
    with pytest.raises(ValueError, match="truncated"):
        list(read_records(io.BytesIO(bytes(framed[:-100]))))


def test_framed_chunks_refuses_a_short_payload() -> None:
    with pytest.raises(ValueError, match="header says"):
        list(framed_chunks(10, [b"123"]))
