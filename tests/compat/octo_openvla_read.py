#!/usr/bin/env python3
"""Load an RLDS dataset through the loading steps of Octo's and OpenVLA's `make_dataset_from_rlds`, with robo-ray's
dataset_statistics.json, and report what came out.

Standalone on purpose: runs in the TF 2.15 / tfds 4.9.3 venv (tests/compat/requirements-openvla.txt) and imports only
tensorflow, tensorflow_datasets, numpy and the standard library (never robo_ray, octo, dlimp or prismatic: those are
not installable next to TF 2.15 without their heavy dependencies). Each step below is re-implemented from the cited
function of the real code; nothing is copied verbatim.

    python tests/compat/octo_openvla_read.py DATA_DIR NAME STATS_JSON --proprio-key state --language-key \
        language_instruction

Sources (read at octo-models/octo, openvla/openvla and kvablack/dlimp HEAD):
  octo/data/dataset.py              make_dataset_from_rlds: restructure, is_nonzero_length, statistics from a JSON
                                    path + tree_map(np.array), the split choice (val if present, else train[95%:]),
                                    normalize_action_and_proprio
  octo/data/utils/data_utils.py     get_dataset_statistics (what Octo computes itself over split="all"),
                                    normalize_action_and_proprio (NORMAL: (x - mean) / (std + 1e-8), mask;
                                    BOUNDS: p01 / p99, clipped to [-1, 1]), tree_map
  prismatic/vla/datasets/rlds/dataset.py          make_dataset_from_rlds (OpenVLA's copy: state_obs_keys
                                                  concatenated into proprio, language_key required and popped)
  prismatic/vla/datasets/rlds/utils/data_utils.py normalize_action_and_proprio (always normalizes `proprio`;
                                                  BOUNDS_Q99 uses q01 / q99, zeros where min == max)
  dlimp/dataset.py                  DLataset.from_rlds (as_dataset with SkipDecoding on steps, shuffle_files, a
                                    ReadConfig) and _broadcast_metadata_rlds (steps to the top level, metadata
                                    repeated per step, _len / _traj_index / _frame_index)
  dlimp/transforms/common.py        selective_tree_map (key paths joined with "/")

stdout gets one line of JSON ({"ok": true, ...} or {"ok": false, "error": ...}); logging goes to stderr.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import traceback

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tensorflow_datasets as tfds  # noqa: E402

QUANTILES = {"p01": 0.01, "p99": 0.99}


# ---- dlimp ---------------------------------------------------------------------------------------------------------
def tree_map(fn, tree):
    """octo/data/utils/data_utils.py tree_map (OpenVLA's is the same): fn on every non-dict leaf."""
    return {k: (tree_map(fn, v) if isinstance(v, dict) else fn(v)) for k, v in tree.items()}


def selective_tree_map(x, match, map_fn, keypath=""):
    """dlimp/transforms/common.py selective_tree_map with a callable `match(keypath, value)`."""
    out = {}
    for key, value in x.items():
        if isinstance(value, dict):
            out[key] = selective_tree_map(value, match, map_fn, keypath + key + "/")
        else:
            out[key] = map_fn(value) if match(keypath + key, value) else value
    return out


def broadcast_metadata_rlds(i, traj):
    """dlimp/dataset.py _broadcast_metadata_rlds: steps become the trajectory, other keys repeat per step."""
    traj = dict(traj)
    steps = traj.pop("steps")
    n = tf.shape(tf.nest.flatten(steps)[0])[0]
    out = dict(steps)
    out["traj_metadata"] = tf.nest.map_structure(lambda x: tf.repeat(x, n), traj)
    out["_len"], out["_traj_index"], out["_frame_index"] = tf.repeat(n, n), tf.repeat(i, n), tf.range(n)
    return out


def from_rlds(builder, split, shuffle=True):
    """dlimp/dataset.py DLataset.from_rlds."""
    ds = builder.as_dataset(split=split, shuffle_files=shuffle, decoders={"steps": tfds.decode.SkipDecoding()},
                            read_config=tfds.ReadConfig(skip_prefetch=True,
                                                        num_parallel_calls_for_interleave_files=tf.data.AUTOTUNE,
                                                        interleave_cycle_length=tf.data.AUTOTUNE))
    return ds.enumerate().map(broadcast_metadata_rlds, num_parallel_calls=tf.data.AUTOTUNE)


# ---- the two loaders' steps ----------------------------------------------------------------------------------------
def load_statistics(path):
    """Both make_dataset_from_rlds: a str is a JSON path read with tf.io.gfile, then tree_map(np.array, ...)."""
    with tf.io.gfile.GFile(path, "r") as f:
        return tree_map(np.array, json.load(f))


def choose_split(builder, train):
    """Both make_dataset_from_rlds: `val` when the builder has it, else the last 5% of train."""
    if "val" not in builder.info.splits:
        return "train[:95%]" if train else "train[95%:]"
    return "train" if train else "val"


def octo_restructure(name, proprio_key, language_key):
    """octo/data/dataset.py make_dataset_from_rlds.restructure (no standardize_fn, no image keys)."""
    def fn(traj):
        missing = {"observation", "action"} - set(traj)
        if missing:
            raise ValueError(f"Trajectory is missing keys: {missing}")
        n = tf.shape(traj["action"])[0]
        obs = {"timestep": tf.range(n)}
        if proprio_key is not None:
            obs["proprio"] = tf.cast(traj["observation"][proprio_key], tf.float32)
        task = {}
        if language_key is not None:
            task["language_instruction"] = traj[language_key]
            if task["language_instruction"].dtype != tf.string:
                raise ValueError(f"Language key {language_key} is not tf.string")
        return {"observation": obs, "task": task, "action": tf.cast(traj["action"], tf.float32),
                "dataset_name": tf.repeat(name, n)}
    return fn


def openvla_restructure(name, state_keys, language_key):
    """prismatic/vla/datasets/rlds/dataset.py make_dataset_from_rlds.restructure (no standardize_fn)."""
    def fn(traj):
        traj = dict(traj)
        missing = {"observation", "action", language_key} - set(traj)
        if missing:
            raise ValueError(f"Trajectory is missing keys: {missing}")
        n = tf.shape(traj["action"])[0]
        obs = {}
        if state_keys:
            obs["proprio"] = tf.concat([tf.zeros((n, 1), tf.float32) if k is None
                                        else tf.cast(traj["observation"][k], tf.float32) for k in state_keys], axis=1)
        obs["timestep"] = tf.range(n)
        if traj[language_key].dtype != tf.string:
            raise ValueError(f"Language key {language_key} is not tf.string")
        task = {"language_instruction": traj.pop(language_key)}
        return {"observation": obs, "task": task, "action": tf.cast(traj["action"], tf.float32),
                "dataset_name": tf.repeat(name, n)}
    return fn


def octo_normalize(traj, metadata, kind):
    """octo/data/utils/data_utils.py normalize_action_and_proprio (proprio only when the trajectory has it)."""
    keys = {"action": "action"}
    if "proprio" in traj["observation"]:
        keys["proprio"] = "observation/proprio"
    for key, traj_key in keys.items():
        m = metadata[key]
        if kind == "normal":
            mask = m.get("mask", tf.ones_like(m["mean"], dtype=tf.bool))
            fn = (lambda x, m=m, mask=mask: tf.where(mask, (x - m["mean"]) / (m["std"] + 1e-8), x))
        else:  # bounds
            mask = m.get("mask", tf.ones_like(m["p01"], dtype=tf.bool))
            fn = (lambda x, m=m, mask=mask: tf.where(
                mask, tf.clip_by_value(2 * (x - m["p01"]) / (m["p99"] - m["p01"] + 1e-8) - 1, -1, 1), x))
        traj = selective_tree_map(traj, lambda k, _, t=traj_key: k == t, fn)
    return traj


def openvla_normalize(traj, metadata, kind):
    """prismatic/vla/datasets/rlds/utils/data_utils.py normalize_action_and_proprio (reads metadata["proprio"]
    whether or not the trajectory has proprio)."""
    for key, traj_key in {"action": "action", "proprio": "observation/proprio"}.items():
        m = metadata[key]
        match = (lambda k, _, t=traj_key: k == t)
        if kind == "normal":
            mask = m.get("mask", tf.ones_like(m["mean"], dtype=tf.bool))
            traj = selective_tree_map(traj, match, lambda x, m=m, mask=mask:
                                      tf.where(mask, (x - m["mean"]) / (m["std"] + 1e-8), x))
            continue
        low, high = m["q01"], m["q99"]  # BOUNDS_Q99
        mask = m.get("mask", tf.ones_like(m["min"], dtype=tf.bool))
        traj = selective_tree_map(traj, match, lambda x, lo=low, hi=high, mask=mask: tf.where(
            mask, tf.clip_by_value(2 * (x - lo) / (hi - lo + 1e-8) - 1, -1, 1), x))
        zeros = m["min"] == m["max"]
        traj = selective_tree_map(traj, match, lambda x, z=zeros: tf.where(z, 0.0, x))
    return traj


def make_dataset(loader, builder, name, stats, train, kind, args, skip_norm=False):
    """The dataset part of each make_dataset_from_rlds (statistics given, so nothing is computed)."""
    ds = from_rlds(builder, choose_split(builder, train), shuffle=False)
    if loader == "octo":
        ds = ds.map(octo_restructure(name, args.proprio_key, args.language_key))
        ds = ds.filter(lambda t: tf.shape(t["action"])[0] > 0)  # is_nonzero_length
        norm = octo_normalize
    else:
        ds = ds.map(openvla_restructure(name, [args.proprio_key] if args.proprio_key else [], args.language_key))
        norm = openvla_normalize
    if not skip_norm:
        ds = ds.map(lambda t: norm(t, stats, kind))
    return ds


def collect(ds):
    actions, proprios, eps = [], [], 0
    for traj in ds.as_numpy_iterator():
        eps += 1
        actions.append(traj["action"])
        if "proprio" in traj["observation"]:
            proprios.append(traj["observation"]["proprio"])
    return eps, np.concatenate(actions), (np.concatenate(proprios) if proprios else None)


def octo_statistics(builder, name, args):
    """octo/data/utils/data_utils.py get_dataset_statistics over split="all" of the restructured dataset."""
    ds = from_rlds(builder, "all", shuffle=False).map(octo_restructure(name, args.proprio_key, args.language_key))
    n_traj, actions, proprios = collect(ds.filter(lambda t: tf.shape(t["action"])[0] > 0))
    out = {"num_transitions": int(len(actions)), "num_trajectories": n_traj}
    for key, a in (("action", actions), ("proprio", proprios)):
        if a is not None:
            out[key] = {"mean": a.mean(0), "std": a.std(0), "max": a.max(0), "min": a.min(0),
                        "p99": np.quantile(a, 0.99, 0), "p01": np.quantile(a, 0.01, 0)}
    return out, {"action": actions, "proprio": proprios}


def rank_interval(values, v):
    """Per dimension, the normalized rank interval [fraction < v, fraction <= v] of v among `values`."""
    n = len(values)
    return [[float((values[:, d] < v[d]).sum() / n), float((values[:, d] <= v[d]).sum() / n)]
            for d in range(values.shape[1])]


def run(args):
    builder = tfds.builder(args.name, data_dir=args.data_dir)
    stats = load_statistics(args.stats)
    out = {"tensorflow": tf.__version__, "tfds": tfds.__version__, "splits": {s: int(builder.info.splits[s]
           .num_examples) for s in builder.info.splits}}
    octo, raw = octo_statistics(builder, args.name, args)
    ours = {g: {k: np.asarray(stats[g][k], np.float64) for k in ("mean", "std", "min", "max", "p01", "p99")}
            for g in ("action", "proprio") if g in octo}
    out["stats_vs_octo"] = {g: {k: float(np.max(np.abs(ours[g][k] - octo[g][k]))) for k in ("mean", "std", "min",
                                                                                          "max", "p01", "p99")}
                            for g in ours}
    out["stats_counts"] = {"ours": [int(stats["num_transitions"]), int(stats["num_trajectories"])],
                           "octo": [octo["num_transitions"], octo["num_trajectories"]]}
    out["quantile_ranks"] = {g: {k: rank_interval(raw[g], ours[g][k]) for k in QUANTILES} for g in ours}
    for loader in ("octo", "openvla"):
        res = {}
        for train in (True, False):
            split = "train" if train else "val"
            n, raw_a, raw_p = collect(make_dataset(loader, builder, args.name, stats, train, "normal", args,
                                                   skip_norm=True))
            _, norm_a, norm_p = collect(make_dataset(loader, builder, args.name, stats, train, "normal", args))
            _, bnd_a, _ = collect(make_dataset(loader, builder, args.name, stats, train, "bounds", args))
            want_a = (raw_a - stats["action"]["mean"]) / (stats["action"]["std"] + 1e-8)
            res[split] = {"split": choose_split(builder, train), "episodes": n, "steps": int(len(raw_a)),
                          "action_sum": norm_a.sum(0).tolist(), "action_max_err": float(np.abs(norm_a - want_a).max()),
                          "bounds_in_range": bool(np.all(np.abs(bnd_a) <= 1.0))}
            if norm_p is not None:
                want_p = (raw_p - stats["proprio"]["mean"]) / (stats["proprio"]["std"] + 1e-8)
                res[split].update(proprio_sum=norm_p.sum(0).tolist(),
                                  proprio_max_err=float(np.abs(norm_p - want_p).max()))
        out[loader] = res
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("data_dir", help="the tfds data_dir (<output>/rlds)")
    p.add_argument("name", help="the dataset name")
    p.add_argument("stats", help="dataset_statistics.json")
    p.add_argument("--proprio-key", default="state", help="observation key used as proprio (Octo's proprio_obs_key, "
                                                          "OpenVLA's state_obs_keys=[key])")
    p.add_argument("--language-key", default="language_instruction")
    args = p.parse_args(argv)
    try:
        out = run(args)
    except Exception as exc:  # one JSON line whatever failed
        traceback.print_exc(file=sys.stderr)
        print(json.dumps({"ok": False, "error": f"{type(exc).__name__}: {exc}"[:2000]}))
        return 1
    print(json.dumps({"ok": True, **out}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
