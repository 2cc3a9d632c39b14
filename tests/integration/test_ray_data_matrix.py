"""Issue #29's round trip per source x target pair: every source robo-ray reads (LeRobot v2.1 and v3.0, Minari,
ORTF, RLDS written by tfds, robomimic and ALOHA HDF5, zarr, ROS bag), each written by its ecosystem's own library
(tests/fixtures), through `robo_ray.data.read` -> `robo_ray.data.write` to every target (RLDS, LeRobot v3.0,
ORTF), equals `robo-ray run` (in this process) of the same source: RLDS byte for byte (the whole rlds/ tree),
LeRobot and ORTF value for value (every low-dim column exactly, the tasks of every step, frames >= 30 dB: the rows
carry encoded frames that LeRobot / ORTF re-encode as video). One local Ray instance for the module; 2-3 short
episodes a source. Plus one non-LeRobot source (ALOHA HDF5) from moto S3 to S3, and `write(..., resume=True)`:
a write cut short by a refused shard continues with the missing unit only (same bytes); a finished write resumed
converts nothing; another dataset is refused; the CLI's `--source ... --resume`.
"""
from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest

import robo_ray.data as rd
from ray.data.block import BlockAccessor
from ray.data.expressions import col
from robo_ray.data.datasource import SourceDatasource
from robo_ray.cli import main
from robo_ray.errors import ConfigError, OutputConflict
from robo_ray.mapping import default_mapping
from robo_ray.readers import open_reader
from robo_ray.stages.spec import mapping_yaml
from tests.conftest import all_episodes, convert_in_process, psnr, sigkill_when, source_cache
from tests.fixtures import aloha_gen, minari_gen, ortf_gen, robomimic_gen, rosbag_gen, rlds_gen, zarr_gen
from tests.fixtures.lerobot_gen import CameraSpec, DatasetSpec, write_lerobot_dataset
from tests.fixtures.servers import FaultRule, s3_server  # noqa: F401 - fixture
from tests.integration.test_discover_scan import ray_local  # noqa: F401 - a local Ray instance for the module

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("ray_data"), pytest.mark.timeout(600)]

NO_READBACK = {"validate": {"tfds_readback": False}}
HW = (32, 48)
MIN_PSNR = 30.0


def _lerobot(version: str) -> Callable[[Path], Path]:
    return lambda tmp: write_lerobot_dataset(tmp / "le", DatasetSpec(
        version=version, episode_lengths=[5, 4], state_dim=3, action_dim=2, cameras=[
            CameraSpec("observation.images.top", height=HW[0], width=HW[1]),
            CameraSpec("observation.images.wrist", height=HW[0], width=HW[1], storage="image")]))


def _minari(tmp: Path) -> Path:
    return tmp.joinpath(*minari_gen.make_dataset(tmp, "image", "hdf5", episodes=2).split("/"))


# name -> (writes the source under a temp folder and returns its URL, the source's --fps if it has no rate)
SOURCES: dict[str, tuple[Callable[[Path], Path], float | None]] = {
    "lerobot-v2.1": (_lerobot("v2.1"), None),
    "lerobot-v3.0": (_lerobot("v3.0"), None),
    "minari": (_minari, 10.0),
    "ortf": (lambda tmp: ortf_gen.write_ortf_native(tmp / "ortf"), None),
    "rlds": (lambda tmp: rlds_gen.write_rlds_dataset(tmp / "rlds", "oxe_lang"), 10.0),
    "robomimic": (lambda tmp: robomimic_gen.write_robomimic(tmp / "lift" / "image.hdf5", (5, 4), HW), None),
    "aloha": (lambda tmp: aloha_gen.write_dataset(tmp / "aloha", (5, 4), cameras=("cam_high", "cam_left_wrist"),
                                                  hw=HW), None),
    "zarr": (lambda tmp: zarr_gen.write_pusht(tmp / "pusht" / "pusht.zarr", (5, 4), (32, 32)), 10.0),
    "rosbag": (lambda tmp: rosbag_gen.write_dataset(tmp / "bags", "mcap", episodes=2, seconds=0.5), None),
}
TARGETS = ("rlds", "lerobot", "ortf")


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> Callable[[str], Path]:
    return source_cache(tmp_path_factory, lambda name, tmp: SOURCES[name][0](tmp))


def _reader_options(name: str) -> dict[str, Any]:
    fps = SOURCES[name][1]
    return {} if fps is None else {"fps": fps}


def _hashes(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", list(SOURCES))
def test_read_write_equals_run(ray_local, made, tmp_path, name, target):
    src = made(name)
    try:
        cli = convert_in_process(src, tmp_path / "cli", target, fps=SOURCES[name][1])
    except ConfigError as refused:  # a camera the target cannot hold (ORTF's 16-bit depth -> 8-bit LeRobot video)
        _same_refusal(src, tmp_path, name, target, refused)
        return
    outcome = rd.write(rd.read(str(src), **_reader_options(name)), str(tmp_path / "rd"), to=target,
                       config=NO_READBACK)
    _same_output(cli, outcome, tmp_path, target)


def _same_output(cli: Any, outcome: Any, tmp_path: Path, target: str) -> None:
    assert outcome.exit_code == 0, outcome.message
    assert outcome.episodes_written == cli.episodes_written >= 2
    assert outcome.quarantined == cli.quarantined == []
    if target == "rlds":
        cli_files, ours = _hashes(tmp_path / "cli" / "rlds"), _hashes(tmp_path / "rd" / "rlds")
        assert len(cli_files) >= 3 and ours == cli_files
    else:
        _same_values(cli.dataset_dir, outcome.dataset_dir)


def _same_refusal(src: Path, tmp_path: Path, name: str, target: str, by_cli: ConfigError) -> None:
    """A pair the CLI refuses because the target cannot hold a 16-bit depth camera (ORTF -> LeRobot, while the
    LeRobot target writes 8-bit video only): `write` refuses it with the CLI's error, before writing anything;
    without that camera (`read(columns=...)`, the CLI with a mapping.yaml that leaves it out) the pair equals the
    CLI. Any other refusal fails here."""
    assert "depth" in str(by_cli), by_cli
    with pytest.raises(ConfigError) as by_write:
        rd.write(rd.read(str(src), **_reader_options(name)), str(tmp_path / "rd0"), to=target, config=NO_READBACK)
    assert str(by_write.value) == str(by_cli)
    assert not any((tmp_path / "rd0").rglob("*"))  # nothing written (as the CLI: an empty folder at most)
    reader = open_reader(str(src))
    full = default_mapping(reader.discover())
    reader.close()
    kept = full.model_copy(update={"steps": [fm for fm in full.steps if fm.dtype != "uint16"]})
    assert len(kept.steps) == len(full.steps) - 1
    (tmp_path / "mapping.yaml").write_text(mapping_yaml(kept))
    cli = convert_in_process(src, tmp_path / "cli", target, f"mapping_file={tmp_path / 'mapping.yaml'}",
                             fps=SOURCES[name][1])
    ds = rd.read(str(src), columns=[fm.target for fm in kept.steps], **_reader_options(name))
    _same_output(cli, rd.write(ds, str(tmp_path / "rd"), to=target, config=NO_READBACK), tmp_path, target)


def _same_values(url_a: str, url_b: str) -> None:
    """Every episode of two outputs (robo-ray's paired reader): lengths, low-dim columns, step tasks exactly; the
    decoded frames of every camera >= MIN_PSNR."""
    a, b = all_episodes(url_a), all_episodes(url_b)
    assert [e.length for e in a] == [e.length for e in b]
    for x, y in zip(a, b):
        assert x.columns.keys() == y.columns.keys()
        for k in x.columns:
            np.testing.assert_array_equal(x.columns[k], y.columns[k], err_msg=k)
        assert x.step_tasks == y.step_tasks
    fa, fb = _decoded_steps(url_a), _decoded_steps(url_b)
    assert len(fa) == len(fb) == sum(e.length for e in a)
    cams = [k for k, v in fa[0].items() if isinstance(v, np.ndarray) and v.ndim == 3]
    assert cams, "no camera compared"
    worst = min(psnr(x[c], y[c]) for x, y in zip(fa, fb) for c in cams)
    assert worst >= MIN_PSNR, worst




def _decoded_steps(url: str) -> list[dict[str, Any]]:
    """Step rows with decoded cameras, in order, made in this process by `read`'s own read tasks."""
    source = SourceDatasource(url, None, None, {}, "step", None, True)
    rows: list[dict[str, Any]] = []
    for task in source.get_read_tasks(1):
        for block in task():
            batch = BlockAccessor.for_block(block).to_batch_format("numpy")
            rows += [{k: v[i] for k, v in batch.items()} for i in range(len(batch["step"]))]
    return rows


def test_hdf5_s3_to_s3_bytes_equal_run(ray_local, made, s3_server, tmp_path):  # noqa: F811
    """A non-LeRobot source (ALOHA episode files) read from moto S3 and written to moto S3: the RLDS bytes of
    `robo-ray run` on the local copy."""
    src = made("aloha")
    convert_in_process(src, tmp_path / "cli", "rlds")
    fs = s3_server.fs()
    bucket = s3_server.make_bucket("rdmatrix")
    fs.put(str(src), f"{bucket}/aloha", recursive=True)
    opts = s3_server.storage_options()
    outcome = rd.write(rd.read(f"s3://{bucket}/aloha", storage_options=opts), f"s3://{bucket}/out",
                       storage_options=opts, config=NO_READBACK)
    assert outcome.exit_code == 0 and outcome.episodes_written == 2, outcome.message
    ours = {p.split("/out/rlds/", 1)[1]: hashlib.sha256(fs.cat_file(p)).hexdigest()
            for p in fs.find(f"{bucket}/out/rlds")}
    assert ours == _hashes(tmp_path / "cli" / "rlds")


def test_write_resumes_a_write_cut_short(ray_local, made, s3_server, tmp_path):  # noqa: F811
    """A write whose second unit cannot be stored (moto answers AccessDenied to its shard) fails after the first
    unit is committed; `write(..., resume=True)` with the same dataset writes only the missing unit and gives the
    bytes of an uninterrupted `robo-ray run`."""
    src = made("aloha")
    one_a_unit = {**NO_READBACK, "plan": {"max_unit_episodes": 1}}
    convert_in_process(src, tmp_path / "cli", "rlds", "plan.max_unit_episodes=1")
    fs = s3_server.fs()
    out = f"{s3_server.make_bucket('resume')}/out"
    opts = s3_server.storage_options()
    # unit 1's shard: AccessDenied after 3 s (unit 0 is committed by then)
    denied = s3_server.faults.add(FaultRule(("PUT",), "tfrecord-00001-of", "403", delay_s=3.0))
    with pytest.raises(Exception, match="tfrecord-00001-of"):
        rd.write(rd.read(str(src)), f"s3://{out}", storage_options=opts, config=one_a_unit)
    assert denied.hits >= 1
    s3_server.faults.clear()
    shards = [p.rsplit("/", 1)[1] for p in fs.find(f"{out}/rlds")]
    assert [s for s in shards if ".tfrecord-" in s] == ["aloha-train.tfrecord-00000-of-00002"], shards
    assert [p.rsplit("/", 1)[1] for p in fs.find(f"{out}/journal")] == ["unit-0000000.json"]
    assert not fs.exists(f"{out}/commit.json")
    outcome = rd.write(rd.read(str(src)), f"s3://{out}", storage_options=opts, config=one_a_unit, resume=True)
    assert outcome.exit_code == 0, outcome.message
    fs.invalidate_cache()
    assert not fs.exists(f"{out}/journal") and fs.exists(f"{out}/commit.json")
    progress = [json.loads(x) for x in fs.cat_file(f"{out}/progress.jsonl").decode().splitlines()]
    assert sorted((p["episode_id"], p["shard"], p["status"]) for p in progress) == [(0, 0, "completed"),
                                                                                      (1, 1, "completed")]
    log = fs.cat_file(f"{out}/logs/convert.log").decode()
    assert "resume: 1 of 2 shards already committed and verified; converting 1" in log
    assert "convert: 1 write tasks, units per task [1]" in log
    ours = {p.split("/out/rlds/", 1)[1]: hashlib.sha256(fs.cat_file(p)).hexdigest() for p in fs.find(f"{out}/rlds")}
    assert ours == _hashes(tmp_path / "cli" / "rlds")


def test_resume_of_a_finished_write_and_of_another_dataset(ray_local, made, tmp_path):
    """Locally: resuming a finished write converts nothing and keeps its bytes; resuming with other episodes (a
    filter) is refused (RR401) before anything changes."""
    src, out = made("robomimic"), tmp_path / "out"
    config = {**NO_READBACK, "plan": {"max_unit_episodes": 1}}
    assert rd.write(rd.read(str(src)), str(out), config=config).exit_code == 0
    before = _hashes(out / "rlds")
    assert not (out / "journal").exists() and len((out / "progress.jsonl").read_text().splitlines()) == 2
    outcome = rd.write(rd.read(str(src)), str(out), config=config, resume=True)
    assert outcome.exit_code == 0 and outcome.episodes_written == 2, outcome.message
    assert "resume: 2 of 2 shards already committed and verified; converting 0" in \
        (out / "logs" / "convert.log").read_text()
    assert _hashes(out / "rlds") == before
    with pytest.raises(OutputConflict, match="RR401|differ"):
        rd.write(rd.read(str(src)).filter(expr=col("length") >= 5), str(out), config=config, resume=True)
    assert _hashes(out / "rlds") == before


def test_cli_several_sources_resume(ray_local, made, tmp_path):
    """`robo-ray run SRC DST --source SRC2 --resume` (in this process, on the module's Ray instance): a finished
    run resumed converts nothing, exits 0 and keeps its bytes."""
    src = made("robomimic")
    other = tmp_path / "copy" / src.name
    other.parent.mkdir()
    shutil.copy(src, other)
    out = tmp_path / "out"
    args = ["run", str(src), str(out), "--source", str(other), "--name", "both", "--set",
            "validate.tfds_readback=false", "--set", "plan.max_unit_episodes=1"]
    assert main(args) == 0
    before = _hashes(out / "rlds")
    assert len([p for p in before if ".tfrecord-" in p]) == 4
    assert main([*args, "--resume"]) == 0
    assert "resume: 4 of 4 shards already committed and verified; converting 0" in \
        (out / "logs" / "convert.log").read_text()
    assert _hashes(out / "rlds") == before


_DRIVER = """
import json, sys, robo_ray.data as rd
from robo_ray.ray_exec.local_instance import init_local
init_local(num_cpus=2, include_dashboard=False, logging_level="WARNING", log_to_driver=False)
src, dst, opts = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
rd.write(rd.read(src), dst, storage_options=opts,
         config={"validate": {"tfds_readback": False}, "plan": {"max_unit_episodes": 1}})
"""


def test_write_resumes_after_the_driver_was_killed(ray_local, made, s3_server, tmp_path):  # noqa: F811
    """A driver process running `write` to S3 is SIGKILLed while unit 1's shard upload hangs (unit 0, the train
    split's shard, committed and journaled): `resume=True` in another process writes unit 1 only; the bytes are `robo-ray run`'s."""
    src = made("robomimic")
    convert_in_process(src, tmp_path / "cli", "rlds", "plan.max_unit_episodes=1")
    fs = s3_server.fs()
    out = f"{s3_server.make_bucket('killed')}/out"
    opts = s3_server.storage_options()
    # unit 1 is the val split's shard (robomimic's masks): its upload hangs 8 s
    hang = s3_server.faults.add(FaultRule(("PUT",), "-val.tfrecord-", "delay", times=1, delay_s=8.0))
    proc = subprocess.Popen([sys.executable, "-c", _DRIVER, str(src), f"s3://{out}", json.dumps(opts)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    part0 = f"{out}/journal/unit-0000000.json"
    sigkill_when(proc, lambda: hang.hits and _exists(fs, part0), 240, "unit 0 journaled, unit 1 uploading")
    s3_server.faults.wait_idle()  # the hung upload of the killed driver lands after it died
    s3_server.faults.clear()
    fs.invalidate_cache()
    assert not fs.exists(f"{out}/commit.json") and not fs.exists(f"{out}/journal/unit-0000001.json")
    outcome = rd.write(rd.read(str(src)), f"s3://{out}", storage_options=opts,
                       config={**NO_READBACK, "plan": {"max_unit_episodes": 1}}, resume=True)
    assert outcome.exit_code == 0, outcome.message
    log = fs.cat_file(f"{out}/logs/convert.log").decode()
    assert "resume: 1 of 2 shards already committed and verified; converting 1" in log
    fs.invalidate_cache()
    ours = {p.split("/out/rlds/", 1)[1]: hashlib.sha256(fs.cat_file(p)).hexdigest() for p in fs.find(f"{out}/rlds")}
    assert ours == _hashes(tmp_path / "cli" / "rlds")


def _exists(fs: Any, path: str) -> bool:
    fs.invalidate_cache()
    return fs.exists(path)
