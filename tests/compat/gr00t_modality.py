#!/usr/bin/env python3
"""Read a LeRobot dataset's meta/modality.json, meta/info.json and meta/stats.json the way Isaac-GR00T's LeRobot
loaders do, and report what they would make of them.

Standalone on purpose: runs in the numpy 1.26.4 / pydantic 2.11.5 / numpydantic 1.6.9 venv
(tests/compat/requirements-trainers.txt; GR00T itself needs torch, flash-attn and Python 3.10) and imports only those
and the standard library, never robo_ray. Each step is re-implemented from the cited code of NVIDIA/Isaac-GR00T;
nothing is copied verbatim.

    python tests/compat/gr00t_modality.py DATASET_ROOT

Sources:
  gr00t/data/schema.py (GR00T N1)   RotationType; LeRobotModalityField (original_key); LeRobotStateActionMetadata
                                    (start, end, rotation_type, absolute = True, dtype = "float64", range,
                                    original_key), its state / action subclasses defaulting original_key to
                                    "observation.state" / "action"; LeRobotModalityMetadata (state, action, video
                                    required, annotation and stage optional) and get_key_meta; DatasetStatisticalValues
                                    (max, min, mean, std, q01, q99 as numpydantic NDArray)
  gr00t/data/dataset.py (GR00T N1)  LeRobotSingleDataset._get_metadata: per state / action group continuous =
                                    np.dtype(dtype) is floating, shape [end - start]; per video key the info.json
                                    feature of its original_key: height / width by their place in `names`, channels by
                                    "channel" in names else info["video.channels"], fps from video_info / info; every
                                    meta/stats.json entry validated as DatasetStatisticalValues (else GR00T recomputes
                                    the statistics from the parquet files)
  gr00t/data/dataset/lerobot_episode_loader.py (GR00T N1.6)  video original_key must be an info.json feature
                                    (default observation.images.<key>); get_dataset_statistics: each group's stats are
                                    stats[original_key or observation.state / action][stat][start:end]; language
                                    annotation.<key> read from its original_key column as task indices

stdout gets one line of JSON ({"ok": true, ...} or {"ok": false, "error": ...}; tests/compat/json_line.py); exit
0 / 1.
"""
from __future__ import annotations

import enum
import json
import pathlib
import sys
from typing import Optional

import numpy as np
import pydantic
from json_line import report  # beside this script
from numpydantic import NDArray

DEFAULT_COLUMNS = {"state": "observation.state", "action": "action"}


# ---- schema.py ------------------------------------------------------------------------------------------------------
class RotationType(enum.Enum):
    AXIS_ANGLE = "axis_angle"
    QUATERNION = "quaternion"
    ROTATION_6D = "rotation_6d"
    MATRIX = "matrix"
    EULER_ANGLES_RPY = "euler_angles_rpy"
    EULER_ANGLES_RYP = "euler_angles_ryp"
    EULER_ANGLES_PRY = "euler_angles_pry"
    EULER_ANGLES_PYR = "euler_angles_pyr"
    EULER_ANGLES_YRP = "euler_angles_yrp"
    EULER_ANGLES_YPR = "euler_angles_ypr"


class ModalityField(pydantic.BaseModel):
    original_key: Optional[str] = None


class StateActionField(ModalityField):
    start: int
    end: int
    rotation_type: Optional[RotationType] = None
    absolute: bool = True
    dtype: str = "float64"
    range: Optional[tuple[float, float]] = None


class StateField(StateActionField):
    original_key: Optional[str] = DEFAULT_COLUMNS["state"]


class ActionField(StateActionField):
    original_key: Optional[str] = DEFAULT_COLUMNS["action"]


class ModalityMeta(pydantic.BaseModel):
    state: dict[str, StateField]
    action: dict[str, ActionField]
    video: dict[str, ModalityField]
    annotation: Optional[dict[str, ModalityField]] = None
    stage: Optional[dict[str, ModalityField]] = None

    def key_meta(self, key: str) -> ModalityField:
        """get_key_meta: "state.<group>", "action.<group>", "video.<name>", "annotation.<name>"."""
        modality, _, sub = key.partition(".")
        table = {"state": self.state, "action": self.action, "video": self.video,
                 "annotation": self.annotation, "stage": self.stage}.get(modality)
        if table is None or sub not in table:
            raise ValueError(f"{key}: not in the modality metadata")
        return table[sub]


class StatValues(pydantic.BaseModel):
    max: NDArray
    min: NDArray
    mean: NDArray
    std: NDArray
    q01: NDArray
    q99: NDArray


# ---- dataset.py / lerobot_episode_loader.py --------------------------------------------------------------------------
def video_meta(info: dict, original_key: str) -> dict:
    feat = info["features"][original_key]
    names, shape = feat["names"], feat["shape"]
    height, width = shape[names.index("height")], shape[names.index("width")]
    try:
        channels, fps = shape[names.index("channel")], feat["video_info"]["video.fps"]
    except (ValueError, KeyError):
        channels, fps = feat["info"]["video.channels"], feat["info"]["video.fps"]
    return {"resolution": [width, height], "channels": channels, "fps": fps}


def build(root: pathlib.Path) -> dict:
    raw = json.loads((root / "meta" / "modality.json").read_text())
    info = json.loads((root / "meta" / "info.json").read_text())
    stats = json.loads((root / "meta" / "stats.json").read_text())
    meta = ModalityMeta.model_validate(raw)
    out: dict = {"state": {}, "action": {}, "video": {}, "annotation": {}}
    try:
        for entry in stats.values():
            StatValues.model_validate(entry)
        out["stats_valid"], out["stats_error"] = True, ""
    except pydantic.ValidationError as exc:  # GR00T N1 would recompute the statistics itself
        out["stats_valid"], out["stats_error"] = False, str(exc).splitlines()[0]
    for modality in ("state", "action"):
        for name, g in getattr(meta, modality).items():
            meta.key_meta(f"{modality}.{name}")
            column = raw[modality][name].get("original_key") or DEFAULT_COLUMNS[modality]
            assert g.original_key == column
            sliced = {stat: list(values[g.start:g.end]) for stat, values in stats[column].items()}
            out[modality][name] = {
                "column": column, "start": g.start, "end": g.end, "shape": [g.end - g.start],
                "continuous": bool(np.issubdtype(np.dtype(g.dtype), np.floating)), "absolute": g.absolute,
                "column_shape": info["features"][column]["shape"], "stats": sliced}
    for name, v in meta.video.items():
        meta.key_meta(f"video.{name}")
        original = raw["video"][name].get("original_key", f"observation.images.{name}")
        if original not in info["features"]:
            raise KeyError(f"video.{name}: original key {original} is not an info.json feature")
        out["video"][name] = {"original_key": original, **video_meta(info, v.original_key or name)}
    for name, v in (meta.annotation or {}).items():
        meta.key_meta(f"annotation.{name}")
        column = raw["annotation"][name].get("original_key", f"annotation.{name}")
        out["annotation"][name] = {"column": column, "in_features": column in info["features"]}
    return out


if __name__ == "__main__":
    sys.exit(report(lambda: build(pathlib.Path(sys.argv[1]))))
