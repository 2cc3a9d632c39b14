"""URL -> (filesystem, root): the storage options' defaults per scheme, the retrying wrapper, the first probe.

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
  wrapped in `RetryingFileSystem` (robo_ray.storage.retrying_fs).

Before a filesystem is handed out for an s3/gs URL, its bucket is probed once per process; an hf:// URL's
repository and revision are resolved (robo_ray.storage.probe)."""
from __future__ import annotations

import logging
import os
from typing import Any
from urllib.parse import quote

import fsspec
from fsspec.implementations.local import LocalFileSystem

from robo_ray.errors import ConfigError
from robo_ray.secrets import redact, redact_url, register_options
from robo_ray.storage.probe import check_bucket, check_hf_repo
from robo_ray.storage.retrying_fs import with_retries
from robo_ray.storage.urls import OBJECT_STORES, protocol_of, scheme_of

DEFAULT_S3_ATTEMPTS = 5


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
