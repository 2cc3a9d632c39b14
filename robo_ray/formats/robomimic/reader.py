"""robomimic-family reader (robomimic, LIBERO, MimicGen, Isaac Lab): one HDF5 file, or a folder of them (a LIBERO
suite: one file per task), each with `data/demo_<N>` groups (layout: robo_ray/formats/robomimic/layout.py).

Each demo is one episode of T steps (T = its `actions` rows): `obs/*` per step, `rewards` -> reward, `dones` ->
the `done` feature (robomimic's done_mode decides what it means, so it is kept as data, not a terminal flag).
Episodes are numbered over the files in name order, demos in number order. Splits come from the file's masks:
`mask/train`, `mask/valid` (-> val), `mask/test`; the other masks (filter keys) are listed in each episode's
`filter_keys` metadata. The language is a demo's `ep_meta` "lang" (RoboCasa), else the file's LIBERO
`problem_info` language_instruction. The frame rate is
env_args' `control_freq` (robosuite's control rate) when the file records it, else --fps.

The files are untrusted: a soft / external link inside a demo quarantines that demo (EP207), one elsewhere refuses
the file (RR301); every dataset is bounded before it is read; images are read a few frames at a time.
"""
from __future__ import annotations

import posixpath
from typing import Any, ClassVar

import numpy as np

from robo_ray.episode import Episode, EpisodeRef, FeatureSpec, RawFrames
from robo_ray.errors import (DataCorrupt, DataMissing, EpisodeDataOutside, RoboRayError, SourceFormatError,
                             UnsafeInput)
from robo_ray.formats.hdf5 import (Hdf5FilesReader, LazyFrames, attr_text, check_dataset, foreign_links, jsonable,
                                   leaves, read_steps)
from robo_ray.formats.robomimic import layout
from robo_ray.readers.base import Finding, Inventory, MetaType
from robo_ray.safety import MAX_EPISODE_LENGTH, MAX_EPISODES, check_count

METADATA: dict[str, MetaType] = {"episode_id": "int", "file_path": "text", "demo_key": "text",
                                 "filter_keys": "text"}
IMAGE_CHUNK = 32  # frames read at a time


class RobomimicReader(Hdf5FilesReader):
    """Reads a robomimic-family HDF5 file (or a folder of them) from any fsspec URL."""

    format_name = "robomimic"
    sniff_hint: ClassVar[str] = "*.hdf5 with data/demo_N groups (robomimic, LIBERO, MimicGen, Isaac Lab)"
    sniff_file_hint: ClassVar[str | None] = "a robomimic-family HDF5 file (data/demo_N)"
    file_test = staticmethod(layout.is_robomimic_file)

    @classmethod
    def sniff(cls, fs: Any, root: str) -> bool:
        """A robomimic-family file, or a folder of them: data/demo_<N> groups inside."""
        return cls.sniff_files(fs, root)

    def __init__(self, url: str, storage_options: dict[str, Any] | None = None) -> None:
        super().__init__(url, storage_options)
        self._file_info: dict[str, dict[str, Any]] = {}
        self.files = self._list_files()
        first = self.files[0]
        demos = self._demos(first)
        if not demos:
            raise SourceFormatError(f"{first}: data/ holds no demo_<N> groups")
        data = self._h5(first)["data"]
        self.features, self.skipped = layout.demo_features(data[demos[0][1]], first)
        for _, name in demos[1:layout.CHECKED_DEMOS]:
            if name in self._info(first)["outside"]:
                continue  # quarantined when loaded (EP207)
            try:
                odd = layout.not_per_step(data[name], list(self.features), first)
            except RoboRayError:
                continue  # a demo that cannot be looked into is that demo's error, when loaded
            self.features = {k: f for k, f in self.features.items() if k not in odd}
            self.skipped += odd
        self.varying = self._shapes_across_files()
        info = self._info(first)
        rate = layout.control_freq(info["env_args"])
        if rate:
            self.set_fps(rate, f"{first} data attrs env_args.env_kwargs.control_freq")
        elif info["libero"]:
            self.set_fps(layout.LIBERO_RATE, "LIBERO's create_dataset.py control_freq (20 Hz)", held=False)

    def _shapes_across_files(self) -> dict[str, str]:
        """Features whose per-step shape differs in another file's first demo (a LIBERO suite's `states`: each scene
        has its own MuJoCo state size) are left out (key -> why) rather than quarantining those files' episodes. A
        file that cannot be opened is its episodes' error, when discovered."""
        varying: dict[str, str] = {}
        for rel in self.files[1:]:
            try:
                demos = self._demos(rel)
                group = self._h5(rel)["data"][demos[0][1]] if demos else None
                shapes = {k: tuple(ds.shape[1:]) for k, ds in leaves(group, "", rel)} if group is not None else {}
            except RoboRayError:
                continue
            for key, spec in list(self.features.items()):
                shape = shapes.get(key)
                if shape is not None and shape != tuple(spec.declared_shape or spec.shape):
                    varying[key] = (f"{key}: {list(spec.declared_shape or spec.shape)} a step in {self.files[0]}, "
                                    f"{list(shape)} in {rel}")
                    del self.features[key]
        self.skipped += list(varying)
        return varying

    def _checked(self, rel: str, h5: Any) -> None:
        """Read what the file says about all its demos once (links outside demos refuse the file, RR301)."""
        if rel not in self._file_info:
            self._file_info[rel] = self._read_info(rel, h5)

    def _info(self, rel: str) -> dict[str, Any]:
        self._h5(rel)
        return self._file_info[rel]

    def _read_info(self, rel: str, f: Any) -> dict[str, Any]:
        """What the file says about all its demos: attributes, masks, the demos that hold foreign links."""
        outside: dict[str, str] = {}
        for name, what in foreign_links(f):
            parts = name.split("/")
            if len(parts) >= 3 and parts[0] == "data" and layout.DEMO.match(parts[1]):
                outside.setdefault(parts[1], f"/{name} is {what}")
            else:
                raise UnsafeInput(f"{rel}: /{name} is {what}; refused")
        if not layout.is_robomimic_file(f):
            raise SourceFormatError(f"{rel}: not a robomimic-family file (no data/demo_<N> groups)")
        attrs = f["data"].attrs
        masks = layout.read_masks(f, rel)
        split_of, filter_keys, mask_findings = self._splits(rel, masks)
        return {"split_of": split_of, "filter_keys": filter_keys, "mask_findings": mask_findings,
                "env_args": layout.json_attr(attrs, "env_args", rel) or layout.json_attr(attrs, "env_info", rel),
                "problem_info": layout.json_attr(attrs, "problem_info", rel),
                "env_name": attr_text(attrs, "env_name", 4096) or attr_text(attrs, "env", 4096),
                "total": jsonable(attrs.get("total")), "opengl": layout.opengl_frames(attrs),
                "libero": "problem_info" in attrs and "bddl_file_name" in attrs,
                "masks": masks, "outside": outside}

    def _demos(self, rel: str) -> list[tuple[int, str]]:
        """(number, name) of the file's demo groups, in number order."""
        found = []
        for name in self._h5(rel)["data"]:
            n = layout.demo_number(name)
            if n is not None:
                found.append((n, name))
        check_count(f"{rel}: number of demos", len(found), MAX_EPISODES)
        return sorted(found)

    # ---- discover ----------------------------------------------------------------------------------------------
    @staticmethod
    def _splits(rel: str, masks: dict[str, list[str]]) -> tuple[dict[str, str], dict[str, str], list[Finding]]:
        """demo -> split, demo -> its other filter keys ("a,b"), and findings about the masks of one file."""
        split_of: dict[str, str] = {}
        filters: dict[str, list[str]] = {}
        findings: list[Finding] = []
        for mask, demos in masks.items():
            split = layout.SPLIT_MASKS.get(mask)
            for demo in demos:
                if split is None:
                    filters.setdefault(demo, []).append(mask)
                elif split_of.setdefault(demo, split) != split:
                    findings.append(Finding("warning", "RM104", f"{rel}: {demo} is in mask/{mask} and in the "
                                            f"{split_of[demo]} split; kept in {split_of[demo]}"))
        return split_of, {d: ",".join(keys) for d, keys in filters.items()}, findings

    def discover(self) -> Inventory:
        refs: list[EpisodeRef] = []
        findings: list[Finding] = []
        tasks: list[str] = []
        for rel in self.files:
            info = self._info(rel)
            f = self._h5(rel)
            split_of, mask_findings = info["split_of"], info["mask_findings"]
            findings += mask_findings
            lang = layout.language(info["problem_info"])
            demos = self._demos(rel)
            names = {name for _, name in demos}
            unknown = sorted({d for ds in info["masks"].values() for d in ds} - names)
            if unknown:
                findings.append(Finding("warning", "RM105", f"{rel}: masks name demos the file does not hold: "
                                        f"{', '.join(unknown[:5])}"))
            steps = 0
            for _, name in demos:
                length = self._demo_length(rel, f["data"], name, info, findings)
                steps += length
                text = self._demo_text(rel, f["data"], name, findings) or lang
                if text and text not in tasks:
                    tasks.append(text)
                refs.append(EpisodeRef(len(refs), length, rel, tasks=(text,) if text else (), source_id=name,
                                       split=split_of.get(name)))
            total = info["total"]
            if isinstance(total, int) and total != steps:
                findings.append(Finding("warning", "RM103", f"{rel}: data attrs total={total} but the demos hold "
                                        f"{steps} steps", total, steps))
        check_count("number of episodes", len(refs), MAX_EPISODES)
        findings += [Finding("warning", "RM109", f"{why}: not one shape across the files; left out")
                     for why in self.varying.values()]
        first = self._info(self.files[0])
        declared = {"files": self.files[:100], "env_name": first["env_name"], "env_args": first["env_args"],
                    "problem_info": first["problem_info"] if len(self.files) == 1 else None,
                    "masks": {k: len(v) for k, v in first["masks"].items()}, "fps_source": self.fps_source,
                    "image_convention": "opengl (flipped to top-down)" if first["opengl"] else "as stored",
                    "left_out": self.skipped[:50]}
        name = posixpath.splitext(self.files[0])[0] if self._single else posixpath.basename(self.root)
        inv = Inventory(dataset_name=name or "robomimic", dataset_root=self.url, source_format="robomimic",
                        source_version="hdf5", episodes_count=len(refs), total_steps=sum(r.length for r in refs),
                        features=self.features, refs=refs, fps=self.fps,
                        robot_type=layout.robot_type(first["env_args"]), tasks=tasks,
                        declared=jsonable(declared), metadata_types=dict(METADATA),
                        language_source="task" if tasks else "", step_storage="hdf5")
        inv.findings = findings + self.fps_findings()
        return inv

    @staticmethod
    def _demo_text(rel: str, data: Any, name: str, findings: list[Finding]) -> str:
        """The demo's own instruction (`ep_meta` "lang"), "" when it has none; an unreadable ep_meta is a warning."""
        import h5py

        if not isinstance(data.get(name, getlink=True), h5py.HardLink):
            return ""
        text, why = layout.demo_language(data[name].attrs, f"{rel}: {name}")
        if why:
            findings.append(Finding("warning", "RM108", f"{why}; the demo has no instruction of its own"))
        return text

    def _demo_length(self, rel: str, data: Any, name: str, info: dict[str, Any], findings: list[Finding]) -> int:
        """T of one demo: its actions' rows (0 when the demo cannot be looked into: it is quarantined when loaded,
        a warning says why)."""
        if name in info["outside"]:
            findings.append(Finding("warning", "RM106", f"{rel}: {name}: {info['outside'][name]}; the demo will "
                                    "be quarantined"))
            return 0
        actions = data[name].get("actions", getlink=True)
        if actions is None:
            findings.append(Finding("warning", "RM107", f"{rel}: {name} has no actions; it will be quarantined"))
            return 0
        ds = data[name]["actions"]
        declared = jsonable(data[name].attrs.get("num_samples"))
        length = check_count(f"{rel}: {name} steps", int(ds.shape[0]) if ds.shape else 0, MAX_EPISODE_LENGTH)
        if isinstance(declared, int) and declared != length:
            findings.append(Finding("warning", "RM102", f"{rel}: {name} num_samples={declared} but its actions "
                                    f"have {length} rows", declared, length))
        return length

    # ---- load one episode --------------------------------------------------------------------------------------
    def load_episode(self, ref: EpisodeRef) -> Episode:
        rel, name = ref.data_path, ref.source_id or ""
        where = f"{rel}: {name} (episode {ref.episode_index})"
        info = self._info(rel)
        if name in info["outside"]:
            raise EpisodeDataOutside(f"{where}: {info['outside'][name]}; refused")
        data = self._h5(rel)["data"]
        if name not in data:
            raise DataMissing(f"{where}: the demo group is missing")
        group = data[name]
        ep = Episode(ref=ref, length=ref.length)
        for key, spec in self.features.items():
            if spec.role == "bookkeeping":
                continue
            ds = _dataset(group, key, where)
            check_dataset(ds, where)
            rows = int(ds.shape[0]) if ds.shape else 0
            if rows != ref.length:
                raise DataCorrupt(f"{where}: {key!r} has {rows} rows, the demo has {ref.length} steps")
            if spec.kind == "image":
                ep.images[key] = self._frames(ds, spec, where, info["opengl"])
            else:
                ep.columns[key] = read_steps(ds, spec, where, ref.length)
        lang = ref.tasks[0] if ref.tasks else ""
        ep.step_tasks = [lang] * ref.length
        ep.metadata = {"episode_id": ref.episode_index, "file_path": rel, "demo_key": name,
                       "filter_keys": info["filter_keys"].get(name, "")}
        return ep

    @staticmethod
    def _frames(ds: Any, spec: FeatureSpec, where: str, flip: bool) -> RawFrames:
        """The camera's frames, read IMAGE_CHUNK at a time when the writer takes them (bottom-up frames flipped)."""
        if ds.dtype != np.dtype(spec.dtype) or tuple(ds.shape[1:]) != tuple(spec.declared_shape or spec.shape):
            raise DataCorrupt(f"{where}: {ds.name} is {ds.dtype} {tuple(ds.shape)}, expected {spec.dtype} frames "
                              f"of {list(spec.declared_shape or spec.shape)}")
        h, w, c = spec.shape

        def read(a: int, b: int) -> np.ndarray:
            try:
                block = np.asarray(ds[a:b]).reshape(b - a, h, w, c)
            except OSError as exc:
                raise DataCorrupt(f"{where}: {ds.name} frames {a}..{b - 1} unreadable ({exc})") from exc
            return block[:, ::-1] if flip else block

        return RawFrames(LazyFrames(int(ds.shape[0]), (h, w, c), read, ds.dtype, IMAGE_CHUNK))


def _dataset(group: Any, key: str, where: str) -> Any:
    """The dataset at `key` below `group`, every step a hard link (checked without following anything)."""
    import h5py

    node = group
    for part in key.split("/"):
        if not isinstance(node, h5py.Group):
            raise DataCorrupt(f"{where}: {node.name} is not a group")
        link = node.get(part, getlink=True)
        if link is None:
            raise DataCorrupt(f"{where}: no {key!r} dataset")
        if not isinstance(link, h5py.HardLink):
            raise EpisodeDataOutside(f"{where}: {node.name}/{part} is an HDF5 {type(link).__name__}; refused")
        node = node[part]
    if not isinstance(node, h5py.Dataset):
        raise DataCorrupt(f"{where}: {key!r} is not a dataset")
    return node
