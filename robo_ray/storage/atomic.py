"""Writes a reader never sees partial: local = temp file + fsync + os.replace; object stores = one PUT (or a
multipart / resumable upload) to the final key, never a rename (`open_upload`/`discard_upload` for streamed
shards); other filesystems: whole writes through RetryingFileSystem (temp + rename where puts are not atomic).
`create_exclusive` is the conditional create for commit markers (S3 `If-None-Match: *`, GCS
`ifGenerationMatch=0`, local hard link). Text written through `write_text_atomic` is passed through
`secrets.redact` first."""
from __future__ import annotations

import os
import posixpath
from typing import Any, Iterable

import fsspec

from robo_ray.secrets import redact
from robo_ray.storage.errors import _http_status, storage_error
from robo_ray.storage.retrying_fs import with_retries
from robo_ray.storage.urls import is_local, is_object_store, temp_name, url_of

# streamed uploads: parts of this size (S3 multipart minimum is 5 MiB; GCS chunks must be multiples of 256 KiB)
UPLOAD_BLOCK = 16 << 20


def _local_temp_copy(path: str, data: bytes) -> str:
    """`data` fsync'ed into a temp file beside `path` (the caller renames or links it into place)."""
    os.makedirs(posixpath.dirname(path), exist_ok=True)
    tmp = temp_name(path)
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    return tmp


def write_bytes_atomic(fs: fsspec.AbstractFileSystem, path: str, data: bytes) -> None:
    """Write so a reader never sees a partial file: temp + rename locally, one PUT on object stores."""
    if is_local(fs):
        tmp = _local_temp_copy(path, data)
        try:
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)
        return
    try:
        with_retries(fs).pipe_file(path, data)
    except Exception as exc:  # noqa: BLE001 - one line naming the URL
        raise storage_error(exc, url_of(fs, path), "writing", fs) from exc


def write_text_atomic(fs: fsspec.AbstractFileSystem, path: str, text: str) -> None:
    """`write_bytes_atomic` for text, with known secrets and URL credentials masked (secrets.redact)."""
    write_bytes_atomic(fs, path, redact(text).encode("utf-8"))


def write_chunks_atomic(fs: fsspec.AbstractFileSystem, path: str, chunks: Iterable[str]) -> None:
    """`write_text_atomic` for text made piece by piece (each chunk whole lines, masked on its own): a file of
    200,000 rows is never one string. Local: temp + rename; object stores: one streamed upload, visible on close."""
    if is_local(fs):
        os.makedirs(posixpath.dirname(path), exist_ok=True)
        tmp = temp_name(path)
        try:
            with open(tmp, "wb") as f:
                for chunk in chunks:
                    f.write(redact(chunk).encode("utf-8"))
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)
        return
    up = open_upload(fs, path)
    if up is None:  # memory:// and the like: no streamed upload
        write_text_atomic(fs, path, "".join(chunks))
        return
    try:
        for chunk in chunks:
            up.write(redact(chunk).encode("utf-8"))
        up.close()
    except Exception as exc:  # noqa: BLE001 - one line naming the URL
        discard_upload(up)
        raise storage_error(exc, url_of(fs, path), "writing", fs) from exc


def create_exclusive(fs: fsspec.AbstractFileSystem, path: str, data: bytes) -> None:
    """Create `path` with `data` only if it does not exist yet; FileExistsError if it does (someone else won).

    Local: temp file + hard link (atomic, fails if the name exists). S3: PUT with If-None-Match: * (AWS S3, MinIO
    and moto enforce it). GCS: upload with ifGenerationMatch=0. Other filesystems (memory://): check then write
    (retried, via temp + rename where puts are not atomic), which is not atomic."""
    if is_local(fs):
        tmp = _local_temp_copy(path, data)
        try:
            try:
                os.link(tmp, path)
            except FileExistsError:
                raise
            except OSError:  # no hard links on this filesystem: exclusive open (atomic name, not content)
                with open(path, "xb") as f:
                    f.write(data)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)
        return
    if is_object_store(fs):
        try:
            fs.pipe_file(path, data, mode="create")
        except FileExistsError:
            raise
        except Exception as exc:  # noqa: BLE001
            if _http_status(exc) == 412 or "PreconditionFailed" in str(exc) or "pre-conditions" in str(exc):
                raise FileExistsError(url_of(fs, path)) from exc
            raise storage_error(exc, url_of(fs, path), "creating", fs) from exc
        return
    fs = with_retries(fs)
    if fs.exists(path):
        raise FileExistsError(url_of(fs, path))
    try:
        fs.pipe_file(path, data)
    except Exception as exc:  # noqa: BLE001
        raise storage_error(exc, url_of(fs, path), "creating", fs) from exc


def open_upload(fs: fsspec.AbstractFileSystem, path: str):
    """A write-mode file that uploads straight to the final key of an object store: one PUT when the data fits in
    one block, else a multipart (S3) / resumable (GCS) upload that becomes visible only on `close()`. Returns None
    when the filesystem has no such upload (local, memory://): the caller writes another way."""
    if not is_object_store(fs):
        return None
    try:
        return fs.open(path, "wb", block_size=UPLOAD_BLOCK)
    except Exception as exc:  # noqa: BLE001
        raise storage_error(exc, url_of(fs, path), "starting the upload of", fs) from exc


def discard_upload(f: Any) -> None:
    """Abandon an `open_upload` file: abort the multipart/resumable upload, never publish a partial object (fsspec
    files commit on close and on garbage collection, so the file is marked closed without committing)."""
    if f is None:
        return
    try:
        if not f.closed:
            f.discard()
    except Exception:  # noqa: BLE001 - best effort; an unfinished multipart upload is invisible anyway
        pass
    try:
        f.buffer = None
        f.closed = True
    except Exception:  # noqa: BLE001
        pass
