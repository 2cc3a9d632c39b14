#!/usr/bin/env python3
"""Read an RLDS dataset the way OpenVLA / Octo (tfds 4.9.3 on TensorFlow 2.15, via dlimp) do, and check it.

Standalone on purpose: runs in a separate TF 2.15 environment (tests/compat/requirements-openvla.txt) and imports
only tensorflow / tensorflow_datasets / the standard library -- never robo_ray.

    python tests/compat/openvla_read.py OUT/rlds/<name>/<version> --episodes 4 --steps 420 --image-shape 96,128,3

Checks, in order (each one's name is the `check` field of the failure summary):
  a_builder_from_directory  tfds.builder_from_directory(dir), read `train` fully with image decoding; counts, shapes,
                            dtypes, is_first/is_last flags.
  b_builder_by_name         tfds.builder(name, data_dir=<dir>/../..) as Octo/OpenVLA call it (plain name, and
                            `name:version`), resolving to this very directory.
  c_slices                  train[:50%] + train[50%:] (and the train[:95%] / train[95%:] split Octo/OpenVLA make when
                            there is no val split): episode counts equal tfds' own split arithmetic and sum to the
                            total, the halves are disjoint, step counts sum to the total. An empty slice is only
                            checked arithmetically (tfds' as_dataset raises on it).
  d_dlimp                   builder.as_dataset(split="train", shuffle_files=True, decoders={"steps": SkipDecoding()},
                            read_config=...) like dlimp.DLataset.from_rlds; tf.io.decode_image on the encoded image
                            strings, language_instruction is tf.string, every non-steps leaf is a scalar so the
                            tf.repeat(x, T) broadcast works; also str(builder.info) (Octo keys its stats cache on it).

stdout gets exactly one line of JSON ({"ok": true, ...} or {"ok": false, "check": ..., "error": ...}); everything else
(TF/absl logging, our progress notes) goes to stderr. Exit code 0 = all checks passed, 1 = a check failed, 2 = usage.
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import sys
import traceback
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


class CheckFailed(Exception):
    pass


def _log(msg: str) -> None:
    print(f"[openvla_read] {msg}", file=sys.stderr, flush=True)


def _expect(cond: bool, msg: str) -> None:
    if not cond:
        raise CheckFailed(msg)


def _parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("dataset_version_dir", help="<data_dir>/<name>/<version> holding dataset_info.json")
    p.add_argument("--episodes", type=int, help="expected number of episodes in the split")
    p.add_argument("--steps", type=int, help="expected total number of steps in the split")
    p.add_argument("--image-shape", help="expected H,W,C of every image feature, e.g. 96,128,3")
    p.add_argument("--split", default="train", help="split to check (default: train)")
    p.add_argument("--allow-name-collision", action="store_true",
                   help="accept that tfds.builder(<plain name>) does not resolve to this directory (the name is "
                        "also a registered tfds dataset); `name:version` must still work")
    return p.parse_args(argv)


# --------------------------------------------------------------------------------------------------- helpers
def _image_features(tfds, feature, prefix=""):
    """{'observation/image_top': Image feature, ...} inside a (steps) FeaturesDict."""
    out = {}
    if isinstance(feature, tfds.features.FeaturesDict):
        for key, sub in feature.items():
            out.update(_image_features(tfds, sub, f"{prefix}{key}/"))
    elif isinstance(feature, tfds.features.Image):
        out[prefix.rstrip("/")] = feature
    return out


def _get(nested, path):
    for part in path.split("/"):
        nested = nested[part]
    return nested


def _flatten(nested, prefix=""):
    if isinstance(nested, dict):
        out = {}
        for k, v in nested.items():
            out.update(_flatten(v, f"{prefix}{k}/"))
        return out
    return {prefix.rstrip("/"): nested}


def _episode_key(episode_np):
    """Hashable identity of an episode from its metadata (and length, as a fallback)."""
    meta = _flatten({k: v for k, v in episode_np.items() if k != "steps"})
    steps = _flatten(episode_np["steps"])
    t = len(next(iter(steps.values())))
    first_float = next((v for k, v in sorted(steps.items()) if getattr(v, "dtype", None) is not None
                        and v.dtype.kind == "f" and t > 0), None)
    key = tuple(sorted((k, v.tobytes() if hasattr(v, "tobytes") else bytes(v)) for k, v in meta.items()))
    return key + (("_len", t), ("_first", None if first_float is None else first_float[0].tobytes()))


# --------------------------------------------------------------------------------------------------- checks
def check_a(tf, tfds, args, version_dir, summary):
    builder = tfds.builder_from_directory(str(version_dir))
    info = builder.info
    _expect(args.split in info.splits, f"split {args.split!r} not in dataset_info splits {list(info.splits.keys())}")
    n_declared = info.splits[args.split].num_examples
    summary["name"], summary["version"] = info.name, str(info.version)
    summary["shard_lengths"] = list(info.splits[args.split].shard_lengths)
    _expect("steps" in info.features, f"no `steps` feature (top-level features: {list(info.features.keys())})")
    steps_feature = info.features["steps"].feature
    images = _image_features(tfds, steps_feature)
    _expect(images, "no Image feature inside steps")
    expected_shape = tuple(int(x) for x in args.image_shape.split(",")) if args.image_shape else None
    summary["images"] = {}
    for key, feat in images.items():
        shape = tuple(feat.shape)
        _expect(feat.dtype == tf.uint8, f"image {key}: declared dtype {feat.dtype}, want uint8")
        if expected_shape is not None:
            _expect(shape == expected_shape, f"image {key}: declared shape {shape}, want {expected_shape}")
        summary["images"][key] = {"shape": list(shape), "dtype": feat.dtype.name,
                                  "encoding": getattr(feat, "encoding_format", None)}

    ds = builder.as_dataset(split=args.split, shuffle_files=False)
    episodes = steps_total = 0
    for episode in ds:  # `steps` is a nested tf.data.Dataset here, decoded by tfds
        t = 0
        first, last = [], []
        for step in episode["steps"]:
            for key, feat in images.items():
                img = _get(step, key)
                _expect(img.dtype == tf.uint8 and tuple(img.shape) == tuple(feat.shape),
                        f"episode {episodes} step {t} {key}: decoded {img.dtype.name}{tuple(img.shape)}, "
                        f"want uint8{tuple(feat.shape)}")
            _expect(step["language_instruction"].dtype == tf.string if "language_instruction" in step else True,
                    f"episode {episodes}: language_instruction is not a string")
            first.append(bool(step["is_first"]) if "is_first" in step else None)
            last.append(bool(step["is_last"]) if "is_last" in step else None)
            t += 1
        _expect(t > 0, f"episode {episodes}: empty (Octo/OpenVLA drop empty episodes; do not write them)")
        if first[0] is not None:
            _expect(first[0] and not any(first[1:]), f"episode {episodes}: is_first must be True exactly on step 0")
        if last[0] is not None:
            _expect(last[-1] and not any(last[:-1]),
                    f"episode {episodes}: is_last must be True exactly on the last step")
        episodes += 1
        steps_total += t
    _expect(episodes == n_declared, f"read {episodes} episodes but dataset_info declares {n_declared}")
    if args.episodes is not None:
        _expect(episodes == args.episodes, f"read {episodes} episodes, expected {args.episodes}")
    if args.steps is not None:
        _expect(steps_total == args.steps, f"read {steps_total} steps, expected {args.steps}")
    summary["episodes"], summary["steps"] = episodes, steps_total
    return builder


def check_b(tf, tfds, args, version_dir, summary):
    name, version = summary["name"], summary["version"]
    data_dir = version_dir.parent.parent
    _expect(version_dir.parent.name == name,
            f"folder {version_dir.parent.name!r} != dataset name {name!r}: tfds.builder(name, data_dir) cannot find it")
    summary["builder_by_name"] = {}
    resolved = None
    for form in (name, f"{name}:{version}"):
        try:
            b = tfds.builder(form, data_dir=str(data_dir))
            where = Path(str(b.data_dir)).resolve()
            ok = where == version_dir.resolve()
            summary["builder_by_name"][form] = "ok" if ok else f"resolved to {where}"
            if ok and resolved is None:
                resolved = b
        except Exception as e:  # noqa: BLE001 - report which form fails and why
            summary["builder_by_name"][form] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    _expect(summary["builder_by_name"][f"{name}:{version}"] == "ok",
            f"tfds.builder({name + ':' + version!r}, data_dir={str(data_dir)!r}) failed: "
            f"{summary['builder_by_name'][f'{name}:{version}']}")
    if not args.allow_name_collision:
        _expect(summary["builder_by_name"][name] == "ok",
                f"tfds.builder({name!r}, data_dir=...) as Octo/OpenVLA call it did not load this directory: "
                f"{summary['builder_by_name'][name]} (name collides with a registered tfds dataset? then rename it or "
                f"pass --allow-name-collision and load it as '{name}:{version}')")
    _expect(resolved.info.splits[args.split].num_examples == summary["episodes"],
            "builder found by name disagrees with builder_from_directory on the episode count")
    return resolved


def check_c(tf, tfds, args, builder, summary):
    total_eps, total_steps = summary["episodes"], summary["steps"]
    summary["slices"] = {}
    for pct in (50, 95):
        halves = (f"{args.split}[:{pct}%]", f"{args.split}[{pct}%:]")
        keys, counts, steps = [], [], []
        for spec in halves:
            expected = builder.info.splits[spec].num_examples  # tfds' own split arithmetic
            if expected == 0:  # tfds raises "Instruction [] corresponds to no data!" on as_dataset(); not our bug
                counts.append(0), steps.append(0), keys.append(set())
                summary["slices"][spec] = 0
                continue
            ds = builder.as_dataset(split=spec, shuffle_files=False,
                                    decoders={"steps": tfds.decode.SkipDecoding()})
            n, s, ks = 0, 0, set()
            for ep in ds.as_numpy_iterator():
                n += 1
                s += len(next(iter(_flatten(ep["steps"]).values())))
                ks.add(_episode_key(ep))
            _expect(n == expected, f"{spec}: read {n} episodes, tfds' split arithmetic says {expected}")
            counts.append(n), steps.append(s), keys.append(ks)
            summary["slices"][spec] = n
        _expect(sum(counts) == total_eps,
                f"{halves[0]} + {halves[1]} = {counts[0]} + {counts[1]} != {total_eps} episodes")
        _expect(sum(steps) == total_steps, f"{halves[0]} + {halves[1]} = {sum(steps)} steps != {total_steps}")
        _expect(not (keys[0] & keys[1]), f"{halves[0]} and {halves[1]} share episodes (shardLengths out of order?)")
        _expect(len(keys[0] | keys[1]) == total_eps,
                f"{halves[0]} and {halves[1]} do not cover {total_eps} distinct episodes")
    summary["slices_sum"] = summary["slices"][f"{args.split}[:50%]"] + summary["slices"][f"{args.split}[50%:]"]


def check_d(tf, tfds, args, builder, summary):
    # As dlimp.DLataset.from_rlds (used by Octo and OpenVLA):
    ds = builder.as_dataset(
        split=args.split,
        shuffle_files=True,
        decoders={"steps": tfds.decode.SkipDecoding()},
        read_config=tfds.ReadConfig(skip_prefetch=True, num_parallel_calls_for_interleave_files=tf.data.AUTOTUNE),
    )
    options = tf.data.Options()
    options.deterministic = False
    ds = ds.with_options(options)
    spec = ds.element_spec
    _expect("steps" in spec, "no `steps` in the element spec")
    steps_spec = _flatten(spec["steps"])
    meta_spec = _flatten({k: v for k, v in spec.items() if k != "steps"})
    non_scalar = {k: str(v.shape) for k, v in meta_spec.items() if v.shape.rank != 0}
    _expect(not non_scalar, f"non-steps leaves must be scalars for dlimp's tf.repeat(x, T) broadcast: {non_scalar}")
    images = list(summary["images"])
    for key in images:
        s = steps_spec.get(key)
        _expect(s is not None and s.dtype == tf.string and s.shape.rank == 1,
                f"with SkipDecoding, steps/{key} should be encoded strings of shape (T,), got {s}")
    _expect("language_instruction" in steps_spec, "steps/language_instruction missing (OpenVLA/Octo read it)")
    _expect(steps_spec["language_instruction"].dtype == tf.string,
            f"steps/language_instruction is {steps_spec['language_instruction'].dtype.name}, must be tf.string")
    for k in ("observation", "action"):
        _expect(k in spec["steps"], f"steps/{k} missing (Octo/OpenVLA require it)")
    bad_first_dim = {k: str(v.shape) for k, v in steps_spec.items() if v.shape.rank == 0}
    _expect(not bad_first_dim, f"steps leaves without a leading T dimension: {bad_first_dim}")

    def broadcast(i, traj):  # dlimp's _broadcast_metadata_rlds
        steps = traj.pop("steps")
        traj_len = tf.shape(tf.nest.flatten(steps)[0])[0]
        metadata = tf.nest.map_structure(lambda x: tf.repeat(x, traj_len), traj)
        out = {**steps, "traj_metadata": metadata}
        out["_len"] = tf.repeat(traj_len, traj_len)
        out["_traj_index"] = tf.repeat(i, traj_len)
        out["_frame_index"] = tf.range(traj_len)
        return out

    def decode(traj):  # what Octo's decode_and_resize does per frame, here for the whole trajectory
        for key in images:
            enc = _get(traj, key)
            shape = summary["images"][key]["shape"]
            dec = tf.map_fn(lambda b: tf.io.decode_image(b, expand_animations=False, dtype=tf.uint8), enc,
                            fn_output_signature=tf.TensorSpec([None, None, None], tf.uint8))
            tf.debugging.assert_equal(tf.shape(dec)[1:], tf.constant(shape, tf.int32),
                                      message=f"decoded {key} has the wrong H,W,C")
            traj.setdefault("_decoded", {})[key] = dec
        return traj

    ds = ds.enumerate().map(broadcast, num_parallel_calls=tf.data.AUTOTUNE).map(decode)
    episodes = steps_total = 0
    for traj in ds:
        t = int(traj["_len"][0])
        lens = {k: int(v.shape[0]) for k, v in _flatten({k: v for k, v in traj.items() if k != "_decoded"}).items()}
        wrong = {k: n for k, n in lens.items() if n != t}
        _expect(not wrong, f"after dlimp's broadcast, leaves whose length != T={t}: {wrong}")
        for key, img in traj["_decoded"].items():
            _expect(img.dtype == tf.uint8 and tuple(img.shape) == (t, *summary["images"][key]["shape"]),
                    f"tf.io.decode_image({key}) gave {img.dtype.name}{tuple(img.shape)}")
        episodes += 1
        steps_total += t
    _expect(episodes == summary["episodes"], f"dlimp-style read saw {episodes} episodes, want {summary['episodes']}")
    _expect(steps_total == summary["steps"], f"dlimp-style read saw {steps_total} steps, want {summary['steps']}")
    summary["dlimp"] = {"episodes": episodes, "steps": steps_total,
                        "metadata_leaves": sorted(meta_spec), "language_instruction_dtype": "string"}
    # Octo caches dataset statistics under a hash of str(builder.info): it must render.
    summary["info_str_sha256"] = hashlib.sha256(str(builder.info).encode()).hexdigest()[:16]


# --------------------------------------------------------------------------------------------------- main
def main(argv=None) -> int:
    args = _parse_args(argv)
    version_dir = Path(args.dataset_version_dir)
    summary: dict = {"ok": False, "dataset_version_dir": str(version_dir)}
    check = "setup"
    real_stdout = sys.stdout
    try:
        with contextlib.redirect_stdout(sys.stderr):  # keep stdout for the JSON line only
            if not (version_dir / "dataset_info.json").is_file():
                raise CheckFailed(f"{version_dir}/dataset_info.json not found (pass <data_dir>/<name>/<version>)")
            import tensorflow as tf
            import tensorflow_datasets as tfds

            tf.config.set_visible_devices([], "GPU")
            summary["tensorflow"], summary["tfds"] = tf.__version__, tfds.__version__
            _log(f"tensorflow {tf.__version__}, tensorflow-datasets {tfds.__version__}, {version_dir}")
            check = "a_builder_from_directory"
            check_a(tf, tfds, args, version_dir, summary)
            _log(f"a ok: {summary['episodes']} episodes, {summary['steps']} steps")
            check = "b_builder_by_name"
            builder = check_b(tf, tfds, args, version_dir, summary)
            _log(f"b ok: {summary['builder_by_name']}")
            check = "c_slices"
            check_c(tf, tfds, args, builder, summary)
            _log(f"c ok: {summary['slices']}")
            check = "d_dlimp"
            check_d(tf, tfds, args, builder, summary)
            _log("d ok")
        summary["ok"] = True
        print(json.dumps(summary, sort_keys=True), file=real_stdout, flush=True)
        return 0
    except Exception as e:  # noqa: BLE001 - any failure is reported the same way
        err = str(e) if isinstance(e, CheckFailed) else f"{type(e).__name__}: {e}"
        if not isinstance(e, CheckFailed):
            traceback.print_exc(file=sys.stderr)
        summary.update(check=check, error=" ".join(err.split())[:2000])
        print(f"FAILED [{check}]: {summary['error']}", file=sys.stderr, flush=True)
        print(json.dumps(summary, sort_keys=True), file=real_stdout, flush=True)
        return 1


if __name__ == "__main__":
    sys.exit(main())
