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
- finding the latest reads only the first bytes of files it has not seen before, not every file.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import hashlib
import os
import threading
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from tulip_nb.core._time import iso_offset, parse_datetime
from tulip_nb.core.errors import (
    BackendUnavailable,
    CheckpointConflict,
    CheckpointCorrupt,
    CheckpointNotFound,
    InvalidThreadId,
)
from tulip_nb.core.state import AgentState, MessageBlobCache
from tulip_nb.memory._envelope import (
    HEAD_BYTES,
    decode_envelope,
    encode_envelope_parts,
    info_from_head,
    info_row,
    matches_pattern,
    metadata_matches,
    read_head,
    search_hit,
    search_state,
)
from tulip_nb.memory.checkpointer import (
    BaseCheckpointer,
    Capabilities,
    Checkpoint,
    CheckpointInfo,
    check_expected_parent,
    new_checkpoint_id,
    next_created_at,
    save_metadata,
    validate_checkpoint,
    validate_checkpoint_id,
    validate_thread_id,
)

__all__ = ["FileCheckpointer", "safe_name"]

_MAX_NAME_BYTES = 200  # below NAME_MAX (255) with room for ".json" and temp suffixes
_LOCK_NAME = ".lock"
_INDEX_NAME = ".tulip_nb_index"  # not *.json: tulip never looks at it


def safe_name(value: str) -> str:
    """tulip's file-name sanitiser, plus a hash suffix for names too long for the file system."""
    name = "".join(c if c.isalnum() or c in "-_" else "_" for c in value)
    if len(name.encode()) <= _MAX_NAME_BYTES:
        return name
    digest = hashlib.sha256(value.encode()).hexdigest()[:16]
    short = name.encode()[: _MAX_NAME_BYTES - 17].decode(errors="ignore")
    return f"{short}_{digest}"


@dataclass
class _Bad:
    reason: str


_Entry = CheckpointInfo | _Bad


class FileCheckpointer(BaseCheckpointer):
    """Checkpoints as JSON files on a local disk (see the module docstring).

    >>> import asyncio, tempfile
    >>> from tulip_nb.core import AgentState, Message
    >>> cp = FileCheckpointer(base_dir=tempfile.mkdtemp())
    >>> cid = asyncio.run(cp.save(AgentState(messages=[Message.user("hi")]), "user/42"))
    >>> asyncio.run(cp.list_threads())
    ['user/42']
    """

    def __init__(self, base_dir: str | os.PathLike[str] = ".tulip_checkpoints", *, fsync: bool = True) -> None:
        self.base_dir = Path(base_dir)
        self.fsync = fsync
        # directory -> file name -> parsed header (or why it is unreadable)
        self._heads: dict[Path, dict[str, _Entry]] = {}
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
            fd = os.open(directory / _LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
        except FileNotFoundError:
            yield  # nothing to lock: the directory does not exist
            return
        except OSError as e:
            raise _unavailable(e, directory) from e
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing releases the flock

    def _scan(self, directory: Path) -> dict[str, _Entry]:
        """Headers of every checkpoint file in ``directory``, reading only files not seen before."""
        try:
            names = [n for n in os.listdir(directory) if n.endswith(".json") and not n.startswith(".")]
        except FileNotFoundError:
            with self._heads_lock:
                self._heads.pop(directory, None)
            return {}
        except OSError as e:
            raise _unavailable(e, directory) from e
        with self._heads_lock:
            first_look = directory not in self._heads
        if first_look:  # a new process: start from the persistent index instead of every head
            indexed = self._read_index(directory, set(names))
            with self._heads_lock:
                self._heads.setdefault(directory, {}).update(indexed)
        with self._heads_lock:
            known = self._heads.setdefault(directory, {})
            missing = [n for n in names if n not in known]
        fresh: dict[str, _Entry] = {}
        for name in missing:
            entry = self._read_entry(directory / name)
            if entry is not None:
                fresh[name] = entry
        with self._heads_lock:
            known = self._heads.setdefault(directory, {})
            known.update(fresh)
            alive = set(names)
            for gone in [n for n in known if n not in alive]:
                del known[gone]
            return dict(known)

    def _read_index(self, directory: Path, alive: set[str]) -> dict[str, _Entry]:
        """Headers recorded in ``<dir>/.tulip_nb_index`` for files that still exist.

        The index is an append-only cache (one JSON line per save); the directory listing stays the
        truth: lines for deleted files are ignored, files written by others (tulip) are not in it
        and get their heads read. A torn last line (a crash mid-append) is skipped.
        """
        try:
            data = (directory / _INDEX_NAME).read_bytes()
        except OSError:
            return {}
        out: dict[str, _Entry] = {}
        lines = data.splitlines()
        for line in lines:
            try:
                row = orjson.loads(line)
                name = row["f"]
                if name in alive:
                    out[name] = CheckpointInfo(row["c"], row["t"], parse_datetime(row["a"]), row["m"])
            except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
                continue
        if len(lines) > 2 * len(out) + 64:  # mostly deleted checkpoints: rewrite it compactly
            self._rewrite_index(directory, out)
        return out

    def _index_line(self, name: str, info: CheckpointInfo) -> bytes:
        row = {"f": name, "c": info.checkpoint_id, "t": info.thread_id, "a": iso_offset(info.created_at)}
        return orjson.dumps({**row, "m": info.metadata}, option=orjson.OPT_NON_STR_KEYS) + b"\n"

    def _append_index(self, directory: Path, lines: list[bytes]) -> None:
        """Record new headers (called under the directory lock); the index is only a cache."""
        try:
            fd = os.open(directory / _INDEX_NAME, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            try:
                os.write(fd, b"".join(lines))
            finally:
                os.close(fd)
        except OSError:
            pass  # a missing index costs a head read later, never correctness

    def _rewrite_index(self, directory: Path, entries: dict[str, _Entry]) -> None:
        lines = [self._index_line(n, e) for n, e in entries.items() if isinstance(e, CheckpointInfo)]
        tmp = directory / f"{_INDEX_NAME}.{os.getpid()}.{threading.get_ident()}.tmp"
        try:
            tmp.write_bytes(b"".join(lines))
            os.replace(tmp, directory / _INDEX_NAME)
        except OSError:
            with contextlib.suppress(OSError):
                tmp.unlink()

    def _read_entry(self, path: Path) -> _Entry | None:
        """The header of one checkpoint file, reading as little of it as possible."""
        try:
            with open(path, "rb") as f:
                head = f.read(HEAD_BYTES)
                obj = read_head(head)
                if obj is None and len(head) == HEAD_BYTES:  # a large metadata object
                    head += f.read(16 * HEAD_BYTES)
                    obj = read_head(head)
                if obj is not None and "metadata" not in obj:  # tulip's order: metadata is last
                    obj["metadata"] = self._tail_metadata(f)
                if obj is None or obj["metadata"] is None:  # anything else: parse the whole file
                    f.seek(0)
                    try:
                        obj = orjson.loads(f.read())
                    except orjson.JSONDecodeError as e:
                        return _Bad(f"invalid JSON: {e}")
                    if not isinstance(obj, dict):
                        return _Bad("not a JSON object")
        except FileNotFoundError:
            return None  # deleted between listdir and open
        except OSError as e:
            raise _unavailable(e, path) from e
        try:
            return info_from_head(obj, where=str(path))
        except CheckpointCorrupt as e:
            return _Bad(e.message)

    @staticmethod
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

    def _infos(self, thread_id: str, directory: Path) -> list[tuple[str, CheckpointInfo]]:
        """(file name, info) of the thread's readable checkpoints, newest first."""
        out = []
        for name, entry in self._scan(directory).items():
            if isinstance(entry, _Bad):
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
        with self._heads_lock:
            self._heads.setdefault(path.parent, {})[path.name] = _Bad(reason)
        self._warn_bad(path, reason)

    def _read_checkpoint(self, path: Path, thread_id: str) -> Checkpoint:
        try:
            data = path.read_bytes()
        except FileNotFoundError as e:
            raise CheckpointNotFound("checkpoint file is gone", thread_id=thread_id, path=str(path)) from e
        except OSError as e:
            raise _unavailable(e, path) from e
        return decode_envelope(data, where=str(path), thread_id=thread_id)

    def _write_atomic(self, path: Path, data: bytes | list[bytes | bytearray]) -> None:
        """Write ``data`` (bytes, or chunks for one ``writev``) to a temp file, fsync, rename."""
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        chunks: list[bytes | bytearray] = [data] if isinstance(data, bytes) else data
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                _write_all(fd, chunks)
                if self.fsync:
                    os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, path)
        except OSError as e:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise _unavailable(e, path) from e

    def _remember(self, path: Path, info: CheckpointInfo) -> None:
        with self._heads_lock:
            self._heads.setdefault(path.parent, {})[path.name] = info

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
            latest = infos[0][1] if infos else None
            latest_id = latest.checkpoint_id if latest else None
            check_expected_parent(expected_parent, latest_id, thread_id)
            existing = self._scan_entry(directory, path.name)
            if isinstance(existing, CheckpointInfo) and existing.thread_id != thread_id:
                raise CheckpointConflict(
                    "checkpoint id already used by another thread in the same directory",
                    thread_id=thread_id,
                    checkpoint_id=cid,
                    path=str(path),
                )
            now = next_created_at(latest.created_at if latest is not None else None)
            meta = save_metadata(
                metadata,
                latest_id,
                state=state,
                parent_metadata=latest.metadata if latest else None,
                thread_id=thread_id,
                cache=self._blobs,
            )
            self._write_atomic(path, encode_envelope_parts(cid, thread_id, now, state, meta, cache=self._blobs))
            info = CheckpointInfo(cid, thread_id, now, meta)
            self._remember(path, info)
            self._append_index(directory, [self._index_line(path.name, info)])
        return cid

    def _put_sync(self, ckpt: Checkpoint) -> None:
        cid, thread_id = ckpt.checkpoint_id, ckpt.thread_id
        directory = self.thread_dir(thread_id)
        path = directory / (safe_name(cid) + ".json")
        with self._locked(directory, create=True):
            self._scan(directory)
            existing = self._scan_entry(directory, path.name)
            if isinstance(existing, CheckpointInfo) and existing.thread_id != thread_id:
                raise CheckpointConflict(
                    "checkpoint id already used by another thread in the same directory",
                    thread_id=thread_id,
                    checkpoint_id=cid,
                    path=str(path),
                )
            meta = dict(ckpt.metadata)
            parts = encode_envelope_parts(cid, thread_id, ckpt.created_at, ckpt.state, meta, ckpt.extra or None)
            self._write_atomic(path, parts)
            self._remember(path, CheckpointInfo(cid, thread_id, ckpt.created_at, meta))

    def _scan_entry(self, directory: Path, name: str) -> _Entry | None:
        with self._heads_lock:
            return self._heads.get(directory, {}).get(name)

    def _find(self, thread_id: str, checkpoint_id: str) -> tuple[Path, CheckpointInfo] | None:
        directory = self.thread_dir(thread_id)
        for name, info in self._infos(thread_id, directory):
            if info.checkpoint_id == checkpoint_id:
                return directory / name, info
        return None

    def _load_sync(self, thread_id: str, checkpoint_id: str | None) -> Checkpoint | None:
        directory = self.thread_dir(thread_id)
        if checkpoint_id is not None:
            validate_checkpoint_id(checkpoint_id, thread_id)
            path = directory / (safe_name(checkpoint_id) + ".json")
            found = self._find(thread_id, checkpoint_id)
            if found is None:
                entry = self._scan_entry(directory, path.name)
                if isinstance(entry, _Bad) and path.exists():
                    raise CheckpointCorrupt(
                        entry.reason, thread_id=thread_id, checkpoint_id=checkpoint_id, path=str(path)
                    )
                raise CheckpointNotFound("no such checkpoint", thread_id=thread_id, checkpoint_id=checkpoint_id)
            return self._read_checkpoint(found[0], thread_id)
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

    def _delete_sync(self, thread_id: str, checkpoint_id: str | None) -> bool:
        directory = self.thread_dir(thread_id)
        if not directory.exists():
            return False
        removed = False
        with self._locked(directory, create=False):
            for name, info in self._infos(thread_id, directory):
                if checkpoint_id is None or info.checkpoint_id == checkpoint_id:
                    try:
                        (directory / name).unlink()
                        removed = True
                    except FileNotFoundError:
                        pass
                    except OSError as e:
                        raise _unavailable(e, directory / name) from e
            remaining = self._scan(directory)
        if not remaining:
            self._remove_dir(directory)
        return removed

    def _remove_dir(self, directory: Path) -> None:
        try:
            leftovers = [n for n in os.listdir(directory) if n not in (_LOCK_NAME, _INDEX_NAME)]
            if not leftovers:
                (directory / _INDEX_NAME).unlink(missing_ok=True)
                (directory / _LOCK_NAME).unlink(missing_ok=True)
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
            raise _unavailable(e, self.base_dir) from e

    def _all_infos(self) -> list[CheckpointInfo]:
        out = []
        for directory in self._thread_dirs():
            for name, entry in self._scan(directory).items():
                if isinstance(entry, _Bad):
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
                copied = CheckpointInfo(cid, dest, info.created_at, meta)
                self._remember(path, copied)
                self._append_index(dst_dir, [self._index_line(path.name, copied)])
        return True

    def _vacuum_sync(self, older_than_days: float) -> int:
        cutoff = datetime.now(UTC) - timedelta(days=older_than_days)
        removed = 0
        for directory in self._thread_dirs():
            with self._locked(directory, create=False):
                for name, entry in self._scan(directory).items():
                    if isinstance(entry, CheckpointInfo) and entry.created_at < cutoff:
                        with contextlib.suppress(FileNotFoundError):
                            (directory / name).unlink()
                            removed += 1
                remaining = self._scan(directory)
            if not remaining:
                self._remove_dir(directory)
        return removed

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

    async def load(self, thread_id: str, checkpoint_id: str | None = None) -> AgentState | None:
        ckpt = await self.load_checkpoint(thread_id, checkpoint_id)
        return ckpt.state if ckpt else None

    async def list_checkpoint_infos(self, thread_id: str, limit: int = 10) -> list[CheckpointInfo]:
        directory = self.thread_dir(thread_id)
        infos = await asyncio.to_thread(self._infos, thread_id, directory)
        return [info for _, info in infos[:limit]]

    async def list_checkpoints(self, thread_id: str, limit: int = 10) -> list[str]:
        return [i.checkpoint_id for i in await self.list_checkpoint_infos(thread_id, limit)]

    async def delete(self, thread_id: str, checkpoint_id: str | None = None) -> bool:
        return await asyncio.to_thread(self._delete_sync, thread_id, checkpoint_id)

    async def exists(self, thread_id: str, checkpoint_id: str | None = None) -> bool:
        infos = await self.list_checkpoint_infos(thread_id, limit=10**9)
        return bool(infos) if checkpoint_id is None else any(i.checkpoint_id == checkpoint_id for i in infos)

    # -- capabilities -------------------------------------------------------------------------
    async def get_metadata(self, thread_id: str, checkpoint_id: str | None = None) -> dict[str, Any] | None:
        infos = await self.list_checkpoint_infos(thread_id, limit=10**9)
        for info in infos:
            if checkpoint_id is None or info.checkpoint_id == checkpoint_id:
                return dict(info.metadata)
        return None

    async def list_threads(self, limit: int = 100, pattern: str = "*") -> list[str]:
        infos = await asyncio.to_thread(self._all_infos)
        ids = sorted({i.thread_id for i in infos if matches_pattern(i.thread_id, pattern)})
        return ids[:limit]

    async def list_with_metadata(self, limit: int = 100) -> list[dict[str, Any]]:
        latest: dict[str, CheckpointInfo] = {}
        for info in await asyncio.to_thread(self._all_infos):
            cur = latest.get(info.thread_id)
            if cur is None or info.created_at > cur.created_at:
                latest[info.thread_id] = info
        rows = sorted(latest.values(), key=lambda i: i.created_at, reverse=True)[:limit]
        return [info_row(i) for i in rows]

    async def copy_thread(self, source_thread_id: str, dest_thread_id: str) -> bool:
        return await asyncio.to_thread(self._copy_sync, source_thread_id, dest_thread_id)

    async def vacuum(self, older_than_days: float = 30) -> int:
        return await asyncio.to_thread(self._vacuum_sync, older_than_days)

    async def search(self, query: str, limit: int = 10) -> list[dict[str, Any]]:
        hits = []
        for tid in await self.list_threads(limit=10**9):
            ckpt = await self.load_checkpoint(tid)
            if ckpt is None:
                continue
            score, idx, snippet = search_state(ckpt.state, query)
            if score:
                hits.append(search_hit(ckpt, score, idx, snippet))
        hits.sort(key=lambda h: (-h["score"], h["thread_id"]))
        return hits[:limit]

    async def query_by_metadata(self, key: str, value: Any, limit: int = 100) -> list[dict[str, Any]]:
        infos = sorted(await asyncio.to_thread(self._all_infos), key=lambda i: i.created_at, reverse=True)
        out = []
        for info in infos:
            state = None
            if key not in info.metadata:
                ckpt = await self.load_checkpoint(info.thread_id, info.checkpoint_id)
                state = ckpt.state if ckpt else None
                meta = ckpt.metadata if ckpt else info.metadata
                info = CheckpointInfo(info.checkpoint_id, info.thread_id, info.created_at, meta)
            if metadata_matches(info.metadata, state, key, value):
                out.append(info_row(info))
                if len(out) >= limit:
                    break
        return out


def _write_all(fd: int, chunks: list[bytes | bytearray]) -> None:
    """``os.writev`` until every byte is written (a regular file may still take a short write)."""
    views = [memoryview(c) for c in chunks if c]
    while views:
        written = os.writev(fd, views)
        while views and written >= len(views[0]):
            written -= len(views[0])
            views.pop(0)
        if views and written:
            views[0] = views[0][written:]


def _unavailable(e: OSError, path: Path | str) -> BackendUnavailable:
    reason = errno.errorcode.get(e.errno or 0, "") if e.errno else ""
    text = e.strerror or str(e)
    return BackendUnavailable(f"file store I/O failed: {reason + ': ' if reason else ''}{text}", path=str(path))
