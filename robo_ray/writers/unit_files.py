"""Staging a unit's files until its commit, shared by the writers' `UnitSink`s.

    files = UnitFiles(writer.fs, writer.dataset_dir, writer.format_name)
    path = files.temp("videos/cam/chunk-000/episode_000000.mp4")   # a local path to write the file at
    ...
    rows = files.publish_all()        # every staged file under its final name: [{name, num_bytes, sha256}]
    files.close()                     # (or files.abort() on failure: every temp removed, nothing published)

Where a staged file sits until `publish_all`:
* local destination: beside its final name, `<final>.tmp-xxxxxxxx` (the name `Writer.files()` and
  `Writer.remove_stale_temps` know as a temp), then fsync'ed and renamed (`os.replace`: atomic);
* any other filesystem: a local scratch folder (`robo-ray-<format>-...`), then uploaded (one PUT through
  `storage.with_retries`: visible whole or not at all) and the local copy removed.
Nothing here names a file: names come from the writer's plan, so the bytes do not depend on the temp names.
"""
from __future__ import annotations

import os
import posixpath
import shutil
import tempfile
import uuid
from typing import Any, Iterable

import fsspec

from robo_ray.storage import HashingReader, is_local, join, storage_error, temp_name, url_of, with_retries


def remove_file(path: str | None) -> None:
    """Remove a local file if it is there."""
    if path:
        try:
            os.remove(path)
        except FileNotFoundError:
            pass


def sha256_local(path: str) -> str:
    """sha256 of a local file, streamed."""
    with open(path, "rb") as f:
        return HashingReader(f).hexdigest()


def _strip(path: str) -> str:
    """A path without the filesystem's protocol prefix, for comparing what `ls` returns with what we joined."""
    return path.split("://", 1)[-1].lstrip("/")


class UnitFiles:
    """The files one unit writes, each staged at a local temp path until `publish_all` (module docstring)."""

    def __init__(self, fs: fsspec.AbstractFileSystem, dataset_dir: str, format_name: str) -> None:
        self.fs = fs
        self.dataset_dir = dataset_dir
        self.local = is_local(fs)
        self._prefix = f"robo-ray-{format_name}-"
        self._scratch: str | None = None  # non-local filesystems: the local folder of the temps
        self._staged: dict[str, str] = {}  # final name (relative to dataset_dir) -> temp path, in staging order
        self.published: list[str] = []  # final names published by this unit

    def new_temp(self, rel: str, tag: str = "") -> str:
        """A fresh local temp path for a file named `rel`, not staged (the caller removes it, `remove_file`)."""
        if self.local:
            final = join(self.dataset_dir, rel)
            os.makedirs(posixpath.dirname(final), exist_ok=True)
            return temp_name(final) + tag
        if self._scratch is None:
            self._scratch = tempfile.mkdtemp(prefix=self._prefix)
        return os.path.join(self._scratch, f"{uuid.uuid4().hex[:8]}{tag}-{posixpath.basename(rel)}")

    def temp(self, rel: str) -> str:
        """The local path where the unit's file `rel` is written until `publish_all` (the same on every call)."""
        if rel not in self._staged:
            self._staged[rel] = self.new_temp(rel)
        return self._staged[rel]

    def drop(self, rel: str) -> None:
        """Unstage `rel` and remove its temp (an episode that failed after its files were started)."""
        remove_file(self._staged.pop(rel, None))

    def publish_all(self, order: Iterable[str] = ()) -> list[dict[str, Any]]:
        """Describe every staged file (bytes, sha256), then put each under its final name: the names of `order`
        first, then the others in staging order. Returns [{name, num_bytes, sha256}] in that order."""
        rels = list(dict.fromkeys([*order, *self._staged]))
        described = [{"name": rel, "num_bytes": os.path.getsize(self._staged[rel]),
                      "sha256": sha256_local(self._staged[rel])} for rel in rels]
        for rel in rels:
            self._publish(rel, self._staged[rel])
            self.published.append(rel)
        return described

    def _publish(self, rel: str, tmp: str) -> None:
        final = join(self.dataset_dir, rel)
        if self.local:
            with open(tmp, "rb+") as f:
                os.fsync(f.fileno())
            os.replace(tmp, final)
            return
        try:
            with_retries(self.fs).put_file(tmp, final)
        except Exception as exc:  # noqa: BLE001 - the store failed after its retries
            raise storage_error(exc, url_of(self.fs, final), "uploading", self.fs) from exc
        remove_file(tmp)

    def sweep_dirs(self, dirs: Iterable[str]) -> None:
        """Remove the final-named files in the folders `dirs` (relative to dataset_dir) that this unit did not
        publish (left by an earlier attempt of the unit); temps are never touched."""
        keep = {_strip(join(self.dataset_dir, rel)) for rel in self.published}
        for d in dirs:
            try:
                names = self.fs.ls(join(self.dataset_dir, d), detail=False)
            except (FileNotFoundError, NotADirectoryError):
                continue
            for p in names:
                p = p.rstrip("/")
                if ".tmp-" not in posixpath.basename(p) and _strip(p) not in keep:
                    self.fs.rm_file(p)

    def remove_finals(self, rels: Iterable[str]) -> None:
        """Remove the files `rels` under their final names where they exist (an earlier attempt's)."""
        for rel in rels:
            path = join(self.dataset_dir, rel)
            if self.fs.exists(path):
                self.fs.rm_file(path)

    def close(self) -> None:
        """Remove what is left of the temps (nothing after `publish_all`) and the scratch folder."""
        for tmp in self._staged.values():
            remove_file(tmp)
        self._staged = {}
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None

    def abort(self) -> None:
        """Remove every temp (files already published stay, as after a crash: a retry rewrites or sweeps them)."""
        self.close()
