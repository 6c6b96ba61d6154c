"""FileCheckpointer: one directory per thread, one JSON envelope per checkpoint (tulip's layout).

``<base_dir>/<safe(thread_id)>/<safe(checkpoint_id)>.json``, where ``safe`` keeps letters, digits,
``-`` and ``_`` and turns every other character into ``_`` (so ``user/42:chat #1`` lives in
``user_42_chat__1/``). Each file is written to a temp file, fsynced and renamed into place, so a
crash never leaves a half-written checkpoint under a real name. The latest checkpoint is the one
with the newest ``created_at``; there is no pointer file to go stale.

Better than tulip, while staying readable by it:

- two thread ids that sanitise to the same directory (``a#1`` and ``a_1``) never mix: each
  envelope's ``thread_id`` is checked;
- a thread id whose directory name would exceed the file system's limit gets a shortened name
  with a hash suffix instead of failing;
- a corrupt or truncated file raises :class:`CheckpointCorrupt` naming the file when asked for
  explicitly, and is skipped with a warning (never chosen) when finding the latest;
- ``expected_parent=`` is compare-and-swap across processes (an ``flock`` on ``<dir>/.lock``);
- finding the latest reads only the first bytes of files it has not seen before (or that another
  process replaced since), not every file; every write records the file's header in memory and
  in the persistent index, each checked against the file itself (see :mod:`._file_index`).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import threading
import warnings
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson

from tulip_nb.core.errors import CheckpointConflict, CheckpointCorrupt, CheckpointNotFound, InvalidThreadId
from tulip_nb.core.state import AgentState, MessageBlobCache
from tulip_nb.memory._envelope import decode_envelope, encode_envelope_parts
from tulip_nb.memory.backends._base import InTreeCheckpointer, newest_first, prepare_save_after
from tulip_nb.memory.backends._file_index import (
    INDEX_NAME,
    LOCK_NAME,
    Bad,
    Entry,
    append_index,
    index_line,
    inodes_in,
    read_entry,
    read_index,
    safe_name,
    stamp_of,
    unavailable,
    write_all,
)
from tulip_nb.memory.checkpointer import (
    Capabilities,
    Checkpoint,
    CheckpointInfo,
    new_checkpoint_id,
    validate_checkpoint,
    validate_checkpoint_id,
    validate_thread_id,
)
from tulip_nb.memory.retention import relink

__all__ = ["FileCheckpointer", "safe_name"]


class FileCheckpointer(InTreeCheckpointer):
    """Checkpoints as JSON files on a local disk (see the module docstring).

    >>> import asyncio, tempfile
    >>> from tulip_nb.core import AgentState, Message
    >>> cp = FileCheckpointer(base_dir=tempfile.mkdtemp())
    >>> cid = asyncio.run(cp.save(AgentState(messages=[Message.user("hi")]), "user/42"))
    >>> asyncio.run(cp.list_threads())
    ['user/42']
    """

    def __init__(
        self, base_dir: str | os.PathLike[str] = ".tulip_checkpoints", *, fsync: bool = True, sign: bool = True
    ) -> None:
        self.base_dir = Path(base_dir)
        self.sign = sign
        self.fsync = fsync
        # directory -> file name -> (inode of the file, its header or why it is unreadable)
        self._heads: dict[Path, dict[str, tuple[int, Entry]]] = {}
        self._heads_lock = threading.Lock()
        self._warned: set[tuple[Path, str]] = set()
        self._blobs = MessageBlobCache()

    def __repr__(self) -> str:
        return f"FileCheckpointer(base_dir={str(self.base_dir)!r})"

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(
            search=True,
            metadata_query=True,
            vacuum=True,
            branching=True,
            list_threads=True,
            list_with_metadata=True,
            persistent_checkpoint_ids=True,
        )

    # -- paths --------------------------------------------------------------------------------
    def thread_dir(self, thread_id: str) -> Path:
        """The directory that holds ``thread_id`` (shared with ids that sanitise alike)."""
        validate_thread_id(thread_id)
        name = safe_name(thread_id)
        base = self.base_dir.resolve()
        path = (base / name).resolve()
        if not name or path.parent != base:
            raise InvalidThreadId("thread_id resolves outside base_dir", thread_id=thread_id, path=str(path))
        return path

    def checkpoint_path(self, thread_id: str, checkpoint_id: str) -> Path:
        validate_checkpoint_id(checkpoint_id, thread_id)
        return self.thread_dir(thread_id) / (safe_name(checkpoint_id) + ".json")

    # -- low-level I/O (sync; run in a worker thread) -----------------------------------------
    @contextlib.contextmanager
    def _locked(self, directory: Path, *, create: bool) -> Iterator[None]:
        try:
            if create:
                directory.mkdir(parents=True, exist_ok=True)
            fd = os.open(directory / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
        except FileNotFoundError:
            yield  # nothing to lock: the directory does not exist
            return
        except OSError as e:
            raise unavailable(e, directory) from e
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing releases the flock

    def _scan(self, directory: Path) -> dict[str, Entry]:
        """Headers of every checkpoint file in ``directory``, reading only new or replaced files."""
        try:
            inodes = inodes_in(directory)
        except FileNotFoundError:
            with self._heads_lock:
                self._heads.pop(directory, None)
            return {}
        with self._heads_lock:
            first_look = directory not in self._heads
        if first_look:  # a new process: start from the persistent index instead of every head
            indexed = read_index(directory, inodes)
            with self._heads_lock:
                self._heads.setdefault(directory, {}).update(indexed)
        with self._heads_lock:
            known = self._heads.setdefault(directory, {})
            stale = [n for n, ino in inodes.items() if n not in known or known[n][0] != ino]
        fresh: dict[str, tuple[int, Entry]] = {}
        for name in stale:
            entry = read_entry(directory / name)
            if entry is not None:
                fresh[name] = (inodes[name], entry)
        with self._heads_lock:
            known = self._heads.setdefault(directory, {})
            known.update(fresh)
            for gone in [n for n in known if n not in inodes]:
                del known[gone]
            return {n: e for n, (_, e) in known.items()}

    def _infos(self, thread_id: str, directory: Path) -> list[tuple[str, CheckpointInfo]]:
        """(file name, info) of the thread's readable checkpoints, newest first."""
        out = []
        for name, entry in self._scan(directory).items():
            if isinstance(entry, Bad):
                self._warn_bad(directory / name, entry.reason)
            elif entry.thread_id == thread_id:
                out.append((name, entry))
        out.sort(key=lambda p: (p[1].created_at, p[0]), reverse=True)
        return out

    def _warn_bad(self, path: Path, reason: str) -> None:
        key = (path, reason)
        if key not in self._warned:
            self._warned.add(key)
            warnings.warn(f"skipping unreadable checkpoint file {path}: {reason}", RuntimeWarning, stacklevel=4)

    def _mark_bad(self, path: Path, reason: str) -> None:
        stamp = stamp_of(path)
        if stamp is not None:
            with self._heads_lock:
                self._heads.setdefault(path.parent, {})[path.name] = (stamp[0], Bad(reason))
        self._warn_bad(path, reason)

    def _read_checkpoint(self, path: Path, thread_id: str) -> Checkpoint:
        try:
            data = path.read_bytes()
        except FileNotFoundError as e:
            raise CheckpointNotFound("checkpoint file is gone", thread_id=thread_id, path=str(path)) from e
        except OSError as e:
            raise unavailable(e, path) from e
        return decode_envelope(data, where=str(path), thread_id=thread_id)

    def _write_atomic(self, path: Path, data: bytes | list[bytes | bytearray]) -> None:
        """Write ``data`` (bytes, or chunks for one ``writev``) to a temp file, fsync, rename."""
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        chunks: list[bytes | bytearray] = [data] if isinstance(data, bytes) else data
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                write_all(fd, chunks)
                if self.fsync:
                    os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, path)
        except OSError as e:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise unavailable(e, path) from e

    def _record_write(self, path: Path, info: CheckpointInfo) -> None:
        """After writing ``path`` (under its directory's lock): keep every index of it.

        The one place a write reaches the in-process heads (keyed by the file's inode) and the
        persistent index (keyed by its stamp), so neither this process after another one replaced
        the file nor a fresh process ever trusts a header that is not the file's.
        """
        stamp = stamp_of(path)
        if stamp is None:
            return  # deleted already (a concurrent vacuum): the listing is the truth
        with self._heads_lock:
            self._heads.setdefault(path.parent, {})[path.name] = (stamp[0], info)
        append_index(path.parent, [index_line(path.name, stamp, info)])

    # -- sync implementations -----------------------------------------------------------------
    def _save_sync(
        self,
        state: AgentState,
        thread_id: str,
        checkpoint_id: str | None,
        metadata: dict[str, Any] | None,
        expected_parent: str | None,
    ) -> str:
        cid = validate_checkpoint_id(checkpoint_id, thread_id) if checkpoint_id else new_checkpoint_id()
        directory = self.thread_dir(thread_id)
        path = directory / (safe_name(cid) + ".json")
        with self._locked(directory, create=True):
            infos = self._infos(thread_id, directory)
            self._check_name_free(path, thread_id, cid)
            plan = prepare_save_after(
                infos[0][1] if infos else None, thread_id, state, metadata, expected_parent, self._blobs, sign=self.sign
            )
            now, meta = plan.created_at, plan.metadata
            self._write_atomic(path, encode_envelope_parts(cid, thread_id, now, state, meta, cache=self._blobs))
            self._record_write(path, CheckpointInfo(cid, thread_id, now, meta))
        return cid

    def _put_sync(self, ckpt: Checkpoint) -> None:
        cid, thread_id = ckpt.checkpoint_id, ckpt.thread_id
        directory = self.thread_dir(thread_id)
        path = directory / (safe_name(cid) + ".json")
        with self._locked(directory, create=True):
            self._scan(directory)
            self._put_locked(path, ckpt)

    def _put_locked(self, path: Path, ckpt: Checkpoint) -> None:
        """Write ``ckpt`` verbatim to ``path`` (its directory's lock is held)."""
        cid, thread_id = ckpt.checkpoint_id, ckpt.thread_id
        self._check_name_free(path, thread_id, cid)
        meta = dict(ckpt.metadata)
        parts = encode_envelope_parts(cid, thread_id, ckpt.created_at, ckpt.state, meta, ckpt.extra or None)
        self._write_atomic(path, parts)
        self._record_write(path, CheckpointInfo(cid, thread_id, ckpt.created_at, meta))

    def _check_name_free(self, path: Path, thread_id: str, cid: str) -> None:
        """A file name shared by two threads (ids that sanitise alike) is never overwritten."""
        existing = self._scan_entry(path.parent, path.name)
        if isinstance(existing, CheckpointInfo) and existing.thread_id != thread_id:
            raise CheckpointConflict(
                "checkpoint id already used by another thread in the same directory",
                thread_id=thread_id,
                checkpoint_id=cid,
                path=str(path),
            )

    def _scan_entry(self, directory: Path, name: str) -> Entry | None:
        with self._heads_lock:
            known = self._heads.get(directory, {}).get(name)
        return known[1] if known else None

    def _load_sync(self, thread_id: str, checkpoint_id: str | None) -> Checkpoint | None:
        directory = self.thread_dir(thread_id)
        if checkpoint_id is not None:
            return self._load_by_id(directory, thread_id, validate_checkpoint_id(checkpoint_id, thread_id))
        for name, _info in self._infos(thread_id, directory):
            path = directory / name
            try:
                ckpt = self._read_checkpoint(path, thread_id)
            except CheckpointCorrupt as e:
                self._mark_bad(path, e.message)
                continue
            except CheckpointNotFound:
                continue  # deleted under us; the next newest is the latest now
            if ckpt.thread_id == thread_id:
                return ckpt
        return None

    def _load_by_id(self, directory: Path, thread_id: str, checkpoint_id: str) -> Checkpoint:
        """The checkpoint's own file, read directly: no directory listing (O(1) in thread length).

        The envelope names its thread and checkpoint, so a file of another thread sharing the
        directory (ids that sanitise alike) or of an id that sanitises alike is not this one.
        """
        path = directory / (safe_name(checkpoint_id) + ".json")
        try:
            ckpt = self._read_checkpoint(path, thread_id)
        except CheckpointNotFound:
            raise CheckpointNotFound("no such checkpoint", thread_id=thread_id, checkpoint_id=checkpoint_id) from None
        except CheckpointCorrupt as e:
            raise CheckpointCorrupt(e.message, thread_id=thread_id, checkpoint_id=checkpoint_id, path=str(path)) from e
        if ckpt.thread_id != thread_id or ckpt.checkpoint_id != checkpoint_id:
            raise CheckpointNotFound("no such checkpoint", thread_id=thread_id, checkpoint_id=checkpoint_id)
        return ckpt

    def _delete_sync(self, thread_id: str, checkpoint_ids: set[str] | None) -> int:
        """Delete the thread's checkpoints in ``checkpoint_ids`` (all for None); how many went."""
        directory = self.thread_dir(thread_id)
        if not directory.exists():
            return 0
        removed = 0
        with self._locked(directory, create=False):
            for name, info in self._infos(thread_id, directory):
                if checkpoint_ids is None or info.checkpoint_id in checkpoint_ids:
                    try:
                        (directory / name).unlink()
                        removed += 1
                    except FileNotFoundError:
                        pass
                    except OSError as e:
                        raise unavailable(e, directory / name) from e
            remaining = self._scan(directory)
        if not remaining:
            self._remove_dir(directory)
        return removed

    def _remove_dir(self, directory: Path) -> None:
        try:
            leftovers = [n for n in os.listdir(directory) if n not in (LOCK_NAME, INDEX_NAME)]
            if not leftovers:
                (directory / INDEX_NAME).unlink(missing_ok=True)
                (directory / LOCK_NAME).unlink(missing_ok=True)
                directory.rmdir()
        except OSError:
            pass  # another writer got in first: the directory stays
        with self._heads_lock:
            if not directory.exists():
                self._heads.pop(directory, None)

    def _thread_dirs(self) -> list[Path]:
        try:
            return sorted(p for p in self.base_dir.resolve().iterdir() if p.is_dir())
        except FileNotFoundError:
            return []
        except OSError as e:
            raise unavailable(e, self.base_dir) from e

    def _all_infos(self) -> list[CheckpointInfo]:
        out = []
        for directory in self._thread_dirs():
            for name, entry in self._scan(directory).items():
                if isinstance(entry, Bad):
                    self._warn_bad(directory / name, entry.reason)
                else:
                    out.append(entry)
        return out

    def _copy_sync(self, source: str, dest: str) -> bool:
        src_dir = self.thread_dir(source)
        dst_dir = self.thread_dir(dest)
        infos = self._infos(source, src_dir)
        if not infos:
            raise CheckpointNotFound("source thread has no checkpoints", thread_id=source)
        with self._locked(dst_dir, create=True):
            if self._infos(dest, dst_dir):
                raise CheckpointConflict("destination thread already has checkpoints; delete it first", thread_id=dest)
            taken = set(self._scan(dst_dir))
            renamed: dict[str, str] = {}
            plan = []
            for name, info in infos:
                cid = info.checkpoint_id
                if safe_name(cid) + ".json" in taken:  # shared directory: mint a fresh id
                    renamed[cid] = new_checkpoint_id()
                plan.append((name, info))
            for name, info in plan:
                try:
                    raw = orjson.loads((src_dir / name).read_bytes())
                except (OSError, orjson.JSONDecodeError) as e:
                    raise CheckpointCorrupt(f"cannot copy: {e}", thread_id=source, path=str(src_dir / name)) from e
                cid = renamed.get(info.checkpoint_id, info.checkpoint_id)
                meta = dict(raw.get("metadata") or {})
                parent = meta.get("parent_checkpoint_id")
                if isinstance(parent, str) and parent in renamed:
                    meta["parent_checkpoint_id"] = renamed[parent]
                meta["copied_from"] = {"thread_id": source, "checkpoint_id": info.checkpoint_id}
                raw.update(checkpoint_id=cid, thread_id=dest, metadata=meta)
                ordered = {"checkpoint_id": cid, "thread_id": dest, "created_at": raw["created_at"], "metadata": meta}
                ordered.update((k, v) for k, v in raw.items() if k not in ordered)
                path = dst_dir / (safe_name(cid) + ".json")
                self._write_atomic(path, orjson.dumps(ordered, option=orjson.OPT_NON_STR_KEYS))
                self._record_write(path, CheckpointInfo(cid, dest, info.created_at, meta))
        return True

    def _vacuum_sync(self, older_than_days: float) -> int:
        cutoff = datetime.now(UTC) - timedelta(days=older_than_days)
        removed = 0
        for directory in self._thread_dirs():
            with self._locked(directory, create=False):
                entries = self._scan(directory)
                old = {n: e for n, e in entries.items() if isinstance(e, CheckpointInfo) and e.created_at < cutoff}
                self._relink_locked(directory, entries, {e.checkpoint_id for e in old.values()})
                for name in old:
                    with contextlib.suppress(FileNotFoundError):
                        (directory / name).unlink()
                        removed += 1
                remaining = self._scan(directory)
            if not remaining:
                self._remove_dir(directory)
        return removed

    def _relink_locked(self, directory: Path, entries: dict[str, Entry], dropped: set[str]) -> None:
        """Before ``dropped`` go: re-link each survivor whose parent is dropped (see retention)."""
        per_thread: dict[str, list[CheckpointInfo]] = {}
        for entry in entries.values():
            if isinstance(entry, CheckpointInfo):
                per_thread.setdefault(entry.thread_id, []).append(entry)
        for thread_id, infos in per_thread.items():
            for cid, meta in relink(infos, dropped).items():
                ckpt = self._load_by_id(directory, thread_id, cid)
                path = directory / (safe_name(cid) + ".json")
                self._put_locked(path, Checkpoint(cid, thread_id, ckpt.created_at, ckpt.state, meta, ckpt.extra))

    # -- async contract -----------------------------------------------------------------------
    async def save(
        self,
        state: AgentState,
        thread_id: str,
        checkpoint_id: str | None = None,
        metadata: dict[str, Any] | None = None,
        *,
        expected_parent: str | None = None,
    ) -> str:
        return await asyncio.to_thread(self._save_sync, state, thread_id, checkpoint_id, metadata, expected_parent)

    async def put_checkpoint(self, checkpoint: Checkpoint) -> None:
        await asyncio.to_thread(self._put_sync, validate_checkpoint(checkpoint))

    async def load_checkpoint(self, thread_id: str, checkpoint_id: str | None = None) -> Checkpoint | None:
        return await asyncio.to_thread(self._load_sync, thread_id, checkpoint_id)

    async def list_checkpoint_infos(self, thread_id: str, limit: int | None = 10) -> list[CheckpointInfo]:
        directory = self.thread_dir(thread_id)
        infos = await asyncio.to_thread(self._infos, thread_id, directory)
        return [info for _, info in (infos if limit is None else infos[:limit])]

    async def delete(self, thread_id: str, checkpoint_id: str | None = None) -> bool:
        ids = None if checkpoint_id is None else {validate_checkpoint_id(checkpoint_id, thread_id)}
        return bool(await asyncio.to_thread(self._delete_sync, thread_id, ids))

    async def _delete_checkpoints(self, thread_id: str, checkpoint_ids: set[str]) -> int:
        return await asyncio.to_thread(self._delete_sync, thread_id, set(checkpoint_ids))

    # -- capabilities (the scans are derived in InTreeCheckpointer) ---------------------------
    async def _scan_infos(self) -> dict[str, list[CheckpointInfo]]:
        per: dict[str, list[CheckpointInfo]] = {}
        for info in await asyncio.to_thread(self._all_infos):
            per.setdefault(info.thread_id, []).append(info)
        return {t: newest_first(infos) for t, infos in per.items()}

    async def copy_thread(self, source_thread_id: str, dest_thread_id: str) -> bool:
        return await asyncio.to_thread(self._copy_sync, source_thread_id, dest_thread_id)

    async def vacuum(self, older_than_days: float = 30) -> int:
        return await asyncio.to_thread(self._vacuum_sync, older_than_days)
