"""lerobot's per-frame language columns (lerobot 0.6.x, `lerobot/datasets/language.py`), read and written.

Two optional data columns beside the frames, declared in info.json as {"dtype": "language", "shape": [1],
"names": null}:
* `language_persistent`: list<struct<role, content, style, timestamp float32, camera, tool_calls list<json>>>, the
  same list on every frame of an episode (state that stays active: subtask, plan, memory, motion, task_aug);
* `language_events`: list<struct<role, content, style, camera, tool_calls>>, rows only on the frame where the event
  fired (interjection, vqa, trace, speech tool calls).

Between readers and writers a column travels as a text feature of the same name (role `language`) holding each
frame's rows as canonical JSON (`rows_json`: the row fields in lerobot's order, timestamps as float32 values,
tool_calls as JSON values), so any
target keeps it (an RLDS Text step feature, an ORTF string column) and the LeRobot target writes it back typed.

An episode with more instructions than its task (RLDS `language_instruction_2`, ..., mapped as language text
features; episode metadata holding language) gets `task_aug` rows as lerobot's annotation pipeline writes them
(steerable_pipeline/modules/plan_subtasks_memory.py: role "user", style "task_aug", the episode's first frame time,
the task first, duplicates dropped) in `language_persistent`, and an empty `language_events`.
"""
from __future__ import annotations

import json
import re
from itertools import accumulate
from typing import TYPE_CHECKING, Any, Iterable

import numpy as np
import pyarrow as pa

from robo_ray.errors import DataCorrupt

if TYPE_CHECKING:
    from robo_ray.episode import CanonicalEpisode
    from robo_ray.formats.lerobot.layout import Feature

LANGUAGE_PERSISTENT = "language_persistent"
LANGUAGE_EVENTS = "language_events"
LANGUAGE_COLUMNS = (LANGUAGE_PERSISTENT, LANGUAGE_EVENTS)
PERSISTENT_FIELDS = ("role", "content", "style", "timestamp", "camera", "tool_calls")
EVENT_FIELDS = ("role", "content", "style", "camera", "tool_calls")
FIELDS = {LANGUAGE_PERSISTENT: PERSISTENT_FIELDS, LANGUAGE_EVENTS: EVENT_FIELDS}
# episode metadata that holds language (RLDS episode_metadata/language_instruction, a task description, ...)
LANGUAGE_METADATA = re.compile(r"(^|[_/])(natural_)?(language|instruction|task)([_/]|$)", re.IGNORECASE)
MAX_ROWS_JSON = 1 << 20  # one frame's rows as JSON: bounded before parsing (untrusted input)


def _row_type(column: str) -> pa.StructType:
    types = {"role": pa.string(), "content": pa.string(), "style": pa.string(), "timestamp": pa.float32(),
             "camera": pa.string(), "tool_calls": pa.list_(pa.json_())}
    return pa.struct([pa.field(k, types[k], nullable=k not in ("role", "timestamp")) for k in FIELDS[column]])


def column_type(column: str) -> pa.DataType:
    """The arrow type lerobot declares for the column (language_persistent_arrow_type / ..._events_...)."""
    return pa.list_(_row_type(column))


def hf_feature(column: str) -> dict[str, Any]:
    """The column in the parquet `huggingface` metadata, as datasets 4 serializes lerobot's feature."""
    value = {k: ({"feature": {"_type": "Json"}, "_type": "List"} if k == "tool_calls" else
                 {"dtype": "float32" if k == "timestamp" else "string", "_type": "Value"}) for k in FIELDS[column]}
    return {"feature": value, "_type": "List"}


def rows_json(rows: Iterable[dict[str, Any]], column: str) -> str:
    """One frame's rows as canonical JSON: each row's fields in lerobot's order, missing ones null."""
    out = []
    for row in rows:
        r = {k: row.get(k) for k in FIELDS[column]}
        if isinstance(r.get("timestamp"), (int, float)):  # float32, as the column stores it
            r["timestamp"] = float(np.float32(r["timestamp"]))
        calls = r.get("tool_calls")
        if calls is not None:  # arrow.json values read as their JSON text
            r["tool_calls"] = [json.loads(c) if isinstance(c, str) else c for c in calls]
        out.append(r)
    return json.dumps(out, ensure_ascii=False, separators=(",", ":"))


def parse_rows(text: str, column: str, where: str) -> list[dict[str, Any]]:
    """A frame's rows from their JSON (ValueError naming `where` when it is not a list of rows with a role)."""
    if len(text) > MAX_ROWS_JSON:
        raise ValueError(f"{where}: {column} of {len(text)} characters (limit {MAX_ROWS_JSON})")
    rows = json.loads(text) if text else []
    if not isinstance(rows, list) or not all(isinstance(r, dict) and _row_ok(r, column) for r in rows):
        raise ValueError(f"{where}: {column} is not a list of rows of lerobot's fields ({', '.join(FIELDS[column])})")
    return rows


def _row_ok(row: dict[str, Any], column: str) -> bool:
    """A row's fields typed as the column declares them (role and a persistent row's timestamp required)."""
    if set(row) - set(FIELDS[column]) or not isinstance(row.get("role"), str):
        return False
    if column == LANGUAGE_PERSISTENT and (not isinstance(row.get("timestamp"), (int, float))
                                          or isinstance(row.get("timestamp"), bool)):
        return False
    return all(row.get(k) is None or isinstance(row[k], str) for k in ("content", "style", "camera")) and \
        (row.get("tool_calls") is None or isinstance(row["tool_calls"], list))


def frame_rows(f: "Feature", ep: "CanonicalEpisode") -> list[list[dict[str, Any]]]:
    """One list of rows per step of the language column `f` (a layout Feature) for episode `ep`: the source's
    column passed through (its JSON parsed; DataCorrupt when malformed), or task_aug rows made from the episode's
    tasks, its language text features (`f.targets`) and language metadata (`f.sources`), or no events."""
    if f.targets == (f.key,):
        try:
            return [parse_rows(t, f.key, f"episode {ep.episode_index} step {i}")
                    for i, t in enumerate(ep.texts[f.key])]
        except ValueError as exc:  # json.JSONDecodeError too
            raise DataCorrupt(str(exc)[:300]) from None
    if f.key == LANGUAGE_EVENTS:
        return [[] for _ in range(ep.length)]
    phrasings = [*dict.fromkeys(ep.language), *(t for target in f.targets for t in ep.texts[target]),
                 *(str(ep.metadata.get(k) or "") for k in f.sources)]
    rows = task_aug_rows(phrasings, 0.0)
    return [rows] * ep.length


def language_array(frames: list[list[dict[str, Any]]], column: str) -> pa.Array:
    """The typed column of `frames` (one list of rows per frame)."""
    calls_text = [[json.dumps(c, ensure_ascii=False) for c in r["tool_calls"]]
                  if r.get("tool_calls") is not None else None for rows in frames for r in rows]
    offsets, flat = [0], []
    for calls in calls_text:
        offsets.append(offsets[-1] + len(calls or []))
        flat += calls or []
    tool_calls = pa.ListArray.from_arrays(pa.array(offsets, pa.int32()),
                                          pa.ExtensionArray.from_storage(pa.json_(), pa.array(flat, pa.string())),
                                          mask=pa.array([c is None for c in calls_text], pa.bool_()))
    rows = [r for rows in frames for r in rows]
    children = []
    for f in _row_type(column):
        if f.name == "tool_calls":
            children.append(tool_calls)
        else:
            children.append(pa.array([r.get(f.name) for r in rows], f.type))
    struct = pa.StructArray.from_arrays(children, fields=list(_row_type(column)))
    ends = pa.array(list(accumulate([len(rows) for rows in frames], initial=0)), pa.int32())
    return pa.ListArray.from_arrays(ends, struct, type=column_type(column))


def column_json(column: pa.ChunkedArray | pa.Array, name: str) -> list[str]:
    """Each frame's rows of a read language column as canonical JSON."""
    return [rows_json(rows or [], name) for rows in column.to_pylist()]


def task_aug_rows(phrasings: Iterable[str], t0: float) -> list[dict[str, Any]]:
    """task_aug rows at `t0` (role user), one per distinct non-empty phrasing, in order."""
    seen: dict[str, None] = {}
    for p in phrasings:
        if p.strip():
            seen.setdefault(p.strip(), None)
    return [{"role": "user", "content": p, "style": "task_aug", "timestamp": float(t0), "camera": None,
             "tool_calls": None} for p in seen]
