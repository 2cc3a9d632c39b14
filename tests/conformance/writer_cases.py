"""Helpers of the writer conformance suite (tests/conformance/test_writers.py): the sources, the options every run
pins, reading an output back into a format-neutral view (through the writer's paired reader), comparing views,
digests of a written dataset, and a paced conversion that a test can SIGKILL between units.

A paced run (a conversion whose units each wait `delay` seconds after every episode, through the public
`ConvertHooks`, so that a SIGKILL lands mid-run whatever the machine's speed):

    python -m tests.conformance.writer_cases paced --delay 0.5 SRC DST FORMAT [--set KEY=VALUE ...]
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from robo_ray.config import JobConfig, load_config
from robo_ray.episode import CanonicalEpisode, EpisodeRef, FrameItem, Frames, QuarantineRecord
from robo_ray.errors import FrameCountMismatch
from robo_ray.images import decode_frame
from robo_ray.mapping import default_mapping
from robo_ray.readers import REGISTRY as READERS, open_reader
from robo_ray.stages.convert import ConvertHooks, ConvertOptions, UnitConverter
from robo_ray.executors.base import JobSpec
from robo_ray.executors.in_process import InProcessExecutor
from robo_ray.stages.pipeline import run_pipeline
from robo_ray.stages.target_setup import make_writer, resolve_mapping
from robo_ray.stages.plan import Unit
from robo_ray.stages.spec import load_mapping
from robo_ray.storage import join, sha256_file
from robo_ray.writers import Writer, writer_class
from tests.conftest import REPO, psnr
from tests.fixtures import minari_gen
from tests.fixtures.lerobot_gen import CameraSpec, DatasetSpec, write_lerobot_dataset

MIN_PSNR_DB = 30.0
# options a run pins when the writer's Options model has the field: a creation time makes bytes differ per run
PINNED_OPTIONS: dict[str, Any] = {"created_at": "2024-01-01T00:00:00Z"}
# options given when the source records no frame rate (Minari) and the writer's Options model has the field
RATELESS_OPTIONS: dict[str, Any] = {"fps": 10.0}
# every run of the suite: one unit per episode (small units); no loader read-back in Validate (the tests read the
# output back themselves; the validate and empty-dataset tests turn it on)
BASE_SETS = ["plan.target_shard_mb=0.001", "validate.tfds_readback=false"]

TOP, WRIST = "observation.images.top", "observation.images.wrist"


# ---- sources ----------------------------------------------------------------------------------------------------
def _lerobot(spec: DatasetSpec) -> Callable[[Path], Path]:
    return lambda tmp: write_lerobot_dataset(tmp / "src", spec)


def _minari_raw(tmp: Path) -> Path:
    before = os.environ.get("MINARI_DATASETS_PATH")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            dataset_id = minari_gen.make_dataset(tmp, "image", "hdf5", jpeg=False)
    finally:  # make_dataset points minari at `tmp` for the whole process
        if before is None:
            os.environ.pop("MINARI_DATASETS_PATH", None)
        else:
            os.environ["MINARI_DATASETS_PATH"] = before
    return tmp.joinpath(*dataset_id.split("/"))


def language_rows(episode: int, length: int, fps: int) -> tuple[list[dict[str, Any]], list[list[dict[str, Any]]]]:
    """lerobot 0.6's language columns of one episode, as its annotation pipeline fills them: persistent rows (the
    same list on every frame: task_aug rephrasings at t0, subtasks at their start) and events on two frames (a
    camera-grounded vqa question, a speech tool call)."""
    persistent = [{"role": "user", "content": f"pick the cube {episode}", "style": "task_aug", "timestamp": 0.0,
                   "camera": None, "tool_calls": None},
                  {"role": "assistant", "content": "reach", "style": "subtask", "timestamp": 0.0, "camera": None,
                   "tool_calls": None},
                  {"role": "assistant", "content": "grasp", "style": "subtask", "timestamp": 2 / fps,
                   "camera": None, "tool_calls": None}]
    events: list[list[dict[str, Any]]] = [[] for _ in range(length)]
    events[1] = [{"role": "user", "content": "what is visible?", "style": "vqa", "camera": TOP, "tool_calls": None}]
    events[length - 1] = [{"role": "assistant", "content": None, "style": None, "camera": None, "tool_calls": [
        {"type": "function", "function": {"name": "say", "arguments": {"text": f"done {episode}"}}}]}]
    return persistent, events


def _lerobot_language(tmp: Path) -> Path:
    """A v3.0 dataset with lerobot 0.6's language columns, added as lerobot's own test adds them (pandas infers the
    parquet types; info.json declares both columns as dtype "language")."""
    import pandas as pd

    spec = DatasetSpec(version="v3.0", episode_lengths=[6, 5], cameras=[CameraSpec(TOP)])
    root = write_lerobot_dataset(tmp / "src", spec)
    for path in sorted(root.glob("data/chunk-*/file-*.parquet")):
        df = pd.read_parquet(path)
        persistent, events = [], []
        for e, n in df.groupby("episode_index", sort=False).size().items():
            p, ev = language_rows(int(e), int(n), spec.fps)
            persistent += [p] * int(n)
            events += ev
        df["language_persistent"], df["language_events"] = persistent, events
        df.to_parquet(path)
    info = json.loads((root / "meta" / "info.json").read_text())
    info["features"].update({k: {"dtype": "language", "shape": [1], "names": None}
                             for k in ("language_persistent", "language_events")})
    (root / "meta" / "info.json").write_text(json.dumps(info, indent=4))
    return root


def _rosbag_depth(tmp: Path) -> Path:
    """Two MCAP bags written by mcap_ros2's writer (tests/fixtures/rosbag_gen.py): joint states, commands, the task
    and a 16UC1 depth camera (32x48, 500..2400 mm), the colour cameras left out (the suite's colour sources cover
    them; a lone camera keeps its name through every target)."""
    from tests.fixtures import rosbag_gen

    folder = tmp / "bags"
    for i in range(2):
        messages = rosbag_gen.episode_messages(i, 1.0, with_depth=True)
        rosbag_gen.write_bag(folder / f"episode_{i}", "mcap", [m for m in messages if not m[1].startswith("/cam_")])
    return folder


def _lerobot_depth(tmp: Path) -> Path:
    """A LeRobot v3.0 dataset with a depth camera as lerobot 0.6.1 writes one (12-bit HEVC `observation.images.
    depth`, `is_depth_map`), written by robo-ray's LeRobot writer from `_rosbag_depth` (that lerobot 0.6.1 itself
    loads it within its quantization: tests/integration/test_lerobot_depth.py)."""
    out = tmp / "src"
    outcome = run_pipeline(load_config(None, [*BASE_SETS, "validate.tfds_readback=false"], **{
        "source.url": str(_rosbag_depth(tmp)), "target.url": str(out), "target.format": "lerobot"}))
    assert outcome.exit_code == 0, outcome.message
    return out


TWO_CAMS = DatasetSpec(version="v2.1", episode_lengths=[8, 6, 7, 5, 6, 4], with_reward_done=True,
                       cameras=[CameraSpec(TOP), CameraSpec(WRIST)])
# name -> (maker, has a frame rate); frames reach the writer as PyAV frames (video) or arrays (Minari raw pixels)
SOURCES: dict[str, tuple[Callable[[Path], Path], bool]] = {
    "lerobot-v21-2cam": (_lerobot(TWO_CAMS), True),
    "lerobot-v21-1cam": (_lerobot(DatasetSpec(version="v2.1", episode_lengths=[9, 7, 5],
                                              tasks_per_episode=[["pick"], ["place", "push"], ["pick"]])), True),
    "minari-image-raw": (_minari_raw, False),
    "lerobot-v21-one-episode": (_lerobot(DatasetSpec(version="v2.1", episode_lengths=[7],
                                                     cameras=[CameraSpec(TOP), CameraSpec(WRIST)])), True),
    "lerobot-v21-state-500": (_lerobot(DatasetSpec(version="v2.1", episode_lengths=[500], cameras=[])), True),
    "lerobot-v21-state-20000": (_lerobot(DatasetSpec(version="v2.1", episode_lengths=[20000], cameras=[])), True),
    "lerobot-v30-language": (_lerobot_language, True),
    "rosbag-mcap-depth": (_rosbag_depth, True),
    "lerobot-v30-depth": (_lerobot_depth, True),
}
DEPTH_SOURCES = ("rosbag-mcap-depth", "lerobot-v30-depth")
ROUND_TRIP_SOURCES = ["lerobot-v21-2cam", "lerobot-v21-1cam", "minari-image-raw", "lerobot-v30-language",
                      *DEPTH_SOURCES]


# ---- the writer under test --------------------------------------------------------------------------------------
@dataclass
class WriterCase:
    """A registered target format, importable (else the suite fails for it), with the options the suite pins."""

    name: str
    cls: type[Writer]

    def options(self, source: str) -> dict[str, Any]:
        fields = self.cls.Options.model_fields
        opts = {k: v for k, v in PINNED_OPTIONS.items() if k in fields}
        if not SOURCES[source][1]:
            opts.update({k: v for k, v in RATELESS_OPTIONS.items() if k in fields})
        return opts

    def sets(self, source: str, *extra: str) -> list[str]:
        """`--set` values of a run of this writer on `source` (without the `--set` flags)."""
        return [*BASE_SETS, *(f"target.options.{k}={json.dumps(v)}" for k, v in self.options(source).items()),
                *extra]

    def cli_args(self, src: Path, out: Path, source: str, *extra: str) -> list[str]:
        args = ["run", str(src), str(out), "--to", self.name]
        for s in self.sets(source, *extra):
            args += ["--set", s]
        return args

    def config(self, src: Path, out: Path, source: str, *extra: str) -> JobConfig:
        """The JobConfig `robo-ray run SRC OUT --to NAME --set ...` builds."""
        return load_config(None, self.sets(source, *extra),
                           **{"source.url": str(src), "target.url": str(out), "target.format": self.name})


def load_writer_case(name: str) -> WriterCase:
    """The registered writer `name`; a writer that cannot be imported fails the test (never a skip)."""
    try:
        cls = writer_class(name)
    except Exception as exc:  # noqa: BLE001 - UsageError (ImportError inside), or a broken module
        raise AssertionError(f"target format {name!r} is registered (robo_ray.writers.REGISTRY) but its writer "
                             f"cannot be loaded: {type(exc).__name__}: {exc}") from exc
    assert cls.format_name == name, f"REGISTRY[{name!r}] loads a writer whose format_name is {cls.format_name!r}"
    return WriterCase(name, cls)


def run_in_process(case: WriterCase, src: Path, out: Path, source: str, *extra: str) -> Any:
    """`robo-ray run` without a subprocess (the in-process executor); returns the RunOutcome."""
    return run_pipeline(case.config(src, out, source, *extra))


# ---- an output folder ---------------------------------------------------------------------------------------------
def output_writer(out: Path) -> Writer:
    """The writer of a finished (or interrupted) run, rebuilt from job.json's target and mapping.yaml."""
    target = json.loads((out / "job.json").read_text())["target"]
    mapping = load_mapping((out / "mapping.yaml").read_text(), "mapping.yaml")
    return writer_class(target["format"])(str(out), mapping, {}, target.get("options") or {})


def ledger(out: Path) -> dict[str, Any]:
    return json.loads((out / "ledger.json").read_text())


def dataset_digests(writer: Writer) -> dict[str, str]:
    """sha256 of every file of the written dataset (Writer.files(), relative to its dataset folder)."""
    return {rel: sha256_file(writer.fs, join(writer.dataset_dir, rel)) for rel in writer.files()}


def all_files(root: Path) -> list[str]:
    """Every file under `root` (relative), directories left out."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if not p.is_dir())


def temp_files(root: Path) -> list[str]:
    """Files under `root` named as temps (`.tmp-xxxx`, what Writer.files() and remove_stale_temps treat so)."""
    return [f for f in all_files(root) if ".tmp-" in Path(f).name]


# ---- a format-neutral view of an episode --------------------------------------------------------------------------
@dataclass
class EpisodeView:
    """One episode as values: tensors and decoded camera frames by mapping target, the step fields."""

    index: int
    length: int
    tensors: dict[str, np.ndarray] = field(default_factory=dict)
    cameras: dict[str, list[np.ndarray]] = field(default_factory=dict)
    steps: dict[str, np.ndarray] = field(default_factory=dict)  # reward, discount, is_first, is_last, is_terminal
    language: list[str] = field(default_factory=list)
    texts: dict[str, list[str]] = field(default_factory=dict)  # text step features by target


def frame_array(item: FrameItem, channels: int, dtype: str = "uint8") -> np.ndarray:
    """A frame as it reaches a writer (PyAV frame, HxWxC array, encoded bytes) as an HxWxC array (16-bit depth:
    its uint16 values)."""
    if isinstance(item, (bytes, bytearray, memoryview)):
        return decode_frame(bytes(item), channels, dtype)
    if isinstance(item, np.ndarray):
        return item if item.ndim == 3 else item[:, :, None]
    if dtype == "uint16":
        return item.to_ndarray(format="gray16le")[:, :, None]
    arr = item.to_ndarray(format="gray" if channels == 1 else "rgb24")
    return arr[:, :, None] if arr.ndim == 2 else arr


def episode_id(ep: CanonicalEpisode) -> int:
    """The episode's identity: its `episode_id` metadata (every reader gives one; a reader of a written dataset
    finds the source's index there), else the reader's own index."""
    value = ep.metadata.get("episode_id")
    return int(value) if isinstance(value, (int, np.integer)) and not isinstance(value, bool) else ep.episode_index


def view_of(ep: CanonicalEpisode) -> EpisodeView:
    cams = {t: [frame_array(x, f.channels, f.dtype) for x in f] for t, f in ep.cameras.items()}
    steps = {"reward": ep.reward, "discount": ep.discount, "is_first": ep.is_first, "is_last": ep.is_last,
             "is_terminal": ep.is_terminal}
    return EpisodeView(episode_id(ep), ep.length, dict(ep.tensors), cams, steps, list(ep.language),
                       {t: list(v) for t, v in ep.texts.items()})


def canonical_views(url: str, fmt: str | None, mapping: Any | None = None) -> list[EpisodeView]:
    """Every episode of a dataset as the convert stage would hand it to a writer (`mapping`: the run's; None: the
    default mapping of the dataset's inventory, i.e. how a conversion *from* it would name things)."""
    reader = open_reader(url, fmt)
    try:
        inv = reader.discover()
        errors = [f for f in inv.findings if f.level == "error"]
        assert not errors, f"{url}: the {fmt or 'source'} reader reports errors: {errors}"
        mapping = mapping or default_mapping(inv)
        conv = UnitConverter(url, fmt, mapping, None, reader=reader)  # type: ignore[arg-type]  # no writer needed
        out = []
        try:
            for ref in inv.refs:
                ep = conv.canonical_episode(ref)
                try:
                    out.append(view_of(ep))
                finally:
                    ep.close()
        finally:
            conv.close()
        return out
    finally:
        reader.close()


def source_views(src: Path, out: Path, skip: tuple[int, ...] = ()) -> list[EpisodeView]:
    """The source's episodes (but `skip`) through the run's own mapping (DST/mapping.yaml), in index order."""
    mapping = load_mapping((out / "mapping.yaml").read_text(), "mapping.yaml")
    views = canonical_views(str(src), None, mapping)
    return sorted((v for v in views if v.index not in skip), key=lambda v: v.index)


def output_views(writer: Writer) -> list[EpisodeView]:
    """The written dataset read back through the writer's paired reader (its default mapping), in the reader's
    order. Writers may renumber episodes (LeRobot's indices are contiguous): episodes pair up by order."""
    paired = writer.paired_reader
    assert paired in READERS, f"{writer.format_name}: Writer.paired_reader {paired!r} is not a registered reader " \
                              f"({sorted(READERS)})"
    return canonical_views(writer.dataset_dir, paired)


def compare_views(expected: list[EpisodeView], got: list[EpisodeView],
                  min_psnr_db: float = MIN_PSNR_DB, names: dict[str, str] | None = None,
                  depth_bound: Callable[[str], Callable[[np.ndarray], np.ndarray] | None] | None = None) -> list[str]:
    """What differs between the source's episodes and the output's read back (empty: a faithful round trip).
    Low-dim values and step fields exact, frame counts equal, every frame within `min_psnr_db`; 16-bit (depth)
    frames per pixel: exact, or within `depth_bound(target)` (Writer.depth_bound: a quantizing writer's documented
    bound), never by PSNR. Features match by
    canonical name, except a lone camera on both sides: readers call it `observation/image` whatever its name was
    (a Minari `observation/pixels` comes back so from a format that names cameras by role). `names` is the writer's
    Writer.read_back_names(): the name each target has once read back (formats with flat dotted keys rename)."""
    names = names or {}
    problems: list[str] = []
    if len(expected) != len(got):
        problems.append(f"{len(got)} episodes read back (ids {[v.index for v in got]}), expected {len(expected)} "
                        f"(source episodes {[v.index for v in expected]})")
    for k, (e, g) in enumerate(zip(expected, got)):
        where = f"episode #{k} (source {e.index}, read back as {g.index})"
        if e.length != g.length:
            problems.append(f"{where}: {g.length} steps read back, source has {e.length}")
            continue
        for source_name, arr in e.tensors.items():
            name = names.get(source_name, source_name)
            if name not in g.tensors:
                problems.append(f"{where}: tensor {name!r} missing (read back: {sorted(g.tensors)})")
            elif not _same(arr, g.tensors[name]):
                problems.append(f"{where}: tensor {name!r} differs (max |diff| {_maxdiff(arr, g.tensors[name])})")
        for name, value in e.steps.items():
            other = g.steps.get(name)
            if other is None or not _same(value, other):
                problems.append(f"{where}: step field {name!r} differs: source {np.asarray(value).tolist()}, "
                                f"read back {None if other is None else np.asarray(other).tolist()}")
        if e.language != g.language:
            problems.append(f"{where}: language differs: source {e.language[:3]}..., read back {g.language[:3]}...")
        for source_name, texts in e.texts.items():
            back = g.texts.get(names.get(source_name, source_name))
            if back != texts:
                problems.append(f"{where}: text {source_name!r} differs: source {texts[:2]}..., read back "
                                f"{None if back is None else back[:2]}... (read back: {sorted(g.texts)})")
        lone = len(e.cameras) == 1 and len(g.cameras) == 1  # readers name a lone camera observation/image
        for cam, frames in e.cameras.items():
            back = next(iter(g.cameras.values())) if lone else g.cameras.get(names.get(cam, cam))
            if back is None:
                problems.append(f"{where}: camera {cam!r} missing (read back: {sorted(g.cameras)})")
                continue
            if len(back) != len(frames):
                problems.append(f"{where}: camera {cam!r} has {len(back)} frames, source {len(frames)}")
                continue
            if frames and frames[0].dtype == np.uint16:
                problems += _depth_problems(where, cam, frames, back, (depth_bound or (lambda _: None))(cam))
                continue
            worst = min((psnr(a, np.asarray(b).reshape(a.shape)) if np.asarray(b).size == a.size else -1.0)
                        for a, b in zip(frames, back)) if frames else 99.0  # 99: psnr's "identical"
            if worst < min_psnr_db:
                problems.append(f"{where}: camera {cam!r} worst frame {worst:.1f} dB (< {min_psnr_db} dB; -1 = "
                                "wrong shape)")
    return problems


def _depth_problems(where: str, cam: str, frames: list[np.ndarray], back: list[np.ndarray],
                    bound: Callable[[np.ndarray], np.ndarray] | None) -> list[str]:
    """16-bit frames read back against the source's: same dtype and shape, every pixel within `bound` (None: exact)."""
    out: list[str] = []
    for k, (a, b) in enumerate(zip(frames, back)):
        b = np.asarray(b)
        if b.dtype != np.uint16 or b.size != a.size:
            return [f"{where}: depth camera {cam!r} frame {k} read back as {b.dtype} {b.shape}, source uint16 "
                    f"{a.shape}"]
        err = np.abs(b.reshape(a.shape).astype(np.float64) - a.astype(np.float64))
        allowed = np.zeros(a.shape) if bound is None else np.asarray(bound(a), np.float64)
        if (err > allowed).any():
            out.append(f"{where}: depth camera {cam!r} frame {k}: {int((err > allowed).sum())} pixels off by up to "
                       f"{err.max():.0f} ({'exact expected' if bound is None else 'beyond the quantization bound'})")
    return out


def _same(a: np.ndarray, b: Any) -> bool:
    """Equal values (any dtype) in the same number: exact."""
    b = np.asarray(b)
    return b.size == a.size and bool(np.array_equal(b.reshape(a.shape), a))


def _maxdiff(a: np.ndarray, b: Any) -> str:
    try:
        return f"{float(np.max(np.abs(a.astype(np.float64) - np.asarray(b, np.float64).reshape(a.shape)))):.3g}"
    except ValueError:
        return f"shapes {a.shape} vs {np.asarray(b).shape}"


# ---- episodes for the sink tests -----------------------------------------------------------------------------------
def failing_frames(frames: Frames, after: int) -> Frames:
    """`frames` that raise FrameCountMismatch after `after` frames (a camera whose video turns out short)."""
    def items() -> Iterator[FrameItem]:
        it = iter(frames)
        try:
            for i, item in enumerate(it):
                if i == after:
                    raise FrameCountMismatch(f"injected: the camera ends after {after} of {frames.length} frames")
                yield item
        finally:
            close = getattr(it, "close", None)
            if close is not None:
                close()
    return Frames(frames.length, items(), frames.shape, frames.dtype)


def break_last_camera(ep: CanonicalEpisode, after: int = 3) -> CanonicalEpisode:
    """The episode with its last camera failing mid-stream (the others are consumed whole first)."""
    assert ep.cameras, "the sink tests need a source with cameras"
    cam = list(ep.cameras)[-1]
    ep.cameras[cam] = failing_frames(ep.cameras[cam], after)
    return ep


@dataclass
class HandRun:
    """The contract driven by hand, as the pipeline drives it: the driver's writer (plan, finalize), the workers'
    writer (built from `Writer.unit_options`, as JobSpec does), the source's inventory and a converter."""

    driver: Writer
    worker: Writer
    inv: Any
    conv: UnitConverter

    def episode(self, ref: EpisodeRef) -> CanonicalEpisode:
        return self.conv.canonical_episode(ref)


def hand_run(case: WriterCase, src: Path, out: Path, source: str) -> HandRun:
    cfg = case.config(src, out, source)
    reader = open_reader(str(src))
    inv = reader.discover()
    mapping = resolve_mapping(cfg, inv)
    driver = make_writer(cfg, mapping)
    job = JobSpec(str(src), None, mapping.model_dump_json(), str(out), ConvertOptions(),
                  target_format=case.name, target_options=driver.unit_options(inv))
    out.mkdir(parents=True)
    worker = job.make_writer()
    return HandRun(driver, worker, inv, UnitConverter(str(src), None, mapping, worker, reader=reader))


def mismatch_record(ref: EpisodeRef) -> dict[str, Any]:
    return QuarantineRecord(ref.episode_index, "EP103", "injected frame count mismatch", ref.data_path).to_dict()


def one_unit(writer: Writer, refs: list[EpisodeRef], features: dict[str, Any]) -> Unit:
    """The writer's plan for `refs` as one unit (large unit target, one unit at least)."""
    units = writer.plan(refs, features, 1 << 20, 1)
    assert len(units) == 1 and [r.episode_index for r in units[0].refs] == [r.episode_index for r in refs], \
        f"{writer.format_name}.plan put {len(refs)} small episodes into {len(units)} units with a 1 TB target"
    return units[0]


# ---- subprocesses -------------------------------------------------------------------------------------------------
@dataclass
class Measured:
    returncode: int
    stdout: str
    stderr: str
    peak_rss_mb: float


def run_cli_measured(args: list[str], timeout: float = 600) -> Measured:
    """`robo-ray ARGS` in a subprocess; its peak RSS from the kernel (wait4's rusage of that very child)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen([sys.executable, "-m", "robo_ray.cli", *args], stdout=out, stderr=err, cwd=REPO,
                                env=dict(os.environ))
        timer = threading.Timer(timeout, lambda: os.kill(proc.pid, signal.SIGKILL))
        timer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            timer.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return Measured(proc.returncode, out.read().decode(), err.read().decode(), usage.ru_maxrss / 1024.0)


def paced_command(case: WriterCase, src: Path, out: Path, source: str, delay: float) -> list[str]:
    cmd = [sys.executable, "-m", "tests.conformance.writer_cases", "paced", "--delay", str(delay), str(src),
           str(out), case.name]
    for s in case.sets(source):
        cmd += ["--set", s]
    return cmd


class _Pause(ConvertHooks):
    def __init__(self, delay: float) -> None:
        self.delay = delay

    def after_episode(self, ref: EpisodeRef) -> None:
        time.sleep(self.delay)


class PacedExecutor(InProcessExecutor):
    """The in-process executor, pausing after every episode (inside the unit, its files open)."""

    def __init__(self, delay: float) -> None:
        self.delay = delay

    def run(self, units: list[Unit], job: JobSpec) -> Iterator[Any]:
        conv = job.make_converter(hooks=_Pause(self.delay))
        try:
            for unit in units:
                yield conv.convert(unit)
        finally:
            conv.close()


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="writer_cases")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("paced", help="robo-ray run SRC DST --to FORMAT, pausing after every episode")
    p.add_argument("--delay", type=float, required=True)
    p.add_argument("src")
    p.add_argument("dst")
    p.add_argument("format")
    p.add_argument("--set", action="append", default=[])
    a = ap.parse_args(argv)
    cfg = load_config(None, a.set, **{"source.url": a.src, "target.url": a.dst, "target.format": a.format})
    return run_pipeline(cfg, executor=PacedExecutor(a.delay)).exit_code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
