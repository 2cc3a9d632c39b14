"""One frame-rate rule for every reader (issue #27 part 7): the rate the source records where it holds one (LeRobot
info.json, ORTF manifest, RLDS metadata.json, robomimic env_args control_freq), else `--fps`, else what the
recorder is known to run at (ALOHA / ACT: 50 fps; ROS bags: the reference topic's median rate), else none (warning
F101). Checked for every reader x every target that stores a rate (LeRobot v3.0: info.json fps; ORTF: the
manifest), by reading each output back. Zarr replay buffers hold no rate: UMI's layout steps at its GoPro's 59.94
fps, any other buffer needs --fps."""
from __future__ import annotations

import warnings
from pathlib import Path
from typing import Callable

import pytest

from robo_ray.config import load_config
from robo_ray.readers import open_reader
from robo_ray.stages.pipeline import run_pipeline
from tests.fixtures import aloha_gen, minari_gen, robomimic_gen, rosbag_gen, zarr_gen
from tests.fixtures.lerobot_gen import CameraSpec, DatasetSpec, write_lerobot_dataset

GIVEN = 7.0


def _minari(tmp: Path) -> Path:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return tmp.joinpath(*minari_gen.make_dataset(tmp, "box", "hdf5", episodes=2).split("/"))


def _lerobot(tmp: Path) -> Path:
    return write_lerobot_dataset(tmp / "lr", DatasetSpec(version="v3.0", episode_lengths=[5, 4], fps=25,
                                                         cameras=[CameraSpec("observation.images.top")]))


def _ortf(tmp: Path) -> Path:
    from robo_ray.formats.ortf.api import write_ortf

    write_ortf(str(_lerobot(tmp)), str(tmp / "ortf"))
    return tmp / "ortf"


def _rlds(tmp: Path) -> Path:
    """An RLDS dataset without metadata.json (robo-ray's own writer records no rate)."""
    src = robomimic_gen.write_isaaclab(tmp / "isaac" / "ds.hdf5")
    return Path(_convert(src, tmp / "rlds_out", "rlds", None).dataset_dir)


# source -> (maker, the rate it records or None, the rate used without --fps)
SOURCES: dict[str, tuple[Callable[[Path], Path], float | None, float]] = {
    "lerobot": (_lerobot, 25.0, 25.0),
    "ortf": (_ortf, 25.0, 25.0),
    "minari": (_minari, None, 0.0),
    "rlds": (_rlds, None, 0.0),
    "robomimic": (lambda tmp: robomimic_gen.write_robomimic(tmp / "rm" / "image.hdf5", (5, 4), (32, 32)), 20.0, 20.0),
    "robomimic-isaaclab": (lambda tmp: robomimic_gen.write_isaaclab(tmp / "isaac" / "ds.hdf5"), None, 0.0),
    "aloha": (lambda tmp: aloha_gen.write_dataset(tmp / "aloha", (5, 4), hw=(32, 48)), None, 50.0),
    "zarr-umi": (lambda tmp: zarr_gen.write_umi(tmp / "umi" / "replay_buffer.zarr.zip", (5, 4)), None, 59.94),
    "zarr-dp": (lambda tmp: zarr_gen.write_dp_zip(tmp / "dp" / "task.hdf5.zarr.zip", (5, 4)), None, 0.0),
    # bags record no rate: the reference topic's (the first camera's) median rate, or --fps (then its clock)
    "rosbag": (lambda tmp: rosbag_gen.write_dataset(tmp / "bags", "mcap", episodes=2), None, 10.0),
}


def _convert(src: Path, out: Path, target: str, fps: float | None) -> object:
    fields: dict[str, object] = {"source.url": str(src), "target.url": str(out), "target.format": target}
    if fps is not None:
        fields["source.options"] = {"fps": fps}
    outcome = run_pipeline(load_config(None, ["validate.tfds_readback=false"], **fields))
    assert outcome.exit_code == 0, outcome.message
    return outcome


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    cache: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in cache:
            cache[name] = SOURCES[name][0](tmp_path_factory.mktemp(name))
        return cache[name]
    return get


@pytest.mark.parametrize("name", list(SOURCES))
def test_every_reader_takes_fps_and_keeps_a_recorded_rate(name: str, made: Callable[[str], Path]) -> None:
    _, held, default = SOURCES[name]
    src = made(name)
    assert open_reader(str(src)).discover().fps == default
    inv = open_reader(str(src), options={"fps": GIVEN}).discover()
    assert inv.fps == (held or GIVEN)
    codes = {f.code for f in inv.findings}
    assert ("F102" in codes) == (held is not None and held != GIVEN), inv.findings  # the ignored --fps is said
    assert "F101" not in codes


@pytest.mark.parametrize("target", ["lerobot", "ortf"])
@pytest.mark.parametrize("name", list(SOURCES))
def test_the_output_rate_follows_the_rule(name: str, target: str, made: Callable[[str], Path],
                                         tmp_path: Path) -> None:
    _, held, _ = SOURCES[name]
    outcome = _convert(made(name), tmp_path / "out", target, GIVEN)
    back = open_reader(outcome.dataset_dir if target == "ortf" else str(tmp_path / "out"))  # type: ignore[attr-defined]
    assert back.discover().fps == (held or GIVEN)
