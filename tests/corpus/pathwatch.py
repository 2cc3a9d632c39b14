"""Record every file access of a program and every Python process it starts, then check where they went (issue
#9, acceptance 2).

`watch_env(log_dir)` is the environment to run the program with: its PYTHONPATH puts pathwatch_site/ first, whose
`sitecustomize` calls `install_from_env()` at the start of every Python process (the CLI, and the child processes
robo-ray's watchdog converts in), before the program's first line. That installs

* a `sys.addaudithook` hook recording the path of every ``open`` (read or write, from the mode or the flags),
  ``os.rename``/``os.replace``/``os.remove``/``os.rmdir``/``os.mkdir``/``os.link``/``os.symlink``/``os.truncate``/
  ``os.chmod``/``os.utime``, ``shutil.*`` copy/move/rmtree, ``tempfile.mkstemp``/``mkdtemp`` (writes) and
  ``os.listdir``/``os.scandir``/``glob.glob`` (reads); fd- and dir_fd-relative paths are resolved through
  /proc/self/fd;
* wrappers around `av.open` and `h5py.File`, whose C libraries open files where no audit hook sees them;

and appends each new (event, access, path) as a JSON line to ``<log_dir>/<pid>.jsonl`` at once (a process killed
by the watchdog keeps what it recorded).

What no Python hook can see, a C library following a reference on its own (HDF5 external links and virtual
datasets, FFmpeg), is caught by `BaitWatch`: inotify on the folder the unsafe corpus cases point at, which reports
every open/read/write of a file there by any process.

`violations` is the rule the tests apply: data may be read only from the source and the destination (and the
Python installation, the venv, robo-ray's code, /proc, /dev, /sys); anything may be written only inside the
destination.
"""
from __future__ import annotations

import ctypes
import json
import os
import struct
import sys
from pathlib import Path
from typing import Any, Iterable

REPO = Path(__file__).resolve().parents[2]
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
# audit event -> (access, indices of the path arguments, index of the dir_fd argument or None)
_EVENTS: dict[str, tuple[str, tuple[int, ...], int | None]] = {
    "os.rename": ("write", (0, 1), 2), "os.replace": ("write", (0, 1), 2), "os.remove": ("write", (0,), 1),
    "os.rmdir": ("write", (0,), 1), "os.mkdir": ("write", (0,), 2), "os.link": ("write", (1,), 3),
    "os.symlink": ("write", (1,), 2), "os.truncate": ("write", (0,), None), "os.chmod": ("write", (0,), 2),
    "os.chown": ("write", (0,), 3), "os.utime": ("write", (0,), 3),
    "shutil.copyfile": ("write", (1,), None), "shutil.copymode": ("write", (1,), None),
    "shutil.copystat": ("write", (1,), None), "shutil.copytree": ("write", (1,), None),
    "shutil.move": ("write", (0, 1), None), "shutil.rmtree": ("write", (0,), 1),
    "shutil.make_archive": ("write", (0,), None), "tempfile.mkstemp": ("write", (0,), None),
    "tempfile.mkdtemp": ("write", (0,), None),
    "os.listdir": ("read", (0,), None), "os.scandir": ("read", (0,), None), "glob.glob": ("read", (0,), None),
}
_READ_TOO = {"shutil.copyfile": 0, "shutil.copytree": 0, "shutil.copymode": 0, "shutil.copystat": 0}


def _fd_path(fd: int) -> str | None:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return None


def _resolve(path: Any, dir_fd: Any = None) -> str | None:
    """An absolute path for an audited argument (str, bytes, PathLike, or an open fd); None if it is none of them."""
    if isinstance(path, bool):
        return None
    if isinstance(path, int):
        return _fd_path(path)
    try:
        path = os.fsdecode(path)
    except TypeError:
        return None
    if not os.path.isabs(path):
        base = _fd_path(dir_fd) if isinstance(dir_fd, int) and dir_fd >= 0 else None
        path = os.path.join(base or os.getcwd(), path)
    return os.path.normpath(path)


class Recorder:
    """Appends each new (event, access, path) to a log fd as one JSON line; installed once per process."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.seen: set[tuple[str, str, str]] = set()
        self._busy = False

    def add(self, event: str, access: str, path: Any, dir_fd: Any = None) -> None:
        resolved = _resolve(path, dir_fd)
        key = (event, access, resolved or "")
        if resolved is not None and key not in self.seen:
            self.seen.add(key)
            os.write(self.fd, (json.dumps({"event": event, "access": access, "path": resolved}) + "\n").encode())

    def hook(self, event: str, args: tuple[Any, ...]) -> None:
        if self._busy or not (event == "open" or event in _EVENTS):
            return
        self._busy = True  # readlink/getcwd/os.write raise no audit events, but stay safe against re-entry
        try:
            if event == "open":
                path, mode, flags = (tuple(args) + (None, None))[:3]
                write = any(c in (mode or "") for c in "wax+") or bool((flags or 0) & _WRITE_FLAGS)
                self.add(event, "write" if write else "read", path)
                return
            access, indices, fd_at = _EVENTS[event]
            dir_fd = args[fd_at] if fd_at is not None and fd_at < len(args) else None
            for i in indices:
                if i < len(args):
                    self.add(event, access, args[i], dir_fd)
            if event in _READ_TOO:
                self.add(event, "read", args[_READ_TOO[event]])
        finally:
            self._busy = False


def _wrap_c_openers(rec: Recorder) -> None:
    """PyAV and h5py open their files in C: record the paths handed to them (file objects were audited already)."""
    import av
    import h5py

    av_open = av.open

    def watched_av_open(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        if isinstance(file, (str, bytes, os.PathLike)):
            rec.add("av.open", "write" if (mode or "r")[0] == "w" else "read", file)
        return av_open(file, mode, *args, **kwargs)

    av.open = watched_av_open
    h5_init = h5py.File.__init__

    def watched_h5_init(self: Any, name: Any, mode: str = "r", *args: Any, **kwargs: Any) -> None:
        if isinstance(name, (str, bytes, os.PathLike)):
            rec.add("h5py.File", "read" if mode in ("r", None) else "write", name)
        h5_init(self, name, mode, *args, **kwargs)

    h5py.File.__init__ = watched_h5_init


LOG_ENV = "ROBO_RAY_PATHWATCH_LOG"
SITE_DIR = Path(__file__).resolve().parent / "pathwatch_site"


def install_from_env() -> None:
    """Called by pathwatch_site/sitecustomize.py in every Python process started with `watch_env`."""
    log_dir = os.environ.get(LOG_ENV)
    if not log_dir:
        return
    fd = os.open(os.path.join(log_dir, f"{os.getpid()}.jsonl"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    rec = Recorder(fd)  # the log is opened before the hook: it is not recorded
    _wrap_c_openers(rec)
    sys.addaudithook(rec.hook)


def watch_env(log_dir: Path) -> dict[str, str]:
    """Environment overrides that make every Python process record into `log_dir` (created)."""
    Path(log_dir).mkdir(parents=True, exist_ok=True)
    path = os.pathsep.join(x for x in (str(SITE_DIR), str(REPO), os.environ.get("PYTHONPATH")) if x)
    return {"PYTHONPATH": path, LOG_ENV: str(log_dir)}


def read_logs(log_dir: Path) -> list[dict[str, str]]:
    """The records of every process that ran with `watch_env(log_dir)`."""
    return [json.loads(line) for p in sorted(Path(log_dir).glob("*.jsonl")) for line in p.read_text().splitlines()
            if line]


# ---- the rule -------------------------------------------------------------------------------------------------
# What a run may touch besides its source (read) and destination (read, write), each with its reason. Nothing else:
# a robo-ray temp file outside the destination, a read of a sibling folder, a cache in $HOME would all be flagged.
KERAS_DIR = os.path.expanduser(os.environ.get("KERAS_HOME") or os.path.join("~", ".keras"))
READ_ROOTS = {
    sys.base_prefix: "the Python installation (stdlib)",
    sys.prefix: "the venv (site-packages)",
    str(REPO / "robo_ray"): "robo-ray's code",
    str(REPO / "robo_ray.egg-info"): "robo-ray's package metadata (importlib.metadata entry points)",
    "/proc": "process state", "/dev": "devices", "/sys": "system state",
    "/usr/share/zoneinfo": "the system time zone database (dateutil, through pandas)",
    KERAS_DIR: "Keras' config, read when TensorFlow is imported for Validate's tfds read-back",
}
LIST_EXACT = {
    str(REPO): "the working directory, sys.path[0] under `python -m` (importlib scans it)",
    str(SITE_DIR): "this watcher's sitecustomize folder, on PYTHONPATH (importlib scans it)",
}
WRITE_ROOTS = {
    "/dev/null": "discarded output of a child process",
    KERAS_DIR: "Keras writes its config once, on first import, when it is missing (TensorFlow, tfds read-back)",
}


def _under(path: str, roots: Iterable[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def _editable_finder(path: str) -> bool:
    """The setuptools editable-install path hook entry on sys.path, looked up relative to the working directory."""
    return os.path.dirname(path) == str(REPO) and os.path.basename(path).startswith("__editable__.")


def _tempdir_probes(records: list[dict[str, str]]) -> set[str]:
    """Python's `tempfile.gettempdir()` checks the temp dir is writable by creating and removing a file with a
    random 8-character name in it (absl does it when TensorFlow is imported): such a pair is not a temp file."""
    import re
    import tempfile

    tmp = os.path.realpath(tempfile.gettempdir())
    made = {r["path"] for r in records if r["event"] == "open" and r["access"] == "write"}
    removed = {r["path"] for r in records if r["event"] == "os.remove"}
    return {p for p in made & removed
            if os.path.dirname(p) == tmp and re.fullmatch(r"[a-z0-9_]{8}", os.path.basename(p))}


ANONYMOUS = ("pipe:[", "socket:[", "anon_inode:")  # what /proc/self/fd names objects outside any filesystem


def violations(records: Iterable[dict[str, str]], source: Path, dest: Path) -> list[str]:
    """Every recorded access that breaks the rule: a read outside the source, the destination and READ_ROOTS
    (LIST_EXACT for directory listings), or a write (create, rename, remove, mkdir, chmod...) outside the
    destination and WRITE_ROOTS."""
    records = list(records)
    src, dst = os.path.realpath(source), os.path.realpath(dest)
    read_ok = [src, dst, *(os.path.realpath(r) for r in READ_ROOTS)]
    write_ok = [dst, *(os.path.realpath(w) for w in WRITE_ROOTS)]
    probes = _tempdir_probes(records)
    out = []
    for r in records:
        if r["path"].startswith(ANONYMOUS):  # a pipe to a child process (an fd resolved through /proc): no file
            continue
        path = os.path.realpath(r["path"])
        if r["access"] == "write":
            if not _under(path, write_ok) and r["path"] not in probes:
                out.append(f"write outside the destination: {r['event']} {r['path']}")
        elif not (_under(path, read_ok) or _editable_finder(path)
                  or (r["event"] in ("os.listdir", "os.scandir") and path in LIST_EXACT)):
            out.append(f"read outside the source: {r['event']} {r['path']}")
    return sorted(set(out))


# ---- C-level opens of the bait ----------------------------------------------------------------------------------
IN_ACCESS, IN_MODIFY, IN_ATTRIB, IN_CLOSE_WRITE, IN_OPEN = 0x1, 0x2, 0x4, 0x8, 0x20
IN_MOVED_FROM, IN_MOVED_TO, IN_CREATE, IN_DELETE = 0x40, 0x80, 0x100, 0x200
_WATCH_MASK = IN_ACCESS | IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_OPEN | IN_MOVED_FROM | IN_MOVED_TO | \
    IN_CREATE | IN_DELETE
_EVENT_HEADER = struct.Struct("iIII")


class BaitWatch:
    """inotify on a folder tree (Linux): every open, read, write, create or delete of anything in it, by any
    process and any library (C included), between `__enter__` and `events()`."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self._libc = ctypes.CDLL(None, use_errno=True)
        self._fd = -1
        self._dirs: dict[int, str] = {}

    def __enter__(self) -> "BaitWatch":
        self._fd = self._libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if self._fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1 failed")
        for d in [self.root, *(p for p in self.root.rglob("*") if p.is_dir())]:
            wd = self._libc.inotify_add_watch(self._fd, os.fsencode(d), _WATCH_MASK)
            if wd < 0:
                raise OSError(ctypes.get_errno(), f"inotify_add_watch {d} failed")
            self._dirs[wd] = str(d)
        return self

    def events(self) -> list[str]:
        """'<path> <mask>' for each event so far (the watch's own setup produces none)."""
        out = []
        while True:
            try:
                data = os.read(self._fd, 1 << 16)
            except BlockingIOError:
                return out
            pos = 0
            while pos < len(data):
                wd, mask, _, size = _EVENT_HEADER.unpack_from(data, pos)
                name = data[pos + 16:pos + 16 + size].split(b"\0", 1)[0].decode()
                out.append(f"{os.path.join(self._dirs.get(wd, '?'), name)} mask=0x{mask:x}")
                pos += 16 + size

    def __exit__(self, *exc: object) -> None:
        os.close(self._fd)
