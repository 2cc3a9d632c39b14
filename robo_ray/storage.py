"""fsspec URLs -> filesystems, joins, atomic writes, exclusive create, sha256. Every dataset path goes through here.

URLs: local paths, `s3://bucket/prefix`, `gs://bucket/prefix`, `hf://datasets/<org>/<repo>[@revision]/...`,
`memory://` (tests). Storage options come from the job config (`source.storage_options`,
`target.storage_options`) and are handed to fsspec unchanged, except for these defaults:

* s3: botocore "standard" retry mode, 5 attempts (throttling, 5xx, resets and connection errors are retried with
  exponential backoff and jitter) unless the options or AWS_MAX_ATTEMPTS / AWS_RETRY_MODE say otherwise; s3fs's
  own timeouts (connect 5 s, read 15 s) and its retries of SlowDown / dropped reads stay on. Endpoint overrides:
  `client_kwargs.endpoint_url`, `endpoint_url`, or AWS_ENDPOINT_URL(_S3) in the environment (MinIO, Ceph, R2...).
* gs: gcsfs retries 429/5xx/connection errors 6 times with exponential backoff; STORAGE_EMULATOR_HOST or
  `endpoint_url` points it elsewhere. Unless `requests_timeout` is given, requests get a 10 s connect and a 60 s
  read-silence timeout (gcsfs' default is none: a silent endpoint would hang a read forever).
* hf: `revision` in the options becomes `@revision` in the path (HfFileSystem's form).
* every other non-local filesystem (memory://, sftp://, http(s)://, abfs://, a test's faulty://...): handed out
  wrapped in `RetryingFileSystem`, which retries a call that failed with a transient error (connection reset or
  refused, timeout, EIO/EAGAIN/EBUSY-like errno, HTTP 5xx/408/429) up to ROBO_RAY_STORAGE_ATTEMPTS times in all
  (default 5), sleeping ROBO_RAY_STORAGE_BACKOFF_S (default 0.2 s) doubled per attempt with jitter, at most 10 s;
  then one StorageError line naming the URL. Reads are ranged `cat_file` calls, each retried on its own; a write
  is retried only whole (the whole object again, never an append twice) and, unless the store replaces objects
  atomically (memory, Azure, OSS), goes to `<name>.tmp-<random>` first, is checked to hold every byte, then renamed
  into place: an interrupted write never leaves a partial file under the final name. `retry_stats()` counts the
  retries of this process.

Before a filesystem is handed out for an s3/gs URL, its bucket is probed once per process (a 1-key listing under
the URL's prefix, bounded by ROBO_RAY_STORAGE_PROBE_TIMEOUT_S, default 60 s); an hf:// URL's repository and
revision are resolved. A missing bucket/repository, refused credentials or an endpoint that does not answer become
one `StorageError` line naming the URL, instead of a traceback or a hang later.

Writes: local = temp file + fsync + os.replace; object stores = one PUT (or a multipart / resumable upload) to the
final key, never a rename (`open_upload`/`discard_upload` for streamed shards); other filesystems: see above.
`create_exclusive` is the conditional create for commit markers (S3 `If-None-Match: *`, GCS `ifGenerationMatch=0`,
local hard link).
Text written through `write_text_atomic` is passed through `secrets.redact` first.
"""
from __future__ import annotations

import errno
import hashlib
import io
import json
import logging
import os
import posixpath
import random
import re
import threading
import time
import uuid
from collections import Counter
from typing import Any, Callable, Iterable
from urllib.parse import quote

import fsspec
from fsspec.implementations.local import LocalFileSystem
from fsspec.spec import AbstractBufferedFile

from robo_ray.errors import (BucketNotFound, ConfigError, RoboRayError, StorageAccessDenied, StorageError,
                             StorageUnreachable)
from robo_ray.secrets import redact, redact_url, register_options

OBJECT_STORES = ("s3", "s3a", "gs", "gcs")
PROBE_TIMEOUT_ENV = "ROBO_RAY_STORAGE_PROBE_TIMEOUT_S"
DEFAULT_PROBE_TIMEOUT_S = 60.0
DEFAULT_S3_ATTEMPTS = 5
# streamed uploads: parts of this size (S3 multipart minimum is 5 MiB; GCS chunks must be multiples of 256 KiB)
UPLOAD_BLOCK = 16 << 20
# remote sequential reads (video): fetch this much per GET, keep one such block per open file
STREAM_BLOCK = 8 << 20

_SCHEME = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*)://")
_probed: set[tuple[str, str]] = set()


class _DropRetryTracebacks(logging.Filter):
    """gcsfs logs `logger.exception(...)` when it gives up; we report that error ourselves, in one line."""

    def filter(self, record: logging.LogRecord) -> bool:
        msg = str(record.msg)
        return not ("out of retries" in msg or "non-retriable exception" in msg)


for _name in ("gcsfs", "gcsfs.retry", "gcsfs.core"):
    _lg = logging.getLogger(_name)
    _lg.addFilter(_DropRetryTracebacks())
    if not _lg.handlers:
        _lg.addHandler(logging.NullHandler())  # never Python's last-resort stderr handler


# ---- URLs -> filesystems ----------------------------------------------------------------------------------------
def scheme_of(url: str) -> str:
    m = _SCHEME.match(url or "")
    return m.group(1).lower() if m else "file"


def protocol_of(fs: fsspec.AbstractFileSystem) -> str:
    p = fs.protocol
    return (p[0] if isinstance(p, (tuple, list)) else p) or "file"


def is_object_store(fs: fsspec.AbstractFileSystem) -> bool:
    return protocol_of(fs) in OBJECT_STORES


def url_of(fs: fsspec.AbstractFileSystem, path: str) -> str:
    """The URL of a filesystem path (`bucket/key` -> `s3://bucket/key`; local paths stay paths)."""
    if is_local(fs):
        return path
    try:
        return fs.unstrip_protocol(path)
    except Exception:  # noqa: BLE001 - only for messages
        return f"{protocol_of(fs)}://{path}"


def _s3_options(opts: dict[str, Any]) -> dict[str, Any]:
    cfg = dict(opts.get("config_kwargs") or {})
    if "retries" not in cfg and not (os.environ.get("AWS_MAX_ATTEMPTS") or os.environ.get("AWS_RETRY_MODE")):
        cfg["retries"] = {"max_attempts": DEFAULT_S3_ATTEMPTS, "mode": "standard"}
    if cfg:
        opts["config_kwargs"] = cfg
    return opts


def _hf_revision(url: str, opts: dict[str, Any]) -> str:
    """hf://datasets/org/repo/sub + revision=R -> hf://datasets/org/repo@R/sub (R URL-encoded, as HfFileSystem
    wants for branch names with slashes such as refs/pr/1)."""
    revision = opts.pop("revision", None)
    if revision in (None, ""):
        return url
    rest = url[len("hf://"):]
    parts = rest.split("/")
    n = 3 if parts and parts[0] in ("datasets", "spaces", "models") else 2
    if len(parts) < n:
        raise ConfigError(f"{url}: expected hf://datasets/<org>/<repo>[/path]")
    repo_seg = parts[n - 1]
    if "@" in repo_seg:
        current = repo_seg.split("@", 1)[1]
        if current not in (str(revision), quote(str(revision), safe="")):
            raise ConfigError(f"{url}: the URL names revision {current!r} and storage_options.revision is "
                              f"{revision!r}; give one")
        return url
    parts[n - 1] = f"{repo_seg}@{quote(str(revision), safe='')}"
    return "hf://" + "/".join(parts)


def url_to_fs(url: str, storage_options: dict[str, Any] | None = None,
              probe: bool = True) -> tuple[fsspec.AbstractFileSystem, str]:
    """Resolve a URL (local path, s3://, gs://, hf://, memory://) to (filesystem, root path).

    For s3/gs the bucket is probed once per process (see the module docstring) unless `probe=False`."""
    opts = dict(storage_options or {})
    register_options(opts)
    scheme = scheme_of(url)
    if scheme in OBJECT_STORES and "@" in url.split("://", 1)[1].split("/", 1)[0]:
        raise ConfigError(f"{redact_url(url)}: credentials in the URL are not supported; use storage_options "
                          "(key/secret, token) or the environment")
    if scheme in ("s3", "s3a"):
        opts = _s3_options(opts)
    elif scheme in ("gs", "gcs") and "requests_timeout" not in opts:
        import aiohttp  # gcsfs' own dependency

        # gcsfs passes timeout=None to aiohttp (no timeout at all): an endpoint that accepts and never answers
        # would hang a read forever. Bounded connect and per-read silence; a whole large download is not capped.
        opts["requests_timeout"] = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=60)
    elif scheme == "hf":
        url = _hf_revision(url, opts)
    try:
        fs, path = fsspec.core.url_to_fs(url, **opts)
    except ImportError as exc:
        raise ConfigError(f"{redact_url(url)}: no filesystem for {scheme}:// is installed ({exc})") from exc
    except (TypeError, ValueError) as exc:
        raise ConfigError(redact(f"{redact_url(url)}: invalid URL or storage options: {exc}")) from exc
    if isinstance(fs, LocalFileSystem):
        path = os.path.abspath(path)
    fs = with_retries(fs)
    root = path.rstrip("/") or "/"
    if probe and protocol_of(fs) in OBJECT_STORES:
        check_bucket(fs, root, url)
    elif probe and protocol_of(fs) == "hf":
        check_hf_repo(fs, root, url)
    return fs, root


def join(root: str, *parts: str) -> str:
    return posixpath.join(root, *parts)


def is_local(fs: fsspec.AbstractFileSystem) -> bool:
    return isinstance(fs, LocalFileSystem)


# ---- errors -----------------------------------------------------------------------------------------------------
def _transport_types() -> tuple[type, ...]:
    types: list[type] = [ConnectionError, TimeoutError]
    try:
        from fsspec.exceptions import FSTimeoutError
        types.append(FSTimeoutError)
    except ImportError:
        pass
    try:
        import botocore.exceptions as be
        types += [be.EndpointConnectionError, be.ConnectTimeoutError, be.ReadTimeoutError, be.ConnectionClosedError,
                  be.HTTPClientError, be.ProxyConnectionError, be.ConnectionError]
    except ImportError:
        pass
    try:
        import aiohttp
        types += [aiohttp.ClientConnectionError, aiohttp.ClientPayloadError, aiohttp.ServerTimeoutError]
    except ImportError:
        pass
    try:
        import requests
        types += [requests.exceptions.ConnectionError, requests.exceptions.Timeout]
    except ImportError:
        pass
    for mod in ("httpx2", "httpx"):  # huggingface_hub's HTTP client
        try:
            types.append(__import__(mod).TransportError)
        except (ImportError, AttributeError):
            pass
    return tuple(types)


def _access_types() -> tuple[type, ...]:
    types: list[type] = [PermissionError]
    try:
        import botocore.exceptions as be
        types += [be.NoCredentialsError, be.PartialCredentialsError, be.CredentialRetrievalError]
    except ImportError:
        pass
    try:
        import google.auth.exceptions as ge
        types.append(ge.GoogleAuthError)
    except ImportError:
        pass
    return tuple(types)


def _http_status(exc: BaseException) -> int | None:
    for attr in ("code", "status", "status_code"):
        v = getattr(exc, attr, None)
        if isinstance(v, int) and 100 <= v < 600:
            return v
    resp = getattr(exc, "response", None)
    if isinstance(resp, dict):
        v = resp.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if isinstance(v, int):
            return v
    return None


_TRANSPORT_ERRNOS = {errno.ECONNREFUSED, errno.ECONNRESET, errno.ETIMEDOUT, errno.EHOSTUNREACH, errno.ENETUNREACH,
                     errno.EPIPE, errno.ECONNABORTED, errno.EIO, errno.EBUSY, getattr(errno, "EREMOTEIO", errno.EIO)}


def _is_transport_one(exc: BaseException) -> bool:
    if isinstance(exc, RoboRayError):
        return False
    if isinstance(exc, _transport_types()) or isinstance(exc, _access_types()):
        return True
    status = _http_status(exc)
    if status is not None and (status >= 500 or status in (401, 403, 408, 429)):
        return True
    if type(exc).__name__ in ("ClientError", "HttpError", "NoCredentialsError"):
        return True
    # s3fs turns 5xx/SlowDown into OSError(EREMOTEIO/EBUSY), gcsfs 403 into OSError("Forbidden: ...")
    return str(exc).startswith("Forbidden") or isinstance(exc, OSError) and exc.errno in _TRANSPORT_ERRNOS


def is_transport_error(exc: BaseException) -> bool:
    """A failure of the storage service or the network (after the client's retries), not of the data: the
    exception itself or what it was raised from (s3fs/pyarrow/PyAV wrap the client's error). A StorageError (e.g.
    RetryingFileSystem giving up) is one: callers that map transport errors with `storage_error` keep it as it is."""
    seen = 0
    while exc is not None and seen < 4:
        if isinstance(exc, StorageError) or _is_transport_one(exc):
            return True
        if isinstance(exc, RoboRayError):
            return False
        exc = exc.__cause__  # type: ignore[assignment]
        seen += 1
    return False


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return redact(f"{type(exc).__name__}: {text}"[:300])


def _endpoint(fs: fsspec.AbstractFileSystem) -> str:
    proto = protocol_of(fs)
    ep: Any = None
    if proto in ("s3", "s3a"):
        ep = (getattr(fs, "client_kwargs", None) or {}).get("endpoint_url") or getattr(fs, "endpoint_url", None)
        ep = ep or getattr(getattr(getattr(fs, "_s3", None), "meta", None), "endpoint_url", None)
        ep = ep or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or "AWS S3"
    elif proto in ("gs", "gcs"):
        try:
            ep = fs._location  # type: ignore[attr-defined]
        except Exception:  # noqa: BLE001
            ep = os.environ.get("STORAGE_EMULATOR_HOST") or "Google Cloud Storage"
    return redact_url(str(ep or proto))


def storage_error(exc: BaseException, url: str, action: str = "accessing",
                  fs: fsspec.AbstractFileSystem | None = None) -> RoboRayError:
    """One clear error naming the URL for a storage failure that survived the client's retries."""
    if isinstance(exc, RoboRayError):
        return exc
    url = redact_url(url)
    where = f" (endpoint {_endpoint(fs)})" if fs is not None and not is_local(fs) else ""
    if isinstance(exc, FileNotFoundError) and "bucket" in str(exc).lower():
        return BucketNotFound(f"{action} {url}: the bucket does not exist{where}")
    if isinstance(exc, _access_types()) or _http_status(exc) in (401, 403) or str(exc).startswith("Forbidden"):
        hint = ""
        if type(exc).__name__ in ("NoCredentialsError", "PartialCredentialsError"):
            hint = " (set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, a profile, or storage_options key/secret; " \
                   "anon: true for public buckets)"
        return StorageAccessDenied(f"{action} {url}: access denied{where}{hint}: {_short(exc)}")
    if isinstance(exc, _transport_types()):
        return StorageUnreachable(f"{action} {url}: the storage endpoint did not answer{where}: {_short(exc)}")
    return StorageError(f"{action} {url} failed{where}: {_short(exc)}")


def probe_timeout() -> float:
    try:
        return max(0.5, float(os.environ.get(PROBE_TIMEOUT_ENV, DEFAULT_PROBE_TIMEOUT_S)))
    except ValueError:
        return DEFAULT_PROBE_TIMEOUT_S


def check_bucket(fs: fsspec.AbstractFileSystem, root: str, url: str) -> None:
    """List at most one key under the URL (once per process, filesystem and URL): a missing bucket, refused
    credentials or a dead endpoint become a StorageError naming the URL, within `probe_timeout()` seconds."""
    from fsspec.asyn import sync
    from fsspec.exceptions import FSTimeoutError

    bucket, _, prefix = root.partition("/")
    if not bucket:
        raise ConfigError(f"{redact_url(url)}: the URL names no bucket")
    token = (str(getattr(fs, "_fs_token", id(fs))), root)
    if token in _probed:
        return
    proto = protocol_of(fs)

    async def list_one() -> None:  # under the URL's prefix: IAM policies often allow listing only there
        if proto in ("s3", "s3a"):
            await fs._call_s3("list_objects_v2", Bucket=bucket, Prefix=prefix, MaxKeys=1)  # type: ignore
        else:
            await fs._call("GET", "b/{}/o", bucket, prefix=prefix, maxResults=1, json_out=True)  # type: ignore

    timeout = probe_timeout()
    bucket_url = f"{proto}://{bucket}"
    try:
        sync(fs.loop, list_one, timeout=timeout)  # type: ignore[attr-defined]
    except (FSTimeoutError, TimeoutError) as exc:
        raise StorageUnreachable(f"cannot reach the storage endpoint {_endpoint(fs)} for {redact_url(url)}: no "
                                 f"answer within {timeout:g} s (set {PROBE_TIMEOUT_ENV} to wait longer)") from exc
    except FileNotFoundError as exc:
        raise BucketNotFound(f"bucket {bucket_url} does not exist (for {redact_url(url)}, endpoint "
                             f"{_endpoint(fs)})") from exc
    except Exception as exc:  # noqa: BLE001 - classified into one line
        ep, u = _endpoint(fs), redact_url(url)
        err = storage_error(exc, url, "listing", fs)
        if type(exc).__name__ == "ClientError" and "NoSuchBucket" in str(exc):
            err = BucketNotFound(f"bucket {bucket_url} does not exist (for {u}, endpoint {ep})")
        elif isinstance(err, StorageUnreachable):
            err = StorageUnreachable(f"cannot reach the storage endpoint {ep} for {u}: {_short(exc)}")
        elif isinstance(err, StorageAccessDenied):
            err = StorageAccessDenied(f"access denied listing bucket {bucket_url} (for {u}, endpoint {ep}): "
                                      f"{_short(exc)}")
        elif type(err) is StorageError:
            err = StorageError(f"cannot list bucket {bucket_url} (for {u}, endpoint {ep}): {_short(exc)}")
        raise err from exc
    _probed.add(token)


def check_hf_repo(fs: fsspec.AbstractFileSystem, root: str, url: str) -> None:
    """Resolve the Hub repository and revision once per process: a missing repo/revision, a gated repo without
    a token, or an unreachable Hub (or HF_HUB_OFFLINE=1) become one StorageError line naming the URL."""
    repo = "/".join(root.split("/")[:3] if root.startswith(("datasets/", "spaces/")) else root.split("/")[:2])
    token = (str(getattr(fs, "_fs_token", id(fs))), repo)
    if token in _probed:
        return
    u = redact_url(url)
    try:
        fs.resolve_path(repo)  # type: ignore[attr-defined]
    except FileNotFoundError as exc:
        raise BucketNotFound(f"Hugging Face Hub repository or revision not found (or not visible with this token): "
                             f"{u}: {_short(exc)}") from exc
    except Exception as exc:  # noqa: BLE001
        err = storage_error(exc, url, "resolving", fs)
        if isinstance(err, StorageUnreachable):
            err = StorageUnreachable(f"cannot reach the Hugging Face Hub for {u}: {_short(exc)}")
        raise err from exc
    _probed.add(token)


# ---- bounded retries for filesystems whose client does not retry ------------------------------------------------
RETRY_ATTEMPTS_ENV = "ROBO_RAY_STORAGE_ATTEMPTS"
RETRY_BACKOFF_ENV = "ROBO_RAY_STORAGE_BACKOFF_S"
DEFAULT_RETRY_ATTEMPTS = 5
DEFAULT_RETRY_BACKOFF_S = 0.2
MAX_RETRY_BACKOFF_S = 10.0
# clients that retry on their own (botocore, gcsfs, huggingface_hub): handed out as they are
_OWN_RETRIES = (*OBJECT_STORES, "hf")
# stores whose PUT replaces an object whole or not at all: written in place; the others via temp + rename
ATOMIC_PUT = ("memory", "abfs", "abfss", "az", "oss")
_TRANSIENT_ERRNOS = {errno.ECONNRESET, errno.ECONNABORTED, errno.ECONNREFUSED, errno.ETIMEDOUT, errno.EHOSTUNREACH,
                     errno.ENETUNREACH, errno.ENETDOWN, errno.ENETRESET, errno.EPIPE, errno.EIO, errno.EAGAIN,
                     errno.EBUSY, getattr(errno, "EREMOTEIO", errno.EIO)}
_PERMANENT = (FileNotFoundError, FileExistsError, IsADirectoryError, NotADirectoryError, PermissionError)
_retry_lock = threading.Lock()
_retries: Counter[str] = Counter()
_log = logging.getLogger(__name__)


def retry_attempts() -> int:
    try:
        return max(1, int(os.environ.get(RETRY_ATTEMPTS_ENV, DEFAULT_RETRY_ATTEMPTS)))
    except ValueError:
        return DEFAULT_RETRY_ATTEMPTS


def _backoff(attempt: int) -> float:
    try:
        base = max(0.0, float(os.environ.get(RETRY_BACKOFF_ENV, DEFAULT_RETRY_BACKOFF_S)))
    except ValueError:
        base = DEFAULT_RETRY_BACKOFF_S
    return min(MAX_RETRY_BACKOFF_S, base * 2 ** (attempt - 1)) * random.uniform(0.5, 1.0)


def retry_stats() -> dict[str, int]:
    """Transient errors retried by this process so far, per action ("reading", "writing", "listing"...)."""
    with _retry_lock:
        return dict(_retries)


def is_transient(exc: BaseException) -> bool:
    """An error worth another attempt: the network or the service hiccuped (reset, refused, timeout, EIO-like errno,
    HTTP 5xx/408/429), not a missing file, a refused permission or robo-ray's own error."""
    seen = 0
    while exc is not None and seen < 4:
        if isinstance(exc, (RoboRayError, *_PERMANENT)) or isinstance(exc, _access_types()):
            return False
        if isinstance(exc, _transport_types()):
            return True
        status = _http_status(exc)
        if status is not None:
            return status >= 500 or status in (408, 429)
        if isinstance(exc, OSError) and exc.errno in _TRANSIENT_ERRNOS:
            return True
        exc = exc.__cause__  # type: ignore[assignment]
        seen += 1
    return False


def retry_call(fn: Callable[[int], Any], fs: fsspec.AbstractFileSystem, path: str, action: str) -> Any:
    """`fn(attempt)` until it returns, at most `retry_attempts()` times; only transient errors are retried. When
    they run out: the StorageError line for `path`'s URL, saying how many attempts were made."""
    attempts = retry_attempts()
    for attempt in range(1, attempts + 1):
        try:
            return fn(attempt)
        except Exception as exc:  # noqa: BLE001 - classified below
            if not is_transient(exc):
                raise
            if attempt >= attempts:
                err = storage_error(exc, url_of(fs, path), action, fs)
                raise type(err)(f"{err} (gave up after {attempts} attempt{'s' * (attempts > 1)})") from exc
            with _retry_lock:
                _retries[action] += 1
            _log.debug("%s %s: attempt %d failed (%s); retrying", action, url_of(fs, path), attempt, _short(exc))
            time.sleep(_backoff(attempt))
    raise AssertionError("unreachable")


def temp_name(path: str) -> str:
    """Where a write goes before it is renamed to `path` (robo-ray's temp names all contain `.tmp-`)."""
    return f"{path}.tmp-{uuid.uuid4().hex[:8]}"


# method -> action named in messages; these are safe to repeat whole (reads, idempotent creates and copies)
_RETRIED = {"info": "checking", "ls": "listing", "find": "listing", "glob": "listing", "du": "listing",
            "expand_path": "listing", "cat_file": "reading", "cat": "reading", "cat_ranges": "reading",
            "get_file": "downloading", "get": "downloading", "checksum": "checking", "ukey": "checking",
            "modified": "checking", "created": "checking", "makedirs": "creating", "touch": "writing",
            "cp_file": "copying", "copy": "copying"}


class RetryingFileSystem:
    """A filesystem whose calls are retried on transient errors (see the module docstring); everything else is the
    wrapped filesystem's own (`protocol`, `unstrip_protocol`, ...). Writes are whole-object and never visible
    partial under their final name."""

    def __init__(self, fs: fsspec.AbstractFileSystem) -> None:
        self.fs = fs
        self.atomic_put = protocol_of(fs) in ATOMIC_PUT

    def __reduce__(self) -> tuple[Any, ...]:
        return RetryingFileSystem, (self.fs,)

    def __repr__(self) -> str:
        return f"RetryingFileSystem({self.fs!r})"

    def __getattr__(self, name: str) -> Any:
        if name == "fs" or name.startswith("__"):
            raise AttributeError(name)
        attr = getattr(self.fs, name)
        action = _RETRIED.get(name)
        if action is None or not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            path = args[0] if args and isinstance(args[0], str) else str(kwargs.get("path", ""))
            return retry_call(lambda _: attr(*args, **kwargs), self.fs, path, action)
        return call

    def _retry(self, action: str, path: str, fn: Callable[[int], Any]) -> Any:
        return retry_call(fn, self.fs, path, action)

    # ---- questions answered from `info`, whose errors are not swallowed (fsspec's `exists` says False on any) --
    def exists(self, path: str, **kwargs: Any) -> bool:
        try:
            self.info(path)
            return True
        except (FileNotFoundError, NotADirectoryError):
            return False

    lexists = exists

    def isdir(self, path: str) -> bool:
        try:
            return self.info(path)["type"] == "directory"
        except (FileNotFoundError, NotADirectoryError):
            return False

    def isfile(self, path: str) -> bool:
        try:
            return self.info(path)["type"] == "file"
        except (FileNotFoundError, NotADirectoryError):
            return False

    def size(self, path: str) -> int | None:
        return self.info(path).get("size")

    # ---- files ---------------------------------------------------------------------------------------------
    def open(self, path: str, mode: str = "rb", block_size: int | None = None, cache_options: dict | None = None,
             compression: str | None = None, **kwargs: Any) -> Any:
        """"rb": a buffered file whose every fetch is one retried ranged read; "wb"/"xb": a buffer written whole
        (and atomically) on close; other modes (append): the wrapped filesystem's file, not retried."""
        if mode == "rb" and compression is None:
            info = self.info(path)
            if info.get("type") == "directory":
                raise IsADirectoryError(url_of(self.fs, path))
            if info.get("size") is not None:
                return _RetryingReadFile(self, path, block_size=block_size or "default",
                                         cache_type=kwargs.get("cache_type", "readahead"),
                                         cache_options=cache_options, size=info["size"])
        if mode in ("wb", "xb") and compression is None:
            return _WholeWriteFile(self, path, exclusive=mode == "xb")
        return self.fs.open(path, mode, block_size=block_size, cache_options=cache_options,
                            compression=compression, **kwargs)

    def pipe_file(self, path: str, value: bytes, mode: str = "overwrite", **kwargs: Any) -> None:
        data = bytes(value)
        if mode == "create" and self.exists(path):
            raise FileExistsError(url_of(self.fs, path))
        if self.atomic_put:
            self._retry("writing", path, lambda _: self.fs.pipe_file(path, data, **kwargs))
            return
        self._via_temp(path, len(data), lambda tmp: self.fs.pipe_file(tmp, data, **kwargs))

    def pipe(self, path: str | dict[str, bytes], value: bytes | None = None, **kwargs: Any) -> None:
        items = path.items() if isinstance(path, dict) else [(path, value)]
        for p, v in items:
            self.pipe_file(p, v, **kwargs)

    def put_file(self, lpath: str, rpath: str, **kwargs: Any) -> None:
        if self.atomic_put:
            self._retry("uploading", rpath, lambda _: self.fs.put_file(lpath, rpath, **kwargs))
            return
        self._via_temp(rpath, os.path.getsize(lpath), lambda tmp: self.fs.put_file(lpath, tmp, **kwargs))

    def _via_temp(self, path: str, nbytes: int, write: Callable[[str], Any]) -> None:
        """Write a temp sibling (each attempt rewrites it whole), check it holds `nbytes`, rename it to `path`;
        then remove temps of `path` left by writers that were killed."""
        tmp = temp_name(path)
        try:
            self._retry("writing", path, lambda _: write(tmp))
            kept = self._retry("writing", path, lambda _: self.fs.info(tmp).get("size"))
            if kept is not None and kept != nbytes:
                raise StorageError(f"writing {url_of(self.fs, path)} failed: the store kept {kept} of {nbytes} bytes")
            self._retry("writing", path, lambda attempt: self._rename(tmp, path, attempt, nbytes))
        except Exception:
            try:
                self.fs.rm_file(tmp)
            except Exception:  # noqa: BLE001 - best effort: a temp name is never taken for the file
                pass
            raise
        self._sweep_temps(path)

    def _rename(self, tmp: str, path: str, attempt: int, nbytes: int) -> None:
        try:
            self.fs.mv(tmp, path)
        except FileNotFoundError:  # an earlier attempt renamed it and then lost the answer?
            if attempt == 1 or self.fs.exists(tmp) or self.fs.info(path).get("size") != nbytes:
                raise

    def _sweep_temps(self, path: str) -> None:
        parent, _, base = path.rpartition("/")
        try:
            names = self._retry("listing", parent or "/", lambda _: self.fs.ls(parent or "/", detail=False))
            for p in names:
                if posixpath.basename(p.rstrip("/")).startswith(f"{base}.tmp-"):
                    self.rm_file(p)
        except Exception:  # noqa: BLE001 - best effort: stale temps never count as output
            pass

    # ---- deletes and renames: repeating one that went through must not fail --------------------------------
    def _gone_ok(self, action: str, path: str, fn: Callable[[], Any]) -> None:
        def once(attempt: int) -> None:
            try:
                fn()
            except FileNotFoundError:
                if attempt == 1:
                    raise
        self._retry(action, path, once)

    def rm_file(self, path: str) -> None:
        self._gone_ok("deleting", path, lambda: self.fs.rm_file(path))

    def rm(self, path: str, recursive: bool = False, maxdepth: int | None = None) -> None:
        self._gone_ok("deleting", path, lambda: self.fs.rm(path, recursive=recursive, maxdepth=maxdepth))

    def mv(self, path1: str, path2: str, **kwargs: Any) -> None:
        self._gone_ok("renaming", path1, lambda: self.fs.mv(path1, path2, **kwargs))

    rename = mv

    def mkdir(self, path: str, create_parents: bool = True, **kwargs: Any) -> None:
        def once(attempt: int) -> None:
            try:
                self.fs.mkdir(path, create_parents=create_parents, **kwargs)
            except FileExistsError:
                if attempt == 1:
                    raise
        self._retry("creating", path, once)


def with_retries(fs: fsspec.AbstractFileSystem) -> Any:
    """`fs` wrapped in RetryingFileSystem, unless it is local, already wrapped, or its client retries itself."""
    if isinstance(fs, (LocalFileSystem, RetryingFileSystem)) or protocol_of(fs) in _OWN_RETRIES:
        return fs
    return RetryingFileSystem(fs)


class _RetryingReadFile(AbstractBufferedFile):
    """Read-only buffered file of a RetryingFileSystem: each block is one ranged `cat_file`, retried on its own."""

    def _fetch_range(self, start: int, end: int) -> bytes:
        fs: RetryingFileSystem = self.fs
        return fs._retry("reading", self.path, lambda _: fs.fs.cat_file(self.path, start=start, end=end))


class _WholeWriteFile(io.BytesIO):
    """Collects a file written through a RetryingFileSystem and stores it whole on `close` (exclusively for "xb");
    an exception inside `with`, or garbage collection, stores nothing."""

    def __init__(self, fs: RetryingFileSystem, path: str, exclusive: bool) -> None:
        super().__init__()
        self.fs, self.path, self.exclusive = fs, path, exclusive

    def close(self) -> None:
        if self.closed:
            return
        data = self.getvalue()
        super().close()
        self.fs.pipe_file(self.path, data, mode="create" if self.exclusive else "overwrite")

    def discard(self) -> None:
        super().close()

    def __exit__(self, exc_type: Any, *rest: Any) -> None:
        if exc_type is not None:
            self.discard()
        else:
            self.close()

    def __del__(self) -> None:
        if not self.closed:
            self.discard()


# ---- reads ------------------------------------------------------------------------------------------------------
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


# ---- writes -----------------------------------------------------------------------------------------------------
def _local_temp_copy(path: str, data: bytes) -> str:
    """`data` fsync'ed into a temp file beside `path` (the caller renames or links it into place)."""
    os.makedirs(posixpath.dirname(path), exist_ok=True)
    tmp = f"{path}.tmp-{uuid.uuid4().hex[:8]}"
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
        tmp = f"{path}.tmp-{uuid.uuid4().hex[:8]}"
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


def open_sequential(fs: fsspec.AbstractFileSystem, path: str):
    """A file to read front to back: remote ones through bounded ranged blocks."""
    return open_input(fs, path, sequential=True) if not is_local(fs) else fs.open(path, "rb")


class HashingReader:
    """Wraps a binary file so one pass both parses and hashes it: every byte read goes into sha256;
    `hexdigest` first hashes whatever was not read (e.g. after a corrupt record). With `hashing=False` it only
    counts the bytes (`n`) and `hexdigest` returns "" after reading to the end."""

    def __init__(self, f: Any, chunk: int = 4 << 20, hashing: bool = True) -> None:
        self.f, self.chunk = f, chunk
        self._h = hashlib.sha256() if hashing else None
        self.n = 0  # bytes read so far

    def read(self, n: int = -1) -> bytes:
        b = self.f.read(n)
        if self._h is not None:
            self._h.update(b)
        self.n += len(b)
        return b

    def hexdigest(self) -> str:
        while b := self.f.read(self.chunk):
            if self._h is not None:
                self._h.update(b)
            self.n += len(b)
        return self._h.hexdigest() if self._h is not None else ""


def sha256_file(fs: fsspec.AbstractFileSystem, path: str) -> str:
    with open_sequential(fs, path) as f:
        return HashingReader(f).hexdigest()


def hash_file(fs: fsspec.AbstractFileSystem, path: str, keep: bool = False) -> tuple[bytes, str, int]:
    """(the file's bytes when `keep`, else b"", its sha256, its size), streamed unless kept; FileNotFoundError when
    it is missing."""
    if keep:
        raw = fs.cat_file(path)
        return raw, hashlib.sha256(raw).hexdigest(), len(raw)
    with open_sequential(fs, path) as f:
        reader = HashingReader(f)
        return b"", reader.hexdigest(), reader.n


def is_empty_dir(fs: fsspec.AbstractFileSystem, path: str) -> bool:
    if not fs.exists(path):
        return True
    if not fs.isdir(path):
        return False
    return len(fs.ls(path, detail=False)) == 0


# --- runlayer: temporary until the storage split lands ---
def read_json_or_none(fs, path: str) -> Any:
    try:
        return json.loads(fs.cat_file(path))
    except (FileNotFoundError, ValueError, OSError):
        return None
