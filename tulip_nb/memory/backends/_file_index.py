"""What :class:`~tulip_nb.memory.backends._delta_file.DeltaFileCheckpointer` knows about files without loading
them: each checkpoint file's header (id, thread, ``created_at``, save metadata), read from the
file's first bytes or from the directory's persistent index, and the stamp that says whether that
knowledge is still about the file on disk.

Every header is kept with what identifies the file it was read from or written as, and a header
whose file differs now is stale and read again, so the caches are correct whoever wrote the file:

- in memory, the file's inode, which the directory listing gives for free: every writer (tulip_nb,
  tulip) replaces a checkpoint by temp file + rename, i.e. with a new inode;
- in the index, the file's **stamp** ``(inode, mtime_ns, size)``, checked once when a process
  first looks at the directory, so a fresh process never trusts a line about an older file.

The index ``<dir>/.tulip_nb_index`` (not ``*.json``: tulip never looks at it) is an append-only
cache, one JSON line per write by tulip_nb; the directory listing stays the truth: lines for
deleted files are ignored, files written by others (tulip) are not in it and get their heads read,
and a torn last line (a crash mid-append) is skipped.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from tulip_nb.core import iso_offset, parse_datetime
from tulip_nb.core.errors import BackendUnavailable, CheckpointCorrupt
from tulip_nb.memory._envelope import HEAD_BYTES, info_from_head, read_head
from tulip_nb.memory.backends._file_safety import NOFOLLOW, TRASH_PREFIX, read_nofollow, warn_link
from tulip_nb.memory.checkpointer import CheckpointInfo

__all__ = [
    "INDEX_NAME",
    "LOCK_NAME",
    "Bad",
    "Entry",
    "Stamp",
    "append_index",
    "index_line",
    "read_entry",
    "read_index",
    "rewrite_index",
    "safe_name",
    "inodes_in",
    "stamp_of",
    "unavailable",
    "write_all",
]

MAX_NAME_BYTES = 200  # below NAME_MAX (255) with room for ".json" and temp suffixes
LOCK_NAME = ".lock"
INDEX_NAME = ".tulip_nb_index"

Stamp = tuple[int, int, int]
"""``(st_ino, st_mtime_ns, st_size)`` of a checkpoint file."""


@dataclass
class Bad:
    """Why a checkpoint file cannot be read (it is skipped when finding the latest)."""

    reason: str


Entry = CheckpointInfo | Bad


def safe_name(value: str) -> str:
    """tulip's file-name sanitiser, plus a hash suffix for names too long for the file system."""
    name = "".join(c if c.isalnum() or c in "-_" else "_" for c in value)
    if len(name.encode()) <= MAX_NAME_BYTES:
        return name
    digest = hashlib.sha256(value.encode()).hexdigest()[:16]
    short = name.encode()[: MAX_NAME_BYTES - 17].decode(errors="ignore")
    return f"{short}_{digest}"


def _stamp(st: os.stat_result) -> Stamp:
    return (st.st_ino, st.st_mtime_ns, st.st_size)


def stamp_of(path: Path) -> Stamp | None:
    """The stamp of ``path`` now, or None if it is gone."""
    try:
        return _stamp(os.stat(path))
    except FileNotFoundError:
        return None
    except OSError as e:
        raise unavailable(e, path) from e


def inodes_in(directory: Path, leftovers: list[str] | None = None) -> dict[str, int]:
    """Inodes of the checkpoint files (``*.json``, not hidden) in ``directory`` (no ``stat``).

    A symbolic link is skipped with a warning naming it (never followed out of the store).
    ``leftovers`` collects the names of tombstones and temp files (``.*.tmp``) seen on the way.
    Raises ``FileNotFoundError`` when the directory does not exist.
    """
    out: dict[str, int] = {}
    try:
        with os.scandir(directory) as it:
            for e in it:
                name = e.name
                if name.startswith("."):
                    if leftovers is not None and (name.startswith(TRASH_PREFIX) or name.endswith(".tmp")):
                        leftovers.append(name)
                elif name.endswith(".json"):
                    if e.is_symlink():
                        warn_link(directory / name)
                    else:
                        out[name] = e.inode()
    except FileNotFoundError:
        raise
    except OSError as e:
        raise unavailable(e, directory) from e
    return out


def read_entry(path: Path) -> Entry | None:
    """The header of one checkpoint file, reading as little of it as possible (None: it is gone)."""
    try:
        fd = os.open(path, os.O_RDONLY | NOFOLLOW)
    except FileNotFoundError:
        return None
    except OSError as e:
        if e.errno == errno.ELOOP:
            return Bad("a symbolic link (never followed)")
        raise unavailable(e, path) from e
    try:
        with open(fd, "rb") as f:
            head = f.read(HEAD_BYTES)
            obj = read_head(head)
            if obj is None and len(head) == HEAD_BYTES:  # a large metadata object
                head += f.read(16 * HEAD_BYTES)
                obj = read_head(head)
            if obj is not None and "metadata" not in obj:  # tulip's order: metadata is last
                obj["metadata"] = _tail_metadata(f)
            if obj is None or obj["metadata"] is None:  # anything else: parse the whole file
                f.seek(0)
                try:
                    obj = orjson.loads(f.read())
                except orjson.JSONDecodeError as e:
                    return Bad(f"invalid JSON: {e}")
                if not isinstance(obj, dict):
                    return Bad("not a JSON object")
    except FileNotFoundError:
        return None  # deleted between listdir and open
    except OSError as e:
        raise unavailable(e, path) from e
    try:
        return info_from_head(obj, where=str(path))
    except CheckpointCorrupt as e:
        return Bad(e.message)


def _tail_metadata(f: BinaryIO) -> Any:
    """The trailing ``"metadata": {...}}`` of a tulip-ordered envelope, or None if not found."""
    size = f.seek(0, os.SEEK_END)
    f.seek(max(0, size - 4 * HEAD_BYTES))
    tail = f.read()
    pos = tail.rfind(b'"metadata"')
    if pos < 0:
        return None
    try:
        obj = orjson.loads(b"{" + tail[pos:])
    except orjson.JSONDecodeError:
        return None
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    return meta if isinstance(meta, dict) else None


def read_index(directory: Path, inodes: dict[str, int]) -> dict[str, tuple[int, Entry]]:
    """Headers recorded in the index for files that still exist with the recorded stamp.

    Returns ``{name: (inode, header)}``; rewrites the index compactly when most lines are stale.
    """
    try:
        data = read_nofollow(directory / INDEX_NAME)
    except OSError:
        return {}
    rows: dict[str, tuple[list[int], CheckpointInfo]] = {}
    lines = data.splitlines()
    for line in lines:
        try:
            row = orjson.loads(line)
            name, stamp = row["f"], row["s"]
            if inodes.get(name) == stamp[0]:  # a later line for the same file wins
                rows[name] = (stamp, CheckpointInfo(row["c"], row["t"], parse_datetime(row["a"]), row["m"]))
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, IndexError):
            continue
    out: dict[str, tuple[int, Entry]] = {}
    fresh: dict[str, tuple[Stamp, Entry]] = {}
    for name, (stamp, info) in rows.items():
        now = stamp_of(directory / name)
        if now is not None and list(now) == stamp:
            out[name] = (now[0], info)
            fresh[name] = (now, info)
    if len(lines) > 2 * len(out) + 64:  # mostly deleted or replaced checkpoints
        rewrite_index(directory, fresh)
    return out


def index_line(name: str, stamp: Stamp, info: CheckpointInfo) -> bytes:
    row = {"f": name, "c": info.checkpoint_id, "t": info.thread_id, "a": iso_offset(info.created_at), "s": stamp}
    return orjson.dumps({**row, "m": info.metadata}, option=orjson.OPT_NON_STR_KEYS) + b"\n"


def append_index(directory: Path, lines: list[bytes]) -> None:
    """Record new headers (called under the directory lock); the index is only a cache."""
    try:
        fd = os.open(directory / INDEX_NAME, os.O_WRONLY | os.O_CREAT | os.O_APPEND | NOFOLLOW, 0o644)
        try:
            os.write(fd, b"".join(lines))
        finally:
            os.close(fd)
    except OSError:
        pass  # a missing index costs a head read later, never correctness


def rewrite_index(directory: Path, entries: dict[str, tuple[Stamp, Entry]]) -> None:
    lines = [index_line(n, s, e) for n, (s, e) in entries.items() if isinstance(e, CheckpointInfo)]
    tmp = directory / f"{INDEX_NAME}.{os.getpid()}.{threading.get_ident()}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW, 0o644)
        try:
            write_all(fd, [b"".join(lines)])
        finally:
            os.close(fd)
        os.replace(tmp, directory / INDEX_NAME)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()


def write_all(fd: int, chunks: list[bytes | bytearray]) -> None:
    """``os.writev`` until every byte is written (a regular file may still take a short write)."""
    views = [memoryview(c) for c in chunks if c]
    while views:
        written = os.writev(fd, views)
        while views and written >= len(views[0]):
            written -= len(views[0])
            views.pop(0)
        if views and written:
            views[0] = views[0][written:]


def unavailable(e: OSError, path: Path | str) -> BackendUnavailable:
    reason = errno.errorcode.get(e.errno or 0, "") if e.errno else ""
    text = e.strerror or str(e)
    return BackendUnavailable(f"file store I/O failed: {reason + ': ' if reason else ''}{text}", path=str(path))
