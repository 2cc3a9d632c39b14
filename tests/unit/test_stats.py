"""robo_ray.stats: merging equals accumulating at once, serialization round-trips, memory does not grow with the
number of steps, and q01/q99 stay within the stated rank error on adversarial inputs."""
from __future__ import annotations

import json
import pickle

import numpy as np
import pytest

from robo_ray.stats import KLL_K, RANK_ERROR, FeatureStats, StatsSet


def _rank_ok(data: np.ndarray, value: float, q: float, eps: float) -> bool:
    """value's normalized rank interval among data [fraction < v, fraction <= v] reaches q within eps."""
    lo, hi = (data < value).mean(), (data <= value).mean()
    return lo - eps <= q <= hi + eps


def _episodes(a: np.ndarray, rng: np.random.Generator) -> list[np.ndarray]:
    cuts = np.sort(rng.choice(np.arange(1, len(a)), size=min(len(a) - 1, 40), replace=False))
    return np.split(a, cuts)


def test_moments_equal_numpy_float64() -> None:
    rng = np.random.default_rng(1)
    a = (1e6 + rng.standard_normal((5000, 3)) * [1e-3, 1.0, 50.0]).astype(np.float32)  # large offset: no cancellation
    fs = FeatureStats([3])
    for part in _episodes(a, rng):
        fs.add(part)
    s, ref = fs.summary(), a.astype(np.float64)
    assert s["count"] == 5000
    np.testing.assert_allclose(s["mean"], ref.mean(0), rtol=1e-12)
    np.testing.assert_allclose(s["std"], ref.std(0), rtol=1e-9)
    assert s["min"] == ref.min(0).tolist() and s["max"] == ref.max(0).tolist()


def test_merge_equals_all_at_once() -> None:
    rng = np.random.default_rng(2)
    a = rng.standard_normal((200_000, 2)).astype(np.float32) * [1.0, 7.0] + [0.5, -3.0]
    whole = FeatureStats([2])
    whole.add(a)
    merged = FeatureStats([2])
    for part in _episodes(a, rng):  # one worker per part; the Publisher merges what they return (as JSON)
        p = FeatureStats([2])
        p.add(part)
        merged.merge(FeatureStats.from_dict(json.loads(json.dumps(p.to_dict()))))
    w, m = whole.summary(), merged.summary()
    assert m["count"] == w["count"] == 200_000
    np.testing.assert_allclose(m["mean"], w["mean"], rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(m["std"], w["std"], rtol=1e-12)
    assert (m["min"], m["max"]) == (w["min"], w["max"])
    for name, q in (("q01", 0.01), ("q99", 0.99)):
        for d in range(2):
            assert _rank_ok(a[:, d], m[name][d], q, RANK_ERROR) and _rank_ok(a[:, d], w[name][d], q, RANK_ERROR)


def test_small_inputs_are_exact_and_merge_identically() -> None:
    """Up to k values per dimension the sketch is exact: merged and whole quantiles are the same data value."""
    rng = np.random.default_rng(3)
    a = rng.standard_normal((KLL_K - 1, 4)).astype(np.float32)
    whole, merged = FeatureStats([4]), FeatureStats([4])
    whole.add(a)
    for part in np.array_split(a, 7):
        p = FeatureStats([4])
        p.add(part)
        merged.merge(pickle.loads(pickle.dumps(p)))  # Ray ships it by pickle
    m, w = merged.summary(), whole.summary()
    assert [m[k] for k in ("count", "min", "max", "q01", "q99")] == [w[k] for k in ("count", "min", "max", "q01", "q99")]
    np.testing.assert_allclose([m["mean"], m["std"]], [w["mean"], w["std"]], rtol=1e-12, atol=1e-15)
    for d in range(4):  # exact: the value's rank interval holds q with no tolerance
        assert _rank_ok(a[:, d], whole.summary()["q01"][d], 0.01, 0.0)


def test_memory_does_not_grow_with_steps() -> None:
    rng = np.random.default_rng(4)
    sizes = {}
    for n in (100_000, 2_000_000):
        fs = FeatureStats([])
        for part in np.array_split(rng.standard_normal(n).astype(np.float32), 200):
            fs.add(part)
        assert fs.count == n
        sizes[n] = (len(json.dumps(fs.to_dict())), fs.sketches[0].num_retained)
    (small_bytes, small_kept), (big_bytes, big_kept) = sizes[100_000], sizes[2_000_000]
    assert big_kept <= 4 * KLL_K and small_kept <= 4 * KLL_K
    assert big_bytes < 1.3 * small_bytes, sizes  # 20x the steps, about the same size


ADVERSARIAL = {
    "sorted ascending": lambda rng, n: np.arange(n, dtype=np.float32),
    "sorted descending": lambda rng, n: np.arange(n, dtype=np.float32)[::-1].copy(),
    "cauchy": lambda rng, n: rng.standard_cauchy(n).astype(np.float32),
    "two values": lambda rng, n: (rng.random(n) < 0.5).astype(np.float32),
    "constant": lambda rng, n: np.full(n, 3.25, np.float32),
    "rare outliers at 1.5%": lambda rng, n: np.where(rng.random(n) < 0.015, 1e30, 0.0).astype(np.float32),
    "alternating extremes": lambda rng, n: np.where(np.arange(n) % 2, -1e6, 1e6).astype(np.float32),
    "lognormal": lambda rng, n: rng.lognormal(0, 4, n).astype(np.float32),
    "sawtooth": lambda rng, n: (np.arange(n) % 997).astype(np.float32),
}


@pytest.mark.parametrize("name", sorted(ADVERSARIAL))
def test_quantile_error_bound_on_adversarial_inputs(name: str) -> None:
    rng = np.random.default_rng(5)
    a = ADVERSARIAL[name](rng, 300_000)
    merged = FeatureStats([])
    for part in _episodes(a, rng):  # episode-sized parts merged in order, as the Publisher would
        p = FeatureStats([])
        p.add(part)
        merged.merge(p)
    s = merged.summary()
    for key, q in (("q01", 0.01), ("q99", 0.99)):
        assert _rank_ok(a, s[key], q, RANK_ERROR), (name, key, s[key], RANK_ERROR)


def test_stats_set_takes_flat_episode_values_and_merges() -> None:
    rng = np.random.default_rng(6)
    acts = [rng.standard_normal((T, 7)).astype(np.float32) for T in (5, 11, 3)]
    a, b = StatsSet({"action": [7], "reward": []}), StatsSet({"action": [7], "reward": []})
    for k, x in enumerate(acts):
        (a if k < 2 else b).add({"action": x.reshape(-1), "reward": np.zeros(len(x), np.float32)}, len(x))
    a.add({"action": np.zeros(5, np.float32)}, 1)  # wrong size: not counted (the schema check reports it)
    merged = StatsSet.from_dict(json.loads(json.dumps(a.to_dict())))
    merged.merge(b)
    s = merged.summary()
    ref = np.concatenate(acts).astype(np.float64)
    assert s["action"]["count"] == s["reward"]["count"] == 19
    np.testing.assert_allclose(s["action"]["mean"], ref.mean(0), rtol=1e-12)
    assert np.asarray(s["action"]["q99"]).shape == (7,) and s["reward"]["q01"] == 0.0
