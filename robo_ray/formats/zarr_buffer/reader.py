"""Zarr replay-buffer reader: Diffusion Policy's `ReplayBuffer` stores and UMI's `replay_buffer.zarr.zip`
(layout and key names: robo_ray/formats/zarr_buffer/arrays.py), as a directory store (`*.zarr`) or a zip store
(`*.zarr.zip`), on a local path or any fsspec URL (read in place: store.py).

The source URL names the store, or a folder holding one (UMI's session folder with its replay_buffer.zarr.zip,
Diffusion Policy's real-robot folder with replay_buffer.zarr). Episode k is rows [ends[k-1], ends[k]) of every
`data/<key>` array (`meta/episode_ends`). Low-dim arrays are read per episode (a chunk kept for the next episode:
units are episodes in order); image arrays are read a few frames at a time while the writer takes them, so an
episode's frames are never all decoded at once. The stores hold no rate: UMI's layout steps at its GoPro's
59.94 fps and Push-T's at 10 Hz unless --fps says otherwise; any other buffer needs --fps.

Untrusted input: every .zarray is checked before zarr opens it (shape, chunks, dtype, codecs: arrays.py); a
broken index (meta/episode_ends negative or decreasing) or an unknown codec refuses the source (RR300 / RR301);
an episode that runs past an array's rows, holds no steps, lacks a chunk (EP201) or has a chunk that does not
decode (EP202) is quarantined alone.
"""
from __future__ import annotations

import posixpath
from collections import OrderedDict
from typing import Any, ClassVar

import numpy as np

from robo_ray.episode import Episode, EpisodeRef, FeatureSpec, RawFrames
from robo_ray.errors import (DataCorrupt, DataMissing, EpisodeError, EpisodeTooLarge, RoboRayError,
                             SourceFormatError)
from robo_ray.formats.hdf5 import MAX_EPISODE_BYTES, LazyFrames
from robo_ray.formats.zarr_buffer import arrays
from robo_ray.formats.zarr_buffer.store import ChunkMissing, ZarrStore, is_zip
from robo_ray.readers.base import BaseReader, Finding, Inventory, MetaType, unique_names
from robo_ray.safety import MAX_EPISODE_LENGTH, MAX_EPISODES, check_count

METADATA: dict[str, MetaType] = {"episode_id": "int", "file_path": "text"}
IMAGE_CHUNK = 16  # frames read and decoded at a time
CACHED_CHUNK_BYTES = 64 << 20  # a low-dim chunk up to this size is kept for the next episode
ENDS = "meta/episode_ends"
VIDEOS = "videos"  # Diffusion Policy real-robot recordings: videos/<episode>/<camera>.mp4 beside replay_buffer.zarr


def _is_store_dir(fs: Any, path: str) -> bool:
    return bool(fs.exists(posixpath.join(path, ".zgroup")) and fs.exists(posixpath.join(path, ENDS, ".zarray")))


def _is_store_zip(fs: Any, path: str) -> bool:
    if not is_zip(fs, path):
        return False
    store = ZarrStore(fs, path, posixpath.basename(path))
    try:
        return store.has(".zgroup") and store.has(f"{ENDS}/.zarray")
    except Exception:  # noqa: BLE001 - an unreadable zip is not a replay buffer
        return False
    finally:
        store.close()


def find_store(fs: Any, path: str) -> str | None:
    """The store the URL names: `path` itself (a zarr zip file or a store folder), or the one `*.zarr` /
    `*.zarr.zip` store in the folder `path`; None when there is none. Several stores are one SourceFormatError."""
    if fs.isfile(path):
        return path if _is_store_zip(fs, path) else None
    if _is_store_dir(fs, path):
        return path
    names = [p for p in fs.ls(path, detail=False) if p.rstrip("/").endswith((".zarr", ".zarr.zip"))]
    found = [p.rstrip("/") for p in sorted(names) if (_is_store_zip(fs, p) if fs.isfile(p) else _is_store_dir(fs, p))]
    if len(found) > 1:
        raise SourceFormatError(f"{path}: holds {len(found)} zarr stores ({', '.join(map(posixpath.basename, found))}"
                                "); give one of them as the source")
    return found[0] if found else None


class ZarrBufferReader(BaseReader):
    """Reads a Diffusion Policy / UMI zarr replay buffer (dir or zip store) from any fsspec URL."""

    format_name = "zarr"
    sniff_hint: ClassVar[str] = "a zarr replay buffer (data/*, meta/episode_ends: Diffusion Policy, UMI)"
    sniff_file_hint: ClassVar[str | None] = "a zarr zip store (*.zarr.zip) with data/ and meta/episode_ends"

    @classmethod
    def sniff(cls, fs: Any, root: str) -> bool:
        return find_store(fs, root) is not None

    def dataset_root(self, path: str) -> str:
        store = self._storage_call("listing", path, lambda: find_store(self.fs, path))
        if store is None:
            raise SourceFormatError(f"{self.url}: not a zarr replay buffer (no .zgroup with {ENDS})")
        self.store_rel = posixpath.basename(store)
        return posixpath.dirname(store)

    def __init__(self, url: str, storage_options: dict[str, Any] | None = None) -> None:
        super().__init__(url, storage_options)
        store = self._open_store()
        self.ends = self._episode_ends(store)
        self.meta, self.skipped = self._arrays(store)
        if not self.meta:
            raise SourceFormatError(f"{self.store_rel}: data/ holds no numeric arrays")
        self.features = unique_names({k: arrays.feature(m) for k, m in self.meta.items()})
        self.layout = arrays.layout_of(list(self.meta))
        rate = arrays.known_rate(self.layout)
        if rate:
            self.set_fps(rate[0], rate[1], held=False)

    # ---- the store and its index -------------------------------------------------------------------------------
    def _open_store(self) -> ZarrStore:
        if getattr(self, "_store", None) is None:
            path = self.path(self.store_rel)
            self._store = self._storage_call("opening", path, lambda: ZarrStore(self.fs, path, self.store_rel))
            self._zarr: dict[str, Any] = {}
            self._cache: OrderedDict[tuple[str, int], np.ndarray] = OrderedDict()
        return self._store

    def _episode_ends(self, store: ZarrStore) -> np.ndarray:
        """meta/episode_ends, checked: 1-D integers, none negative, never decreasing (else the index is broken and
        the source is refused, naming the first bad episode)."""
        where = f"{self.store_rel}: {ENDS}"
        zarray = store.meta(f"{ENDS}/.zarray")
        meta = arrays.parse_array(zarray or {}, "episode_ends", where)
        if isinstance(meta, str) or len(meta.shape) != 1 or np.dtype(meta.dtype).kind not in "iu":
            what = meta if isinstance(meta, str) else f"{meta.dtype} {list(meta.shape)}"
            raise SourceFormatError(f"{where}: not a 1-D integer array ({what})")
        check_count(f"{where}: number of episodes", meta.rows, MAX_EPISODES)
        try:
            ends = np.asarray(self._read(ENDS, 0, meta.rows, where), dtype=np.int64)
        except EpisodeError as exc:  # the index itself: nothing can be converted
            raise SourceFormatError(str(exc)) from exc
        if not len(ends):
            raise SourceFormatError(f"{where}: holds no episodes")
        bad = np.flatnonzero(ends < 0)
        if len(bad):
            raise SourceFormatError(f"{where}: episode {bad[0]} ends at {ends[bad[0]]} (negative)")
        down = np.flatnonzero(np.diff(ends) < 0)
        if len(down):
            k = int(down[0]) + 1
            raise SourceFormatError(f"{where}: episode {k} ends at {ends[k]}, before episode {k - 1}'s end "
                                    f"{ends[k - 1]} (decreasing)")
        return ends

    def _arrays(self, store: ZarrStore) -> tuple[dict[str, arrays.ArrayMeta], list[str]]:
        """The checked metadata of every data/ array, and what is left out (groups, non-numeric arrays)."""
        found: dict[str, arrays.ArrayMeta] = {}
        skipped: list[str] = []
        names = self._storage_call("listing", self.path(self.store_rel), lambda: store.listdir("data"))
        check_count(f"{self.store_rel}: data arrays", len(names), 10_000)
        for name in names:
            if name.startswith("."):
                continue
            zarray = store.meta(f"data/{name}/.zarray")
            if zarray is None:
                skipped.append(f"{name} (not an array)")
                continue
            meta = arrays.parse_array(zarray, name, f"{self.store_rel}: data/{name}/.zarray")
            if isinstance(meta, str):
                skipped.append(f"{name} ({meta})")
            else:
                found[name] = meta
        return found, skipped

    def _array(self, key: str) -> Any:
        """The zarr array at `key` (opened once, read through the strict mapping)."""
        import zarr

        self._open_store()
        if key not in self._zarr:
            self._zarr[key] = zarr.Array(self._store.mapping(), path=key, read_only=True)
        return self._zarr[key]

    def _read(self, key: str, a: int, b: int, where: str) -> np.ndarray:
        """Rows a..b-1 of the array at `key`; a missing chunk is the episode's DataMissing, one that does not
        decode its DataCorrupt, a failing store one StorageError naming the URL."""
        try:
            return np.asarray(self._array(key)[a:b])
        except ChunkMissing as exc:
            raise DataMissing(f"{where}: chunk {exc} is missing from the store") from exc
        except RoboRayError:
            raise
        except Exception as exc:  # noqa: BLE001 - a codec's error, a cut zip member, a transport failure
            mapped = self._storage_error(exc, self.path(self.store_rel), "reading")
            if mapped is not exc:
                raise mapped from exc
            raise DataCorrupt(f"{where}: {key} rows {a}..{b - 1} do not decode ({type(exc).__name__}: "
                              f"{' '.join(str(exc).split())[:160]})") from exc

    def _rows(self, meta: arrays.ArrayMeta, a: int, b: int, where: str) -> np.ndarray:
        """Rows a..b-1 of a low-dim array, read chunk by chunk; the last chunks read stay for the next episode."""
        step = meta.chunks[0]
        per = int(np.prod(meta.chunks[1:], dtype=np.int64)) * np.dtype(meta.dtype).itemsize
        if step * per > CACHED_CHUNK_BYTES or meta.chunks[1:] != meta.shape[1:]:
            return self._read(f"data/{meta.key}", a, b, where)
        parts = []
        for c in range(a // step, (b - 1) // step + 1):
            block = self._cache.get((meta.key, c))
            if block is None:
                block = self._read(f"data/{meta.key}", c * step, min((c + 1) * step, meta.rows), where)
                self._cache[(meta.key, c)] = block
                while len(self._cache) > 2 * len(self.meta):
                    self._cache.popitem(last=False)
            lo, hi = max(a, c * step) - c * step, min(b, (c + 1) * step) - c * step
            parts.append(block[lo:hi])
        return np.concatenate(parts) if len(parts) > 1 else parts[0]

    # ---- discover ----------------------------------------------------------------------------------------------
    def discover(self) -> Inventory:
        findings: list[Finding] = []
        data_rows = min(m.rows for m in self.meta.values())
        starts = np.concatenate([[0], self.ends[:-1]])
        refs = [EpisodeRef(k, int(e - s), self.store_rel, source_id=f"episode_{k}")
                for k, (s, e) in enumerate(zip(starts.tolist(), self.ends.tolist()))]
        past = np.flatnonzero(self.ends > data_rows)
        if len(past):
            short = min(self.meta.values(), key=lambda m: m.rows)
            findings.append(Finding("warning", "ZR101", f"{self.store_rel}: {ENDS} runs to step {self.ends[-1]}, past "
                                    f"data/{short.key}'s {short.rows} rows: episodes {_ranges(past)} will be "
                                    "quarantined", int(self.ends[-1]), short.rows))
        empty = np.flatnonzero(self.ends == starts)
        if len(empty):
            findings.append(Finding("warning", "ZR102", f"{self.store_rel}: episodes {_ranges(empty)} hold no steps; "
                                    "they will be quarantined"))
        extra = [m.key for m in self.meta.values() if m.rows > self.ends[-1]]
        if extra:
            findings.append(Finding("warning", "ZR103", f"{self.store_rel}: data/{extra[0]} has rows after the last "
                                    f"episode's end {self.ends[-1]}; they are left out", int(self.ends[-1]),
                                    self.meta[extra[0]].rows))
        findings += self._videos_beside()
        declared = {"store": self.store_rel, "store_kind": "zip" if self._open_store().zip is not None else "directory",
                    "layout": self.layout, "arrays": {k: m.declared() for k, m in list(self.meta.items())[:100]},
                    "fps_source": self.fps_source, "left_out": self.skipped[:50]}
        name = self.store_rel.removesuffix(".zip").removesuffix(".zarr")
        if name == "replay_buffer":
            name = posixpath.basename(self.root) or name
        inv = Inventory(dataset_name=name or "zarr", dataset_root=self.url, source_format="zarr",
                        source_version="zarr v2", episodes_count=len(refs), total_steps=sum(r.length for r in refs),
                        features=self.features, refs=refs, fps=self.fps,
                        robot_type="umi" if self.layout == "umi" else None, declared=declared,
                        metadata_types=dict(METADATA), language_source="", step_storage="zarr")
        inv.findings = findings + self.fps_findings()
        return inv

    def _videos_beside(self) -> list[Finding]:
        """Diffusion Policy's real-robot recordings keep the cameras beside the buffer, as `videos/<episode>/<camera>
        .mp4` at the camera's own rate (DP's dataset class aligns them to the buffer's timestamps when it builds its
        `*.zarr.zip` cache): those frames are not in the store, and are said not to be read (ZR104)."""
        folder = posixpath.join(self.root, VIDEOS)
        try:
            if not self.fs.isdir(folder):
                return []
            episodes = len(self.fs.ls(folder, detail=False))
        except OSError:
            return []
        return [Finding("warning", "ZR104", f"{VIDEOS}/ beside {self.store_rel} holds {episodes} folder(s) of camera "
                        "videos (a Diffusion Policy real-robot recording); they are not read: only the store's arrays "
                        "convert (convert the *.zarr.zip cache DP's real-robot dataset writes to keep the cameras)")]

    # ---- load one episode --------------------------------------------------------------------------------------
    def load_episode(self, ref: EpisodeRef) -> Episode:
        k = ref.episode_index
        where = f"{self.store_rel}: episode {k}"
        start, end = (int(self.ends[k - 1]) if k else 0), int(self.ends[k])
        steps = end - start
        if steps <= 0:
            raise DataMissing(f"{where}: holds no steps ({ENDS}[{k}] = {end}, the previous end {start})")
        if steps > MAX_EPISODE_LENGTH:
            raise EpisodeTooLarge(f"{where}: {steps} steps, over the {MAX_EPISODE_LENGTH}-step limit")
        self._open_store()
        ep = Episode(ref=ref, length=steps)
        for key, spec in self.features.items():
            if spec.role == "bookkeeping":
                continue
            meta = self.meta[key]
            if meta.rows < end:
                raise DataCorrupt(f"{where}: data/{key} has {meta.rows} rows, the episode runs to step {end} "
                                  f"({ENDS}[{k}])")
            if spec.kind == "image":
                ep.images[key] = self._frames(meta, spec, start, steps, where)
                continue
            per = int(np.prod(meta.shape[1:], dtype=np.int64)) * np.dtype(meta.dtype).itemsize
            if steps * per > MAX_EPISODE_BYTES:
                raise EpisodeTooLarge(f"{where}: data/{key} is {steps * per} bytes for this episode (limit "
                                      f"{MAX_EPISODE_BYTES})")
            ep.columns[key] = self._rows(meta, start, end, where).astype(spec.dtype, copy=False).reshape(
                (steps, *spec.shape))
        ep.step_tasks = [""] * steps
        ep.metadata = {"episode_id": k, "file_path": self.store_rel}
        return ep

    def _frames(self, meta: arrays.ArrayMeta, spec: FeatureSpec, start: int, steps: int, where: str) -> RawFrames:
        """A camera's frames, read IMAGE_CHUNK at a time when the writer takes them."""
        h, w, c = spec.shape

        def read(a: int, b: int) -> np.ndarray:
            block = self._read(f"data/{meta.key}", start + a, start + b, where)
            return arrays.to_frames(block, spec).reshape(b - a, h, w, c)

        return RawFrames(LazyFrames(steps, (h, w, c), read, np.uint8 if spec.dtype == "uint8" else np.uint16,
                                    IMAGE_CHUNK))

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        for key in ("_store", "_zarr", "_cache"):
            state.pop(key, None)
        return state

    def close(self) -> None:
        super().close()
        store = getattr(self, "_store", None)
        if store is not None:
            store.close()
        self._store = None


def _ranges(idx: np.ndarray) -> str:
    """Episode numbers for a message (the first few)."""
    shown = ", ".join(str(int(i)) for i in idx[:5])
    return shown + (f" and {len(idx) - 5} more" if len(idx) > 5 else "")
