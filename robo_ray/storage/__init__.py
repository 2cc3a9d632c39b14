"""Storage: every dataset path goes through here (`from robo_ray.storage import X`). One module per job:

* `urls`: schemes, protocols, joins, URLs for messages, temp names (no I/O).
* `connect`: URL -> (filesystem, root), with the per-scheme option defaults (s3 retries, gs timeouts, hf revision).
* `probe`: the first contact with a bucket or Hub repository, once per process.
* `errors`: transport/access error classification and the one StorageError line naming the URL.
* `retry`: the retry policy (transient errors, attempts, backoff, counts).
* `retrying_fs`: RetryingFileSystem, the fsspec filesystem that applies it to stores whose client does not retry.
* `atomic`: writes never visible partial, exclusive creates, streamed uploads.
* `reads`: files opened for bounded ranged reads.
* `hashing`: sha256 of stored files, a reader that hashes while it is parsed.
* `listing`: lookups where "missing" is an answer (empty folder, folder entries, JSON or None).
"""
from robo_ray.storage.atomic import (UPLOAD_BLOCK, create_exclusive, discard_upload, open_upload, write_bytes_atomic,
                                     write_chunks_atomic, write_text_atomic)
from robo_ray.storage.connect import DEFAULT_S3_ATTEMPTS, url_to_fs
from robo_ray.storage.errors import is_transport_error, storage_error
from robo_ray.storage.hashing import HashingReader, hash_against, hash_file, sha256_file
from robo_ray.storage.listing import is_empty_dir, ls_or_empty, read_json_or_none
from robo_ray.storage.probe import (DEFAULT_PROBE_TIMEOUT_S, PROBE_TIMEOUT_ENV, check_bucket, check_hf_repo,
                                    probe_timeout)
from robo_ray.storage.reads import STREAM_BLOCK, open_input, open_sequential
from robo_ray.storage.retry import (DEFAULT_RETRY_ATTEMPTS, DEFAULT_RETRY_BACKOFF_S, MAX_RETRY_BACKOFF_S,
                                    RETRY_ATTEMPTS_ENV, RETRY_BACKOFF_ENV, is_transient, retry_attempts, retry_call,
                                    retry_stats)
from robo_ray.storage.retrying_fs import ATOMIC_PUT, RetryingFileSystem, with_retries
from robo_ray.storage.urls import (OBJECT_STORES, is_local, is_object_store, join, protocol_of, scheme_of, temp_name,
                                   url_of)

__all__ = [
    "ATOMIC_PUT", "DEFAULT_PROBE_TIMEOUT_S", "DEFAULT_RETRY_ATTEMPTS", "DEFAULT_RETRY_BACKOFF_S", "DEFAULT_S3_ATTEMPTS",
    "HashingReader", "MAX_RETRY_BACKOFF_S", "OBJECT_STORES", "PROBE_TIMEOUT_ENV", "RETRY_ATTEMPTS_ENV",
    "RETRY_BACKOFF_ENV", "RetryingFileSystem", "STREAM_BLOCK", "UPLOAD_BLOCK", "check_bucket", "check_hf_repo", "hash_against",
    "create_exclusive", "discard_upload", "hash_file", "is_empty_dir", "is_local", "is_object_store",
    "is_transient", "is_transport_error", "join", "ls_or_empty", "open_input", "open_sequential", "open_upload",
    "probe_timeout", "protocol_of", "read_json_or_none", "retry_attempts", "retry_call", "retry_stats", "scheme_of",
    "sha256_file", "storage_error", "temp_name", "url_of", "url_to_fs", "with_retries", "write_bytes_atomic",
    "write_chunks_atomic", "write_text_atomic",
]
