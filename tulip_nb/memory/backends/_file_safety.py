"""Confinement and durability helpers of :class:`~tulip_nb.memory.backends.file.FileCheckpointer`.

- **Confinement**: no file-store operation follows a symbolic link planted inside ``base_dir``
  (a thread directory, a checkpoint file, the index, the lock, a log, the forks file): listings
  skip such entries with a :class:`RuntimeWarning` naming them, files are opened with
  ``O_NOFOLLOW``, and a thread asked for by name whose directory is a link is refused.
- **Durability**: a rename or a new entry is made durable by fsyncing its directory.
- **Tombstones**: a deleted thread is renamed to ``.tulip_nb_trash-<uuid>`` (in ``base_dir``, or
  inside its directory for a thread sharing it) before it is removed, so a crash leaves it whole
  or gone; leftovers (and stale ``.*.tmp`` files) are removed on the next open or scan.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
import time
import warnings
from pathlib import Path

__all__ = [
    "NOFOLLOW",
    "THREAD_FILE",
    "TRASH_PREFIX",
    "fsync_dir",
    "is_link",
    "is_loop",
    "is_stale_tmp",
    "read_nofollow",
    "remove_tree",
    "warn_link",
]

NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
TRASH_PREFIX = ".tulip_nb_trash-"
THREAD_FILE = ".thread"
"""In a tombstone inside a shared thread directory: the id of the thread being deleted."""
STALE_TMP_SECONDS = 3600.0


def is_link(path: Path | str) -> bool:
    """Whether ``path`` is a symbolic link (False when it does not exist)."""
    try:
        return stat.S_ISLNK(os.lstat(path).st_mode)
    except OSError:
        return False


def warn_link(path: Path | str) -> None:
    warnings.warn(
        f"skipping symbolic link {path}: the file store never follows links inside base_dir",
        RuntimeWarning,
        stacklevel=3,
    )


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


def is_loop(e: OSError) -> bool:
    return e.errno == errno.ELOOP


def fsync_dir(directory: Path | str) -> None:
    """Make a rename in ``directory`` or a new entry of it durable (best effort on odd file systems)."""
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | NOFOLLOW)
    except FileNotFoundError:
        return
    try:
        with contextlib.suppress(OSError):  # some file systems cannot fsync a directory
            os.fsync(fd)
    finally:
        os.close(fd)


def remove_tree(path: Path) -> None:
    """Remove a tombstone (never following links out of it); a failure leaves it for the next scan."""
    with contextlib.suppress(OSError):
        shutil.rmtree(path)  # rmtree does not follow symbolic links


def is_stale_tmp(directory: Path, name: str) -> bool:
    """Whether ``name`` is a temp file (``.<name>.<pid>.<tid>.tmp``) its writer left behind for good."""
    if not (name.startswith(".") and name.endswith(".tmp")):
        return False
    parts = name.split(".")
    pid = int(parts[-3]) if len(parts) >= 4 and parts[-3].isdigit() else None
    if pid is not None and pid != os.getpid():
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True  # its writer is gone
        except OSError:
            pass
    try:
        return time.time() - os.lstat(directory / name).st_mtime > STALE_TMP_SECONDS
    except OSError:
        return False
