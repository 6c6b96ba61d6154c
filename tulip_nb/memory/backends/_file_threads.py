"""Thread-level operations of :class:`~tulip_nb.memory.backends._delta_file.DeltaFileCheckpointer`: delete,
copy, vacuum and the scans behind the listing capabilities, in both layouts (:mod:`._file_delta`).

Functions of the checkpointer: they run on its own primitives (its per-directory lock, header
cache, envelope reads and writes, the thread logs), so every operation keeps every index and the
tulip envelope (the *mirror*) in step with the log. Each is crash-atomic (whole or gone after a
kill -9): a thread delete by a tombstone (below), a copy and a multi-step drop as
:mod:`._file_crash` describes; :func:`settle` and :func:`clean_base` finish or remove what a crash
left, before a scan lists.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import os
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from tulip_nb.core.errors import InvalidThreadId
from tulip_nb.memory.backends import _file_crash as crash
from tulip_nb.memory.backends._delta_log import LOG_NAME
from tulip_nb.memory.backends._file_delta import FORKS_NAME, info_of, log_name
from tulip_nb.memory.backends._file_index import INDEX_NAME, LOCK_NAME, Bad, inodes_in, read_entry, unavailable
from tulip_nb.memory.backends._file_safety import (
    NOFOLLOW,
    THREAD_FILE,
    TRASH_PREFIX,
    fsync_dir,
    is_link,
    read_nofollow,
    remove_tree,
    warn_link,
)
from tulip_nb.memory.checkpointer import Checkpoint, CheckpointInfo
from tulip_nb.memory.retention import relink

if TYPE_CHECKING:
    from tulip_nb.memory.backends._delta_file import DeltaFileCheckpointer as FileCheckpointer

__all__ = ["all_infos", "clean_base", "copy_sync", "delete_sync", "lock_fd", "settle", "vacuum_sync"]

_BOOKKEEPING = (LOCK_NAME, INDEX_NAME, FORKS_NAME)


# -- locking, leftovers -----------------------------------------------------------------------
def lock_fd(cp: FileCheckpointer, directory: Path, *, create: bool) -> int | None:
    """An ``flock``-ed descriptor of ``<directory>/.lock`` (None: the directory does not exist).

    The lock is taken again when the directory was deleted (renamed to a tombstone) or its lock
    file replaced while this waited, so a writer never writes into a deleted thread.
    """
    lock = directory / LOCK_NAME
    while True:
        try:
            if create and not directory.is_dir():
                cp._base.mkdir(parents=True, exist_ok=True)
                with contextlib.suppress(FileExistsError):
                    os.mkdir(directory)
                    if cp.fsync:  # the new thread directory survives a power cut
                        fsync_dir(cp._base)
            if is_link(directory):
                raise InvalidThreadId("the thread's directory is a symbolic link (never followed)", path=str(directory))
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | NOFOLLOW, 0o644)
        except FileNotFoundError:
            return None
        except OSError as e:
            raise unavailable(e, lock) from e
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            st, now = os.fstat(fd), os.lstat(lock)
            if (st.st_dev, st.st_ino) == (now.st_dev, now.st_ino):
                return fd
        except FileNotFoundError:
            pass
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)  # deleted meanwhile: take the lock of the directory that is there now


def clean_base(base: Path) -> None:
    """Remove the tombstones of thread deletes a crash interrupted (they are gone already) and the
    staging directories of copies that died (never committed: see :mod:`._file_crash`)."""
    try:
        names = [n for n in os.listdir(base) if n.startswith((TRASH_PREFIX, crash.COPY_PREFIX))]
    except OSError:
        return
    for name in names:
        if name.startswith(TRASH_PREFIX):
            remove_tree(base / name)
        else:
            crash.clean_staging(base / name)


def settle(cp: FileCheckpointer, directory: Path, leftovers: list[str]) -> None:
    """Finish the deletes, drops and copies a crash interrupted in ``directory`` (or roll back the
    uncommitted ones) and remove dead writers' temp files."""
    for name in leftovers:
        if name.startswith(crash.COPY_PREFIX):
            crash.settle_copy(cp, directory, name)
        elif name.startswith(TRASH_PREFIX):
            with cp._locked(directory, create=False):
                trash = directory / name
                if not is_link(trash) and crash.settle_drop(cp, directory, trash):
                    continue
                try:
                    thread_id: str | None = read_nofollow(trash / THREAD_FILE).decode()
                except OSError:
                    thread_id = None  # not committed: nothing of the thread was moved yet
                if thread_id and os.path.isdir(trash) and not is_link(trash):
                    _entomb_files(cp, directory, trash, _own_names(cp, directory, thread_id))
                remove_tree(trash)
        elif crash.stale_tmp(directory, name):
            with contextlib.suppress(OSError):
                os.unlink(directory / name)


def _own_names(cp: FileCheckpointer, directory: Path, thread_id: str) -> list[str]:
    """The files of ``thread_id`` in ``directory``: its log, then its envelopes (header reads)."""
    names = []
    log = log_name(directory, thread_id)
    if os.path.lexists(directory / log):
        names.append(log)
    for name in inodes_in(directory):
        entry = read_entry(directory / name)
        if entry is not None and not isinstance(entry, Bad) and entry.thread_id == thread_id:
            names.append(name)
    cp._logs.forget(directory / log)
    return names


def _entomb_files(cp: FileCheckpointer, directory: Path, trash: Path, names: list[str]) -> None:
    for name in names:
        with contextlib.suppress(FileNotFoundError):
            os.rename(directory / name, trash / name)
        with cp._heads_lock:
            cp._heads.get(directory, {}).pop(name, None)
    if cp.fsync:
        fsync_dir(directory)


# -- delete -----------------------------------------------------------------------------------
def delete_sync(cp: FileCheckpointer, thread_id: str, checkpoint_ids: set[str] | None) -> int:
    """Delete the thread's checkpoints in ``checkpoint_ids`` (all for None); how many went."""
    directory = cp.thread_dir(thread_id)
    if not directory.exists():
        return 0
    if checkpoint_ids is None:
        return _delete_thread(cp, thread_id, directory)
    with cp._locked(directory, create=False):
        going = [(n, i) for n, i in cp._infos(thread_id, directory) if i.checkpoint_id in checkpoint_ids]
        if not going:
            return 0
        files = {n: i.checkpoint_id for n, i in going if n is not None}
        logged = {i.checkpoint_id for n, i in going if n is None}
        removed = crash.drop(cp, directory, thread_id, files, logged)  # all or nothing (see _file_crash)
        empty = not cp._scan(directory) and not _logs_in(directory)
    if empty:
        _remove_dir(cp, directory)
    return removed


def _delete_thread(cp: FileCheckpointer, thread_id: str, directory: Path) -> int:
    """Delete a whole thread, crash-atomically: whole or gone after a kill at any point.

    A directory holding only this thread is renamed to a tombstone in ``base_dir`` (one atomic
    step), then removed. In a directory shared with other threads (ids that sanitise alike), a
    tombstone directory inside it first records the thread's id (the commit point), then the
    thread's files are moved into it; a scan that finds such a tombstone finishes the move first.
    """
    trash: Path | None = None
    with cp._locked(directory, create=False):
        infos = cp._infos(thread_id, directory)
        if not infos:
            return 0
        log = cp._logs.get(directory, thread_id)
        if log is not None:  # the log goes: the forks built on it must stand alone first
            cp._logs.release_dependents(directory, functools.partial(_lock_dir, cp), going=log.path)
            cp._logs.forget(log.path)
        names = _own_names(cp, directory, thread_id)
        try:
            if _exclusive(directory, names):
                trash = cp._base / f"{TRASH_PREFIX}{uuid.uuid4().hex}"
                os.rename(directory, trash)
                if cp.fsync:
                    fsync_dir(cp._base)
                with cp._heads_lock:
                    cp._heads.pop(directory, None)
            else:
                inner = directory / f"{TRASH_PREFIX}{uuid.uuid4().hex}"
                os.mkdir(inner)
                cp._write_atomic(inner / THREAD_FILE, thread_id.encode())  # the commit point
                _entomb_files(cp, directory, inner, names)
                remove_tree(inner)
        except OSError as e:
            raise unavailable(e, directory) from e
        empty = trash is None and not cp._scan(directory) and not _logs_in(directory)
    if trash is not None:
        remove_tree(trash)
    elif empty:
        _remove_dir(cp, directory)
    return len(infos)


def _exclusive(directory: Path, names: list[str]) -> bool:
    """Whether ``directory`` holds nothing but ``names`` and the store's bookkeeping."""
    mine = set(names)
    for name in os.listdir(directory):
        if name in mine or name in _BOOKKEEPING or name.startswith(TRASH_PREFIX) or name.endswith(".tmp"):
            continue
        return False
    return True


def _lock_dir(cp: FileCheckpointer, directory: Path) -> contextlib.AbstractContextManager[None]:
    return cp._locked(directory, create=False)


def _remove_dir(cp: FileCheckpointer, directory: Path) -> None:
    try:
        leftovers = [n for n in os.listdir(directory) if n not in _BOOKKEEPING]
        if not leftovers:
            for name in _BOOKKEEPING:
                (directory / name).unlink(missing_ok=True)
            directory.rmdir()
    except OSError:
        pass  # another writer got in first: the directory stays
    with cp._heads_lock:
        if not directory.exists():
            cp._heads.pop(directory, None)


# -- scans ------------------------------------------------------------------------------------
def _thread_dirs(cp: FileCheckpointer) -> list[Path]:
    """The thread directories (a symbolic link is skipped with a warning; tombstones are removed)."""
    out: list[Path] = []
    try:
        with os.scandir(cp._base) as it:
            for e in it:
                if e.name.startswith(TRASH_PREFIX):
                    remove_tree(cp._base / e.name)
                elif e.name.startswith(crash.COPY_PREFIX):
                    crash.clean_staging(cp._base / e.name)
                elif e.is_symlink():
                    warn_link(cp._base / e.name)
                elif e.is_dir(follow_symlinks=False) and not e.name.startswith("."):
                    out.append(cp._base / e.name)
    except FileNotFoundError:
        return []
    except OSError as e:
        raise unavailable(e, cp.base_dir) from e
    return sorted(out)


def _log_threads(cp: FileCheckpointer, directory: Path) -> Iterator[tuple[str, list[CheckpointInfo]]]:
    """(thread id, live infos) of every log in ``directory``."""
    for name in _logs_in(directory):
        log = cp._logs.open_path(directory / name)
        thread_id = log.file_thread_id or (directory.name if name == LOG_NAME else None)
        if thread_id is not None:
            yield thread_id, [info_of(h, thread_id) for h in log.headers()]


def _dir_infos(cp: FileCheckpointer, directory: Path) -> dict[str, list[tuple[str | None, CheckpointInfo]]]:
    """Per thread id, the (file name or None, info) of each checkpoint in ``directory``."""
    per: dict[str, list[tuple[str | None, CheckpointInfo]]] = {}
    logged: set[tuple[str, str]] = set()
    scanned = cp._scan(directory)  # first: it finishes a delete a crash interrupted
    for thread_id, infos in _log_threads(cp, directory):
        per.setdefault(thread_id, []).extend((None, i) for i in infos)
        logged.update((thread_id, i.checkpoint_id) for i in infos)
    for name, entry in scanned.items():
        if isinstance(entry, Bad):
            cp._warn_bad(directory / name, entry.reason)
        elif (entry.thread_id, entry.checkpoint_id) not in logged:
            per.setdefault(entry.thread_id, []).append((name, entry))
    return per


def all_infos(cp: FileCheckpointer) -> list[CheckpointInfo]:
    out: list[CheckpointInfo] = []
    for directory in _thread_dirs(cp):
        for entries in _dir_infos(cp, directory).values():
            out.extend(info for _, info in entries)
    return out


# -- copy -------------------------------------------------------------------------------------
def copy_sync(cp: FileCheckpointer, source: str, dest: str) -> bool:
    """Copy a thread into a new one, crash-atomically (see :mod:`._file_crash`)."""
    return crash.copy_thread(cp, source, dest)


# -- vacuum -----------------------------------------------------------------------------------
def vacuum_sync(cp: FileCheckpointer, older_than_days: float) -> int:
    cutoff = datetime.now(UTC) - timedelta(days=older_than_days)
    removed = 0
    for directory in _thread_dirs(cp):
        with cp._locked(directory, create=False):
            per = _dir_infos(cp, directory)
        for thread_id, entries in per.items():
            old = {i.checkpoint_id for _, i in entries if i.created_at < cutoff}
            if not old:
                continue
            whole = _delete_if_only(cp, thread_id, directory, old) if len(old) == len(entries) else None
            if whole is not None:
                removed += whole
            else:  # survivors re-linked first (each rewrite atomic), then the old go in one drop
                _relink(cp, directory, thread_id, [i for _, i in entries], old)
                removed += delete_sync(cp, thread_id, old)
    return removed


def _delete_if_only(cp: FileCheckpointer, thread_id: str, directory: Path, old: set[str]) -> int | None:
    """Delete the whole thread (one rename to a tombstone) if it holds nothing but ``old`` now
    (None: a save came in since the listing; it must survive, re-linked)."""
    with cp._locked(directory, create=False):
        if any(i.checkpoint_id not in old for _, i in cp._infos(thread_id, directory)):
            return None
        return _delete_thread(cp, thread_id, directory)


def _relink(
    cp: FileCheckpointer, directory: Path, thread_id: str, infos: list[CheckpointInfo], dropped: set[str]
) -> None:
    """Before ``dropped`` go: re-link each survivor whose parent is dropped (see retention)."""
    changes = relink(sorted(infos, key=lambda i: (i.created_at, i.checkpoint_id)), dropped)  # oldest first
    if not changes:
        return
    with cp._locked(directory, create=False):
        for cid, meta in changes.items():
            ckpt = cp._load_by_id(directory, thread_id, cid)
            cp._put_locked(directory, Checkpoint(cid, thread_id, ckpt.created_at, ckpt.state, meta, ckpt.extra))


def _logs_in(directory: Path) -> list[str]:
    """The thread logs in ``directory`` (a symbolic link is skipped with a warning)."""
    out = []
    try:
        with os.scandir(directory) as it:
            for e in it:
                if e.name == LOG_NAME or e.name.startswith(LOG_NAME + "-"):
                    if e.is_symlink():
                        warn_link(directory / e.name)
                    else:
                        out.append(e.name)
    except FileNotFoundError:
        return []
    return sorted(out)
