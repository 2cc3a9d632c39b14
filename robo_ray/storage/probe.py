"""The first contact with a bucket or a Hub repository, once per process: a missing bucket/repository, refused
credentials or an endpoint that does not answer become one StorageError line naming the URL, within
`probe_timeout()` seconds, instead of a traceback or a hang later."""
from __future__ import annotations

import os

import fsspec

from robo_ray.errors import BucketNotFound, ConfigError, StorageAccessDenied, StorageError, StorageUnreachable
from robo_ray.secrets import redact_url
from robo_ray.storage.errors import _endpoint, _short, storage_error
from robo_ray.storage.urls import protocol_of

PROBE_TIMEOUT_ENV = "ROBO_RAY_STORAGE_PROBE_TIMEOUT_S"
DEFAULT_PROBE_TIMEOUT_S = 60.0

_probed: set[tuple[str, str]] = set()


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
