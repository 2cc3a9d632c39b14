"""Opening files for reading: remote files through bounded ranged reads, never read ahead whole."""
from __future__ import annotations

import fsspec

from robo_ray.storage.retrying_fs import with_retries
from robo_ray.storage.urls import is_local

# remote sequential reads (video): fetch this much per GET, keep one such block per open file
STREAM_BLOCK = 8 << 20


def open_input(fs: fsspec.AbstractFileSystem, path: str, sequential: bool = False):
    """A seekable binary file for reading. Remote files are not read ahead whole: random access (parquet via
    pyarrow: footer, then the column chunks it needs) gets one ranged GET per read; sequential access (video
    handed to PyAV) gets STREAM_BLOCK-sized ranged GETs, one block buffered at a time."""
    if is_local(fs):
        return fs.open(path, "rb")
    fs = with_retries(fs)
    if sequential:
        return fs.open(path, "rb", block_size=STREAM_BLOCK, cache_type="readahead")
    return fs.open(path, "rb", cache_type="none")


def open_sequential(fs: fsspec.AbstractFileSystem, path: str):
    """A file to read front to back: remote ones through bounded ranged blocks."""
    return open_input(fs, path, sequential=True) if not is_local(fs) else fs.open(path, "rb")
