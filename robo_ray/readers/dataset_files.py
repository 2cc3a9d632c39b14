"""`DatasetFiles`: a reader's dataset-relative file access: existence and listings, ranged and size-limited reads
(JSON, JSON lines, parquet), and a storage failure turned into one error naming the URL."""
from __future__ import annotations

import json
import posixpath
from contextlib import contextmanager
from typing import Any, Callable, Iterable, Iterator

from robo_ray.errors import DataCorrupt, DataMissing, RoboRayError, SourceFormatError, UnsafeInput
from robo_ray.lfs_pointer import head_of, lfs_pointer_note
from robo_ray.safety import MAX_JSON_BYTES
from robo_ray.storage import is_transport_error, join, ls_or_empty, open_input, storage_error, url_of


class DatasetFiles:
    """Dataset-relative file access with guarded reads (needs `self.fs` and `self.root`).

    Every call that touches storage maps a transport failure that survived the client's retries (connection,
    timeout, 5xx, access denied) to one `StorageError` naming the URL (robo_ray.storage.storage_error): a failing
    store is never mistaken for a missing or corrupt file."""

    fs: Any
    root: str

    def path(self, rel: str) -> str:
        return join(self.root, rel)

    def url_for(self, rel: str) -> str:
        """The full URL of a dataset file (for messages)."""
        return url_of(self.fs, self.path(rel))

    def _storage_error(self, exc: BaseException, path: str, action: str) -> BaseException:
        """`exc` as one StorageError naming the URL when it is a storage failure; else `exc` itself."""
        if is_transport_error(exc):
            return storage_error(exc, url_of(self.fs, path), action, self.fs)
        return exc

    def _storage_call(self, action: str, p: str, fn: Callable[[], Any]) -> Any:
        """`fn()`, one storage call on the full path `p`; a transport failure becomes one StorageError naming the
        URL, anything else propagates as it is."""
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001 - a transport failure names the URL; anything else is a bug
            mapped = self._storage_error(exc, p, action)
            if mapped is exc:
                raise
            raise mapped from exc

    def _exists(self, p: str) -> bool:
        """Whether a full path exists; a storage failure is an error, not False."""
        return bool(self._storage_call("checking", p, lambda: self.fs.exists(p)))

    def exists(self, rel: str) -> bool:
        return self._exists(self.path(rel))

    def _listdir(self, rel: str = "") -> list[str]:
        """The names in a dataset folder (`""`: the root)."""
        p = self.path(rel) if rel else self.root
        return [posixpath.basename(q.rstrip("/")) for q in self._storage_call("listing", p, lambda: self.fs.ls(
            p, detail=False))]

    def find_files(self, suffix: str, limit: int = 10_000) -> list[str]:
        """Dataset-relative paths of up to `limit` files under the root whose names end with `suffix` (one
        recursive listing: for hints about a misplaced layout, not for reading)."""
        root = self.root.rstrip("/")
        found = self._storage_call("listing", root, lambda: self.fs.find(root))
        out = []
        for q in found:
            if q.endswith(suffix) and q.startswith(root + "/"):
                out.append(q[len(root) + 1:])
                if len(out) >= limit:
                    break
        return out

    def existing(self, rels: Iterable[str]) -> set[str]:
        """Which of the dataset-relative paths `rels` exist: one listing per distinct folder (paginated by the
        filesystem), not one existence call per file; a missing folder means its files are missing."""
        by_folder: dict[str, set[str]] = {}
        for rel in rels:
            by_folder.setdefault(posixpath.dirname(rel), set()).add(posixpath.basename(rel))
        found: set[str] = set()
        for folder, names in by_folder.items():
            p = self.path(folder) if folder else self.root
            listed = self._storage_call("listing", p, lambda p=p: ls_or_empty(self.fs, p))
            found |= {posixpath.join(folder, n) for n in names & {posixpath.basename(q.rstrip("/")) for q in listed}}
        return found

    def _file_size(self, rel: str) -> int:
        p = self.path(rel)
        return int(self._storage_call("checking", p, lambda: self.fs.size(p)) or 0)

    def _read_range(self, rel: str, start: int, length: int) -> bytes:
        """Exactly the bytes [start, start + length) of a file, in one ranged read (the caller bounds `length`)."""
        p = self.path(rel)
        return self._storage_call("reading", p, lambda: self.fs.cat_file(p, start=start, end=start + length))

    def open_binary(self, rel: str, sequential: bool = True):
        """A seekable binary file: local files as they are; remote ones read in bounded ranged blocks (`sequential`,
        for PyAV, HDF5, parquet footers) or one ranged read per call. FileNotFoundError is left to the caller
        (missing video, missing data: each its own code)."""
        try:
            return open_input(self.fs, self.path(rel), sequential=sequential)
        except FileNotFoundError:
            raise
        except Exception as exc:  # noqa: BLE001
            mapped = self._storage_error(exc, self.path(rel), "opening")
            if mapped is exc:
                raise
            raise mapped from exc

    def _read_bytes(self, rel: str, limit: int = MAX_JSON_BYTES) -> bytes:
        """A whole (metadata) file, refused (RR301) when larger than `limit` before anything is read; a missing
        file is a SourceFormatError (RR300)."""
        p = self.path(rel)
        if not self._exists(p):
            raise SourceFormatError(f"{rel}: file is missing")
        try:
            size = self.fs.size(p)
            if size is not None and size > limit:
                raise UnsafeInput(f"{rel}: {size} bytes exceeds the {limit}-byte metadata limit")
            with open_input(self.fs, p) as f:
                data = f.read(limit + 1)
        except Exception as exc:  # noqa: BLE001
            mapped = self._storage_error(exc, p, "reading")
            if mapped is exc:
                raise
            raise mapped from exc
        if len(data) > limit:  # the file grew since `size`
            raise UnsafeInput(f"{rel}: more than {limit} bytes exceeds the {limit}-byte metadata limit")
        return data

    def _read_json(self, rel: str, limit: int = MAX_JSON_BYTES) -> Any:
        """A JSON file read with `_read_bytes`; invalid JSON or text is one SourceFormatError naming the file."""
        try:
            return json.loads(self._read_bytes(rel, limit))
        except json.JSONDecodeError as exc:
            raise SourceFormatError(f"{rel}: not valid JSON ({exc.msg} at line {exc.lineno})") from exc
        except UnicodeDecodeError as exc:
            raise SourceFormatError(f"{rel}: not valid JSON (not UTF-8 text: {exc.reason} at byte {exc.start})") \
                from exc

    def _read_jsonl(self, rel: str) -> Iterator[tuple[int, dict[str, Any]]]:
        """(line number, object) of each non-blank line of a JSON-lines file read with `_read_bytes` (size-limited);
        a line that is not a JSON object is one SourceFormatError naming file and line."""
        try:
            text = self._read_bytes(rel).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise SourceFormatError(f"{rel}: not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
        for lineno, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise SourceFormatError(f"{rel}:{lineno}: not valid JSON ({exc.msg})") from exc
            if not isinstance(obj, dict):
                raise SourceFormatError(f"{rel}:{lineno}: expected a JSON object")
            yield lineno, obj

    def _read_parquet(self, rel: str, columns: list[str] | None = None,
                      error: type[RoboRayError] = DataCorrupt, row_groups: list[int] | None = None) -> Any:
        """A parquet file (or some of its row groups) as a pyarrow Table; on object stores through ranged reads
        (footer, then the column chunks). An unreadable file raises `error` (DataCorrupt EP202 for episode data;
        SourceFormatError for metadata a dataset cannot be opened without), a missing one DataMissing (EP201), or
        SourceFormatError when `error` is one."""
        import pyarrow.parquet as pq

        with self._parquet_errors(rel, error) as p, open_input(self.fs, p) as f:
            if row_groups is not None:
                return pq.ParquetFile(f, metadata=self._footer(rel, f)).read_row_groups(row_groups, columns=columns)
            # ParquetFile, not pq.read_table: read_table sets up a ParquetDataset per call (and imports
            # pyarrow.dataset and pandas), 10% of a LeRobot v2.1 copy run's CPU with one small file per episode
            return pq.ParquetFile(f).read(columns=columns)

    def _parquet_batches(self, rel: str, batch_rows: int, skip_prefix: str | None = None,
                         error: type[RoboRayError] = DataCorrupt) -> Iterator[Any]:
        """Record batches of parquet file `rel` (`batch_rows` rows each), its columns named `skip_prefix...` left
        unread: a metadata table of 200,000 rows is never whole in memory. Errors as `_read_parquet`."""
        import pyarrow.parquet as pq

        with self._parquet_errors(rel, error) as p, open_input(self.fs, p) as f:
            pf = pq.ParquetFile(f)
            names = pf.schema_arrow.names
            cols = [c for c in names if not c.startswith(skip_prefix)] if skip_prefix else names
            yield from pf.iter_batches(batch_size=batch_rows, columns=cols)

    @contextmanager
    def _parquet_errors(self, rel: str, error: type[RoboRayError]) -> Iterator[str]:
        """Yields the file's path; maps what reading it raises to our errors (see `_read_parquet`)."""
        import pyarrow as pa

        missing = SourceFormatError if issubclass(error, SourceFormatError) else DataMissing
        p = self.path(rel)
        if not self._exists(p):
            raise missing(f"{rel}: parquet file is missing")
        try:
            yield p
        except FileNotFoundError as exc:
            raise missing(f"{rel}: parquet file is missing") from exc
        except RoboRayError:
            raise
        except Exception as exc:  # noqa: BLE001
            mapped = self._storage_error(exc, p, "reading")
            if mapped is not exc:  # the store failed after its retries: not a property of the episode
                raise mapped from exc
            if isinstance(exc, (pa.ArrowException, OSError)):
                raise error(f"{rel}: unreadable parquet ({exc}){lfs_pointer_note(head_of(self.fs, p))}") from exc
            raise

    def row_group_ranges(self, rel: str, column: str) -> list[tuple[int, int]] | None:
        """(min, max) of `column` in each row group of parquet file `rel`, from the footer's statistics (no data
        read); None when a row group has no statistics or the footer cannot be read (the caller reads the file)."""
        try:
            with open_input(self.fs, self.path(rel)) as f:
                meta = self._footer(rel, f)
            names = [meta.schema.column(i).path for i in range(meta.num_columns)]
            col = names.index(column)
            out: list[tuple[int, int]] = []
            for g in range(meta.num_row_groups):
                st = meta.row_group(g).column(col).statistics
                if st is None or not st.has_min_max:
                    return None
                out.append((int(st.min), int(st.max)))
            return out
        except Exception:  # noqa: BLE001 - no usable index: the whole file is read (and its errors reported then)
            return None

    _last_footer: tuple[str, Any] | None = None

    def _footer(self, rel: str, f: Any) -> Any:
        """The parquet footer (FileMetaData) of `rel`, open as `f`, parsed once for the last file asked: a file of
        20,000 row groups has a footer of megabytes (0.1 s to parse), and its episodes are read one by one."""
        import pyarrow.parquet as pq

        if self._last_footer is None or self._last_footer[0] != rel:
            self._last_footer = (rel, pq.ParquetFile(f).metadata)
        return self._last_footer[1]

    _last_table: tuple[str, Any] | None = None

    def last_table(self, rel: str) -> Any:
        """`rel` read with `_read_parquet`, keeping only the last file read: units are file-ordered, so a file
        holding many episodes (LeRobot v3.0, ORTF chunks) is read once per unit, not once per episode."""
        if self._last_table is None or self._last_table[0] != rel:
            self._last_table = (rel, self._read_parquet(rel))
        return self._last_table[1]
