"""Crash-atomic multi-file operations of :class:`~tulip_nb.memory.backends._delta_file.DeltaFileCheckpointer`.

A kill -9 (or an exception) at any moment of these leaves each thread *whole or absent*, never a
partial thread that lists; what a crash leaves behind is finished or removed by the next open
(``base_dir``) or scan (a thread directory), in both layouts.

**Copy** (:func:`copy_thread`; ``copy_thread`` of the store). The destination is built under a
name every scan skips, a *staging* directory ``.tulip_nb_copy-<pid>-<hex>.tmp`` holding the files
under their final names (the log, the tulip envelope(s), the index), then made visible in one step:

- when the destination directory does not exist, the staging directory is built in ``base_dir``
  and renamed to it: the rename is the commit (it fails when the directory appeared meanwhile,
  and the copy falls back to the next case);
- when it exists (another thread id sanitises to the same name, or a leftover directory), the
  staging directory is built *inside* it under the directory's lock. The commit point is a marker
  file ``.thread`` (the destination id) written into the staging directory; then the files are
  moved in (the log first, so the tulip envelope never lists alone) and the staging directory is
  removed, all under the lock. A scan that finds a committed staging directory moves the rest in
  (roll forward), one without the marker removes it (roll back), under the lock and *before* it
  lists (``FileCheckpointer._scan`` lists the directory again after settling), so a reader never
  sees half a copy. A staging directory left in ``base_dir`` was never committed: it is removed.

A re-run of a copy that a crash interrupted starts from scratch (the remains are rolled back); a
re-run of a copy that committed finds the destination equal to the copy (every checkpoint's
``copied_from`` names the source, one per source checkpoint) and returns True.

**Drop** (:func:`drop`: delete of checkpoints, ``prune``, ``vacuum``). When it takes more than one
step (several envelope files, envelopes and log records, or the log's tulip envelope changes), a
tombstone ``.tulip_nb_trash-<hex>/`` in the thread's directory first records what goes, a ``.drop``
file (the commit point); then the log is pruned, the envelopes moved into the tombstone, and the
tombstone removed. A scan that finds a committed ``.drop`` finishes it (each step is idempotent),
one without it removes the empty tombstone. ``vacuum`` re-links the survivors first (each rewrite
is atomic, and a re-linked survivor verifies while the dropped checkpoints still exist), then drops
the old checkpoints in this one transaction per thread; a thread whose checkpoints are all old is
deleted whole (one rename to a tombstone).

**Leftovers and live writers.** A staging directory is in use while its creator holds an ``flock``
on its ``.lock`` (the kernel drops it when the process dies). In a thread directory it is removed
or finished only under the directory's lock with its own lock free; in ``base_dir`` (no directory
lock) only when its lock is free *and* the pid in its name is gone (or a zombie) or it is older
than an hour (the pid was reused). A temp file ``.<name>.<pid>.<tid>.tmp`` is removed when its
writer's pid is gone or a zombie, or when it is older than an hour (a reused pid; a writer renames
its temp file within milliseconds), so never while its writer is still writing it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from tulip_nb.core.errors import CheckpointConflict, CheckpointCorrupt, CheckpointNotFound
from tulip_nb.core.keys import PARENT_KEY
from tulip_nb.memory.backends._delta_log import LOG_NAME, DeltaLog, ForeignBase
from tulip_nb.memory.backends._file_delta import is_turn_end, load_from, log_name, mirror_name
from tulip_nb.memory.backends._file_index import INDEX_NAME, LOCK_NAME, append_index, read_entry, unavailable
from tulip_nb.memory.backends._file_safety import (
    NOFOLLOW,
    STALE_TMP_SECONDS,
    THREAD_FILE,
    TRASH_PREFIX,
    fsync_dir,
    is_link,
    read_nofollow,
    remove_tree,
)
from tulip_nb.memory.checkpointer import Checkpoint, CheckpointInfo, new_checkpoint_id

if TYPE_CHECKING:
    from tulip_nb.memory.backends._delta_file import DeltaFileCheckpointer as FileCheckpointer

__all__ = [
    "COPY_PREFIX",
    "DROP_FILE",
    "clean_staging",
    "copy_thread",
    "drop",
    "settle_copy",
    "settle_drop",
    "stale_tmp",
]

COPY_PREFIX = ".tulip_nb_copy-"
DROP_FILE = ".drop"
"""In a tombstone inside a thread directory: what a drop removes (its commit point)."""

_ACTIVE: set[Path] = set()  # tombstones this process is finishing (a scan on the way skips them)
_ACTIVE_LOCK = threading.Lock()


# -- liveness ---------------------------------------------------------------------------------
def _pid_gone(pid: int) -> bool:
    """Whether process ``pid`` has exited (a zombie has: it only waits to be reaped)."""
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False  # another user's process: alive
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state in (b"Z", b"X")


def _older_than_bound(path: Path) -> bool:
    try:
        return time.time() - os.lstat(path).st_mtime > STALE_TMP_SECONDS
    except OSError:
        return False


def stale_tmp(directory: Path, name: str) -> bool:
    """Whether temp file ``name`` (``.<name>.<pid>.<tid>.tmp``) was left by a writer that is gone."""
    if not (name.startswith(".") and name.endswith(".tmp")) or name.startswith(COPY_PREFIX):
        return False
    parts = name.split(".")
    if len(parts) >= 4 and parts[-3].isdigit() and _pid_gone(int(parts[-3])):
        return True
    return _older_than_bound(directory / name)


def _lock_free(staging: Path) -> bool | None:
    """Whether nobody holds the staging directory's lock (None: it has no lock file)."""
    try:
        fd = os.open(staging / LOCK_NAME, os.O_RDONLY | NOFOLLOW)
    except FileNotFoundError:
        return None
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    finally:
        os.close(fd)  # the lock (if taken) goes with it: its owner is dead and never comes back
    return True


def clean_staging(path: Path) -> None:
    """Remove a staging directory in ``base_dir`` whose copy died (never a live one)."""
    name = path.name
    pid_text = name[len(COPY_PREFIX) :].split("-", 1)[0]
    if is_link(path):
        with contextlib.suppress(OSError):
            os.unlink(path)
        return
    free = _lock_free(path)
    gone = pid_text.isdigit() and _pid_gone(int(pid_text))
    if (free is not False and gone) or (free is not False and _older_than_bound(path)):
        remove_tree(path)


# -- copy -------------------------------------------------------------------------------------
class _Staging:
    """A staging directory with its ``flock`` held (see the module docstring)."""

    def __init__(self, cp: FileCheckpointer, parent: Path) -> None:
        from tulip_nb.memory.backends._file_threads import lock_fd

        while True:
            self.path = parent / f"{COPY_PREFIX}{os.getpid()}-{uuid.uuid4().hex}.tmp"
            try:
                os.mkdir(self.path)
            except OSError as e:
                raise unavailable(e, self.path) from e
            fd = lock_fd(cp, self.path, create=False)
            if fd is not None:
                self.fd: int | None = fd
                return

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def copy_thread(cp: FileCheckpointer, source: str, dest: str) -> bool:
    """Copy every checkpoint of ``source`` into the new thread ``dest``, whole or not at all."""
    src_dir, dst_dir = cp.thread_dir(source), cp.thread_dir(dest)
    infos = cp._infos(source, src_dir)
    if not infos:
        raise CheckpointNotFound("source thread has no checkpoints", thread_id=source)
    if not os.path.lexists(dst_dir):
        cp._base.mkdir(parents=True, exist_ok=True)
        staging = _Staging(cp, cp._base)
        try:
            _build(cp, staging.path, infos, source, src_dir, dest, dst_dir, {})
            if _publish_dir(cp, staging.path, dst_dir):
                return True
        finally:
            staging.release()
            if staging.path.exists():
                remove_tree(staging.path)
            with cp._heads_lock:
                cp._heads.pop(staging.path, None)
    with cp._locked(dst_dir, create=True):
        have = cp._infos(dest, dst_dir)  # its scan first settles what a crashed copy left
        if have:
            if _is_copy(have, infos, source):
                return True  # a re-run of a copy that committed
            raise CheckpointConflict("destination thread already has checkpoints; delete it first", thread_id=dest)
        taken = set(cp._scan(dst_dir))
        shared = src_dir == dst_dir  # ids that sanitise alike: every checkpoint gets a fresh id
        renamed = {
            i.checkpoint_id: new_checkpoint_id() for _, i in infos if shared or mirror_name(i.checkpoint_id) in taken
        }
        staging = _Staging(cp, dst_dir)
        committed = False
        try:
            _build(cp, staging.path, infos, source, src_dir, dest, dst_dir, renamed)
            cp._write_atomic(staging.path / THREAD_FILE, dest.encode())  # the commit point
            committed = True
            _move_in(cp, dst_dir, staging.path)
        finally:
            staging.release()
            if not committed:
                remove_tree(staging.path)
                with cp._heads_lock:
                    cp._heads.pop(staging.path, None)
    return True


def _is_copy(
    have: list[tuple[str | None, CheckpointInfo]], infos: list[tuple[str | None, CheckpointInfo]], source: str
) -> bool:
    """Whether the destination's checkpoints are exactly a copy of ``source``'s (a committed re-run)."""
    wanted = sorted(i.checkpoint_id for _, i in infos)
    got = []
    for _, info in have:
        origin = info.metadata.get("copied_from")
        if not isinstance(origin, dict) or origin.get("thread_id") != source:
            return False
        got.append(origin.get("checkpoint_id"))
    return sorted(map(str, got)) == wanted


def _build(
    cp: FileCheckpointer,
    out: Path,
    infos: list[tuple[str | None, CheckpointInfo]],
    source: str,
    src_dir: Path,
    dest: str,
    dst_dir: Path,
    renamed: dict[str, str],
) -> None:
    """Write the copy into the staging directory ``out`` under the names it has in ``dst_dir``."""
    delta = cp.layout == "delta"
    if delta and any(n is None for n, _ in infos):  # before the copy can be seen: its log depends on the source's
        cp._logs.add_dependent(src_dir, cp._logs.ref(dst_dir, dest))
    log: DeltaLog | None = None
    if delta:
        log = DeltaLog(out / log_name(dst_dir, dest), fsync=cp.fsync, thread_id=dest, resolver=cp._logs.resolve)
    try:
        for name, info in reversed(infos):  # oldest first
            cid = renamed.get(info.checkpoint_id, info.checkpoint_id)
            meta = dict(info.metadata)
            parent = meta.get(PARENT_KEY)
            if isinstance(parent, str) and parent in renamed:
                meta[PARENT_KEY] = renamed[parent]
            meta["copied_from"] = {"thread_id": source, "checkpoint_id": info.checkpoint_id}
            if name is None:
                _copy_logged(cp, src_dir, source, out, dest, log, info, cid, meta)
            else:
                _copy_envelope(cp, src_dir / name, source, out, dest, log, info, cid, meta)
        if log is not None:
            want = next((h for h in reversed(log.headers()) if is_turn_end(h.metadata)), None)
            if want is not None:  # the tulip envelope of the copy's latest turn end
                cp._write_envelope(out, load_from(log, dest, want.checkpoint_id), mirror_of=log.path.name)
    finally:
        if log is not None:
            log.close()


def _copy_logged(
    cp: FileCheckpointer,
    src_dir: Path,
    source: str,
    out: Path,
    dest: str,
    log: DeltaLog | None,
    info: CheckpointInfo,
    cid: str,
    meta: dict[str, Any],
) -> None:
    """One checkpoint of the source's log: a fork record (delta layout) or an envelope."""
    parent = meta.get(PARENT_KEY)
    src_log = cp._logs.get(src_dir, source)
    if src_log is None:
        raise CheckpointNotFound("source log vanished", thread_id=source)
    if log is not None:
        base = ForeignBase(cp._logs.ref(src_dir, source), info.checkpoint_id)
        extra = src_log.header(info.checkpoint_id).extra  # the source's envelope keys go with it
        log.append_fork(cid, info.created_at, base, meta, parent if isinstance(parent, str) else None, extra=extra)
        return
    ck = load_from(src_log, source, info.checkpoint_id)
    cp._write_envelope(out, Checkpoint(cid, dest, info.created_at, ck.state, meta, ck.extra))


def _copy_envelope(
    cp: FileCheckpointer,
    path: Path,
    source: str,
    out: Path,
    dest: str,
    log: DeltaLog | None,
    info: CheckpointInfo,
    cid: str,
    meta: dict[str, Any],
) -> None:
    if log is not None:
        ck = cp._read_checkpoint(path, source)
        cp._logs.append(log, Checkpoint(cid, dest, ck.created_at, ck.state, meta, ck.extra))
        return
    try:
        raw = orjson.loads(read_nofollow(path))
    except (OSError, orjson.JSONDecodeError) as e:
        raise CheckpointCorrupt(f"cannot copy: {e}", thread_id=source, path=str(path)) from e
    raw.update(checkpoint_id=cid, thread_id=dest, metadata=meta)
    ordered = {"checkpoint_id": cid, "thread_id": dest, "created_at": raw["created_at"], "metadata": meta}
    ordered.update((k, v) for k, v in raw.items() if k not in ordered)
    target = out / mirror_name(cid)
    cp._write_atomic(target, orjson.dumps(ordered, option=orjson.OPT_NON_STR_KEYS))
    cp._record_write(target, CheckpointInfo(cid, dest, info.created_at, meta))


def _publish_dir(cp: FileCheckpointer, staging: Path, dst_dir: Path) -> bool:
    """Rename the staging directory to the thread's (the commit); False when that exists by now."""
    try:
        os.rename(staging, dst_dir)
    except OSError as e:
        if e.errno in (errno.EEXIST, errno.ENOTEMPTY):
            return False
        raise unavailable(e, dst_dir) from e
    if cp.fsync:
        fsync_dir(cp._base)
    with cp._heads_lock:
        heads = cp._heads.pop(staging, {})
        cp._heads[dst_dir] = heads  # same files, same inodes
    for name in os.listdir(dst_dir):
        if name.startswith(LOG_NAME):
            cp._logs.forget(dst_dir / name)
    return True


def _movable(name: str) -> bool:
    if name.endswith(".tmp"):
        return False
    return name.startswith(LOG_NAME) or (name.endswith(".json") and not name.startswith("."))


def _move_in(cp: FileCheckpointer, directory: Path, staging: Path) -> None:
    """Move a committed staging directory's files into ``directory`` (the log first), then remove it."""
    try:
        names = sorted((n for n in os.listdir(staging) if _movable(n)), key=lambda n: (not n.startswith(LOG_NAME), n))
        for name in names:
            if name.startswith(LOG_NAME):
                cp._logs.forget(directory / name)
            os.rename(staging / name, directory / name)
        with contextlib.suppress(OSError):
            append_index(directory, [read_nofollow(staging / INDEX_NAME)])  # stamps survive the rename
        if cp.fsync:
            fsync_dir(directory)
    except OSError as e:
        raise unavailable(e, directory) from e
    with cp._heads_lock:
        moved = cp._heads.pop(staging, {})
        if directory in cp._heads:
            cp._heads[directory].update((n, v) for n, v in moved.items() if n in names)
    remove_tree(staging)


def settle_copy(cp: FileCheckpointer, directory: Path, name: str) -> None:
    """Finish (committed) or remove (not) a staging directory a crashed copy left in ``directory``."""
    staging = directory / name
    with cp._locked(directory, create=False):
        if is_link(staging):
            with contextlib.suppress(OSError):
                os.unlink(staging)
            return
        if not os.path.isdir(staging) or _lock_free(staging) is False:
            return  # gone already, or its copy is running (in this thread, further up the stack)
        if os.path.lexists(staging / THREAD_FILE):
            _move_in(cp, directory, staging)
        else:
            remove_tree(staging)
            with cp._heads_lock:
                cp._heads.pop(staging, None)


# -- drop -------------------------------------------------------------------------------------
@contextlib.contextmanager
def _active(tomb: Path) -> Iterator[None]:
    with _ACTIVE_LOCK:
        _ACTIVE.add(tomb)
    try:
        yield
    finally:
        with _ACTIVE_LOCK:
            _ACTIVE.discard(tomb)


def _is_active(tomb: Path) -> bool:
    with _ACTIVE_LOCK:
        return tomb in _ACTIVE


def drop(cp: FileCheckpointer, directory: Path, thread_id: str, files: dict[str, str], logged: set[str]) -> int:
    """Drop the thread's envelope ``files`` (name -> checkpoint id) and ``logged`` ids, atomically.

    Called under the directory's lock. Returns how many checkpoints went.
    """
    steps = len(files) + (1 if logged else 0)
    mirror_hit = bool(logged) and any(c in logged for c in cp._mirrors(directory, thread_id).values())
    if steps <= 1 and not mirror_hit:
        return _finish(cp, directory, thread_id, files, logged, None)
    tomb = directory / f"{TRASH_PREFIX}{uuid.uuid4().hex}"
    with _active(tomb):
        try:
            os.mkdir(tomb)
        except OSError as e:
            raise unavailable(e, tomb) from e
        record = {"thread_id": thread_id, "files": files, "logged": sorted(logged)}
        cp._write_atomic(tomb / DROP_FILE, orjson.dumps(record))  # the commit point
        removed = _finish(cp, directory, thread_id, files, logged, tomb)
        remove_tree(tomb)
    return removed


def _finish(
    cp: FileCheckpointer, directory: Path, thread_id: str, files: dict[str, str], logged: set[str], tomb: Path | None
) -> int:
    """The steps of a drop; each is idempotent, so a scan can run them again after a crash."""
    removed = 0
    log = cp._logs.get(directory, thread_id) if logged else None
    if log is not None:
        live = {h.checkpoint_id for h in log.headers()}
        going = live & logged
        if going:
            whole = going == live
            if whole:  # the log goes: the forks built on it must stand alone first
                cp._logs.release_dependents(directory, lambda d: cp._locked(d, create=False), going=log.path)
            cp._sync_mirror(directory, thread_id, dropping=going)
            if whole:
                for name in cp._mirrors(directory, thread_id):
                    cp._unlink(directory / name)
                cp._logs.forget(log.path)
                with contextlib.suppress(FileNotFoundError):
                    log.path.unlink()
            else:
                log.prune(going)
                cp._logs.maybe_compact(directory, log)
            removed += len(going)
    for name, cid in files.items():
        path = directory / name
        if tomb is None:
            removed += cp._unlink(path)
            continue
        entry = read_entry(path)
        if not isinstance(entry, CheckpointInfo) or entry.thread_id != thread_id or entry.checkpoint_id != cid:
            continue  # moved already (or not this checkpoint's file)
        try:
            os.rename(path, tomb / name)
        except FileNotFoundError:
            continue
        except OSError as e:
            raise unavailable(e, path) from e
        with cp._heads_lock:
            cp._heads.get(directory, {}).pop(name, None)
        removed += 1
    if tomb is not None and files and cp.fsync:
        fsync_dir(directory)
    return removed


def settle_drop(cp: FileCheckpointer, directory: Path, tomb: Path) -> bool:
    """Finish a drop a crash interrupted (the caller holds the lock); False: ``tomb`` is no drop's."""
    if _is_active(tomb):
        return True  # this thread is finishing it, further up the stack
    try:
        record = orjson.loads(read_nofollow(tomb / DROP_FILE))
    except FileNotFoundError:
        return False
    except (OSError, orjson.JSONDecodeError):
        record = None  # a torn record is not committed: _write_atomic renames a whole one into place
    if isinstance(record, dict) and isinstance(record.get("thread_id"), str):
        files = {str(k): str(v) for k, v in dict(record.get("files") or {}).items()}
        logged = {str(c) for c in record.get("logged") or []}
        with _active(tomb):
            _finish(cp, directory, record["thread_id"], files, logged, tomb)
    remove_tree(tomb)
    return True
