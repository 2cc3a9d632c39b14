"""Lookups where "missing" is an answer, not an error: an empty folder, a folder's entries, a JSON file's value.
Only a missing path (or bytes that are not JSON) is tolerated; any other failure (a transport error, a refused
permission) propagates, so a failing store is never read as an empty one."""
from __future__ import annotations

import json
from typing import Any

import fsspec


def is_empty_dir(fs: fsspec.AbstractFileSystem, path: str) -> bool:
    if not fs.exists(path):
        return True
    if not fs.isdir(path):
        return False
    return len(fs.ls(path, detail=False)) == 0


def ls_or_empty(fs: fsspec.AbstractFileSystem, path: str) -> list[str]:
    """The entries of a folder (full paths), [] when it does not exist."""
    try:
        return list(fs.ls(path, detail=False))
    except FileNotFoundError:
        return []


def read_json_or_none(fs: fsspec.AbstractFileSystem, path: str) -> Any:
    """The value of a JSON file, None when the file is missing or does not hold JSON (cut by a kill, not UTF-8)."""
    try:
        return json.loads(fs.cat_file(path))
    except (FileNotFoundError, ValueError):  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        return None
