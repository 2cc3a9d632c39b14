#!/usr/bin/env python3
"""Load robo-ray's norm_stats.json the way openpi does, normalize the dataset's values with it, and compute openpi's
own statistics of the same values for comparison.

Standalone on purpose: runs in the numpy 1.26.4 / pydantic 2.11.5 / numpydantic 1.6.9 venv
(tests/compat/requirements-trainers.txt; openpi itself is not on PyPI and needs JAX) and imports only those and the
standard library, never robo_ray. Each step is re-implemented from the cited code of Physical-Intelligence/openpi
(read at commit 15a9616); nothing is copied verbatim.

    python tests/compat/openpi_norm_stats.py DIR VALUES.npz [--batch 32]

DIR holds norm_stats.json; VALUES.npz holds one (steps, dims) array per openpi key ("state", "actions"): the values
openpi's LeRobot data loader hands to compute_norm_stats after its repack transform ("state" <- observation.state,
"actions" <- action).

Sources:
  src/openpi/shared/normalize.py   NormStats (a pydantic dataclass: mean, std as numpydantic NDArray; q01, q99
                                   optional), _NormStatsDict (pydantic BaseModel with norm_stats: dict[str, NormStats]),
                                   deserialize_json / load (DIR/norm_stats.json, FileNotFoundError when missing),
                                   serialize_json (model_dump_json), RunningStats (running mean and mean of squares,
                                   std = sqrt(max(0, E[x^2] - mean^2)); 5000-bin histograms per dimension over
                                   [min, max], re-binned when the range grows; quantile = the left edge of the first
                                   bin whose cumulative count reaches q * count)
  src/openpi/transforms.py         Normalize: z-score (x - mean) / (std + 1e-6); with use_quantiles (pi0-FAST,
                                   pi05) (x - q01) / (q99 - q01 + 1e-6) * 2 - 1, stats cut to x's last dimension;
                                   _assert_quantile_stats (q01 and q99 must be present)
  scripts/compute_norm_stats.py    keys = ["state", "actions"]; every batch's values reshaped to (-1, dims)

stdout gets one line of JSON ({"ok": true, ...} or {"ok": false, "error": ...}; tests/compat/json_line.py); exit
0 / 1.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import sys
from importlib import metadata

import numpy as np
import numpydantic
import pydantic
from json_line import report  # beside this script

KEYS = ("state", "actions")
BINS = 5000


# ---- normalize.py: the model and its JSON ----------------------------------------------------------------------------
@pydantic.dataclasses.dataclass
class NormStats:
    mean: numpydantic.NDArray
    std: numpydantic.NDArray
    q01: numpydantic.NDArray | None = None
    q99: numpydantic.NDArray | None = None


class NormStatsFile(pydantic.BaseModel):
    norm_stats: dict[str, NormStats]


def deserialize_json(text: str) -> dict[str, NormStats]:
    return NormStatsFile(**json.loads(text)).norm_stats


def serialize_json(stats: dict[str, NormStats]) -> str:
    return NormStatsFile(norm_stats=stats).model_dump_json(indent=2)


def load(directory: str | pathlib.Path) -> dict[str, NormStats]:
    path = pathlib.Path(directory) / "norm_stats.json"
    if not path.exists():
        raise FileNotFoundError(f"no norm stats at {path}")
    return deserialize_json(path.read_text())


# ---- normalize.py: what openpi computes itself ----------------------------------------------------------------------
class OpenpiRunningStats:
    """openpi's RunningStats, re-implemented: mean and mean of squares updated per batch, min / max, and one
    histogram of BINS bins per dimension spanning the range seen so far (re-binned, counts moved by their bins' left
    edges, whenever a batch widens it)."""

    def __init__(self) -> None:
        self.n = 0

    def update(self, batch: np.ndarray) -> None:
        b = batch.reshape(-1, batch.shape[-1])
        k, _ = b.shape
        if self.n == 0:
            self.mean, self.sq = b.mean(0), (b ** 2).mean(0)
            self.lo, self.hi = b.min(0), b.max(0)
            self.edges = [np.linspace(lo - 1e-10, hi + 1e-10, BINS + 1) for lo, hi in zip(self.lo, self.hi)]
            self.hist = [np.zeros(BINS) for _ in self.edges]
        else:
            lo, hi = np.minimum(self.lo, b.min(0)), np.maximum(self.hi, b.max(0))
            widened = bool((lo < self.lo).any() or (hi > self.hi).any())
            self.lo, self.hi = lo, hi
            if widened:
                for d, (old, h) in enumerate(zip(self.edges, self.hist)):
                    new = np.linspace(self.lo[d], self.hi[d], BINS + 1)
                    self.hist[d], _ = np.histogram(old[:-1], bins=new, weights=h)
                    self.edges[d] = new
        self.n += k
        self.mean = self.mean + (b.mean(0) - self.mean) * (k / self.n)
        self.sq = self.sq + ((b ** 2).mean(0) - self.sq) * (k / self.n)
        for d in range(b.shape[1]):
            self.hist[d] += np.histogram(b[:, d], bins=self.edges[d])[0]

    def quantile(self, q: float) -> np.ndarray:
        return np.array([e[np.searchsorted(np.cumsum(h), q * self.n)] for h, e in zip(self.hist, self.edges)])

    def result(self) -> dict[str, list[float]]:
        std = np.sqrt(np.maximum(0.0, self.sq - self.mean ** 2))
        return {"mean": self.mean.tolist(), "std": std.tolist(), "q01": self.quantile(0.01).tolist(),
                "q99": self.quantile(0.99).tolist()}


# ---- transforms.py: Normalize ----------------------------------------------------------------------------------------
def normalize_zscore(x: np.ndarray, s: NormStats) -> np.ndarray:
    d = x.shape[-1]
    return (x - s.mean[..., :d]) / (s.std[..., :d] + 1e-6)


def normalize_quantile(x: np.ndarray, s: NormStats) -> np.ndarray:
    if s.q01 is None or s.q99 is None:
        raise ValueError("quantile normalization needs q01 and q99 (openpi's _assert_quantile_stats)")
    d = x.shape[-1]
    q01, q99 = s.q01[..., :d], s.q99[..., :d]
    return (x - q01) / (q99 - q01 + 1e-6) * 2.0 - 1.0


def build(args: argparse.Namespace) -> dict:
    stats = load(args.dir)
    again = deserialize_json(serialize_json(stats))  # openpi's save of what it loaded, loaded again
    data = np.load(args.values)
    out: dict = {"versions": {"numpy": np.__version__, "pydantic": pydantic.VERSION,
                              "numpydantic": metadata.version("numpydantic")},
                 "keys": sorted(stats), "per_key": {}}
    for key in KEYS:
        if key not in stats or key not in data.files:
            continue
        s, x = stats[key], np.asarray(data[key], dtype=np.float64)
        fields = {name: getattr(s, name) for name in ("mean", "std", "q01", "q99")}
        z, q = normalize_zscore(x, s), normalize_quantile(x, s)
        running = OpenpiRunningStats()
        for i in range(0, len(x), args.batch):
            running.update(x[i:i + args.batch])
        out["per_key"][key] = {
            "types": {n: type(v).__name__ for n, v in fields.items()},
            "shapes": {n: list(np.shape(v)) for n, v in fields.items()},
            "round_trip_equal": all(np.array_equal(getattr(again[key], n), v) for n, v in fields.items()),
            "zscore_mean": z.mean(0).tolist(), "zscore_std": z.std(0).tolist(),
            "quantile_min": q.min(0).tolist(), "quantile_max": q.max(0).tolist(),
            "quantile_inside": float(((q >= -1.0) & (q <= 1.0)).mean()),
            "openpi_running": running.result()}
    return out


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("values")
    ap.add_argument("--batch", type=int, default=32)
    parsed = ap.parse_args()
    sys.exit(report(lambda: build(parsed)))
