"""One LeRobot unit being written (`EpisodeFileSink`): its data parquet, one MP4 per camera and its
meta/episodes part, committed together."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from robo_ray.episode import CanonicalEpisode
from robo_ray.errors import DataCorrupt, EpisodeError
from robo_ray.formats.lerobot.depth import DEPTH_ENCODED, clipped_json, encode_depth_camera
from robo_ray.formats.lerobot.language import frame_rows
from robo_ray.formats.lerobot.parquet import arrow_column, parquet_bytes, parquet_writer
from robo_ray.formats.lerobot.paths import DATA_PATH, EPISODES_PATH, VIDEO_PATH, file_rel
from robo_ray.formats.lerobot.stats import Agg, STAT_KEYS, array_stats, image_stats_json, merge_image_json, to_list
from robo_ray.formats.lerobot.unit_copies import CameraState, UnitCopies, reencode_video, settle
from robo_ray.formats.lerobot.video_encode import ImageHistogram, UnitVideo, encode_episode
from robo_ray.stages.plan import Unit
from robo_ray.writers.base import UnitResult, UnitSink
from robo_ray.writers.unit_files import UnitFiles, remove_file

if TYPE_CHECKING:
    from robo_ray.formats.lerobot.writer import LeRobotWriter

EMPTY_EPISODE = "EP208"  # an episode with no steps: LeRobot cannot hold it (no frame, no video)


def _discard(encoded: list[tuple[str, str, ImageHistogram]], decisions: dict[str, CameraState]) -> None:
    """An episode's scratch MP4s removed and its copied packets released (it went into the unit, or failed)."""
    for _, tmp, _ in encoded:
        remove_file(tmp)
    for st in decisions.values():
        if st.video is not None:
            st.video.close()


class EpisodeFileSink(UnitSink):
    """Writes one unit: data parquet (row group per episode, streamed to a temp file), per camera one MP4 (episodes
    appended by stream copy), and its meta/episodes part at `commit`. Temps sit beside the final names on a local
    destination (`*.tmp-xxxxxxxx`), in a local scratch folder otherwise (uploaded by `commit`): `UnitFiles`."""

    def __init__(self, writer: "LeRobotWriter", unit: Unit) -> None:
        self.writer = writer
        self.unit = unit
        w = writer
        cs = w.options.chunks_size
        self.chunk_index, self.file_index = divmod(unit.index, cs)
        self.data_rel = file_rel(DATA_PATH, unit.index, cs)
        self.meta_rel = file_rel(EPISODES_PATH, unit.index, cs)
        self.video_rels = {c.key: file_rel(VIDEO_PATH, unit.index, cs, video_key=c.key) for c in w.layout.cameras}
        self.result = UnitResult(unit.index, "")
        self.files = UnitFiles(w.fs, w.dataset_dir, w.format_name)  # the unit's files until commit
        self._pq: pq.ParquetWriter | None = None
        self._videos: dict[str, UnitVideo] = {}
        self._rows: list[dict[str, Any]] = []
        self._extra_eps: list[dict[str, Any]] = []
        self._tasks: dict[str, int] = {}  # task -> id written (unit first-appearance order)
        self._provisional = 0
        self._aggs: dict[str, Agg] = {}
        self._hists: dict[str, list[dict[str, Any]]] = {}
        self._clipped: dict[str, list[int]] = {}  # depth camera -> pixels [below, above, all] its quantizer clipped
        self.next_episode = getattr(unit, "episode_offset", 0)
        self.next_index = getattr(unit, "index_offset", 0)
        self._planned = dict(getattr(unit, "task_ids", ()))
        self._planned_tasks = getattr(unit, "planned_tasks", 0)
        self._broken: BaseException | None = None
        self.copies = UnitCopies(w.options.reencode, w.fps)  # per camera: copied or re-encoded, and why
        self._done = False

    # ---- episodes ----------------------------------------------------------------------------------------------
    def add(self, episode: CanonicalEpisode) -> None:
        w, n = self.writer, episode.length
        if n == 0:
            raise EpisodeError(f"{episode.ref.data_path}: episode {episode.episode_index} has no steps (a LeRobot "
                               "episode needs at least one frame)", code=EMPTY_EPISODE)
        if len(episode.language) != n:
            raise DataCorrupt(f"episode {episode.episode_index}: {len(episode.language)} instructions for {n} steps")
        columns = self._columns(episode)
        encoded: list[tuple[str, str, ImageHistogram]] = []
        decisions: dict[str, CameraState] = {}  # per camera: copied or encoded (applied with the episode)
        depth_st: dict[str, tuple[dict[str, np.ndarray], list[int]]] = {}  # depth camera: stats, clipped pixels
        try:
            for cam in w.layout.cameras:
                tmp = self.files.new_temp(self.video_rels[cam.key], "-episode")
                hist = ImageHistogram(3)
                encoded.append((cam.key, tmp, hist))
                frames = episode.cameras[cam.targets[0]]
                if cam.depth:
                    decisions[cam.key] = CameraState(mode="encode", reason=DEPTH_ENCODED)
                    depth_st[cam.key] = encode_depth_camera(tmp, frames, n, cam.shape[0], cam.shape[1], w)
                    continue
                decisions[cam.key] = self.copies.decide(cam.key, tmp, frames, n, hist, episode.episode_index)
                if decisions[cam.key].mode != "copy":
                    h, wd = cam.shape[:2]
                    encode_episode(tmp, frames, n, h, wd, w.settings, hist)
        except BaseException:
            _discard(encoded, decisions)
            raise
        try:  # every camera is encoded: from here on the episode goes into the unit's files
            for cam in w.layout.cameras:
                if decisions[cam.key].switch:  # the unit's camera held copied episodes: re-encode them too
                    self._reencode_camera(cam)
            self._append(episode, columns, encoded, decisions, depth_st)
        except BaseException as exc:  # the unit's files may hold part of the episode: the unit cannot commit
            self._broken = exc
            raise
        finally:
            _discard(encoded, decisions)

    def _reencode_camera(self, cam: Any) -> None:
        """Re-encode the camera's episodes the unit copied so far (`unit_copies.reencode_video`); a failure here
        leaves the unit's MP4 unusable (the caller marks the unit broken)."""
        video = self._videos.get(cam.key)
        if video is not None:
            rel = self.video_rels[cam.key]
            self._videos[cam.key] = reencode_video(
                video, [e["length"] for e in self._extra_eps], lambda tag: self.files.new_temp(rel, tag),
                cam.shape[0], cam.shape[1], self.writer.settings)

    def _columns(self, ep: CanonicalEpisode) -> dict[str, Any]:
        """The episode's data columns (everything but the bookkeeping and the task ids)."""
        n = ep.length
        out: dict[str, Any] = {}
        for f in self.writer.layout.data_features:
            if f.kind == "action":
                parts = []
                for target, size in zip(f.targets, f.sizes):
                    v = np.asarray(ep.tensors[target]).reshape(n, size)
                    if v.dtype.kind in "iu" and v.size and np.abs(v).max() > (1 << 24):
                        raise EpisodeError(f"episode {ep.episode_index}: integer action {target!r} exceeds float32's "
                                           "exact range (the LeRobot action is float32)", code="EP205")
                    parts.append(v.astype(np.float32))
                out[f.key] = np.concatenate(parts, axis=1) if parts else np.zeros((n, 0), np.float32)
            elif f.kind == "tensor" and f.targets:
                out[f.key] = np.asarray(ep.tensors[f.targets[0]])
            elif f.kind == "string":
                out[f.key] = list(ep.texts[f.targets[0]])
            elif f.kind == "language":
                out[f.key] = frame_rows(f, ep)
            elif f.kind == "reward":
                out[f.key] = np.asarray(ep.reward, np.float32)
            elif f.kind == "done":
                out[f.key] = np.asarray(ep.is_terminal, np.bool_)
            elif f.kind == "discount":
                out[f.key] = np.asarray(ep.discount, np.float32)
        return out

    def _task_id(self, task: str) -> int:
        if task not in self._tasks:
            if task in self._planned:
                self._tasks[task] = self._planned[task]
            else:
                self._tasks[task] = self._planned_tasks + self._provisional
                self._provisional += 1
        return self._tasks[task]

    def _append(self, ep: CanonicalEpisode, columns: dict[str, Any], encoded: list[tuple[str, str, ImageHistogram]],
                decisions: dict[str, CameraState], depth_st: dict[str, tuple[dict[str, np.ndarray], list[int]]]
                ) -> None:
        w, n = self.writer, ep.length
        e, i0 = self.next_episode, self.next_index
        lang = [str(t) for t in ep.language]
        ep_tasks = list(dict.fromkeys(lang))
        ids = {t: self._task_id(t) for t in ep_tasks}
        frame_index = np.arange(n, dtype=np.int64)
        columns["timestamp"] = (frame_index / w.fps).astype(np.float32)
        columns["frame_index"] = frame_index
        columns["episode_index"] = np.full(n, e, dtype=np.int64)
        columns["index"] = i0 + frame_index
        columns["task_index"] = np.array([ids[t] for t in lang], dtype=np.int64)
        row: dict[str, Any] = {"episode_index": e, "tasks": ep_tasks, "length": n,
                               "data/chunk_index": self.chunk_index, "data/file_index": self.file_index,
                               "dataset_from_index": i0, "dataset_to_index": i0 + n}
        for key, tmp, hist in encoded:
            video = self._videos.get(key)
            if video is None:
                video = self._videos[key] = UnitVideo(self.files.temp(self.video_rels[key]), w.fps)
            copied = decisions[key].video
            t0, t1 = video.append(tmp, n) if copied is None else \
                video.append_packets(copied.stream, copied.read(), n, copied.path)
            self.copies.apply(key, decisions[key])
            row.update({f"videos/{key}/chunk_index": self.chunk_index, f"videos/{key}/file_index": self.file_index,
                        f"videos/{key}/from_timestamp": t0, f"videos/{key}/to_timestamp": t1})
        table = pa.Table.from_arrays([arrow_column(columns[f.key], f, n) for f in w.layout.data_features],
                                     schema=w.data_schema)
        if self._pq is None:
            self._pq = parquet_writer(self.files.temp(self.data_rel), w.data_schema)
        self._pq.write_table(table, row_group_size=n)
        hists = {key: hist for key, _, hist in encoded}
        for f in w.layout.features:
            if f.kind == "video" and f.depth:
                st, clipped = depth_st[f.key]
                self._clipped[f.key] = [a + b for a, b in zip(self._clipped.get(f.key, [0, 0, 0]), clipped)]
                agg = Agg.of_episode(st)
                self._aggs[f.key] = agg if f.key not in self._aggs else self._aggs[f.key].merge(agg)
            elif f.kind == "video":
                st = hists[f.key].stats()
                self._hists.setdefault(f.key, []).append(image_stats_json(hists[f.key].hist, hists[f.key].frames))
            elif f.numeric:
                st = array_stats(np.asarray(columns[f.key]), f.scalar)
                agg = Agg.of_episode(st)
                self._aggs[f.key] = agg if f.key not in self._aggs else self._aggs[f.key].merge(agg)
            else:
                continue
            for k in STAT_KEYS:
                row[f"stats/{f.key}/{k}"] = to_list(st[k])
        row["meta/episodes/chunk_index"] = self.chunk_index
        row["meta/episodes/file_index"] = self.file_index
        self._rows.append(row)
        self._extra_eps.append({"source": ep.episode_index, "length": n,
                                "tasks": [list(self._tasks).index(t) for t in ep_tasks]})
        self.result.episodes.append((ep.episode_index, n))
        self.next_episode += 1
        self.next_index += n

    def quarantine(self, record: dict[str, Any]) -> None:
        self.result.quarantined.append(record)

    # ---- commit / abort ---------------------------------------------------------------------------------------
    def commit(self) -> UnitResult:
        w = self.writer
        if self._broken is not None:
            self.abort()
            raise RuntimeError(f"unit {self.unit.index}: writing an episode into the unit's files failed "
                               f"({type(self._broken).__name__}: {self._broken}); the unit is not committed")
        try:
            if self._rows:
                self._pq.close()  # type: ignore[union-attr]
                self._pq = None
                for key, v in self._videos.items():
                    settle(v, self.files.temp(self.video_rels[key]))
                meta = parquet_bytes(pa.Table.from_pylist(self._rows, schema=w.episodes_schema))
                with open(self.files.temp(self.meta_rel), "wb") as f:
                    f.write(meta)
                main, *others = self.files.publish_all(
                    [self.data_rel, self.meta_rel, *(self.video_rels[c.key] for c in w.layout.cameras)])
                self.result.filename, self.result.num_bytes, self.result.sha256 = \
                    self.data_rel, main["num_bytes"], main["sha256"]
                self.result.files = others
                self.result.extra = self._extra()
            else:
                self._close_all()
                # every episode quarantined: remove final-named files an earlier attempt of this unit committed
                # (lerobot loads every data parquet it finds)
                self.files.remove_finals([self.data_rel, self.meta_rel, *self.video_rels.values()])
        except BaseException:
            self.abort()
            raise
        self.files.close()
        self._done = True
        return self.result

    def _extra(self) -> dict[str, Any]:
        """What finalize needs of this unit (small: a few numbers per episode, the unit's stats aggregates)."""
        tasks = list(self._tasks)
        stats: dict[str, Any] = {k: a.to_json() for k, a in self._aggs.items()}
        for key, parts in self._hists.items():
            stats[key] = merge_image_json(parts)
        return {"episodes": self._extra_eps, "tasks": tasks,
                "numbering": {"episode_offset": getattr(self.unit, "episode_offset", 0),
                              "index_offset": getattr(self.unit, "index_offset", 0),
                              "task_ids": [self._tasks[t] for t in tasks]},
                "stats": stats, "videos": self.copies.summary(),
                **({"clipped_depth": {k: clipped_json(v) for k, v in self._clipped.items()}} if self._clipped else {})}

    def _close_all(self) -> None:
        if self._pq is not None:
            try:
                self._pq.close()
            except Exception:  # noqa: BLE001 - being thrown away
                pass
            self._pq = None
        for key, v in self._videos.items():
            try:
                v.close()
            except Exception:  # noqa: BLE001
                pass
            if v.path != self.files.temp(self.video_rels[key]):  # a re-encoded camera's MP4 (not staged)
                remove_file(v.path)

    def abort(self) -> None:
        self._done = True
        self._close_all()
        self.files.abort()
