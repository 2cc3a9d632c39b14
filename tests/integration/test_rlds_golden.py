"""RLDS bytes do not drift: the shards, features.json and dataset_info.json written for the samples in ../shared
equal the sha256 recorded when issue #13 restructured the pipeline (the same bytes as before it), re-recorded when
single-file sources (a v3.0 file, a Minari HDF5) began to make `plan.min_shards` units (#15, eighth session: the
shards concatenated are byte-identical to the old single shard). A change here must be deliberate: re-record with the command in the docstring of `GOLDEN` and say why in the commit.

The real G1 dataset was compared the same way (before/after, 6 files) in the issue's note; it is too slow for CI."""
from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from tests.conftest import run_cli

# robo-ray run ../shared/<source> OUT --set validate.tfds_readback=false; sha256 of OUT/rlds/<name>/1.0.0/*
GOLDEN = {
    "samples/lerobot_v21_h264_1cam": {
        "dataset_info.json": "53fed6ca50bc1300", "features.json": "033021a23c258aeb",
        "lerobot_v21_h264_1cam-train.tfrecord-00000-of-00003": "579172e7573e69a8",
        "lerobot_v21_h264_1cam-train.tfrecord-00001-of-00003": "e57f3c8d34fd9d10",
        "lerobot_v21_h264_1cam-train.tfrecord-00002-of-00003": "dbbae479581be743"},
    "samples/lerobot_v30_av1_2cam": {
        "dataset_info.json": "ce59b54d2497b886", "features.json": "cb3133b590c09138",
        "lerobot_v30_av1_2cam-train.tfrecord-00000-of-00004": "e01e04e35ae67373",
        "lerobot_v30_av1_2cam-train.tfrecord-00001-of-00004": "be03f98f3870d8e8",
        "lerobot_v30_av1_2cam-train.tfrecord-00002-of-00004": "c5ecf9be79d4e214",
        "lerobot_v30_av1_2cam-train.tfrecord-00003-of-00004": "4df1796e10021646"},
    "samples/minari/pendulum/random-v0": {
        "dataset_info.json": "151965db97541e70", "features.json": "0451da5a5db72f09",
        "pendulum_random_v0-train.tfrecord-00000-of-00004": "627ac623e55e52e6",
        "pendulum_random_v0-train.tfrecord-00001-of-00004": "ac9cba30e731b493",
        "pendulum_random_v0-train.tfrecord-00002-of-00004": "ab8616131dc6a577",
        "pendulum_random_v0-train.tfrecord-00003-of-00004": "93fbc6577c10a453"},
    "samples/minari/pointmaze/umaze-random-v0": {
        "dataset_info.json": "f9c81cfc3dc5c4e6", "features.json": "6421300a71a6fabc",
        "pointmaze_umaze_random_v0-train.tfrecord-00000-of-00004": "827fc8431b08861c",
        "pointmaze_umaze_random_v0-train.tfrecord-00001-of-00004": "fef8a9219028df70",
        "pointmaze_umaze_random_v0-train.tfrecord-00002-of-00004": "27e051b6bea4e2ef",
        "pointmaze_umaze_random_v0-train.tfrecord-00003-of-00004": "cfecbca5f8e963b8"},
}


@pytest.mark.parametrize("source", sorted(GOLDEN))
def test_rlds_bytes_equal_the_recorded_ones(source: str, shared: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = run_cli("run", str(shared / source), str(out), "--set", "validate.tfds_readback=false")
    assert proc.returncode == 0, proc.stderr[-2000:]
    (version_dir,) = list((out / "rlds").glob("*/1.0.0"))
    got = {p.name: hashlib.sha256(p.read_bytes()).hexdigest()[:16] for p in sorted(version_dir.iterdir())}
    assert got == GOLDEN[source], f"{source}: RLDS bytes changed: {got}"
