"""features.json of a TFDS-written RLDS dataset (FORMATS 1.3), as `FeaturesDict.save_config` writes it, parsed
without tfds: the tree of FeaturesDict / Dataset nodes is flattened to leaves, each with its path, class, dtype,
declared shape and encoding. The input is untrusted: nesting depth, number of leaves, key length and shapes are
bounded, and anything malformed is one `SourceFormatError` / `UnsafeInput` line naming the feature.

Leaves tfds can write but robo-ray cannot read from a tf.Example without tfds (ragged sequences inside steps,
dynamic shapes, bfloat16/complex dtypes, Text with a deprecated encoder, float images...) are returned as
`Unsupported` with the reason; the reader reports them as findings and leaves them out.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from robo_ray.errors import SourceFormatError, UnsafeInput
from robo_ray.safety import MAX_DIM, MAX_ELEMENTS_PER_STEP

WHERE = "features.json"
MAX_DEPTH = 16
MAX_LEAVES = 4096
MAX_KEY_CHARS = 256
MAX_RANK = 5
DTYPES = {"bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16", "float32",
          "float64", "string"}
TENSOR_ENCODINGS = ("none", "bytes", "zlib")
IMAGE_DTYPES = ("uint8", "uint16")


@dataclass(frozen=True)
class Leaf:
    """One feature of the tree. `path` starts at the root (`("steps", "observation", "image")`); `shape` is per step
    for leaves under steps, per episode otherwise; -1 marks a dimension the file leaves open (images only)."""

    path: tuple[str, ...]
    cls: str  # Tensor | Scalar | Image | Text | ClassLabel
    dtype: str  # numpy dtype name, or "string"
    shape: tuple[int, ...]
    encoding: str = "none"  # tensors: none | bytes | zlib; images: jpeg | png | "" (not declared)
    doc: str | None = None

    @property
    def flat_key(self) -> str:
        """The key of this leaf in the serialized tf.train.Example."""
        return "/".join(self.path)

    @property
    def per_step(self) -> bool:
        return self.path[0] == "steps"


@dataclass(frozen=True)
class Unsupported:
    path: tuple[str, ...]
    reason: str

    @property
    def flat_key(self) -> str:
        return "/".join(self.path)


def _name(path: tuple[str, ...]) -> str:
    return "/".join(path) or "<root>"


def _kind(node: Any, path: tuple[str, ...]) -> str:
    """The node's class: from its type-specific key (what tfds reads back), else from pythonClassName."""
    if not isinstance(node, dict):
        raise SourceFormatError(f"{WHERE}: feature {_name(path)!r} is not a JSON object")
    cls = node.get("pythonClassName")
    short = cls.rsplit(".", 1)[-1] if isinstance(cls, str) else ""
    for key, kind in (("featuresDict", "FeaturesDict"), ("tensor", "Tensor"), ("image", "Image"),
                      ("text", "Text"), ("classLabel", "ClassLabel")):
        if key in node:
            return "Scalar" if kind == "Tensor" and short == "Scalar" else kind
    if "sequence" in node:
        return "Dataset" if short == "Dataset" else "Sequence"
    return short or "unknown"


def _dims(raw: Any, path: tuple[str, ...]) -> tuple[int, ...]:
    """A proto Shape as JSON ({"dimensions": ["64", "64", "3"]}, {} for a scalar): ints, -1 = unknown."""
    if raw is None or raw == {}:
        return ()
    dims = raw.get("dimensions", []) if isinstance(raw, dict) else None
    if not isinstance(dims, list) or len(dims) > MAX_RANK:
        raise UnsafeInput(f"{WHERE}: feature {_name(path)!r}: shape {raw!r:.80} is not a list of at most "
                          f"{MAX_RANK} dims")
    out = []
    for d in dims:
        try:
            v = int(d) if isinstance(d, (str, int)) and not isinstance(d, bool) and len(str(d)) <= 12 else None
        except ValueError:
            v = None
        if v is None or v < -1 or v > MAX_DIM:
            raise UnsafeInput(f"{WHERE}: feature {_name(path)!r}: shape {dims!r:.80} has a dim outside -1..{MAX_DIM}")
        out.append(v)
    total = 1
    for v in out:
        total *= max(v, 1)
    if total > MAX_ELEMENTS_PER_STEP:
        raise UnsafeInput(f"{WHERE}: feature {_name(path)!r}: shape {out} is too large ({total} elements)")
    return tuple(out)


def _doc(node: dict[str, Any]) -> str | None:
    doc = node.get("description")
    return doc[:1000] if isinstance(doc, str) and doc else None


def _leaf(node: dict[str, Any], kind: str, path: tuple[str, ...]) -> Leaf | Unsupported:
    doc = _doc(node)
    if kind in ("Tensor", "Scalar"):
        spec = node.get("tensor")
        if not isinstance(spec, dict):
            raise SourceFormatError(f"{WHERE}: feature {_name(path)!r}: `tensor` is not an object")
        shape = _dims(spec.get("shape"), path)
        dtype = spec.get("dtype")
        encoding = str(spec.get("encoding") or "none").lower()
        if not isinstance(dtype, str) or dtype not in DTYPES:
            return Unsupported(path, f"dtype {dtype!r:.40} is not supported")
        if encoding not in TENSOR_ENCODINGS:
            return Unsupported(path, f"tensor encoding {encoding!r:.40} is not supported")
        if -1 in shape:
            return Unsupported(path, f"variable shape {list(shape)} (stored ragged or with its shape) is not "
                                     "supported")
        if 0 in shape:
            return Unsupported(path, f"empty shape {list(shape)}: holds no values")
        if dtype == "string" and encoding != "none":
            return Unsupported(path, "string tensor with an encoding")
        return Leaf(path, kind, dtype, shape, encoding, doc)
    if kind == "Image":
        spec = node.get("image")
        if not isinstance(spec, dict):
            raise SourceFormatError(f"{WHERE}: feature {_name(path)!r}: `image` is not an object")
        shape = _dims(spec.get("shape"), path)
        dtype = spec.get("dtype", "uint8")
        fmt = str(spec.get("encodingFormat") or "").lower()
        if len(shape) != 3:
            return Unsupported(path, f"image shape {list(shape)} is not HxWxC")
        if dtype not in IMAGE_DTYPES:
            return Unsupported(path, f"image dtype {dtype!r:.40} is not supported (uint8 / uint16 only)")
        if fmt not in ("", "jpeg", "png"):
            return Unsupported(path, f"image encoding {fmt!r:.40} is not supported")
        if 0 in shape:
            return Unsupported(path, f"empty image shape {list(shape)}")
        return Leaf(path, "Image", dtype, shape, fmt, doc)
    if kind == "Text":
        spec = node.get("text")
        if isinstance(spec, dict) and (spec.get("useEncoder") or spec.get("use_encoder")):
            return Unsupported(path, "Text with a (deprecated) tfds text encoder")
        return Leaf(path, "Text", "string", (), "none", doc)
    if kind == "ClassLabel":
        return Leaf(path, "ClassLabel", "int64", (), "none", doc)
    return Unsupported(path, f"feature class {kind!r:.60} is not supported")


def _walk(node: Any, path: tuple[str, ...], out: list[Leaf | Unsupported], depth: int) -> None:
    if depth > MAX_DEPTH:
        raise UnsafeInput(f"{WHERE}: features nested deeper than {MAX_DEPTH} levels at {_name(path)!r}")
    kind = _kind(node, path)
    if kind == "FeaturesDict":
        feats = node["featuresDict"].get("features") if isinstance(node["featuresDict"], dict) else None
        if not isinstance(feats, dict):
            raise SourceFormatError(f"{WHERE}: feature {_name(path)!r}: featuresDict has no `features` object")
        for key, child in feats.items():
            if not isinstance(key, str) or not key or len(key) > MAX_KEY_CHARS or not key.isprintable():
                raise UnsafeInput(f"{WHERE}: a feature key under {_name(path)!r} is empty, too long or not "
                                  f"printable: {key!r:.60}")
            _walk(child, (*path, key), out, depth + 1)
            if len(out) > MAX_LEAVES:
                raise UnsafeInput(f"{WHERE}: more than {MAX_LEAVES} features")
        return
    if kind in ("Dataset", "Sequence"):
        if path == ("steps",) and kind == "Dataset":
            seq = node.get("sequence")
            inner = seq.get("feature") if isinstance(seq, dict) else None
            if _kind(inner, path) != "FeaturesDict":
                raise SourceFormatError(f"{WHERE}: `steps` is not a Dataset of a FeaturesDict")
            _walk(inner, path, out, depth + 1)
            return
        out.append(Unsupported(path, f"a nested {kind} (ragged per-step values) is not supported"))
        return
    out.append(_leaf(node, kind, path))


def parse_features(obj: Any) -> list[Leaf | Unsupported]:
    """features.json -> its leaves in file order; refuses a file that is not an RLDS FeaturesDict with `steps`."""
    if not isinstance(obj, dict) or _kind(obj, ()) != "FeaturesDict":
        raise SourceFormatError(f"{WHERE}: the top level is not a FeaturesDict (pythonClassName + featuresDict; "
                                "older tfds `type`/`content` files are not supported)")
    top = obj["featuresDict"].get("features") if isinstance(obj["featuresDict"], dict) else None
    if not isinstance(top, dict) or _kind(top.get("steps", {}), ("steps",)) != "Dataset":
        raise SourceFormatError(f"{WHERE}: no `steps` Dataset at the top level: not an RLDS dataset")
    out: list[Leaf | Unsupported] = []
    _walk(obj, (), out, 0)
    seen: dict[str, tuple[str, ...]] = {}
    for leaf in out:
        other = seen.setdefault(leaf.flat_key, leaf.path)
        if other != leaf.path:  # {"a/b": x} and {"a": {"b": y}} share the Example key "a/b"
            raise SourceFormatError(f"{WHERE}: features {list(other)} and {list(leaf.path)} both serialize as "
                                    f"{leaf.flat_key!r}")
    return out
