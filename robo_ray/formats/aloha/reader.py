"""ALOHA / ACT reader: a folder of episode files (`episode_<N>.hdf5`, as aloha's record_episodes and ACT's
record_sim_episodes name them), or one such file.

Each file is one episode of T steps (T = `/action` rows): `/observations/qpos` -> observation/state, `qvel`,
`effort` and any other per-step observation -> observation/<key>, `/action` -> action (Mobile ALOHA's
`/base_action` -> action_base; LeRobot concatenates the two into `action`), `/observations/images/<cam>` -> a
camera (`cam_high` -> observation/image_high): raw (T, H, W, 3) uint8, or compressed (root attr `compress`): JPEG
rows padded to the longest + `/compress_len` (robo_ray/formats/aloha/jpeg_rows.py), decoded in the recorder's
colour order. Frames are read and decoded a few at a time while the writer takes them: an episode
of 1,000 steps from four 480x640 cameras (3.7 GB decoded) is never whole in memory.

The files record no rate: the recorders step at DT = 0.02 s, so 50 fps unless --fps says otherwise. Episode files
are untrusted: a file h5py cannot open (truncated), one with a soft / external link, or one whose datasets are
beyond the limits is quarantined alone (EP202 / EP207 / EP206) and the others convert.
"""
from __future__ import annotations

import posixpath
import re
from dataclasses import replace
from typing import Any, ClassVar

import numpy as np

from robo_ray.episode import Episode, EpisodeRef, FeatureSpec, RawFrames
from robo_ray.errors import DataCorrupt, EpisodeDataOutside, RoboRayError, SourceFormatError
from robo_ray.formats.aloha import jpeg_rows
from robo_ray.formats.hdf5 import (Hdf5FilesReader, LazyFrames, check_dataset, foreign_links, jsonable, leaves,
                                   read_steps)
from robo_ray.readers.base import Finding, Inventory, MetaType, canonical_path, unique_names
from robo_ray.safety import MAX_EPISODE_LENGTH, check_count, check_shape

RECORDER_FPS = 50.0  # aloha / ACT constants: DT = 0.02
METADATA: dict[str, MetaType] = {"episode_id": "int", "file_path": "text", "sim": "bool"}
IMAGES = "observations/images/"
IMAGE_CHUNK = 8  # frames read and decoded at a time (4 x 480x640 cameras: ~30 MB in flight)
LENGTHS_NOTE = "the JPEG length of each image row (used to decode the cameras)"


def is_aloha_file(f: Any) -> bool:
    """An ALOHA / ACT episode: `/action` and `/observations/qpos` datasets."""
    import h5py

    obs = f.get("observations", getlink=True)
    act = f.get("action", getlink=True)
    return isinstance(obs, h5py.HardLink) and isinstance(act, h5py.HardLink) and \
        isinstance(f["observations"], h5py.Group) and "qpos" in f["observations"] and \
        isinstance(f["action"], h5py.Dataset)


def _declare(key: str, ds: Any, compressed: bool, steps: int, first_jpeg: bytes | None) -> FeatureSpec | None:
    """The feature of one dataset of an episode file (None: not per-step data)."""
    shape = tuple(int(d) for d in ds.shape[1:])
    if key.startswith(IMAGES):
        cam = key[len(IMAGES):]
        name = canonical_path("observation", f"image_{re.sub(r'^cam_?', '', cam) or cam}")  # cam_high -> image_high
        if compressed and len(shape) == 1 and ds.dtype == np.uint8 and first_jpeg is not None:
            h, w = jpeg_rows.jpeg_shape(first_jpeg, key)
            return FeatureSpec(key, "image", "uint8", (h, w, 3), declared_shape=shape, codec="jpeg", role="camera",
                               name=name)
        if len(shape) == 3 and shape[2] == 3 and ds.dtype == np.uint8:
            return FeatureSpec(key, "image", "uint8", shape, declared_shape=shape, codec="raw", role="camera",
                               name=name)
        return None
    if ds.dtype.kind not in "biuf" or not ds.shape or int(ds.shape[0]) != steps:
        return None
    spec = FeatureSpec(key, "tensor", str(ds.dtype), check_shape(key, list(shape)), declared_shape=shape)
    head, _, rest = key.partition("/")
    if key == "compress_len":
        return replace(spec, role="bookkeeping", note=LENGTHS_NOTE)
    if key == "observations/qpos":
        return replace(spec, role="state", name="observation/state")
    if head == "observations":
        return replace(spec, role="observation", name=canonical_path("observation", rest))
    if key == "action":
        return replace(spec, role="action", name="action")
    if key == "base_action":
        return replace(spec, role="action", name="action_base")  # LeRobot: action = arms (14) + base (2)
    return replace(spec, role="other", name=canonical_path("", key))


class AlohaReader(Hdf5FilesReader):
    """Reads ALOHA / ACT episode files (a folder of them, or one) from any fsspec URL."""

    format_name = "aloha"
    sniff_hint: ClassVar[str] = "episode_*.hdf5 with /observations/qpos and /action (ALOHA, ACT)"
    sniff_file_hint: ClassVar[str | None] = "an ALOHA / ACT episode .hdf5 (/observations, /action)"
    file_test = staticmethod(is_aloha_file)

    @classmethod
    def sniff(cls, fs: Any, root: str) -> bool:
        """An ALOHA / ACT episode file, or a folder of them: /action and /observations/qpos inside."""
        return cls.sniff_files(fs, root)

    def __init__(self, url: str, storage_options: dict[str, Any] | None = None) -> None:
        super().__init__(url, storage_options)
        self.files = self._list_files()
        self.features, self.compressed = self._features()
        self.set_fps(RECORDER_FPS, "the ALOHA / ACT recorders' rate (DT = 0.02 s)", held=False)

    def _checked(self, rel: str, h5: Any) -> None:
        """An episode file with a link to outside is refused (its episode is quarantined, EP207)."""
        links = foreign_links(h5)
        if links:
            raise EpisodeDataOutside(f"{rel}: /{links[0][0]} is {links[0][1]}; refused")

    # ---- features (from the first file that opens) -------------------------------------------------------------
    def _features(self) -> tuple[dict[str, FeatureSpec], bool]:
        first: RoboRayError | None = None
        for rel in self.files[:3]:
            try:
                f = self._h5(rel)
            except (SourceFormatError, EpisodeDataOutside) as exc:
                first = first or exc
                continue
            return self._features_of(f, rel)
        assert first is not None
        raise SourceFormatError(f"{first} (the first episode files cannot be read)")

    def _features_of(self, f: Any, rel: str) -> tuple[dict[str, FeatureSpec], bool]:
        if not is_aloha_file(f):
            raise SourceFormatError(f"{rel}: not an ALOHA / ACT episode (no /action and /observations/qpos)")
        steps = int(f["action"].shape[0]) if f["action"].shape else 0
        compressed = bool(jsonable(f.attrs.get("compress", False))) or "compress_len" in f
        feats: dict[str, FeatureSpec] = {}
        for key, ds in leaves(f, "", rel):
            first_jpeg = None
            if compressed and key.startswith(IMAGES) and ds.ndim == 2 and ds.shape[0]:
                check_dataset(ds, rel)
                first_jpeg = ds[0].tobytes()  # the header gives the frame size (the zero padding is ignored)
            spec = _declare(key, ds, compressed, steps, first_jpeg)
            if spec is not None:
                feats[key] = spec
            elif key.startswith(IMAGES):
                raise SourceFormatError(f"{rel}: camera /{key} is neither raw HxWx3 uint8 frames nor JPEG rows "
                                        f"({ds.dtype} {tuple(ds.shape)})")
        return unique_names(feats), compressed

    # ---- discover ----------------------------------------------------------------------------------------------
    def discover(self) -> Inventory:
        refs: list[EpisodeRef] = []
        findings: list[Finding] = []
        sims: set[bool] = set()
        for i, rel in enumerate(self.files):
            length = 0
            try:
                f = self._h5(rel)
                act = f.get("action")
                length = check_count(f"{rel}: steps", int(act.shape[0]) if act is not None and act.shape else 0,
                                     MAX_EPISODE_LENGTH)
                sims.add(bool(jsonable(f.attrs.get("sim", False))))
            except (SourceFormatError, EpisodeDataOutside) as exc:
                findings.append(Finding("warning", "AL101", f"{exc}; episode {i} will be quarantined"))
            refs.append(EpisodeRef(i, length, rel, source_id=posixpath.splitext(posixpath.basename(rel))[0]))
        declared = {"files": self.files[:100], "compressed": self.compressed, "sim": sorted(sims),
                    "fps_source": self.fps_source}
        name = posixpath.splitext(self.files[0])[0] if self._single else posixpath.basename(self.root)
        inv = Inventory(dataset_name=name or "aloha", dataset_root=self.url, source_format="aloha",
                        source_version="hdf5", episodes_count=len(refs), total_steps=sum(r.length for r in refs),
                        features=self.features, refs=refs, fps=self.fps, robot_type="aloha", declared=declared,
                        metadata_types=dict(METADATA), language_source="", step_storage="hdf5")
        inv.findings = findings + self.fps_findings()
        return inv

    # ---- load one episode --------------------------------------------------------------------------------------
    def load_episode(self, ref: EpisodeRef) -> Episode:
        rel = ref.data_path
        where = f"{rel} (episode {ref.episode_index})"
        try:
            f = self._h5(rel)
        except SourceFormatError as exc:  # this file only: the episode is quarantined, the others convert
            raise DataCorrupt(f"{exc} (episode {ref.episode_index})") from exc
        except EpisodeDataOutside as exc:
            raise EpisodeDataOutside(f"{exc} (episode {ref.episode_index})") from exc
        steps = ref.length
        ep = Episode(ref=ref, length=steps)
        datasets = dict(leaves(f, "", where))
        cams = [k for k, s in self.features.items() if s.kind == "image"]
        for key, spec in self.features.items():
            if spec.role == "bookkeeping":
                continue
            ds = datasets.get(key)
            if ds is None:
                raise DataCorrupt(f"{where}: no /{key} dataset")
            check_dataset(ds, where)
            if not ds.shape or int(ds.shape[0]) != steps:
                raise DataCorrupt(f"{where}: /{key} has {ds.shape[0] if ds.shape else 0} rows, /action has {steps}")
            if spec.kind == "tensor":
                ep.columns[key] = read_steps(ds, spec, where, steps)
        if cams:
            ep.images.update(self._cameras(f, datasets, cams, where, steps))
        ep.step_tasks = [""] * steps
        ep.metadata = {"episode_id": ref.episode_index, "file_path": rel,
                       "sim": bool(jsonable(f.attrs.get("sim", False)))}
        return ep

    def _cameras(self, f: Any, datasets: dict[str, Any], cams: list[str], where: str,
                 steps: int) -> dict[str, RawFrames]:
        """Each camera's frames, read lazily: raw rows as stored, JPEG rows decoded (lengths checked first)."""
        specs = {k: self.features[k] for k in cams}
        if not self.compressed:
            for key, spec in specs.items():
                ds = datasets[key]
                if ds.dtype != np.uint8 or tuple(ds.shape[1:]) != spec.shape:
                    raise DataCorrupt(f"{where}: /{key} is {ds.dtype} {tuple(ds.shape)}, expected frames of "
                                      f"{list(spec.shape)} uint8")
            return {k: RawFrames(LazyFrames(steps, specs[k].shape, _raw_reader(datasets[k], where),
                                            chunk=IMAGE_CHUNK)) for k in cams}
        if "compress_len" not in datasets:
            raise DataCorrupt(f"{where}: compressed images without /compress_len")
        widths = {k: int(datasets[k].shape[1]) if datasets[k].ndim == 2 else 0 for k in cams}
        for key, width in widths.items():
            if not width or datasets[key].dtype != np.uint8:
                raise DataCorrupt(f"{where}: /{key} is not rows of JPEG bytes ({datasets[key].dtype} "
                                  f"{tuple(datasets[key].shape)})")
        check_dataset(datasets["compress_len"], where)
        lens = jpeg_rows.lengths_table(datasets["compress_len"], len(cams), steps, min(widths.values()), where)
        names = [k[len(IMAGES):] for k in cams]
        rows = {n: datasets[k] for n, k in zip(names, cams)}
        order = jpeg_rows.camera_rows(names, {n: ds[0] for n, ds in rows.items()},
                                      {n: ds[steps - 1] for n, ds in rows.items()}, lens, where) if steps else {}
        out = {}
        for name, key in zip(names, cams):
            h, w, _ = specs[key].shape
            out[key] = RawFrames(LazyFrames(steps, (h, w, 3), _jpeg_reader(rows[name], lens[order[name]], (h, w),
                                                                            f"{where} camera {name}"),
                                            chunk=IMAGE_CHUNK))
        return out


def _raw_reader(ds: Any, where: str) -> Any:
    def read(a: int, b: int) -> np.ndarray:
        try:
            return np.asarray(ds[a:b])
        except OSError as exc:
            raise DataCorrupt(f"{where}: {ds.name} frames {a}..{b - 1} unreadable ({exc})") from exc
    return read


def _jpeg_reader(ds: Any, lens: np.ndarray, hw: tuple[int, int], where: str) -> Any:
    def read(a: int, b: int) -> np.ndarray:
        try:
            block = np.asarray(ds[a:b])
        except OSError as exc:
            raise DataCorrupt(f"{where}: rows {a}..{b - 1} unreadable ({exc})") from exc
        return jpeg_rows.decode_rows(block, lens[a:b], hw, where, a)
    return read
