"""Minari reader: 0.5 HDF5 and Arrow/Parquet datasets, and 0.4 HDF5 datasets (metadata in root attributes).

Layout (FORMATS.md part 3): `<dataset>/data/main_data.hdf5` with one group `episode_<id>` per episode holding
`observations (T+1, ...)`, `actions (T, ...)`, `rewards`, `terminations`, `truncations (T,)`, `infos/...`; Dict and
Tuple spaces are nested groups (`_index_<i>` for Tuple items); image Boxes are JPEG bytes when `jpeg_encoding`.
Arrow: `data/<id>/part-0.arrow` per episode, every column padded to T+1 rows, Dict/Tuple spaces as structs.

Episodes come out in the RLDS layout: T transitions and T+1 observations make T+1 steps; action, reward,
terminations and truncations get a zero row at the end (the invalid last step), and the reader adds two per-step
columns, `is_terminal` (terminations[-1] on the last step) and `discount` (0 after a terminating transition and on
the last step, else 1). The HDF5 file is untrusted: an external or soft link refuses the whole file when it is opened
(RR301); an episode with a virtual or externally stored dataset (EP207), or one beyond the shape limits (EP206), is
quarantined before anything of it is read.

The spaces and features (roles, names) are `spaces.py`; the Arrow columns' flattening `arrow_columns.py`.
"""
from __future__ import annotations

import json
import posixpath
import re
from typing import Any, ClassVar

import numpy as np

from robo_ray.episode import Episode, EpisodeRef, FeatureSpec, RawFrames
from robo_ray.errors import DataCorrupt, DataMissing, SourceFormatError
from robo_ray.formats.hdf5 import check_dataset, check_links, children, jsonable, leaves, open_h5, peek_h5
from robo_ray.formats.minari.arrow_columns import arrow_columns
from robo_ray.formats.minari.spaces import declare_features, h5_feature, parse_space, space_features
from robo_ray.readers.base import BaseReader, Finding, Inventory, MetaType
from robo_ray.safety import MAX_EPISODE_LENGTH, MAX_EPISODES, check_count, check_declared_counts
from robo_ray.storage import join

MAIN_FILE = "main_data.hdf5"
STEP_KEYS = ("observations", "actions", "rewards", "terminations", "truncations")
TRANSITION_KEYS = STEP_KEYS[1:]
_EPISODE_GROUP = re.compile(r"^episode_(\d{1,12})$")
_ARROW_SUFFIX = {"arrow": ".arrow", "parquet": ".parquet"}
# Episode.metadata of every episode (episode_id, file_path, and the seed minari recorded at reset, if any)
METADATA: dict[str, MetaType] = {"episode_id": "int", "file_path": "text", "seed": "int"}


def _other_layout(fs: Any, path: str) -> bool:
    """A readable HDF5 file without episode_<N> groups at its root (a damaged HDF5 file is one SourceFormatError
    naming it, whatever its format)."""
    return peek_h5(fs, path, lambda f: not any(_EPISODE_GROUP.match(name) for name in f))


class MinariReader(BaseReader):
    """Reads a Minari dataset folder (or its `data/main_data.hdf5`) from any fsspec URL."""

    format_name = "minari"
    sniff_hint: ClassVar[str] = "data/main_data.hdf5 / data/metadata.json (Minari)"
    sniff_file_hint: ClassVar[str | None] = "a Minari main_data.hdf5"

    @classmethod
    def sniff(cls, fs: Any, root: str) -> bool:
        """A Minari dataset folder (data/main_data.hdf5 or data/metadata.json), its data/ folder, or an .hdf5
        file, unless it is an HDF5 file without episode_<N> groups at its root (robomimic's, ALOHA's: their
        readers take it)."""
        if fs.isfile(root):
            return root.endswith(".hdf5") and not _other_layout(fs, root)
        for base in (join(root, "data"), root):
            if fs.exists(join(base, MAIN_FILE)) or (posixpath.basename(base) == "data"
                                                   and fs.exists(join(base, "metadata.json"))):
                return True
        return False

    def dataset_root(self, path: str) -> str:
        """The dataset folder, also when the URL names its data/main_data.hdf5 or its data/ folder."""
        if path.endswith(".hdf5"):
            path = posixpath.dirname(path)
        if posixpath.basename(path) == "data" and not self._exists(join(path, "data")):
            path = posixpath.dirname(path)
        return path

    def __init__(self, url: str, storage_options: dict[str, Any] | None = None) -> None:
        super().__init__(url, storage_options)
        # Minari records no rate: --fps gives one (BaseReader.apply_given_fps)
        self._h5: Any = None
        self._h5_file: Any = None
        self.legacy = not self.exists("data/metadata.json")
        if self.legacy:
            if not self.exists(f"data/{MAIN_FILE}"):
                raise SourceFormatError(f"{url}: not a Minari dataset (no data/metadata.json or data/{MAIN_FILE})")
            self.metadata = {k: jsonable(v) for k, v in self._file().attrs.items()}
            self.data_format = "hdf5"
        else:
            self.metadata = self._read_json("data/metadata.json")
            if not isinstance(self.metadata, dict):
                raise SourceFormatError("data/metadata.json is not a JSON object")
            self.data_format = self.metadata.get("data_format", "hdf5")
        if self.data_format not in ("hdf5", *_ARROW_SUFFIX):
            raise SourceFormatError(f"data/metadata.json: data_format {self.data_format!r} is not supported "
                                    "(hdf5, arrow, parquet)")
        check_declared_counts(f"data/{MAIN_FILE} attributes" if self.legacy else "data/metadata.json", self.metadata,
                              {"total_episodes": MAX_EPISODES, "total_steps": MAX_EPISODES * MAX_EPISODE_LENGTH})
        self.version = str(self.metadata.get("minari_version") or ("0.4" if self.legacy else "0.5"))
        self.jpeg = bool(self.metadata.get("jpeg_encoding", not self.legacy))
        self._episode_dirs: dict[int, list[str]] = {}
        self.features = self._features()

    # ---- the HDF5 file -----------------------------------------------------------------------------------------
    def _file(self) -> Any:
        """The open main_data.hdf5 (one handle per reader; reopened after unpickling)."""
        if self._h5 is None:
            rel = f"data/{MAIN_FILE}"
            self._h5, self._h5_file = open_h5(self.fs, self.path(rel), rel)
            try:
                check_links(self._h5, rel)
            except BaseException:
                self.close()
                raise
        return self._h5

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state["_h5"] = state["_h5_file"] = None
        return state

    def close(self) -> None:
        super().close()
        if self._h5 is not None:
            self._h5.close()
            self._h5 = None
        if self._h5_file is not None:
            self._h5_file.close()
            self._h5_file = None

    # ---- features ----------------------------------------------------------------------------------------------
    def _features(self) -> dict[str, FeatureSpec]:
        obs = parse_space(self.metadata.get("observation_space"), "observation_space")
        act = parse_space(self.metadata.get("action_space"), "action_space")
        first = self._first_episode_arrays()
        feats: list[FeatureSpec] = []
        for name, space in (("observations", obs), ("actions", act)):
            if space is not None:
                feats += space_features(space, name, self.jpeg, f"{name[:-1]}_space")
            else:  # 0.4 files may carry only env_spec: take the structure from the data
                feats += [h5_feature(k, ds) for k, ds in first.items() if k == name or k.startswith(name + "/")]
            if not any(f.key == name or f.key.startswith(name + "/") for f in feats):
                raise SourceFormatError(f"{self.url}: no {name} found (no space in the metadata and no data)")
        if any(f.kind == "image" for f in feats if f.key.startswith("actions")):
            raise SourceFormatError("action_space: image action spaces are not supported")
        for key in ("rewards", "terminations", "truncations"):
            ds = first.get(key)
            dtype = str(ds.dtype) if ds is not None and ds.dtype.kind in "biuf" else \
                ("float64" if key == "rewards" else "bool")
            feats.append(FeatureSpec(key, "tensor", dtype, ()))
        for key, ds in first.items():
            if key.split("/")[0] not in STEP_KEYS:
                feats.append(h5_feature(key, ds))
        feats.append(FeatureSpec("is_terminal", "tensor", "bool", ()))
        feats.append(FeatureSpec("discount", "tensor", "float32", ()))
        return declare_features({f.key: f for f in feats})

    def _first_episode_arrays(self) -> dict[str, Any]:
        """Leaf datasets/columns of the first episode, for the parts no space describes (infos, extras)."""
        ids = self._episode_ids()
        if not ids:
            return {}
        if self.data_format == "hdf5":
            group = self._file()[f"episode_{ids[0]}"]
            return dict(leaves(group, "", f"data/{MAIN_FILE}"))
        table = self._arrow_table(ids[0])
        return {k: np.asarray(v) if not isinstance(v, list) else np.asarray(v, dtype=object)
                for k, v in arrow_columns(table, {}).items()}

    # ---- discover ----------------------------------------------------------------------------------------------
    def _episode_ids(self) -> list[int]:
        if self.data_format == "hdf5":
            ids = []
            for name, _ in children(self._file(), f"data/{MAIN_FILE}"):
                m = _EPISODE_GROUP.match(name)
                if m:
                    ids.append(int(m.group(1)))
            return sorted(ids)
        if not self._episode_dirs:
            suffix = _ARROW_SUFFIX[self.data_format]
            for p in sorted(self.fs.glob(self.path(f"data/*/*{suffix}"))):
                d = posixpath.basename(posixpath.dirname(p))
                if d.isdigit() and len(d) <= 12:
                    self._episode_dirs.setdefault(int(d), []).append(posixpath.relpath(p, self.root))
        return sorted(self._episode_dirs)

    def episode_refs(self) -> list[EpisodeRef]:
        ids = self._episode_ids()
        check_count("number of episodes", len(ids), MAX_EPISODES)
        refs = []
        for i in ids:
            if self.data_format == "hdf5":
                group = self._file()[f"episode_{i}"]
                rewards = group.get("rewards")
                if rewards is None or not hasattr(rewards, "shape") or len(rewards.shape) < 1:
                    raise SourceFormatError(f"data/{MAIN_FILE}: episode_{i} has no rewards dataset")
                T = check_count(f"episode_{i} steps", int(rewards.shape[0]), MAX_EPISODE_LENGTH)
                refs.append(EpisodeRef(i, T + 1, f"data/{MAIN_FILE}", source_id=f"episode_{i}"))
            else:
                meta = self._episode_meta(i)
                T = check_count(f"data/{i}/metadata.json total_steps", meta.get("total_steps"), MAX_EPISODE_LENGTH)
                refs.append(EpisodeRef(i, T + 1, self._episode_dirs[i][0], source_id=str(i)))
        return refs

    def _episode_meta(self, i: int) -> dict[str, Any]:
        if self.data_format == "hdf5":
            return {k: jsonable(v) for k, v in self._file()[f"episode_{i}"].attrs.items()}
        rel = f"data/{i}/metadata.json"
        if not self.exists(rel):
            return {}
        meta = self._read_json(rel)
        return meta if isinstance(meta, dict) else {}

    def discover(self) -> Inventory:
        refs = self.episode_refs()
        md = self.metadata
        name = md.get("dataset_id") if isinstance(md.get("dataset_id"), str) else posixpath.basename(self.root)
        declared = {k: md.get(k) for k in ("total_episodes", "total_steps", "dataset_id", "minari_version",
                                           "data_format", "jpeg_encoding", "author", "author_email",
                                           "algorithm_name", "code_permalink", "description", "dataset_size")
                    if k in md}
        declared["data_format"] = self.data_format
        declared["fps_source"] = self.fps_source
        for k in ("env_spec", "eval_env_spec", "observation_space", "action_space"):
            if isinstance(md.get(k), str):
                try:
                    declared[k] = json.loads(md[k])
                except json.JSONDecodeError:
                    declared[k] = md[k]
        inv = Inventory(dataset_name=name or "minari", dataset_root=self.url, source_format="minari",
                        source_version=self.version, episodes_count=len(refs),
                        total_steps=sum(r.length for r in refs), features=self.features, refs=refs, fps=self.fps,
                        robot_type=(declared.get("env_spec") or {}).get("id") if isinstance(
                            declared.get("env_spec"), dict) else None, declared=jsonable(declared),
                        metadata_types=dict(METADATA), language_source="", step_storage="hdf5")
        inv.findings = self._findings(inv) + self.fps_findings()
        return inv

    def _findings(self, inv: Inventory) -> list[Finding]:
        out: list[Finding] = []
        transitions = sum(r.length - 1 for r in inv.refs)
        n_eps, n_steps = inv.declared.get("total_episodes"), inv.declared.get("total_steps")
        if isinstance(n_eps, int) and n_eps != inv.episodes_count:
            out.append(Finding("error", "M101", f"metadata total_episodes={n_eps} but the data holds "
                               f"{inv.episodes_count} episodes", n_eps, inv.episodes_count))
        if isinstance(n_steps, int) and n_steps != transitions:
            out.append(Finding("error", "M102", f"metadata total_steps={n_steps} but the episodes hold "
                               f"{transitions} transitions", n_steps, transitions))
        ids = [r.episode_index for r in inv.refs]
        if ids != list(range(len(ids))):
            out.append(Finding("warning", "M103", "episode ids are not contiguous 0..N-1"))
        return out

    # ---- load one episode --------------------------------------------------------------------------------------
    def _arrow_table(self, i: int) -> Any:
        import pyarrow as pa
        import pyarrow.ipc as ipc
        import pyarrow.parquet as pq

        if i not in self._episode_dirs:
            self._episode_ids()
        parts = self._episode_dirs.get(i)
        if not parts:
            raise DataMissing(f"data/{i}: episode {i} has no data files")
        tables = []
        for rel in parts:
            try:
                with self.open_binary(rel) as f:
                    tables.append(ipc.open_file(f).read_all() if self.data_format == "arrow" else pq.read_table(f))
            except (pa.ArrowException, OSError) as exc:
                raise DataCorrupt(f"{rel}: unreadable {self.data_format} file ({exc})") from exc
        try:
            return pa.concat_tables(tables)
        except pa.ArrowException as exc:
            raise DataCorrupt(f"data/{i}: part files disagree ({exc})") from exc

    def _raw_arrays(self, ref: EpisodeRef) -> tuple[dict[str, Any], int]:
        """Leaf arrays keyed like the features, and T (transitions). Arrow columns are cut back to T rows."""
        if self.data_format == "hdf5":
            where = f"data/{MAIN_FILE}"
            if ref.source_id not in self._file():
                raise DataMissing(f"{where}: group {ref.source_id} is missing")
            out: dict[str, Any] = {}
            for key, ds in leaves(self._file()[ref.source_id], "", where):
                check_dataset(ds, where)
                out[key] = ds[()]
            if "rewards" not in out:
                raise DataCorrupt(f"{where}: {ref.source_id} has no rewards")
            return out, len(out["rewards"])
        table = self._arrow_table(ref.episode_index)
        flat = arrow_columns(table, self.features)
        n = table.num_rows
        for key in TRANSITION_KEYS:
            for k in list(flat):
                if k == key or k.startswith(key + "/"):
                    flat[k] = flat[k][:n - 1]  # Arrow pads transitions to T+1 rows
        return flat, n - 1

    def load_episode(self, ref: EpisodeRef) -> Episode:
        arrays, T = self._raw_arrays(ref)
        n = T + 1
        if n != ref.length:
            raise DataCorrupt(f"{ref.data_path}: episode {ref.episode_index} has {T} transitions, the index "
                              f"says {ref.length - 1}")
        ep = Episode(ref=ref, length=n)
        for key, spec in self.features.items():
            if key in ("is_terminal", "discount"):
                continue
            if key not in arrays:
                raise DataCorrupt(f"{ref.data_path}: episode {ref.episode_index} has no {key!r}")
            value = arrays[key]
            rows = len(value)
            top = key.split("/")[0]
            if top in TRANSITION_KEYS:  # one row per transition, exactly (T+1 actions are not an extra step)
                if rows != T:
                    raise DataCorrupt(f"{ref.data_path}: episode {ref.episode_index} {key!r} has {rows} rows, "
                                      f"expected {T} (one per transition)")
                value = _pad(value, spec)
            elif rows == T and top != "observations":  # infos / extras recorded per transition
                value = _pad(value, spec)
            elif rows != n:
                want = f"{n} (one per step: {T} transitions + the final one)" if top == "observations" else \
                    f"{n} (one per step) or {T} (one per transition)"
                raise DataCorrupt(f"{ref.data_path}: episode {ref.episode_index} {key!r} has {rows} rows, "
                                  f"expected {want}")
            if spec.kind == "image":
                ep.images[key] = self._image_rows(value, spec, ref)
            elif spec.kind == "string":
                ep.columns[key] = np.asarray([v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)
                                              for v in value], dtype=object)
            else:
                ep.columns[key] = self._tensor(np.asarray(value), spec, ref, n)
        term = np.asarray(ep.columns["terminations"], dtype=bool).reshape(n)
        is_terminal = np.zeros(n, dtype=bool)
        if T:
            is_terminal[-1] = term[T - 1]
        discount = np.where(term, 0.0, 1.0).astype(np.float32)
        discount[-1] = 0.0
        ep.columns["is_terminal"], ep.columns["discount"] = is_terminal, discount
        ep.step_tasks = [""] * n
        meta = self._episode_meta(ref.episode_index) if self.data_format != "hdf5" else \
            {k: jsonable(v) for k, v in self._file()[ref.source_id].attrs.items()}
        seed = meta.get("seed")
        ep.metadata = {"episode_id": ref.episode_index, "file_path": ref.data_path,
                       "seed": int(seed) if isinstance(seed, (int, float)) and not isinstance(seed, bool) else None}
        return ep

    @staticmethod
    def _tensor(value: np.ndarray, spec: FeatureSpec, ref: EpisodeRef, n: int) -> np.ndarray:
        per = int(np.prod(spec.shape)) if spec.shape else 1
        if value.size != n * per:
            raise DataCorrupt(f"{ref.data_path}: episode {ref.episode_index} {spec.key!r} holds {value.size} "
                              f"values, shape {list(spec.shape)} over {n} steps needs {n * per}")
        try:
            return value.astype(spec.dtype, copy=False).reshape((n, *spec.shape))
        except (TypeError, ValueError) as exc:
            raise DataCorrupt(f"{ref.data_path}: {spec.key!r} is not {spec.dtype}") from exc

    @staticmethod
    def _image_rows(value: Any, spec: FeatureSpec, ref: EpisodeRef) -> Any:
        if spec.codec == "jpeg":  # 1-D vlen uint8 (or 2-D when every JPEG has the same size), or Arrow binary
            out = []
            for i, row in enumerate(value):
                data = bytes(row) if isinstance(row, (bytes, bytearray)) else np.asarray(row, np.uint8).tobytes()
                if data[:3] != b"\xff\xd8\xff":
                    raise DataCorrupt(f"{ref.data_path}: episode {ref.episode_index} {spec.key!r} row {i} is not "
                                      "JPEG data")
                out.append(data)
            return out
        arr = np.asarray(value)
        h, w, c = spec.shape
        if arr.dtype != np.uint8 or arr.size != len(arr) * h * w * c:
            raise DataCorrupt(f"{ref.data_path}: episode {ref.episode_index} {spec.key!r} is {arr.dtype} "
                              f"{arr.shape}, expected uint8 frames of {h}x{w}x{c}")
        return RawFrames(arr.reshape(len(arr), h, w, c))


def _pad(value: Any, spec: FeatureSpec) -> Any:
    """Append the invalid last step: zeros (False, empty text) for the transition columns."""
    if isinstance(value, list):
        return value + [b""]
    arr = np.asarray(value)
    return np.concatenate([arr, np.zeros((1, *arr.shape[1:]), dtype=arr.dtype)])
