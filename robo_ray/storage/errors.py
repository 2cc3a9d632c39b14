"""What a storage failure is: a transport or access error (after the client's retries) or not, and the one
StorageError line naming the URL (and the endpoint) that replaces it."""
from __future__ import annotations

import errno
import os
from typing import Any

import fsspec

from robo_ray.errors import (BucketNotFound, RoboRayError, StorageAccessDenied, StorageError, StorageUnreachable)
from robo_ray.secrets import redact, redact_url
from robo_ray.storage.urls import is_local, protocol_of


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
