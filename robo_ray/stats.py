"""Mergeable normalization statistics whose memory does not depend on the number of steps.

Per numeric feature (per flattened dimension): count, mean and std (float64, Chan et al.'s pairwise update: a
batch's own two-pass mean / M2 combined with the running ones, so merging is exact up to float64 rounding), min
and max (exact), and the 1st / 99th percentiles from one Apache DataSketches KLL sketch per dimension
(`kll_floats_sketch`, k = KLL_K). KLL's stated bound: a returned quantile's normalized rank is within
`RANK_ERROR` of the asked rank with 99% confidence (exact while a dimension has seen at most k values); its size
grows only with log(n / k). Every object serializes to a small JSON-safe dict (`to_dict` / `from_dict`, sketches as
base64) and merges (`merge`), so a worker can return one unit's statistics and the Publisher can add them up.
"""
from __future__ import annotations

import base64
from typing import Any, Iterable

import numpy as np
from datasketches import kll_floats_sketch

KLL_K = 1000  # rank error 0.28% (99% confidence); ~12 KB per dimension serialized at 1M values (docs/NOTES.md)
RANK_ERROR = float(kll_floats_sketch.get_normalized_rank_error(KLL_K, False))
QUANTILES = {"q01": 0.01, "q99": 0.99}


class FeatureStats:
    """Running statistics of one feature of per-step shape `shape`; `add` takes (T, *shape) values (or T * size)."""

    def __init__(self, shape: Iterable[int] = (), k: int = KLL_K) -> None:
        self.shape = [int(d) for d in shape]
        self.k = k
        self.size = int(np.prod(self.shape)) if self.shape else 1
        self.count = 0
        self.mean = np.zeros(self.size)
        self.m2 = np.zeros(self.size)
        self.min = np.full(self.size, np.inf)
        self.max = np.full(self.size, -np.inf)
        self.sketches = [kll_floats_sketch(k) for _ in range(self.size)]

    def add(self, values: np.ndarray) -> None:
        a = np.asarray(values).reshape(-1, self.size)
        n = a.shape[0]
        if n == 0:
            return
        a64 = a.astype(np.float64)
        with np.errstate(invalid="ignore", over="ignore"):  # NaN / Inf (nan_policy allow) propagate, silently
            b_mean = a64.mean(0)
            b_m2 = ((a64 - b_mean) ** 2).sum(0)
            self._combine(n, b_mean, b_m2, a64.min(0), a64.max(0))
        cols = np.ascontiguousarray(a.astype(np.float32).T)
        for sk, col in zip(self.sketches, cols):
            sk.update(col)

    def merge(self, other: "FeatureStats") -> None:
        if other.size != self.size:
            raise ValueError(f"cannot merge statistics of {other.size} values per step into {self.size}")
        if other.count:
            with np.errstate(invalid="ignore", over="ignore"):
                self._combine(other.count, other.mean, other.m2, other.min, other.max)
        for sk, o in zip(self.sketches, other.sketches):
            sk.merge(o)

    def _combine(self, n: int, mean: np.ndarray, m2: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> None:
        total = self.count + n
        delta = mean - self.mean
        self.mean = self.mean + delta * (n / total)
        self.m2 = self.m2 + m2 + delta ** 2 * (self.count * n / total)
        self.count = total
        self.min = np.minimum(self.min, lo)  # NaN propagates, as numpy's min/max/mean do
        self.max = np.maximum(self.max, hi)

    def quantile(self, q: float) -> np.ndarray:
        return np.array([sk.get_quantile(q) if not sk.is_empty() else np.nan for sk in self.sketches])

    def summary(self) -> dict[str, Any]:
        """mean / std (population, as numpy's) / min / max / q01 / q99 in the feature's shape, and count."""
        def shaped(x: np.ndarray) -> Any:
            return np.asarray(x, dtype=np.float64).reshape(self.shape).tolist() if self.shape else float(x[0])
        out = {"mean": shaped(self.mean), "std": shaped(np.sqrt(self.m2 / max(self.count, 1))),
               "min": shaped(self.min), "max": shaped(self.max)}
        out.update({name: shaped(self.quantile(q)) for name, q in QUANTILES.items()})
        out["count"] = self.count
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"shape": self.shape, "k": self.k, "count": self.count, "mean": self.mean.tolist(),
                "m2": self.m2.tolist(), "min": self.min.tolist(), "max": self.max.tolist(),
                "sketches": [base64.b64encode(sk.serialize()).decode("ascii") for sk in self.sketches]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "FeatureStats":
        out = cls(d["shape"], int(d["k"]))
        out.count = int(d["count"])
        out.mean, out.m2 = np.asarray(d["mean"], float), np.asarray(d["m2"], float)
        out.min, out.max = np.asarray(d["min"], float), np.asarray(d["max"], float)
        out.sketches = [kll_floats_sketch.deserialize(base64.b64decode(s)) for s in d["sketches"]]
        return out

    def __getstate__(self) -> dict[str, Any]:  # picklable (Ray ships it) through the compact form
        return self.to_dict()

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(FeatureStats.from_dict(state).__dict__)


class StatsSet:
    """`FeatureStats` keyed by feature name; `add(values, T)` takes one episode's values (flat or (T, ...))."""

    BATCH_ROWS = 4096  # episodes are buffered and added in batches: short episodes cost one numpy pass each

    def __init__(self, shapes: dict[str, list[int]] | None = None) -> None:
        self.features: dict[str, FeatureStats] = {k: FeatureStats(s) for k, s in (shapes or {}).items()}
        self._pending: dict[str, list[np.ndarray]] = {}
        self._pending_rows = 0

    def add(self, values: dict[str, Any], T: int) -> None:
        if T == 0:
            return
        for key, fs in self.features.items():
            v = values.get(key)
            if isinstance(v, np.ndarray) and v.size and v.size == T * fs.size:
                self._pending.setdefault(key, []).append(v.reshape(T, fs.size))
        self._pending_rows += T
        if self._pending_rows >= self.BATCH_ROWS:
            self.flush()

    def flush(self) -> None:
        """Add the buffered episodes (every read of the statistics flushes first)."""
        pending, self._pending, self._pending_rows = self._pending, {}, 0
        for key, parts in pending.items():
            self.features[key].add(parts[0] if len(parts) == 1 else np.concatenate(parts))

    def __getstate__(self) -> dict[str, Any]:
        self.flush()
        return dict(self.__dict__)

    def merge(self, other: "StatsSet") -> None:
        self.flush()
        other.flush()
        for key, fs in other.features.items():
            if key in self.features:
                self.features[key].merge(fs)
            else:
                self.features[key] = FeatureStats.from_dict(fs.to_dict())

    def summary(self) -> dict[str, Any]:
        """Per feature with at least one step: `FeatureStats.summary()`."""
        self.flush()
        return {k: fs.summary() for k, fs in self.features.items() if fs.count}

    def to_dict(self) -> dict[str, Any]:
        self.flush()
        return {k: fs.to_dict() for k, fs in self.features.items()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "StatsSet":
        out = cls()
        out.features = {k: FeatureStats.from_dict(v) for k, v in d.items()}
        return out
