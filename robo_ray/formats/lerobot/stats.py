"""Statistics for the LeRobot v3.0 writer, as lerobot 0.6.1 computes and aggregates them
(`lerobot/datasets/compute_stats.py`), but mergeable so that no per-step value outlives its episode:

* per episode (the `stats/<feature>/<stat>` columns of meta/episodes): min / max / mean / std (population) and
  the quantiles q01 q10 q50 q90 q99 of every numeric feature over the episode's steps, `count` = steps; cameras:
  per channel on the 0..1 scale from the sampled frames (robo_ray.formats.lerobot.video_encode), count = frames
  sampled. Quantiles here are exact (numpy's linear rule); lerobot's are read off a 5000-bin histogram.
* per unit and per dataset (meta/stats.json): `Agg` merges episodes as lerobot's `aggregate_feature_stats`
  does: min/max envelope, count-weighted mean, the parallel-variance formula for std, and each quantile as the
  count-weighted mean of the episodes' quantiles (what lerobot 0.6.1 writes; exact global quantiles are not
  mergeable). Cameras merge their 256-bin histograms instead, so their dataset quantiles are exact.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from robo_ray.formats.lerobot.video_encode import QUANTILES, hist_stats

STAT_KEYS = ("min", "max", "mean", "std", "count", *QUANTILES)


def array_stats(values: np.ndarray, scalar: bool) -> dict[str, np.ndarray]:
    """Stats of one episode's values (T, *shape) over T. `scalar` features (lerobot shape [1]) give (1,) arrays,
    others the feature's shape; min/max keep the values' dtype (bool, int64, float)."""
    t = len(values)
    v = values.reshape(t, 1) if scalar else values
    a = v.astype(np.float64)
    out: dict[str, np.ndarray] = {"min": v.min(axis=0), "max": v.max(axis=0), "mean": a.mean(axis=0),
                                  "std": a.std(axis=0), "count": np.asarray([t], dtype=np.int64)}
    qs = np.quantile(a, list(QUANTILES.values()), axis=0)
    for k, name in enumerate(QUANTILES):
        out[name] = qs[k]
    return out


def to_list(x: np.ndarray) -> Any:
    """A stats array as JSON / parquet lists of Python numbers (bool stays bool, ints int)."""
    return np.asarray(x).tolist()


class Agg:
    """Mergeable aggregate of episode stats of one numeric feature (see the module docstring)."""

    def __init__(self, count: int, mean: np.ndarray, m2: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                 qsum: dict[str, np.ndarray]) -> None:
        self.count, self.mean, self.m2, self.lo, self.hi, self.qsum = count, mean, m2, lo, hi, qsum

    @classmethod
    def of_episode(cls, st: dict[str, np.ndarray]) -> "Agg":
        n = int(st["count"][0])
        mean = np.asarray(st["mean"], np.float64)
        return cls(n, mean, np.asarray(st["std"], np.float64) ** 2 * n, np.asarray(st["min"]),
                   np.asarray(st["max"]), {q: np.asarray(st[q], np.float64) * n for q in QUANTILES})

    def merge(self, o: "Agg") -> "Agg":
        n = self.count + o.count
        if not n:
            return self
        delta = o.mean - self.mean
        mean = self.mean + delta * (o.count / n)
        m2 = self.m2 + o.m2 + delta ** 2 * (self.count * o.count / n)
        return Agg(n, mean, m2, np.minimum(self.lo, o.lo), np.maximum(self.hi, o.hi),
                   {q: self.qsum[q] + o.qsum[q] for q in QUANTILES})

    def finish(self) -> dict[str, np.ndarray]:
        n = max(self.count, 1)
        out = {"min": self.lo, "max": self.hi, "mean": self.mean, "std": np.sqrt(np.maximum(self.m2 / n, 0.0)),
               "count": np.asarray([self.count], dtype=np.int64)}
        out.update({q: self.qsum[q] / n for q in QUANTILES})
        return out

    def to_json(self) -> dict[str, Any]:
        return {"count": self.count, "mean": to_list(self.mean), "m2": to_list(self.m2), "min": to_list(self.lo),
                "max": to_list(self.hi), "qsum": {q: to_list(v) for q, v in self.qsum.items()}}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Agg":
        return cls(int(d["count"]), np.asarray(d["mean"], np.float64), np.asarray(d["m2"], np.float64),
                   np.asarray(d["min"]), np.asarray(d["max"]),
                   {q: np.asarray(v, np.float64) for q, v in d["qsum"].items()})


def merge_aggs(aggs: list[Agg]) -> Agg | None:
    out: Agg | None = None
    for a in aggs:
        out = a if out is None else out.merge(a)
    return out


def image_stats_json(hist: np.ndarray, frames: int) -> dict[str, Any]:
    return {"hist": np.asarray(hist, np.int64).tolist(), "frames": int(frames)}


def image_stats(d: dict[str, Any]) -> dict[str, np.ndarray]:
    return hist_stats(np.asarray(d["hist"], np.int64), int(d["frames"]))


def merge_image_json(parts: list[dict[str, Any]]) -> dict[str, Any] | None:
    if not parts:
        return None
    hist = np.sum([np.asarray(p["hist"], np.int64) for p in parts], axis=0)
    return image_stats_json(hist, sum(int(p["frames"]) for p in parts))


def stats_json(stats: dict[str, dict[str, np.ndarray]]) -> dict[str, dict[str, Any]]:
    """meta/stats.json: every stat as a list (count as [n]), in STAT_KEYS order."""
    return {feat: {k: to_list(st[k]) for k in STAT_KEYS if k in st} for feat, st in stats.items()}
