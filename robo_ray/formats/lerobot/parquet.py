"""The arrow schemas of a LeRobot dataset's parquet files (data, meta/episodes) and how they are written (one
row group per episode, snappy, lerobot's dictionary columns)."""
from __future__ import annotations

import io
import json
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from robo_ray.formats.lerobot import language
from robo_ray.formats.lerobot.layout import Feature, Layout
from robo_ray.formats.lerobot.stats import STAT_KEYS


_PA = {"float32": pa.float32(), "float64": pa.float64(), "int64": pa.int64(), "bool": pa.bool_(),
       "int32": pa.int32(), "uint8": pa.uint8()}


def _nested(t: pa.DataType, shape: tuple[int, ...], fixed: bool = True) -> pa.DataType:
    for d in reversed(shape):
        t = pa.list_(t, d) if fixed else pa.list_(t)
    return t


def column_type(f: Feature) -> pa.DataType:
    if f.dtype == "language":
        return language.column_type(f.key)
    if f.dtype == "string":
        return pa.string()
    base = _PA[f.dtype]
    return base if f.scalar else _nested(base, f.shape)


def hf_feature(f: Feature) -> dict[str, Any]:
    """The feature in the `huggingface` parquet metadata (datasets 4 style, as lerobot 0.4.4+ writes it)."""
    if f.dtype == "language":
        return language.hf_feature(f.key)
    if f.dtype == "string" or f.scalar:
        return {"dtype": f.dtype, "_type": "Value"}
    if len(f.shape) == 1:
        return {"feature": {"dtype": f.dtype, "_type": "Value"}, "length": f.shape[0], "_type": "List"}
    return {"shape": list(f.shape), "dtype": f.dtype, "_type": f"Array{len(f.shape)}D"}


def data_schema(layout: Layout) -> pa.Schema:
    feats = layout.data_features
    meta = {"huggingface": json.dumps({"info": {"features": {f.key: hf_feature(f) for f in feats}}})}
    return pa.schema([pa.field(f.key, column_type(f)) for f in feats], metadata=meta)


def _stat_shape(f: Feature) -> tuple[int, ...]:
    return (1 if f.depth else 3, 1, 1) if f.kind == "video" else f.shape


def stats_fields(f: Feature) -> list[pa.Field]:
    """meta/episodes `stats/<feature>/<stat>` columns, typed as lerobot's pa.Table.from_pydict infers them."""
    shape = _stat_shape(f)
    out = []
    for k in STAT_KEYS:
        if k == "count":
            t = pa.list_(pa.int64())
        elif k in ("min", "max") and f.kind != "video" and f.dtype in ("bool", "int64"):
            t = _nested(_PA[f.dtype], shape, fixed=False)
        else:
            t = _nested(pa.float64(), shape, fixed=False)
        out.append(pa.field(f"stats/{f.key}/{k}", t))
    return out


def episodes_schema(layout: Layout) -> pa.Schema:
    fields = [pa.field("episode_index", pa.int64()), pa.field("tasks", pa.list_(pa.string())),
              pa.field("length", pa.int64()), pa.field("data/chunk_index", pa.int64()),
              pa.field("data/file_index", pa.int64()), pa.field("dataset_from_index", pa.int64()),
              pa.field("dataset_to_index", pa.int64())]
    for cam in layout.cameras:
        fields += [pa.field(f"videos/{cam.key}/chunk_index", pa.int64()),
                   pa.field(f"videos/{cam.key}/file_index", pa.int64()),
                   pa.field(f"videos/{cam.key}/from_timestamp", pa.float64()),
                   pa.field(f"videos/{cam.key}/to_timestamp", pa.float64())]
    for f in layout.features:
        if f.numeric or f.kind == "video":
            fields += stats_fields(f)
    fields += [pa.field("meta/episodes/chunk_index", pa.int64()), pa.field("meta/episodes/file_index", pa.int64())]
    return pa.schema(fields)


def arrow_column(values: Any, f: Feature, n: int) -> pa.Array:
    if f.dtype == "language":  # one list of rows per frame
        return language.language_array(values, f.key)
    if f.dtype == "string":
        return pa.array(list(values), type=pa.string())
    arr = np.ascontiguousarray(np.asarray(values).astype(f.dtype, copy=False))
    if f.scalar:
        return pa.array(arr.reshape(n), type=_PA[f.dtype])
    flat: pa.Array = pa.array(arr.reshape(-1), type=_PA[f.dtype])
    for d in reversed(f.shape):
        flat = pa.FixedSizeListArray.from_arrays(flat, d)
    return flat


def dictionary_columns(schema: pa.Schema) -> list[str]:
    """Columns worth dictionary encoding: the repeating bookkeeping, flags and text (lerobot encodes every column
    so; on float data that only costs: ~3x the write time and +45% size on 1M rows of 2x26 float32)."""
    return [f.name for f in schema if f.name in ("timestamp", "frame_index", "episode_index", "task_index")
            or f.type in (pa.bool_(), pa.string())]


def parquet_writer(sink: Any, schema: pa.Schema) -> pq.ParquetWriter:
    return pq.ParquetWriter(sink, schema, compression="snappy", use_dictionary=dictionary_columns(schema))


def write_parquet(sink: Any, table: pa.Table, lengths: list[int]) -> None:
    """`table` with one row group per episode (lerobot's layout), snappy."""
    writer = parquet_writer(sink, table.schema)
    try:
        start = 0
        for n in lengths:
            writer.write_table(table.slice(start, n), row_group_size=max(n, 1))
            start += n
    finally:
        writer.close()


def parquet_bytes(table: pa.Table, lengths: list[int] | None = None) -> bytes:
    buf = io.BytesIO()
    write_parquet(buf, table, lengths if lengths is not None else [table.num_rows])
    return buf.getvalue()
