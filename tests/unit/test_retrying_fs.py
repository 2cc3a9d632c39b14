"""RetryingFileSystem is a real fsspec filesystem that retries transient errors (and only those), pickles for Ray,
and sees through to the wrapped filesystem's names; the listing helpers treat only "missing" as an answer."""
from __future__ import annotations

import errno
import pickle
import uuid
from collections import Counter
from typing import Any

import fsspec
import pytest
from fsspec.spec import AbstractFileSystem

from robo_ray.errors import StorageError, StorageUnreachable
from robo_ray.storage import (RETRY_ATTEMPTS_ENV, RETRY_BACKOFF_ENV, RetryingFileSystem, is_object_store,
                              ls_or_empty, protocol_of, read_json_or_none, retry_stats, url_of, url_to_fs,
                              with_retries)


class FlakyFileSystem(AbstractFileSystem):
    """An in-memory filesystem whose calls fail with `exc` the first `fails` times each method is called."""

    protocol = "flakytest"
    root_marker = "/"
    cachable = False

    def __init__(self, fails: int = 0, exc: Exception | None = None) -> None:
        super().__init__()
        self.fails, self.exc = fails, exc
        self.calls: Counter[str] = Counter()
        self.files: dict[str, bytes] = {"/d/a.bin": b"0123456789"}

    def _gate(self, method: str) -> None:
        self.calls[method] += 1
        if self.exc is not None and self.calls[method] <= self.fails:
            raise self.exc

    def info(self, path: str, **kwargs: Any) -> dict[str, Any]:
        self._gate("info")
        path = self._strip_protocol(path)
        if path in self.files:
            return {"name": path, "size": len(self.files[path]), "type": "file"}
        if any(p.startswith(path + "/") for p in self.files):
            return {"name": path, "size": 0, "type": "directory"}
        raise FileNotFoundError(path)

    def ls(self, path: str, detail: bool = True, **kwargs: Any) -> list[Any]:
        self._gate("ls")
        path = self._strip_protocol(path)
        names = sorted(p for p in self.files if p.startswith(path + "/"))
        if not names:
            raise FileNotFoundError(path)
        return [self.info(p) for p in names] if detail else names

    def cat_file(self, path: str, start: int | None = None, end: int | None = None, **kwargs: Any) -> bytes:
        self._gate("cat_file")
        path = self._strip_protocol(path)
        if path not in self.files:
            raise FileNotFoundError(path)
        return self.files[path][start:end]


@pytest.fixture(autouse=True)
def fast_retries(monkeypatch):
    monkeypatch.setenv(RETRY_ATTEMPTS_ENV, "3")
    monkeypatch.setenv(RETRY_BACKOFF_ENV, "0")


@pytest.fixture
def memory_root():
    root = f"/retrying-{uuid.uuid4().hex[:8]}"
    yield root
    fsspec.filesystem("memory").rm(root, recursive=True)


def test_it_is_an_fsspec_filesystem_that_sees_through_to_the_wrapped_one(memory_root):
    fs, root = url_to_fs(f"memory://{memory_root}")
    assert isinstance(fs, RetryingFileSystem) and isinstance(fs, AbstractFileSystem)
    assert not hasattr(RetryingFileSystem, "__getattr__")  # no proxy: every method is the class's own
    assert protocol_of(fs) == "memory" and not is_object_store(fs)
    assert url_of(fs, f"{root}/x.json") == f"memory://{memory_root}/x.json"
    fs.pipe_file(f"{root}/sub/x.json", b"{}")
    # fsspec's base methods (walk, read_text) work on top of the delegated ones, paths as the wrapped fs gives them
    assert list(fs.walk(root)) == [(root, ["sub"], []), (f"{root}/sub", [], ["x.json"])]
    assert fs.read_text(f"memory://{root}/sub/x.json") == "{}"
    assert fs._parent(f"{root}/sub/x.json") == f"{root}/sub"
    again = RetryingFileSystem(fs.fs)
    assert again is not fs and again == fs and hash(again) == hash(fs)  # not cached by fsspec, equal by wrapped fs
    assert RetryingFileSystem(FlakyFileSystem()) != fs
    assert with_retries(fs) is fs


def test_it_pickles_and_round_trips(memory_root):
    fs, root = url_to_fs(f"memory://{memory_root}")
    fs.pipe_file(f"{root}/a.bin", b"payload")
    back = pickle.loads(pickle.dumps(fs))
    assert type(back) is RetryingFileSystem and back == fs and back.fs is fs.fs
    assert protocol_of(back) == "memory" and back.atomic_put
    assert back.cat_file(f"{root}/a.bin") == b"payload"
    with back.open(f"{root}/a.bin") as f:
        assert f.read() == b"payload"


def test_a_transient_error_is_retried_until_the_call_succeeds():
    inner = FlakyFileSystem(fails=2, exc=ConnectionResetError(errno.ECONNRESET, "Connection reset by peer"))
    fs = RetryingFileSystem(inner)
    before = retry_stats().get("reading", 0)
    assert fs.cat_file("/d/a.bin", start=2, end=5) == b"234"
    assert inner.calls["cat_file"] == 3
    assert retry_stats().get("reading", 0) - before == 2


def test_a_transient_error_is_retried_n_times_then_raises_the_mapped_error():
    inner = FlakyFileSystem(fails=99, exc=TimeoutError(errno.ETIMEDOUT, "Read timed out"))
    fs = RetryingFileSystem(inner)
    with pytest.raises(StorageUnreachable, match=r"reading flakytest:///d/a.bin: .*gave up after 3 attempts"):
        fs.cat_file("/d/a.bin")
    assert inner.calls["cat_file"] == 3
    # exists() derives from info(): a failing store is an error, never "missing"
    with pytest.raises(StorageError, match="gave up after 3 attempts"):
        fs.exists("/d/a.bin")
    assert inner.calls["info"] == 3


def test_a_missing_file_is_not_retried():
    inner = FlakyFileSystem()
    fs = RetryingFileSystem(inner)
    with pytest.raises(FileNotFoundError):
        fs.cat_file("/d/missing.bin")
    assert inner.calls["cat_file"] == 1
    assert fs.exists("/d/missing.bin") is False and inner.calls["info"] == 1
    assert fs.isdir("/d") and fs.isfile("/d/a.bin") and fs.size("/d/a.bin") == 10


def test_a_read_file_retries_each_block_on_its_own():
    inner = FlakyFileSystem(fails=1, exc=OSError(errno.EIO, "Input/output error"))
    fs = RetryingFileSystem(inner)
    with fs.open("/d/a.bin", block_size=4, cache_type="none") as f:
        assert f.read(3) == b"012" and f.read() == b"3456789"
    assert inner.calls["info"] == 2 and inner.calls["cat_file"] == 3  # one failed fetch, then one per read


def test_a_non_atomic_store_gets_whole_files_under_the_final_name(tmp_path):
    inner = fsspec.filesystem("file")
    fs = RetryingFileSystem(inner)  # as for sftp:// or faulty://: writes go through a temp name and a rename
    assert not fs.atomic_put
    target = str(tmp_path / "out.bin")
    with fs.open(target, "wb") as f:
        f.write(b"abc")
    assert (tmp_path / "out.bin").read_bytes() == b"abc" and [p.name for p in tmp_path.iterdir()] == ["out.bin"]
    with pytest.raises(RuntimeError), fs.open(str(tmp_path / "never.bin"), "wb") as f:
        f.write(b"partial")
        raise RuntimeError("the writer failed")
    assert [p.name for p in tmp_path.iterdir()] == ["out.bin"]


def test_ls_or_empty_is_empty_only_for_a_missing_folder():
    fs = FlakyFileSystem()
    assert ls_or_empty(fs, "/nowhere") == []
    assert ls_or_empty(fs, "/d") == ["/d/a.bin"]
    failing = FlakyFileSystem(fails=1, exc=ConnectionResetError(errno.ECONNRESET, "reset"))
    with pytest.raises(ConnectionResetError):  # a failing store is not an empty folder
        ls_or_empty(failing, "/d")


def test_read_json_or_none_is_none_only_for_missing_or_bad_json():
    fs = FlakyFileSystem()
    fs.files.update({"/j/ok.json": b'{"a": [1, 2]}', "/j/cut.json": b'{"a": [1,', "/j/latin.json": b'"\xe9"'})
    assert read_json_or_none(fs, "/j/ok.json") == {"a": [1, 2]}
    assert read_json_or_none(fs, "/j/missing.json") is None
    assert read_json_or_none(fs, "/j/cut.json") is None
    assert read_json_or_none(fs, "/j/latin.json") is None
    failing = FlakyFileSystem(fails=1, exc=TimeoutError(errno.ETIMEDOUT, "timed out"))
    failing.files = dict(fs.files)
    with pytest.raises(TimeoutError):  # a failing store is not a missing file
        read_json_or_none(failing, "/j/ok.json")
