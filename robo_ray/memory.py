"""Giving freed memory back to the system between phases of a run.

Freed memory is not always reused by the next allocation: Arrow's pool (mimalloc) keeps pages for reuse, and glibc
keeps one heap per thread (a parquet footer of 20,000 row groups, ~270 MB of small allocations, parsed by the
converting thread and freed, is not reused when the report's thread parses it again: the peak was both). Called
where a phase ends; a no-op where the calls do not exist (not glibc, no pyarrow)."""
from __future__ import annotations

import ctypes
import ctypes.util
import functools


@functools.lru_cache(maxsize=1)
def _malloc_trim():
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
        return getattr(libc, "malloc_trim", None)
    except OSError:
        return None


def release_unused_memory() -> None:
    """Arrow's unused pool memory, then every glibc heap's free pages, back to the system."""
    try:
        import pyarrow as pa

        pa.default_memory_pool().release_unused()
    except Exception:  # noqa: BLE001 - best effort
        pass
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
