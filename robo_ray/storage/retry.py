"""The retry policy for filesystems whose client does not retry: which errors are transient, how many attempts
(ROBO_RAY_STORAGE_ATTEMPTS, default 5 in all), the backoff between them (ROBO_RAY_STORAGE_BACKOFF_S, default
0.2 s, doubled per attempt with jitter, at most 10 s), and the count of retries of this process."""
from __future__ import annotations

import errno
import logging
import os
import random
import threading
import time
from collections import Counter
from typing import Any, Callable

import fsspec

from robo_ray.errors import RoboRayError
from robo_ray.storage.errors import _access_types, _http_status, _short, _transport_types, storage_error
from robo_ray.storage.urls import url_of

RETRY_ATTEMPTS_ENV = "ROBO_RAY_STORAGE_ATTEMPTS"
RETRY_BACKOFF_ENV = "ROBO_RAY_STORAGE_BACKOFF_S"
DEFAULT_RETRY_ATTEMPTS = 5
DEFAULT_RETRY_BACKOFF_S = 0.2
MAX_RETRY_BACKOFF_S = 10.0
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
