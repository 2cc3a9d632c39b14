"""Bag files through `rosbags` (one library for every layout, measured in docs/NOTES.md): which entries of a folder
are bags, opening one (remote bags are copied to a local temporary folder first: rosbags reads local paths), its
messages as (connection, receive time, raw bytes), and a message's header stamp read from its first bytes.

Bags are untrusted: whatever rosbags raises on a truncated file, a garbled or missing message definition or a bad
chunk becomes the episode's DataCorrupt (EP202) naming the bag and the episode.
"""
from __future__ import annotations

import posixpath
import re
import shutil
import struct
import tempfile
from pathlib import Path
from typing import Any, Iterator

from robo_ray.errors import DataCorrupt, EpisodeTooLarge
from robo_ray.storage import is_local

MAX_BAG_BYTES = 256 << 30  # a remote bag copied locally: refused beyond this
ROS1_SUFFIX = ".bag"
MCAP_SUFFIX = ".mcap"
HEADER_TYPE = "std_msgs/msg/Header"
_NUMBER = re.compile(r"(\d+)")


def bag_kind(fs: Any, path: str, is_dir: bool | None = None) -> str | None:
    """"ros1" (a .bag file), "mcap" (a .mcap file), "rosbag2" (a folder with metadata.yaml), else None. `is_dir`
    when a listing already said (no request to ask again)."""
    is_dir = fs.isdir(path) if is_dir is None else is_dir
    if is_dir:
        return "rosbag2" if fs.isfile(posixpath.join(path, "metadata.yaml")) else None
    if path.endswith(ROS1_SUFFIX):
        return "ros1"
    return "mcap" if path.endswith(MCAP_SUFFIX) else None


def entries(fs: Any, root: str, limit: int | None = None) -> list[tuple[str, bool]]:
    """(path, is a folder) of a folder's entries from one listing."""
    listed = fs.ls(root, detail=True)[:limit]
    return [(e["name"].rstrip("/"), e.get("type") == "directory") for e in listed]


def _order(path: str) -> list[Any]:
    """Name order with numbers compared as numbers (ep_2 before ep_10)."""
    return [int(p) if p.isdigit() else p for p in _NUMBER.split(posixpath.basename(path.rstrip("/")))]


def list_bags(fs: Any, root: str) -> list[str]:
    """The bags of a source: `root` itself when it is one, else the bags directly inside the folder, in name
    order."""
    if bag_kind(fs, root):
        return [root]
    found = [p for p, is_dir in entries(fs, root) if bag_kind(fs, p, is_dir)]
    return sorted(found, key=_order)


def has_header(typestore: Any, msgtype: str) -> bool:
    """Whether a message type starts with a std_msgs/Header (its stamp can be read from the raw bytes)."""
    fields = typestore.fielddefs.get(msgtype, ((), ()))[1]
    return bool(fields) and fields[0][1][0] == 2 and fields[0][1][1] == HEADER_TYPE  # Nodetype.NAME


def header_stamp(raw: bytes | memoryview, ros1: bool) -> int:
    """The header stamp (ns) of a message whose first field is a Header: ROS 1 `seq, secs, nsecs`; CDR a 4-byte
    encapsulation (byte 1: 0 big-endian, 1 little-endian) then `sec, nanosec`."""
    if ros1:
        _, sec, nsec = struct.unpack_from("<III", raw, 0)
    else:
        endian = "<" if raw[1] & 1 else ">"
        sec, nsec = struct.unpack_from(endian + "iI", raw, 4)
    return int(sec) * 1_000_000_000 + int(nsec)


class Bag:
    """One bag opened with rosbags' AnyReader (`reader`): `connections` by topic, `typestore`, `ros1`. A remote bag
    is copied into a temporary folder removed by `close`."""

    def __init__(self, fs: Any, path: str, where: str) -> None:
        from rosbags.highlevel import AnyReader
        from rosbags.typesys import Stores, get_typestore

        self.where = where
        self._tmp: str | None = None
        local = Path(path) if is_local(fs) else self._copy(fs, path)
        self.ros1 = local.suffix == ROS1_SUFFIX
        try:
            # bags that carry no definitions at all (rosbag2 before Iron may not) fall back to the standard types
            default = None if self.ros1 else get_typestore(Stores.ROS2_HUMBLE)
            self.reader = AnyReader([local], default_typestore=default)
            self.reader.open()
        except Exception as exc:  # noqa: BLE001 - rosbags raises many kinds on damaged input
            self.close()
            raise DataCorrupt(f"{where}: not a readable bag ({_short(exc)})") from exc
        self.typestore = self.reader.typestore
        self.connections: dict[str, list[Any]] = {}
        for conn in self.reader.connections:
            self.connections.setdefault(conn.topic, []).append(conn)

    def _copy(self, fs: Any, path: str) -> Path:
        size = sum(fs.du(path, total=False).values()) if fs.isdir(path) else fs.size(path)
        if size > MAX_BAG_BYTES:
            raise EpisodeTooLarge(f"{self.where}: the bag is {size} bytes, over the {MAX_BAG_BYTES} limit")
        self._tmp = tempfile.mkdtemp(prefix="robo_ray_bag_")
        local = Path(self._tmp) / posixpath.basename(path.rstrip("/"))
        try:
            fs.get(path, str(local), recursive=fs.isdir(path))
        except Exception as exc:  # noqa: BLE001 - storage errors of any client
            raise DataCorrupt(f"{self.where}: the bag cannot be copied locally ({_short(exc)})") from exc
        return local

    def msgtype(self, topic: str) -> str:
        return self.connections[topic][0].msgtype

    def defined(self, topic: str) -> bool:
        """Whether the topic's message type has a definition to deserialise it with: the bag's own for each of
        the topic's connections (an empty one is missing), or the standard types for a bag that carries none."""
        fields = self.typestore.fielddefs.get(self.msgtype(topic))
        if not fields or not fields[1]:
            return False
        carries = any(c.msgdef.data.strip() for c in self.reader.connections)
        return not carries or all(c.msgdef.data.strip() for c in self.connections[topic])

    def messages(self, topics: list[str], start: int | None = None) -> Iterator[tuple[str, int, memoryview]]:
        """(topic, receive time ns, raw bytes) of the topics' messages in receive-time order, from `start`."""
        conns = [c for t in topics for c in self.connections.get(t, [])]
        if not conns:
            return
        try:
            for conn, t, raw in self.reader.messages(connections=conns, start=start):
                yield conn.topic, int(t), raw
        except GeneratorExit:
            raise
        except Exception as exc:  # noqa: BLE001 - a truncated or damaged bag, whatever rosbags calls it
            raise DataCorrupt(f"{self.where}: unreadable message data ({_short(exc)})") from exc

    def deserialize(self, raw: bytes | memoryview, topic: str) -> Any:
        msgtype = self.msgtype(topic)
        try:
            if self.ros1:
                return self.typestore.deserialize_ros1(raw, msgtype)
            return self.typestore.deserialize_cdr(raw, msgtype)
        except Exception as exc:  # noqa: BLE001 - a message that does not match its definition
            raise DataCorrupt(f"{self.where}: a {topic} message does not decode as {msgtype} "
                              f"({_short(exc)})") from exc

    def close(self) -> None:
        reader = getattr(self, "reader", None)
        if reader is not None and reader.stack is not None:
            try:
                reader.close()
            except Exception:  # noqa: BLE001 - closing a damaged bag
                pass
        if self._tmp:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    def __enter__(self) -> "Bag":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _short(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:200] or type(exc).__name__
