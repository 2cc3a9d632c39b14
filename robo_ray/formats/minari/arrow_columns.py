"""A Minari Arrow/Parquet episode's columns as leaves keyed like the HDF5 layout: struct fields nest
(`observations/<k>`), Tuple fields become `_index_<i>`, fixed-size lists take their feature's shape."""
from __future__ import annotations

from typing import Any

import numpy as np

from robo_ray.arrow_lists import list_values
from robo_ray.episode import FeatureSpec
from robo_ray.errors import DataCorrupt


def arrow_columns(table: Any, features: dict[str, FeatureSpec]) -> dict[str, Any]:
    """Arrow columns -> leaves keyed like the HDF5 layout (struct fields nest, Tuple fields become `_index_<i>`)."""
    out: dict[str, Any] = {}
    for name in table.column_names:
        if name == "episode_id":
            continue
        _arrow_leaf(table.column(name).combine_chunks(), name, None, features, out)
    return out


def _arrow_leaf(arr: Any, key: str, field: Any, features: dict[str, FeatureSpec], out: dict[str, Any]) -> None:
    """`arr` (column or struct field `key`) into `out`: numpy leaves, binary as bytes lists, text as objects."""
    import pyarrow as pa

    t = arr.type
    if pa.types.is_struct(t):
        for i in range(t.num_fields):
            f = t.field(i)
            sub = f"_index_{f.name}" if f.name.isdigit() else f.name
            _arrow_leaf(arr.field(i), f"{key}/{sub}", f, features, out)
        return
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        out[key] = [b if b is not None else b"" for b in arr.to_pylist()]
        return
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        out[key] = np.asarray(arr.to_pylist(), dtype=object)
        return
    if pa.types.is_fixed_size_list(t):
        values = list_values(arr).to_numpy(zero_copy_only=False)
        spec = features.get(key)
        shape: tuple[int, ...] = (t.list_size,)
        meta = field.metadata if field is not None else None
        if spec is not None and spec.kind == "tensor":
            shape = spec.shape or (1,)
        elif spec is not None and spec.kind == "image":
            shape = spec.shape
        elif meta and b"shape" in meta:
            shape = tuple(int(d) for d in meta[b"shape"].split(b",") if d)
        out[key] = values.reshape((len(arr), *shape))
        return
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        raise DataCorrupt(f"column {key!r}: variable-length lists are not supported")
    if arr.null_count:
        arr = arr.fill_null(0) if not pa.types.is_boolean(t) else arr.fill_null(False)
    out[key] = arr.to_numpy(zero_copy_only=False)
