"""features.json and dataset_info.json for an RLDS dataset, built from the Mapping (FORMATS 1.2, 1.3)."""
from __future__ import annotations

import re
from typing import Any

from robo_ray.mapping import Mapping

_P = "tensorflow_datasets.core.features."
FEATURES_DICT = _P + "features_dict.FeaturesDict"


def _tensor(dtype: str, shape: list[int], doc: str | None = None) -> dict[str, Any]:
    node: dict[str, Any] = {
        "pythonClassName": _P + ("scalar.Scalar" if not shape else "tensor_feature.Tensor"),
        "tensor": {"shape": {"dimensions": [str(d) for d in shape]} if shape else {}, "dtype": dtype,
                   "encoding": "none"}}
    if doc:
        node["description"] = doc
    return node


def _image(shape: list[int], encoding: str, doc: str | None = None, dtype: str = "uint8") -> dict[str, Any]:
    node: dict[str, Any] = {"pythonClassName": _P + "image_feature.Image",
                            "image": {"shape": {"dimensions": [str(d) for d in shape]}, "dtype": dtype,
                                      "encodingFormat": encoding}}
    if doc:
        node["description"] = doc
    return node


def _text(doc: str | None = None) -> dict[str, Any]:
    node: dict[str, Any] = {"pythonClassName": _P + "text_feature.Text", "text": {}}
    if doc:
        node["description"] = doc
    return node


def _dict(features: dict[str, Any]) -> dict[str, Any]:
    return {"pythonClassName": FEATURES_DICT, "featuresDict": {"features": features}}


def _insert(tree: dict[str, Any], path: str, node: dict[str, Any]) -> None:
    parts = path.split("/")
    for p in parts[:-1]:
        tree = tree.setdefault(p, {})
    tree[parts[-1]] = node


def _to_features(tree: dict[str, Any]) -> dict[str, Any]:
    return {k: (v if "pythonClassName" in v else _dict(_to_features(v))) for k, v in tree.items()}


METADATA_FEATURES = {
    "episode_id": lambda: _tensor("int64", [], "Episode index in the source dataset."),
    "file_path": lambda: _text("Source file of the episode, relative to the source dataset root."),
}
# episode metadata scalars of other keys, by the mapping's episode_metadata_types (int / float / text / bool)
_METADATA_BY_TYPE = {
    "int": lambda doc: _tensor("int64", [], doc),
    "float": lambda doc: _tensor("float32", [], doc),
    "bool": lambda doc: _tensor("bool", [], doc),
    "text": lambda doc: _text(doc),
}


def metadata_feature(mapping: Mapping, key: str) -> dict[str, Any]:
    """The features.json node of one episode_metadata key (always a scalar: dlimp repeats them per step)."""
    if key in METADATA_FEATURES and key not in mapping.episode_metadata_types:
        return METADATA_FEATURES[key]()
    return _METADATA_BY_TYPE[mapping.metadata_type(key)](f"Episode metadata `{key}` from the source.")


def step_tree(mapping: Mapping) -> dict[str, Any]:
    tree: dict[str, Any] = {}
    for fm in mapping.steps:
        doc = f"From {fm.source}."
        node = _image(fm.shape, mapping.encoding_of(fm), doc, fm.dtype) if fm.kind == "image" \
            else _text(doc) if fm.kind == "text" else _tensor(fm.dtype, fm.shape, doc)
        _insert(tree, fm.target, node)
    _insert(tree, "reward", _tensor("float32", [], "Reward" + (f" from {mapping.defaults.reward_source}."
                                                              if mapping.defaults.reward_source else
                                                              f", constant {mapping.defaults.reward}.")))
    d = mapping.defaults
    _insert(tree, "discount", _tensor("float32", [], f"Discount from {d.discount_source}." if d.discount_source
                                      else f"Discount, constant {d.discount}."))
    _insert(tree, "is_first", _tensor("bool", [], f"From {d.is_first_source}." if d.is_first_source
                                      else "True on the first step."))
    _insert(tree, "is_last", _tensor("bool", [], f"From {d.is_last_source}." if d.is_last_source
                                     else "True on the last step."))
    _insert(tree, "is_terminal", _tensor("bool", [], "True on a terminal last step."))
    _insert(tree, "language_instruction", _text("Task text of the step."))
    return tree


def features_json(mapping: Mapping) -> dict[str, Any]:
    steps = {"pythonClassName": _P + "dataset_feature.Dataset",
             "sequence": {"feature": _dict(_to_features(step_tree(mapping))), "length": "-1"}}
    meta = {k: metadata_feature(mapping, k) for k in mapping.episode_metadata}
    return _dict({"steps": steps, "episode_metadata": _dict(meta)})


def shard_filename(name: str, split: str, index: int, num_shards: int) -> str:
    digits = max(5, len(str(num_shards)))
    return f"{name}-{split}.tfrecord-{index:0{digits}d}-of-{num_shards:0{digits}d}"


def parse_shard_filename(name: str, filename: str) -> tuple[str, int, int] | None:
    """(split, index, count) of a shard file name written by shard_filename, or None."""
    m = re.fullmatch(re.escape(name) + r"-([A-Za-z0-9_]+)\.tfrecord-(\d+)-of-(\d+)", filename)
    return (m.group(1), int(m.group(2)), int(m.group(3))) if m else None


def dataset_info_json(mapping: Mapping, splits: list[tuple[str, list[int], int]], description: str) -> dict[str, Any]:
    """Only keys tfds 4.9.3 and 4.9.10 both parse (unknown keys are fatal); never disableShuffling. `splits`:
    (name, shard lengths, bytes) per split, in order."""
    return {
        "citation": "",
        "description": description,
        "fileFormat": "tfrecord",
        "moduleName": f"robo_ray.{mapping.dataset_name}",
        "name": mapping.dataset_name,
        "releaseNotes": {mapping.version: "Converted by robo-ray."},
        "splits": [{"filepathTemplate": "{DATASET}-{SPLIT}.{FILEFORMAT}-{SHARD_X_OF_Y}", "name": split,
                    "numBytes": str(num_bytes), "shardLengths": [str(n) for n in lengths]}
                   for split, lengths, num_bytes in splits],
        "version": mapping.version,
    }
