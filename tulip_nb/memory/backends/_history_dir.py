"""The thread directories of the history layout: tulip's envelopes, read and written confined.

A thread directory (``<base_dir>/<safe(thread_id)>/``) holds what tulip reads: the *projection*
of the thread's history (its latest turn end, or every checkpoint with ``layout="tulip"``, as
tulip envelopes marked with :data:`~tulip_nb.memory.history.PROJECTION_KEY`), and any envelopes
tulip wrote itself (a tulip
agent that resumed the thread). :class:`EnvelopeDir` lists both from each file's first bytes
(remembered per file, re-read only when the file changed), and writes an envelope without ever
following a link: the directory is opened ``O_NOFOLLOW | O_DIRECTORY`` and every name resolved
relative to it, the temp file is created ``O_EXCL | O_NOFOLLOW`` under a random name, checked to
be singly linked, and renamed over the target (a rename replaces a planted symlink or hard link
as a name; it never writes through it).

The projection is not fsynced: an acknowledged save's durability is the SQLite commit, and a
projection lost or emptied by a power cut (or a temp file of a killed write) is put right from the
history the next time a process touches the thread (:meth:`FileCheckpointer._repair`). Also here:
the small file helpers the file store and ``tulip-nb convert`` share (:func:`safe_name`,
:func:`read_nofollow`, :func:`unavailable`, :func:`is_turn_end`, ...).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import stat
import threading
import time
import uuid
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tulip_nb.core.errors import BackendUnavailable, CheckpointCorrupt, InvalidThreadId
from tulip_nb.core.keys import SOURCE_KEY
from tulip_nb.memory._envelope import HEAD_BYTES, decode_envelope, info_from_head, read_head
from tulip_nb.memory.checkpointer import Checkpoint, CheckpointInfo
from tulip_nb.memory.history import PROJECTION_KEY

__all__ = [
    "NOFOLLOW",
    "EnvelopeDir",
    "Head",
    "is_link",
    "is_stale_temp",
    "is_loop",
    "is_turn_end",
    "read_nofollow",
    "safe_name",
    "unavailable",
    "write_all",
]

NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | NOFOLLOW
_MAX_NAME_BYTES = 200  # below NAME_MAX (255) with room for ".json" and temp suffixes
_NOT_TURN_ENDS = frozenset(("iteration", "fork"))
_TEMP = re.compile(r"^\..+\.json\.[0-9a-f]{32}\.tmp$")
"""The temp name :meth:`EnvelopeDir.write` uses (a random hex per write)."""
_OLD_TEMP_SECONDS = 3600.0


def is_stale_temp(directory: Path, name: str, *, writes_locked: bool) -> bool:
    """The one rule for a temp file an envelope write left in a thread directory: is it garbage?

    - this layout's (``.<name>.<random hex>.tmp``, :meth:`EnvelopeDir.write`): exactly when the
      caller holds the store's write lock (``writes_locked``), under which every envelope is
      written, so none of them is a write in flight;
    - the release before the history model's (``.<name>.<pid>.<tid>.tmp``): when its process is
      gone, or it is older than an hour (its writer took no lock this one can hold);
    - any other name: never (not a temp file of ours).
    """
    if _TEMP.match(name):
        return writes_locked
    parts = name.split(".")
    if not (name.startswith(".") and name.endswith(".tmp") and len(parts) >= 4 and parts[-3].isdigit()):
        return False
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(int(parts[-3]), 0)
        try:
            return time.time() - os.lstat(directory / name).st_mtime > _OLD_TEMP_SECONDS
        except OSError:
            return False
    return True


def is_turn_end(metadata: Mapping[str, Any]) -> bool:
    """Whether a save with this metadata is a turn end (its ``source`` is not ``"iteration"`` or
    ``"fork"``): what tulip itself keeps, and what the default projection shows it.

    >>> is_turn_end({"source": "answer"}), is_turn_end({"source": "iteration"})
    (True, False)
    """
    return metadata.get(SOURCE_KEY) not in _NOT_TURN_ENDS


def safe_name(value: str) -> str:
    """tulip's file-name sanitiser (letters, digits, ``-`` and ``_`` kept, anything else ``_``),
    plus a hash suffix for names too long for the file system.

    >>> safe_name("user/42:chat #1")
    'user_42_chat__1'
    """
    name = "".join(c if c.isalnum() or c in "-_" else "_" for c in value)
    if len(name.encode()) <= _MAX_NAME_BYTES:
        return name
    digest = hashlib.sha256(value.encode()).hexdigest()[:16]
    short = name.encode()[: _MAX_NAME_BYTES - 17].decode(errors="ignore")
    return f"{short}_{digest}"


def is_link(path: Path | str) -> bool:
    """Whether ``path`` is a symbolic link (False when it does not exist)."""
    try:
        return stat.S_ISLNK(os.lstat(path).st_mode)
    except OSError:
        return False


def is_loop(e: OSError) -> bool:
    """Whether ``e`` is what ``O_NOFOLLOW`` raises on a symbolic link."""
    return e.errno == errno.ELOOP


def read_nofollow(path: Path | str) -> bytes:
    """The whole file at ``path``, refusing a symbolic link (``OSError`` with ``ELOOP``)."""
    fd = os.open(path, os.O_RDONLY | NOFOLLOW)
    try:
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


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
    """An I/O failure of the file store as :class:`BackendUnavailable` (errno name, path)."""
    reason = errno.errorcode.get(e.errno or 0, "") if e.errno else ""
    text = e.strerror or str(e)
    return BackendUnavailable(f"file store I/O failed: {reason + ': ' if reason else ''}{text}", path=str(path))


@dataclass(frozen=True)
class Head:
    """What one ``*.json`` file of a thread directory is: an envelope's header, or why it is not."""

    info: CheckpointInfo | None
    projection: bool
    problem: str = ""


class EnvelopeDir:
    """Reads and writes the envelopes of thread directories (one instance per checkpointer)."""

    def __init__(self) -> None:
        self._heads: dict[Path, dict[str, tuple[tuple[int, int, int], Head]]] = {}
        self._lock = threading.Lock()
        self._warned: set[tuple[Path, str]] = set()

    # -- reading ------------------------------------------------------------------------------
    def scan(self, directory: Path) -> dict[str, Head]:
        """Every ``*.json`` file of ``directory`` (none when it does not exist): name -> head."""
        try:
            with os.scandir(directory) as it:
                found = [(e.name, e) for e in it if e.name.endswith(".json") and not e.name.startswith(".")]
        except FileNotFoundError:
            return {}
        except NotADirectoryError:
            return {}
        except OSError as e:
            raise unavailable(e, directory) from e
        with self._lock:
            known = dict(self._heads.get(directory, {}))
        out: dict[str, Head] = {}
        fresh: dict[str, tuple[tuple[int, int, int], Head]] = {}
        for name, entry in found:
            try:
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            if stat.S_ISLNK(st.st_mode) or not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
                self._warn(directory / name, "not a plain, singly linked file (links are never followed)")
                continue
            stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
            cached = known.get(name)
            head = cached[1] if cached is not None and cached[0] == stamp else self._read_head(directory / name)
            fresh[name] = (stamp, head)
            out[name] = head
        with self._lock:
            self._heads[directory] = fresh
        return out

    def _read_head(self, path: Path) -> Head:
        try:
            fd = os.open(path, os.O_RDONLY | NOFOLLOW)
            try:
                first = os.read(fd, HEAD_BYTES)
            finally:
                os.close(fd)
            obj = read_head(first)
            if obj is None or "metadata" not in obj:  # metadata after the state (tulip's order): read it all
                try:
                    ckpt = decode_envelope(read_nofollow(path), where=str(path))
                    return Head(ckpt.info, PROJECTION_KEY in ckpt.extra)
                except CheckpointCorrupt:
                    if obj is None:
                        raise
                    # its header reads: it is listed, and loading it says what is wrong
            return Head(info_from_head(obj, where=str(path)), PROJECTION_KEY in obj)
        except FileNotFoundError:
            return Head(None, False, "gone")
        except CheckpointCorrupt as e:
            return Head(None, False, e.message)
        except OSError as e:
            return Head(None, False, f"cannot be read: {e.strerror or e}")

    def read(self, path: Path, thread_id: str) -> Checkpoint:
        """The envelope at ``path`` (never through a link); CheckpointCorrupt / FileNotFoundError."""
        try:
            if os.lstat(path).st_nlink != 1:
                raise CheckpointCorrupt(
                    "a hard-linked file (never read as a checkpoint)", thread_id=thread_id, path=str(path)
                )
            data = read_nofollow(path)
        except OSError as e:
            if is_loop(e):
                raise CheckpointCorrupt("a symbolic link (never followed)", thread_id=thread_id, path=str(path)) from e
            raise
        return decode_envelope(data, where=str(path), thread_id=thread_id)

    def warn_bad(self, path: Path, reason: str) -> None:
        self._warn(path, reason)

    def _warn(self, path: Path, reason: str) -> None:
        key = (path, reason)
        if key not in self._warned:
            self._warned.add(key)
            warnings.warn(f"skipping unreadable checkpoint file {path}: {reason}", RuntimeWarning, stacklevel=4)

    # -- writing ------------------------------------------------------------------------------
    @contextlib.contextmanager
    def opened(self, directory: Path, *, create: bool) -> Iterator[int | None]:
        """A descriptor of ``directory`` opened without following a link (None: it does not exist)."""
        if create:
            directory.parent.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(FileExistsError):
                os.mkdir(directory, 0o755)
        try:
            fd = os.open(directory, _DIR_FLAGS)
        except FileNotFoundError:
            yield None
            return
        except OSError as e:
            if is_loop(e) or is_link(directory):
                raise InvalidThreadId(
                    "the thread's directory is a symbolic link (never followed)", path=str(directory)
                ) from e
            raise unavailable(e, directory) from e
        try:
            yield fd
        finally:
            os.close(fd)

    def write(self, directory: Path, name: str, parts: list[bytes | bytearray], *, fsync: bool) -> None:
        """Write an envelope as ``directory/name`` via a random temp name and a rename."""
        tmp = f".{name}.{uuid.uuid4().hex}.tmp"
        with self.opened(directory, create=True) as dfd:
            if dfd is None:  # removed between the mkdir and the open (a tulip rmtree): an outage of this write
                raise unavailable(FileNotFoundError(2, "the thread directory vanished while writing"), directory)
            try:
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW, 0o644, dir_fd=dfd)
                try:
                    if os.fstat(fd).st_nlink != 1:
                        raise OSError(f"{tmp} is linked elsewhere")
                    write_all(fd, parts)
                    if fsync:
                        os.fsync(fd)
                finally:
                    os.close(fd)
                os.rename(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
            except OSError as e:
                with contextlib.suppress(OSError):
                    os.unlink(tmp, dir_fd=dfd)
                raise unavailable(e, directory / name) from e
            if fsync:
                with contextlib.suppress(OSError):
                    os.fsync(dfd)
        with self._lock:
            self._heads.get(directory, {}).pop(name, None)

    def unlink(self, directory: Path, names: list[str]) -> int:
        """Remove ``names`` from ``directory`` (an unlink never follows a link); how many went."""
        gone = 0
        with self.opened(directory, create=False) as dfd:
            if dfd is None:
                return 0
            for name in names:
                try:
                    os.unlink(name, dir_fd=dfd)
                    gone += 1
                except FileNotFoundError:
                    pass
                except OSError as e:
                    raise unavailable(e, directory / name) from e
        with self._lock:
            known = self._heads.get(directory, {})
            for name in names:
                known.pop(name, None)
        return gone

    def temps(self, directory: Path) -> list[str]:
        """Temp files of envelope writes in ``directory`` (a process killed mid-write leaves one)."""
        try:
            return sorted(n for n in os.listdir(directory) if _TEMP.match(n))
        except OSError:
            return []

    def clean_temps(self, directory: Path) -> None:
        """Remove them: call it holding the store's write lock, under which every envelope is
        written, so none of them is a write in flight."""
        leftovers = [n for n in self.temps(directory) if is_stale_temp(directory, n, writes_locked=True)]
        if leftovers:
            self.unlink(directory, leftovers)

    def remove_if_empty(self, directory: Path) -> None:
        with contextlib.suppress(OSError):
            os.rmdir(directory)  # fails (kept) while anything else is in it
        with self._lock:
            if not directory.exists():
                self._heads.pop(directory, None)
