"""Keep credentials out of everything robo-ray writes or prints.

Three tools, used wherever text leaves the process (job.json, reports, logs, progress.jsonl, error lines):

* `redact_options(opts)`: a copy of storage options with the value of every credential-like key replaced by
  `***` (keys such as `secret`, `key`, `token`, `password`, `aws_secret_access_key`, `session_token`,
  `client_secret`, `private_key`, nested dicts included). Well-known non-secret token modes (`anon`,
  `google_default`, `cloud`, `browser`) and booleans are kept, so job.json still says how the run authenticated.
* `redact_url(url)`: `scheme://user:password@host/...` -> `scheme://user:***@host/...`, and signed-URL query
  parameters (`X-Amz-Signature`, `X-Amz-Credential`, `X-Amz-Security-Token`, `sig`, `token`, ...) -> `***`.
* `redact(text)`: every registered secret value (from storage options that went through `storage.url_to_fs`,
  and from the standard credential environment variables: AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, HF_TOKEN,
  ...) is replaced by `***`, and URLs in the text are redacted as above. Values shorter than
  `MIN_SECRET_LEN` characters are never registered (a short value would blank out ordinary words).

The registry is per process (a Ray actor registers the options it is handed when it opens its filesystems).
"""
from __future__ import annotations

import os
import re
import threading
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

MASK = "***"
MIN_SECRET_LEN = 8

# option keys whose values are credentials (matched on the key name, case-insensitive, after - -> _)
_SENSITIVE_KEY = re.compile(
    r"(^|_)(secret|secrets|password|passwd|pass|token|tokens|credential|credentials|private_key|privatekey|"
    r"signature|sig|sas|sas_token|api_key|apikey|access_key|access_key_id|secret_key|session_token|auth|"
    r"authorization|client_secret|account_key|connection_string|key)($|_)", re.I)
# keys that look sensitive by name but hold no secret
_NOT_SENSITIVE_KEY = re.compile(r"^(key_prefix|token_uri|auth_uri|sse_kms_key_id|kms_key_name|"
                                r"requester_pays|use_auth|skip_instance_cache)$", re.I)
# token values that name an auth mode, not a secret (gcsfs, adlfs)
_MODE_VALUES = {"anon", "google_default", "cloud", "browser", "cache", "none", ""}
# environment variables that hold secrets in the standard credential chains
SECRET_ENV_VARS = ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", "HF_TOKEN",
                   "HUGGING_FACE_HUB_TOKEN", "HUGGINGFACE_TOKEN", "GOOGLE_OAUTH_ACCESS_TOKEN",
                   "AZURE_STORAGE_KEY", "AZURE_STORAGE_SAS_TOKEN", "AZURE_CLIENT_SECRET",
                   "AZURE_STORAGE_CONNECTION_STRING")
_SENSITIVE_QUERY = re.compile(r"^(x-amz-signature|x-amz-credential|x-amz-security-token|x-goog-signature|"
                              r"x-goog-credential|signature|sig|token|access_token|sv|se|sp|skoid|sktid|"
                              r"api_key|apikey|key|password|secret)$", re.I)
_URL_IN_TEXT = re.compile(r"[a-zA-Z][a-zA-Z0-9+.-]*://[^\s'\"<>`|)]+")

_lock = threading.Lock()
_registered: set[str] = set()


def is_sensitive_key(key: Any) -> bool:
    k = str(key).replace("-", "_")
    return not _NOT_SENSITIVE_KEY.match(k) and bool(_SENSITIVE_KEY.search(k))


def _mask_value(value: Any) -> Any:
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _MODE_VALUES:
        return value
    return MASK


def redact_options(opts: Any) -> Any:
    """A deep copy of storage options (or any nested dict/list) with credential values masked."""
    if isinstance(opts, dict):
        out: dict[Any, Any] = {}
        for k, v in opts.items():
            if is_sensitive_key(k) and not isinstance(v, (dict, list, tuple)):
                out[k] = _mask_value(v)
            elif is_sensitive_key(k) and isinstance(v, dict):  # e.g. a service-account JSON as a dict
                out[k] = MASK if v else v
            else:
                out[k] = redact_options(v)
        return out
    if isinstance(opts, (list, tuple)):
        return type(opts)(redact_options(v) for v in opts)
    if isinstance(opts, str):
        return redact_url(opts) if "://" in opts else opts
    return opts


def _walk_secrets(opts: Any, sensitive: bool = False) -> list[str]:
    found: list[str] = []
    if isinstance(opts, dict):
        for k, v in opts.items():
            found += _walk_secrets(v, sensitive or is_sensitive_key(k))
    elif isinstance(opts, (list, tuple)):
        for v in opts:
            found += _walk_secrets(v, sensitive)
    elif sensitive and isinstance(opts, str) and opts.strip().lower() not in _MODE_VALUES:
        found.append(opts)
    return found


def register_secret(value: Any) -> None:
    """Remember a secret value so `redact` masks it wherever it shows up."""
    if isinstance(value, str) and len(value) >= MIN_SECRET_LEN:
        with _lock:
            _registered.add(value)


def register_options(opts: Any) -> None:
    """Register every credential value in storage options (called by storage.url_to_fs)."""
    for v in _walk_secrets(opts):
        register_secret(v)


def _env_secrets() -> list[str]:
    return [v for k in SECRET_ENV_VARS if len(v := os.environ.get(k, "")) >= MIN_SECRET_LEN]


def known_secrets() -> list[str]:
    with _lock:
        values = set(_registered)
    values.update(_env_secrets())
    return sorted(values, key=len, reverse=True)  # longest first: a secret containing another is masked whole


def redact_url(url: str) -> str:
    """Mask the password of `scheme://user:password@host` (the whole userinfo for object stores, whose
    "user" would be an access key id) and credential query parameters of signed URLs."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, host = netloc.rsplit("@", 1)
        if parts.scheme in ("http", "https", "ftp", "sftp", "ssh", "smb", "webdav") and ":" in userinfo:
            netloc = f"{userinfo.split(':', 1)[0]}:{MASK}@{host}"
        else:
            netloc = f"{MASK}@{host}"
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        if any(_SENSITIVE_QUERY.match(k) for k, _ in pairs):
            query = urlencode([(k, MASK if _SENSITIVE_QUERY.match(k) else v) for k, v in pairs], safe="*")
    if netloc == parts.netloc and query == parts.query:
        return url
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def redact(text: str) -> str:
    """Mask every known secret value and every credential in URLs found in `text`."""
    if not text:
        return text
    for s in known_secrets():
        if s in text:
            text = text.replace(s, MASK)
    if "://" in text:
        text = _URL_IN_TEXT.sub(lambda m: redact_url(m.group(0)), text)
    return text
