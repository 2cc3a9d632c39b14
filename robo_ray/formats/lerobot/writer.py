"""LeRobot v3.0 writer (`--to lerobot`): any source robo-ray reads -> a LeRobot v3.0 dataset that lerobot 0.6.1's
`LeRobotDataset` loads and trains on (FORMATS.md parts 2 and 5). The dataset is the output root itself
(`dataset_rel` ""), beside robo-ray's reports.

Layout (one work unit = one file index; file index = unit index, chunk = index // chunks_size):
    data/chunk-CCC/file-FFF.parquet            the unit's episodes, one row group per episode
    videos/<camera key>/chunk-CCC/file-FFF.mp4  per camera, the unit's episodes concatenated
    meta/episodes/chunk-CCC/file-FFF.parquet   one row per episode of the unit (lerobot reads every file under
                                               meta/episodes/ in path order, so the parts form one table)
    meta/tasks.parquet  meta/stats.json  meta/modality.json (GR00T's)  meta/info.json (written last: the commit)
    norm_stats.json                            openpi's, written by Validate (formats/lerobot/trainer_meta.py)

Feature naming: robo_ray/formats/lerobot/layout.py. Numbering (finalize renumbers what quarantine shifted):
robo_ray/formats/lerobot/finalize.py.

Video: see robo_ray/formats/lerobot/video_encode.py (one encode per camera per episode, stream-copied into the
unit's MP4: frame k of an episode sits at from_timestamp + k/fps exactly). A source camera whose encoded stream
already fits is copied packet for packet instead (video_copy.py; per camera and unit, unit_copies.py), unless
`target.options.reencode=true`. Statistics: robo_ray/formats/lerobot/
stats.py (per episode in meta/episodes, mergeable per unit in the ledger, merged into meta/stats.json).
"""
from __future__ import annotations

from typing import Any, Callable, Literal

import numpy as np
from pydantic import Field

from robo_ray.episode import EpisodeRef, FeatureSpec
from robo_ray.errors import ConfigError
from robo_ray.formats.lerobot.depth import DepthQuant
from robo_ray.formats.lerobot.finalize import finalize_dataset
from robo_ray.formats.lerobot.layout import plan_layout
from robo_ray.formats.lerobot.parquet import data_schema, episodes_schema
from robo_ray.formats.lerobot.paths import BOOKKEEPING, DATA_PATH, INFO, file_rel
from robo_ray.formats.lerobot.plan import plan_units
from robo_ray.formats.lerobot.unit_sink import EpisodeFileSink
from robo_ray.formats.lerobot.video_encode import ENCODERS, VideoSettings
from robo_ray.mapping import Mapping
from robo_ray.readers.base import Inventory
from robo_ray.stages.plan import MAX_UNIT_EPISODES, Unit
from robo_ray.writers.base import UnitResult, VerifyContext, Writer, WriterOptions


class LeRobotOptions(WriterOptions):
    """`target.options` of a LeRobot run (`--set target.options.KEY=VALUE`)."""

    fps: int | None = Field(None, gt=0, le=10_000)  # default: the source's rate, when it is an integer
    vcodec: Literal["libsvtav1", "av1", "libx264", "h264"] = "libsvtav1"
    crf: int = Field(30, ge=0, le=63)
    g: int = Field(2, ge=1, le=10_000)  # GOP size (keyframe interval)
    preset: int | str | None = None  # None: 12 for libsvtav1 (lerobot's), the encoder's default for libx264
    encoder_threads: int = Field(1, ge=1, le=64)
    chunks_size: int = Field(1000, ge=1, le=1_000_000)
    data_files_size_in_mb: int = Field(100, gt=0)
    video_files_size_in_mb: int = Field(200, gt=0)
    robot_type: str | None = None  # default: the source's
    reencode: bool = False  # True: never copy a source's encoded video, decode and encode every camera
    # depth cameras (formats/lerobot/depth.py): lerobot's DepthEncoderConfig quantizer, metres
    depth_min: float = Field(0.01, ge=0)
    depth_max: float = Field(10.0, gt=0)
    depth_shift: float = 3.5
    depth_use_log: bool = True


class LeRobotWriter(Writer):
    """Writes a LeRobot v3.0 dataset at the output root (module docstring)."""

    format_name = "lerobot"
    title = "LeRobot v3.0"
    paired_reader = "lerobot"
    Options = LeRobotOptions
    OUTPUTS = ("data", "meta", "videos")

    def __init__(self, out_url: str, mapping: Mapping, storage_options: dict[str, Any] | None = None,
                 options: dict[str, Any] | None = None) -> None:
        super().__init__(out_url, mapping, storage_options, options)
        self.options: LeRobotOptions
        self.layout = plan_layout(mapping)
        if any(c.depth for c in self.layout.cameras):
            self.depth_quant  # noqa: B018 - ConfigError now for a bad quantizer, not in a unit
        self.data_schema = data_schema(self.layout)
        self.episodes_schema = episodes_schema(self.layout)

    # ---- options ----------------------------------------------------------------------------------------------
    @property
    def fps(self) -> int:
        if not self.options.fps:
            raise ConfigError("the LeRobot writer has no frame rate: the driver sets target.options.fps from the "
                              "source (Writer.unit_options); pass --set target.options.fps=N")
        return int(self.options.fps)

    @property
    def takes_encoded_video(self) -> bool:  # type: ignore[override]
        """Copies a source's encoded video that fits (formats/lerobot/video_copy.py) unless told to re-encode."""
        return not self.options.reencode

    @property
    def depth_quant(self) -> DepthQuant:
        o = self.options
        return DepthQuant(o.depth_min, o.depth_max, o.depth_shift, o.depth_use_log)

    @property
    def settings(self) -> VideoSettings:
        o = self.options
        return VideoSettings(o.vcodec, self.fps, o.g, o.crf, o.preset, o.encoder_threads)

    def resolve_fps(self, inv: Inventory) -> int:
        """target.options.fps, else the source's rate when it is a whole number; anything else is refused (a
        float rate truncated to an integer would put every frame at the wrong time)."""
        if self.options.fps:
            return int(self.options.fps)
        fps = inv.fps
        if not fps or fps <= 0:
            raise ConfigError(f"LeRobot needs an integer frame rate and the source ({inv.source_format}) records "
                              "none: pass --set target.options.fps=N")
        if abs(fps - round(fps)) > 1e-9:
            raise ConfigError(f"LeRobot needs an integer frame rate; the source's is {fps:g} fps. Pass "
                              "--set target.options.fps=N with an integer N: frames are then stamped k/N "
                              "(the source's own timing is not kept)")
        return int(round(fps))

    def unit_options(self, inv: Inventory) -> dict[str, Any]:
        """The options every unit's writer gets: the user's, with the frame rate resolved from the source."""
        opts = self.options.model_dump(exclude_unset=True)
        opts["fps"] = self.resolve_fps(inv)
        return opts

    # ---- where things go ----------------------------------------------------------------------------------------
    @property
    def dataset_rel(self) -> str:
        return ""

    def commit_files(self) -> list[str]:
        return [INFO]

    # ---- plan ---------------------------------------------------------------------------------------------------
    def plan(self, refs: list[EpisodeRef], features: dict[str, FeatureSpec], target_unit_mb: float,
             min_units: int, max_unit_episodes: int = MAX_UNIT_EPISODES) -> list[Unit]:
        """`plan_units` (episodes sharing source files stay together) with units capped by the file size limits
        (an estimate: video is sized as JPEG, so the real MP4s stay well under video_files_size_in_mb); each unit
        carries the numbering it writes when nothing is quarantined. Planned per split (`plan_split_units`), so each
        split is one episode range of info.json `splits` whatever order the source lists its episodes in."""
        cap = min(float(target_unit_mb), float(self.options.video_files_size_in_mb),
                  float(self.options.data_files_size_in_mb) * 10)
        return plan_units(refs, features, cap, min_units, max_unit_episodes)

    def unit_filenames(self, unit: Unit) -> list[str]:
        return [file_rel(DATA_PATH, unit.index, self.options.chunks_size)]

    def open_unit(self, unit: Unit) -> EpisodeFileSink:
        return EpisodeFileSink(self, unit)

    # ---- finalize -----------------------------------------------------------------------------------------------
    def finalize(self, results: list[UnitResult], inv: Inventory) -> dict[str, Any]:
        """Renumber the units whose planned numbering is off (robo_ray/formats/lerobot/finalize.py), then
        tasks.parquet, stats.json and info.json last (the commit)."""
        if not self.options.fps:  # the Publisher's writer is built from the user's options
            self.options = self.options.model_copy(update={"fps": self.resolve_fps(inv)})
        return finalize_dataset(self, results, inv)

    # ---- validate -----------------------------------------------------------------------------------------------
    def read_back_names(self) -> dict[str, str]:
        """What the LeRobot reader calls each written feature (its own naming rules, formats/lerobot/reader.py):
        flat dotted keys come back as `observation/<key, dots as _>`, cameras by their count. A concatenated
        `action` made of several targets has no per-target name back (it is read as one `action`)."""
        from robo_ray.formats.lerobot.reader import declare_features

        specs: dict[str, FeatureSpec] = {}
        for f in self.layout.features:
            if f.kind == "video":
                specs[f.key] = FeatureSpec(f.key, "video", "uint16" if f.depth else "uint8", tuple(f.shape))
            elif f.kind not in ("string", "language"):
                specs[f.key] = FeatureSpec(f.key, "tensor", f.dtype, tuple(f.shape))
        names = declare_features(specs)
        out: dict[str, str] = {}
        for f in self.layout.features:
            if len(f.targets) == 1 and f.key in names and names[f.key].name:
                out[f.targets[0]] = str(names[f.key].name)
        return out

    def depth_bound(self, target: str) -> Callable[[np.ndarray], np.ndarray] | None:
        """Depth cameras are quantized to 12 bits (formats/lerobot/depth.py): read back within `DepthQuant.bound`."""
        depth = any(c.depth and c.targets == (target,) for c in self.layout.cameras)
        return self.depth_quant.bound if depth else None

    def verify_unit(self, result: UnitResult, ctx: VerifyContext) -> Any:
        """Re-read one committed unit (its data parquet, meta/episodes part and MP4s; formats/lerobot/verify.py)."""
        from robo_ray.formats.lerobot.verify import LeRobotVerifier

        return LeRobotVerifier(self, ctx).check_unit(result)

    def verify(self, ctx: VerifyContext, res: Any) -> bool:
        """The dataset-level checks (meta/, every file present, numbering across units, the merged unit checks, the
        paired reader's read-back)."""
        from robo_ray.formats.lerobot.verify import LeRobotVerifier

        return LeRobotVerifier(self, ctx).run(res)

    def usage(self) -> list[str]:
        return ["```python", "from lerobot.datasets.lerobot_dataset import LeRobotDataset  # lerobot >= 0.4", "",
                f"ds = LeRobotDataset('local/{self.mapping.dataset_name}', root='{self.out_url}')",
                "print(ds.num_episodes, ds.num_frames, ds.meta.camera_keys)", "frame = ds[0]  # tensors, task text",
                "```", "", "Codec: " + ENCODERS[self.options.vcodec][1] + f", crf {self.options.crf}, g "
                f"{self.options.g}; fps {self.options.fps}.", "",
                "Features: " + ", ".join(f"`{f.key}` ({', '.join(f.targets or f.sources)})"
                                         for f in self.layout.features if f.key not in BOOKKEEPING) + ".",
                "Not written (LeRobot has no field for them): is_first / is_last (frame_index and the episode "
                "bounds say it), episode metadata."]
