"""The history model (:mod:`tulip_nb.memory.history`) on SQLite: one database per ``base_dir``.

``<base_dir>/.tulip_nb/history.sqlite3``, in WAL mode, opened with the stdlib :mod:`sqlite3`.
Every read-modify-write is one ``BEGIN IMMEDIATE`` transaction, so several processes share the
store: a writer waits for the others (``busy_timeout``, 60 s by default) instead of failing, and
SQLite's journal makes each transaction whole or absent after a crash or a power cut
(``synchronous=FULL``; with ``fsync=False``, ``OFF``: fast, and a power cut may lose the last
saves). **WAL needs a local file system**: its shared-memory index (``-shm``) is a memory-mapped
file, which network file systems (NFS, SMB) do not keep coherent between hosts; put ``base_dir``
on a local disk (several processes on one host are fine).

Tables::

    entries(rowid, id BLOB UNIQUE, parent -> entries.rowid, refs, data)
    checkpoints(seq, thread, cid, parent, head -> entries.rowid, n, at_us, created_at, turn_end,
                metadata, rest, base, depth, chain, fields, digest, UNIQUE(thread, cid))

``rest`` holds the state's other fields, whole or as a patch against the row ``base`` of the same
thread (:mod:`tulip_nb.memory.rest_delta`); ``fields`` is the hash of the whole fields, which the
row's digest covers, so a copy re-binds a row to its new thread without rebuilding it. A row that
others use as their base is rewritten whole before it is dropped, in the dropping transaction.

``refs`` counts the rows whose head an entry is and the entries whose parent it is; a drop
decrements along the chain and deletes what reaches zero, in the dropping transaction. So an
entry exists only while a committed row reaches it, and when an entry exists so does its whole
prefix (a save checks one entry to know what it may skip).

Blocking calls run in a worker thread (``asyncio.to_thread``), one connection per process guarded
by a lock (a process started by ``fork`` opens its own).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import stat
import threading
import urllib.parse
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import orjson
from pydantic import ValidationError

from tulip_nb.core import iso_offset, parse_datetime
from tulip_nb.core.errors import (
    BackendUnavailable,
    CheckpointConflict,
    CheckpointCorrupt,
    CheckpointNotFound,
)
from tulip_nb.core.fastload import gc_paused, messages_from_json
from tulip_nb.core.keys import PARENT_KEY
from tulip_nb.core.messages import Message
from tulip_nb.memory.backends._history_dir import is_turn_end
from tulip_nb.memory.checkpointer import Checkpoint, CheckpointInfo
from tulip_nb.memory.history import (
    HistoryStore,
    MessageChain,
    RewritePlanFn,
    Row,
    RowWrite,
    SavePlanFn,
    StoredCheckpoint,
    entry_id,
    fields_hash,
    row_digest,
    state_with,
)
from tulip_nb.memory.rest_delta import MAX_DEPTH, Parts, PatchError, decode, encode, pack, parts_of_json

__all__ = ["DB_DIR", "DB_NAME", "SQLiteHistory"]

DB_DIR = ".tulip_nb"
DB_NAME = "history.sqlite3"
_T = TypeVar("_T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS entries(
    rowid INTEGER PRIMARY KEY, id BLOB NOT NULL UNIQUE, parent INTEGER, refs INTEGER NOT NULL,
    data BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS checkpoints(
    seq INTEGER PRIMARY KEY AUTOINCREMENT, thread TEXT NOT NULL, cid TEXT NOT NULL, parent TEXT,
    head INTEGER, n INTEGER NOT NULL, at_us INTEGER NOT NULL, created_at TEXT NOT NULL,
    turn_end INTEGER NOT NULL, metadata BLOB NOT NULL, rest BLOB NOT NULL, base TEXT,
    depth INTEGER NOT NULL, chain INTEGER NOT NULL, fields BLOB NOT NULL, digest BLOB NOT NULL,
    UNIQUE(thread, cid));
CREATE INDEX IF NOT EXISTS checkpoints_by_time ON checkpoints(thread, at_us, cid);
CREATE INDEX IF NOT EXISTS checkpoints_by_base ON checkpoints(thread, base) WHERE base IS NOT NULL;
"""
_VERSION = 2
"""``PRAGMA user_version`` of the schema above."""
_COLS = "seq, thread, cid, head, n, created_at, metadata, rest, digest, base, fields, at_us, turn_end"
_ORDER = "ORDER BY at_us DESC, cid DESC"
_WALK = """
WITH RECURSIVE walk(rid, id, parent, data) AS (
    SELECT rowid, id, parent, data FROM entries WHERE rowid = ?
    UNION ALL
    SELECT e.rowid, e.id, e.parent, e.data FROM entries e JOIN walk w ON e.rowid = w.parent)
SELECT id, data FROM walk LIMIT ?
"""
_WALK_TO = """
WITH RECURSIVE walk(rid, id, parent, data, k) AS (
    SELECT rowid, id, parent, data, 1 FROM entries WHERE rowid = ?
    UNION ALL
    SELECT e.rowid, e.id, e.parent, e.data, w.k + 1 FROM entries e JOIN walk w ON e.rowid = w.parent
    WHERE w.rid != ? AND w.k < ?)
SELECT rid, id, data FROM walk
"""
"""A head's walk that stops after the entry ``rowid = ?`` (the head of a history already verified)."""
_WALK_ROWS = """
WITH RECURSIVE walk(rid, id, parent, data) AS (
    SELECT rowid, id, parent, data FROM entries WHERE rowid = ?
    UNION ALL
    SELECT e.rowid, e.id, e.parent, e.data FROM entries e JOIN walk w ON e.rowid = w.parent)
SELECT rid, id, data FROM walk LIMIT ?
"""
_ERRNO = (
    ("SQLITE_FULL", "ENOSPC"),
    ("SQLITE_READONLY", "EROFS"),
    ("SQLITE_IOERR", "EIO"),
    ("SQLITE_CANTOPEN", "EACCES"),
    ("SQLITE_BUSY", "EBUSY"),
    ("SQLITE_PERM", "EPERM"),
)
"""SQLite's error names as the errno names the other stores' errors carry."""
Blobs = tuple[tuple[str, bytes], ...]
"""(checkpoint id, stored ``rest``) of the rows from a snapshot to a patch, snapshot first."""
_CACHED_THREADS = 64
_CACHED_MESSAGES = 16_384
"""Verified entries an instance keeps as message objects (reused by the loads that share them)."""
"""Threads whose newest saved fields an instance keeps parsed (the base of their next patch)."""


def _micros(when: datetime) -> int:
    delta = when.astimezone(UTC) - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _check_plain(path: Path, *, directory: bool) -> None:
    """Refuse a symbolic link, a hard-linked file or the wrong kind of file at ``path``."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    kind_ok = stat.S_ISDIR(st.st_mode) if directory else stat.S_ISREG(st.st_mode)
    if stat.S_ISLNK(st.st_mode) or not kind_ok or (not directory and st.st_nlink != 1):
        what = "a symbolic link" if stat.S_ISLNK(st.st_mode) else "not a plain, singly linked file"
        raise BackendUnavailable(f"the history store refuses {path}: {what} (never followed)", path=str(path))


class SQLiteHistory(HistoryStore):
    """The history store of one ``base_dir`` (see the module docstring)."""

    def __init__(self, base_dir: Path, *, fsync: bool = True, busy_timeout: float = 60.0) -> None:
        self.directory = base_dir / DB_DIR
        self.path = self.directory / DB_NAME
        self.fsync = fsync
        self.busy_timeout = busy_timeout
        self._conn: sqlite3.Connection | None = None
        self._pid = 0
        self._read_only = False
        self._lock = threading.RLock()
        # thread -> (checkpoint id, fields hash, parts, depth, chain, stored chain) of its newest save
        self._fields: OrderedDict[str, tuple[str, bytes, Parts, int, int, Blobs]] = OrderedDict()
        # entry id -> (stored bytes, parent id, message) of the entries this instance verified
        self._messages: OrderedDict[bytes, tuple[bytes, bytes | None, Message]] = OrderedDict()

    def __repr__(self) -> str:
        return f"SQLiteHistory({str(self.path)!r})"

    # -- connection and transactions ----------------------------------------------------------
    def _open(self) -> sqlite3.Connection:
        base = self.directory.parent
        base.mkdir(parents=True, exist_ok=True)
        _check_plain(self.directory, directory=True)
        with contextlib.suppress(FileExistsError):
            os.mkdir(self.directory, 0o755)
        _check_plain(self.directory, directory=True)
        for suffix in ("", "-wal", "-shm", "-journal"):
            _check_plain(self.path.with_name(DB_NAME + suffix), directory=False)
        if os.statvfs(self.directory).f_flag & os.ST_RDONLY:
            return self._open_read_only()
        conn = sqlite3.connect(self.path, timeout=self.busy_timeout, isolation_level=None, check_same_thread=False)
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute(f"PRAGMA synchronous = {'FULL' if self.fsync else 'OFF'}")
            conn.execute("BEGIN IMMEDIATE")
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            tables = conn.execute("SELECT COUNT(*) FROM sqlite_master WHERE name = 'checkpoints'").fetchone()[0]
            if version != _VERSION and (version or tables):
                raise BackendUnavailable(
                    f"the history store's schema is version {version}, this tulip_nb reads version {_VERSION}",
                    path=str(self.path),
                )
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {_VERSION}")
            conn.execute("COMMIT")
        except BaseException:
            conn.close()
            raise
        return conn

    def _open_read_only(self) -> sqlite3.Connection:
        """The store on a read-only file system: readable while its WAL is empty (then nothing can
        change it: SQLite's ``immutable``); every write is EROFS. A WAL that still holds commits
        cannot be read without writing its index, so that is an error, never an older state."""
        wal = self.path.with_name(DB_NAME + "-wal")
        if not self.path.exists() or (wal.exists() and wal.stat().st_size > 0):
            why = "it does not exist" if not self.path.exists() else "its WAL holds commits (mount it rw once)"
            raise BackendUnavailable(
                f"history store is on a read-only file system (EROFS) and {why}", path=str(self.path)
            )
        uri = f"file:{urllib.parse.quote(str(self.path))}?mode=ro&immutable=1"
        conn = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
        self._read_only = True
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version != _VERSION:
            conn.close()
            raise BackendUnavailable(
                f"the history store's schema is version {version}, this tulip_nb reads version {_VERSION}",
                path=str(self.path),
            )
        return conn

    def _connection(self, *, write: bool = False) -> sqlite3.Connection:
        if write and self._read_only and self._conn is not None:  # the mount may be writable again
            self._conn.close()
            self._conn = None
        if self._conn is None or self._pid != os.getpid():
            self._read_only = False
            try:
                self._conn = self._open()
            except OSError as e:  # base_dir is a file, unwritable, on a missing mount: never an empty store
                raise BackendUnavailable(f"history store cannot be opened: {e}", path=str(self.path)) from e
            self._pid = os.getpid()
        return self._conn

    def exists(self) -> bool:
        """Whether the store's database is there (reads of a store never written create nothing)."""
        return self._conn is not None or os.path.lexists(self.path)

    @contextlib.contextmanager
    def _txn(self, *, write: bool) -> Iterator[sqlite3.Connection]:
        """One transaction (``BEGIN IMMEDIATE`` for a write); SQLite errors become BackendUnavailable."""
        with self._lock:
            try:
                conn = self._connection(write=write)
                conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            except sqlite3.Error as e:
                raise self._unavailable(e) from e
            try:
                yield conn
            except BaseException:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
                raise
            try:
                conn.execute("COMMIT")
            except sqlite3.Error as e:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
                raise self._unavailable(e) from e

    def _unavailable(self, e: sqlite3.Error) -> BackendUnavailable:
        name = getattr(e, "sqlite_errorname", "") or ""
        code = next((c for prefix, c in _ERRNO if name.startswith(prefix)), "")
        with contextlib.suppress(OSError):
            if code in ("EACCES", "EIO") and os.statvfs(self.directory).f_flag & os.ST_RDONLY:
                code = "EROFS"
        return BackendUnavailable(f"history store failed: {code + ': ' if code else ''}{e}", path=str(self.path))

    async def _run(self, fn: Callable[..., _T], *args: Any) -> _T:
        """``fn(*args)`` in a worker thread, its errors as tulip_nb's. On a full disk, the WAL is
        checkpointed and truncated and ``fn`` tried once more (every ``fn`` rolls back whole on
        failure): a WAL holds many versions of the same pages, so this frees room, e.g. for the
        delete that frees the disk."""
        try:
            return await asyncio.to_thread(self._call, fn, *args)
        except BackendUnavailable as e:
            if "ENOSPC" not in str(e) or not await asyncio.to_thread(self._truncate_wal):
                raise
        return await asyncio.to_thread(self._call, fn, *args)

    def _call(self, fn: Callable[..., _T], *args: Any) -> _T:
        try:
            return fn(*args)
        except sqlite3.Error as e:
            name = getattr(e, "sqlite_errorname", "") or ""
            if type(e) is sqlite3.DatabaseError or name.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB")):
                raise CheckpointCorrupt(f"history store is damaged: {e}", path=str(self.path)) from e
            raise self._unavailable(e) from e  # locked past the busy timeout, full, read-only, I/O
        except BackendUnavailable:
            raise
        except OSError as e:  # the file store's own I/O (a thread directory, an envelope): an outage
            where = e.filename if isinstance(e.filename, str) else str(self.path.parent.parent)
            raise BackendUnavailable(f"file store I/O failed: {e.strerror or e}", path=where) from e

    def _truncate_wal(self) -> bool:
        """Checkpoint the WAL into the database and truncate it; whether that completed."""
        with self._lock:
            try:
                busy, _, _ = self._connection().execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            except (sqlite3.Error, BackendUnavailable):
                return False
            return not busy

    def close_sync(self) -> None:
        with self._lock:
            if self._conn is not None and self._pid == os.getpid():
                self._conn.close()
            self._conn = None

    async def close(self) -> None:
        self.close_sync()

    # -- rows ---------------------------------------------------------------------------------
    def _row(self, r: tuple[Any, ...], *, strict: bool = True) -> Row:
        """A row's header. ``strict=False`` (listings, the latest a save chains after): a damaged
        header is listed with no metadata and its order key's time, so the thread stays listable
        and writable and the row's load (and verify) report it; strict: CheckpointCorrupt."""
        try:
            meta = orjson.loads(r[6])
            when = parse_datetime(r[5])
            if not isinstance(meta, dict):
                raise ValueError("save metadata is not an object")
        except (ValueError, TypeError) as e:  # orjson.JSONDecodeError is a ValueError
            if not strict and len(r) > 11 and isinstance(r[11], int):
                return Row(r[1], r[2], datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=r[11]), {}, r[4])
            raise CheckpointCorrupt(
                f"checkpoint row cannot be read: {e}", path=str(self.path), thread_id=r[1], checkpoint_id=r[2]
            ) from e
        return Row(r[1], r[2], when, meta, r[4])

    def _check_derived(self, r: tuple[Any, ...]) -> None:
        """The columns derived from digested ones (the order key, the turn-end flag) still match."""
        row = self._row(r)
        if r[11] != _micros(row.created_at) or r[12] != int(is_turn_end(row.metadata)):
            raise CheckpointCorrupt(
                "checkpoint row's order or turn-end columns do not match its created_at and metadata",
                path=str(self.path),
                thread_id=row.thread_id,
                checkpoint_id=row.checkpoint_id,
            )

    def _latest(self, conn: sqlite3.Connection, thread_id: str) -> CheckpointInfo | None:
        r = conn.execute(f"SELECT {_COLS} FROM checkpoints WHERE thread = ? {_ORDER} LIMIT 1", (thread_id,)).fetchone()
        return self._row(r, strict=False).info if r else None

    def rows_sync(self, thread_id: str, limit: int | None = None) -> list[Row]:
        if not self.exists():
            return []
        with self._txn(write=False) as conn:
            sql = f"SELECT {_COLS} FROM checkpoints WHERE thread = ? {_ORDER}" + (
                " LIMIT ?" if limit is not None else ""
            )
            args: tuple[Any, ...] = (thread_id, limit) if limit is not None else (thread_id,)
            return [self._row(r, strict=False) for r in conn.execute(sql, args)]

    def span_sync(self, thread_id: str) -> tuple[int, Row, Row] | None:
        """How many rows ``thread_id`` has, its oldest and its newest (None: no rows): a count over
        the thread's index range and two rows, whatever the thread's length."""
        if not self.exists():
            return None
        with self._txn(write=False) as conn:
            count = conn.execute("SELECT COUNT(*) FROM checkpoints WHERE thread = ?", (thread_id,)).fetchone()[0]
            if not count:
                return None
            newest = conn.execute(
                f"SELECT {_COLS} FROM checkpoints WHERE thread = ? {_ORDER} LIMIT 1", (thread_id,)
            ).fetchone()
            oldest = conn.execute(
                f"SELECT {_COLS} FROM checkpoints WHERE thread = ? ORDER BY at_us ASC, cid ASC LIMIT 1", (thread_id,)
            ).fetchone()
            return int(count), self._row(oldest, strict=False), self._row(newest, strict=False)

    def all_rows_sync(self) -> dict[str, list[Row]]:
        if not self.exists():
            return {}
        out: dict[str, list[Row]] = {}
        with self._txn(write=False) as conn:
            for r in conn.execute(f"SELECT {_COLS} FROM checkpoints ORDER BY thread, at_us DESC, cid DESC"):
                row = self._row(r, strict=False)
                out.setdefault(row.thread_id, []).append(row)
        return out

    def threads_sync(self) -> list[str]:
        if not self.exists():
            return []
        with self._txn(write=False) as conn:
            return [r[0] for r in conn.execute("SELECT DISTINCT thread FROM checkpoints")]

    # -- save ---------------------------------------------------------------------------------
    def save_sync(self, thread_id: str, plan: SavePlanFn) -> tuple[Row, RowWrite]:
        with self._txn(write=True) as conn:
            write = plan(self._latest(conn, thread_id))
            self._insert(conn, thread_id, write)
        return Row(thread_id, write.checkpoint_id, write.created_at, write.metadata, write.chain.n), write

    def _insert(self, conn: sqlite3.Connection, thread_id: str, write: RowWrite) -> None:
        head = self._store_chain(conn, write.chain)
        if head is not None:  # referenced before the row it replaces lets go of a shared prefix
            conn.execute("UPDATE entries SET refs = refs + 1 WHERE rowid = ?", (head,))
        self._drop_rows(conn, thread_id, [write.checkpoint_id])  # saving an id again replaces it
        base = conn.execute(
            f"SELECT cid, fields FROM checkpoints WHERE thread = ? {_ORDER} LIMIT 1", (thread_id,)
        ).fetchone()
        base_parts, depth, chain, blobs = self._base_parts(conn, thread_id, base)
        enc, parts, fields_bytes = encode(write.rest, base_parts, depth, chain)
        blobs = (*blobs, (write.checkpoint_id, enc.blob)) if enc.patch else ((write.checkpoint_id, enc.blob),)
        digest_of_fields = fields_hash(fields_bytes)
        meta = orjson.dumps(write.metadata, option=orjson.OPT_NON_STR_KEYS)
        digest = row_digest(
            thread_id, write.checkpoint_id, write.created_at, meta, write.chain.head, write.chain.n, digest_of_fields
        )
        parent = write.metadata.get(PARENT_KEY)
        conn.execute(
            "INSERT INTO checkpoints(thread, cid, parent, head, n, at_us, created_at, turn_end, metadata, rest,"
            " base, depth, chain, fields, digest) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                thread_id,
                write.checkpoint_id,
                parent if isinstance(parent, str) else None,
                head,
                write.chain.n,
                _micros(write.created_at),
                iso_offset(write.created_at),
                int(is_turn_end(write.metadata)),
                meta,
                enc.blob,
                base[0] if enc.patch and base is not None else None,
                enc.depth,
                enc.chain,
                digest_of_fields,
                digest,
            ),
        )
        self._remember(thread_id, (write.checkpoint_id, digest_of_fields, parts, enc.depth, enc.chain, blobs))

    def _remember(self, thread_id: str, value: tuple[str, bytes, Parts, int, int, Blobs]) -> None:
        self._fields[thread_id] = value
        self._fields.move_to_end(thread_id)
        while len(self._fields) > _CACHED_THREADS:
            self._fields.popitem(last=False)

    def _base_parts(
        self, conn: sqlite3.Connection, thread_id: str, base: tuple[str, bytes] | None
    ) -> tuple[Parts | None, int, int, Blobs]:
        """The parts, depth, chain and stored chain of the row a new save patches against (None: none).

        The instance's own newest save when the row is still that one (same id and fields hash,
        whoever else wrote meanwhile), else rebuilt from the store; a base that cannot be rebuilt
        (corrupt) gives None, so the save is written whole and never depends on it.
        """
        if base is None:
            return None, 0, 0, ()
        cached = self._fields.get(thread_id)
        if (
            cached is not None
            and cached[0] == base[0]
            and cached[1] == base[1]
            and self._same_blobs(conn, thread_id, cached[5])
        ):
            return cached[2], cached[3], cached[4], cached[5]
        r = conn.execute(
            "SELECT rest, base, depth, chain, fields FROM checkpoints WHERE thread = ? AND cid = ?",
            (thread_id, base[0]),
        ).fetchone()
        try:
            with gc_paused():
                fields, blobs = self._rebuild_chain(conn, thread_id, base[0], r[0], r[1], r[4])
                parts = parts_of_json(orjson.dumps(fields))
        except CheckpointCorrupt:
            return None, 0, 0, ()
        return parts, int(r[2]), int(r[3]), blobs

    def _same_blobs(self, conn: sqlite3.Connection, thread_id: str, blobs: Blobs) -> bool:
        """Whether the rows of a cached base chain still hold the bytes the cache was built from (a
        row damaged since is never patched against: the save is written whole instead)."""
        if not blobs:
            return True
        marks = ",".join("?" * len(blobs))
        stored = dict(
            conn.execute(
                f"SELECT cid, rest FROM checkpoints WHERE thread = ? AND cid IN ({marks})",
                (thread_id, *(cid for cid, _ in blobs)),
            ).fetchall()
        )
        return all(stored.get(cid) == blob for cid, blob in blobs)

    def _rebuild(
        self, conn: sqlite3.Connection, thread_id: str, cid: str, blob: bytes, base: str | None, want: bytes
    ) -> dict[str, Any]:
        """A row's whole fields: its snapshot, or its base's rebuilt and its patch applied; verified."""
        return self._rebuild_chain(conn, thread_id, cid, blob, base, want)[0]

    def _rebuild_chain(
        self, conn: sqlite3.Connection, thread_id: str, cid: str, blob: bytes, base: str | None, want: bytes
    ) -> tuple[dict[str, Any], Blobs]:
        """:meth:`_rebuild`, and the (id, stored blob) of each row it read, snapshot first."""
        where = str(self.path)
        ctx: dict[str, Any] = {"thread_id": thread_id, "checkpoint_id": cid}
        blobs = [blob]
        cids = [cid]
        while base is not None:
            if len(blobs) > MAX_DEPTH + 1:
                raise CheckpointCorrupt("the row's fields patch a chain with no snapshot", path=where, **ctx)
            r = conn.execute(
                "SELECT rest, base FROM checkpoints WHERE thread = ? AND cid = ?", (thread_id, base)
            ).fetchone()
            if r is None:
                raise CheckpointCorrupt(f"the row's fields patch missing checkpoint {base}", path=where, **ctx)
            blobs.append(r[0])
            cids.append(base)
            base = r[1]
        try:
            fields = decode(blobs[-1], None)
            for patch in reversed(blobs[:-1]):
                fields = decode(patch, fields)
        except PatchError as e:
            raise CheckpointCorrupt(str(e), path=where, **ctx) from e
        if fields_hash(orjson.dumps(fields)) != want:
            raise CheckpointCorrupt("the row's state fields do not match their hash", path=where, **ctx)
        return fields, tuple(zip(reversed(cids), reversed(blobs), strict=True))

    def _entry_rowid(self, conn: sqlite3.Connection, eid: bytes) -> int | None:
        r = conn.execute("SELECT rowid FROM entries WHERE id = ?", (eid,)).fetchone()
        return int(r[0]) if r else None

    def _store_chain(self, conn: sqlite3.Connection, chain: MessageChain) -> int | None:
        """The rowid of the chain's head, inserting the entries the store lacks (in this transaction).

        An entry's presence implies its whole prefix's, so the longest stored prefix is found by a
        binary search (usually two lookups: the head, then the writer's ``known`` hint).
        """
        if chain.n == 0:
            return None
        ids = chain.ids
        head = self._entry_rowid(conn, ids[chain.n - 1])
        if head is not None:
            self._check_stored(conn, chain, head, chain.n)
            return head
        lo, hi = 0, chain.n - 1  # entries [0, lo) stored; [hi, n) not
        parent: int | None = None
        if 0 < chain.known < chain.n:
            hint = self._entry_rowid(conn, ids[chain.known - 1])
            if hint is not None:
                lo, parent = chain.known, hint
            else:
                hi = chain.known - 1
        while lo < hi:
            mid = (lo + hi) // 2
            found = self._entry_rowid(conn, ids[mid])
            if found is not None:
                lo, parent = mid + 1, found
            else:
                hi = mid
        if lo and parent is None:
            parent = self._entry_rowid(conn, ids[lo - 1])
        if parent is not None:
            self._check_stored(conn, chain, parent, lo)
            conn.execute("UPDATE entries SET refs = refs + 1 WHERE rowid = ?", (parent,))
        for i in range(lo, chain.n):
            refs = 0 if i == chain.n - 1 else 1
            cur = conn.execute(
                "INSERT INTO entries(id, parent, refs, data) VALUES (?, ?, ?, ?)", (ids[i], parent, refs, chain.data(i))
            )
            parent = cur.lastrowid
        return parent

    def _check_stored(self, conn: sqlite3.Connection, chain: MessageChain, top: int, upto: int) -> None:
        """Check the stored entries ``[chain.known, upto)`` (``top``: the rowid of entry ``upto - 1``)
        against the writer's messages before a save builds on them; a damaged entry (its id still
        names the writer's bytes) is repaired with them, so a save never extends a damaged history.
        Entries this instance wrote or loaded (``known``) are not read again."""
        want = upto - chain.known
        if want <= 0:
            return
        rows = conn.execute(_WALK_ROWS, (top, want)).fetchall()
        for k, (rowid, eid, data) in enumerate(rows):
            i = upto - 1 - k
            if eid != chain.ids[i]:
                raise CheckpointCorrupt(
                    f"stored history differs from the saved state's at message {i} (a damaged parent link)",
                    path=str(self.path),
                )
            mine = chain.data(i)
            if data != mine:
                conn.execute("UPDATE entries SET data = ? WHERE rowid = ?", (mine, rowid))
        if len(rows) != want:
            raise CheckpointCorrupt("stored history is shorter than its entry ids say", path=str(self.path))

    # -- drop ---------------------------------------------------------------------------------
    def _release(self, conn: sqlite3.Connection, rowid: int | None) -> None:
        """One reference fewer to entry ``rowid``; entries nothing reaches any more are deleted."""
        while rowid is not None:
            r = conn.execute(
                "UPDATE entries SET refs = refs - 1 WHERE rowid = ? RETURNING refs, parent", (rowid,)
            ).fetchone()
            if r is None or r[0] > 0:
                return
            conn.execute("DELETE FROM entries WHERE rowid = ?", (rowid,))
            rowid = r[1]

    def _drop_rows(self, conn: sqlite3.Connection, thread_id: str, cids: list[str] | None) -> int:
        if cids is None:
            found = conn.execute("SELECT seq, head FROM checkpoints WHERE thread = ?", (thread_id,)).fetchall()
        else:
            found = []
            for cid in cids:
                r = conn.execute(
                    "SELECT seq, head FROM checkpoints WHERE thread = ? AND cid = ?", (thread_id, cid)
                ).fetchone()
                if r is not None:
                    found.append(r)
        if cids is not None and found:
            self._rebase(conn, thread_id, set(cids))
        for seq, head in found:
            conn.execute("DELETE FROM checkpoints WHERE seq = ?", (seq,))
            self._release(conn, head)
        return len(found)

    def _rebase(self, conn: sqlite3.Connection, thread_id: str, dropped: set[str]) -> None:
        """Rewrite whole the surviving rows whose fields patch a row about to be dropped.

        All are rebuilt before any is rewritten (one may patch another). A row that cannot be
        rebuilt is corrupt already; it is left as it is (``verify`` reports it).
        """
        rebuilt: list[tuple[bytes, int]] = []
        for cid in sorted(dropped):
            for seq, dep, blob, base, want in conn.execute(
                "SELECT seq, cid, rest, base, fields FROM checkpoints WHERE thread = ? AND base = ?", (thread_id, cid)
            ).fetchall():
                if dep in dropped:
                    continue
                with contextlib.suppress(CheckpointCorrupt):
                    rebuilt.append((orjson.dumps(self._rebuild(conn, thread_id, dep, blob, base, want)), seq))
        for fields_bytes, seq in rebuilt:
            whole = pack(fields_bytes)
            conn.execute(
                "UPDATE checkpoints SET rest = ?, base = NULL, depth = 0, chain = 0 WHERE seq = ?", (whole, seq)
            )
        if rebuilt:
            self._fields.pop(thread_id, None)

    def delete_sync(self, thread_id: str, cids: list[str] | None) -> int:
        with self._txn(write=True) as conn:
            return self._drop_rows(conn, thread_id, cids)

    def rewrite_sync(self, thread_id: str, plan: RewritePlanFn) -> int:
        with self._txn(write=True) as conn:
            rows = [
                self._row(r, strict=False)
                for r in conn.execute(f"SELECT {_COLS} FROM checkpoints WHERE thread = ? {_ORDER}", (thread_id,))
            ]
            change = plan([r.info for r in rows])
            for cid, meta in change.metadata.items():
                if cid not in change.drop:
                    self._set_metadata(conn, thread_id, cid, meta)
            return self._drop_rows(conn, thread_id, sorted(change.drop))

    def _set_metadata(self, conn: sqlite3.Connection, thread_id: str, cid: str, meta: dict[str, Any]) -> None:
        r = conn.execute(
            "SELECT c.seq, c.n, c.created_at, c.fields, e.id, c.metadata, c.digest FROM checkpoints c"
            " LEFT JOIN entries e ON e.rowid = c.head WHERE c.thread = ? AND c.cid = ?",
            (thread_id, cid),
        ).fetchone()
        if r is None:
            return
        seq, n, created, fields, head, old_meta, old_digest = r
        with contextlib.suppress(CheckpointCorrupt, ValueError):
            if row_digest(thread_id, cid, parse_datetime(created), old_meta, head, n, fields) != old_digest:
                return  # a damaged or moved-in row is never re-signed (verify keeps reporting it)
        blob = orjson.dumps(meta, option=orjson.OPT_NON_STR_KEYS)
        digest = row_digest(thread_id, cid, parse_datetime(created), blob, head, n, fields)
        parent = meta.get(PARENT_KEY)
        conn.execute(
            "UPDATE checkpoints SET metadata = ?, digest = ?, parent = ?, turn_end = ? WHERE seq = ?",
            (blob, digest, parent if isinstance(parent, str) else None, int(is_turn_end(meta)), seq),
        )

    # -- copy ---------------------------------------------------------------------------------
    def copy_sync(self, source: str, dest: str, metadata: Callable[[Row], dict[str, Any]]) -> int:
        with self._txn(write=True) as conn:
            rows = conn.execute(
                "SELECT c.seq, c.cid, c.head, c.n, c.at_us, c.created_at, c.turn_end, c.metadata, c.rest, e.id,"
                " c.base, c.depth, c.chain, c.fields, c.digest FROM checkpoints c"
                " LEFT JOIN entries e ON e.rowid = c.head"
                " WHERE c.thread = ? ORDER BY c.seq",
                (source,),
            ).fetchall()
            if not rows:
                raise CheckpointNotFound("source thread has no checkpoints", thread_id=source)
            if conn.execute("SELECT 1 FROM checkpoints WHERE thread = ? LIMIT 1", (dest,)).fetchone():
                raise CheckpointConflict("destination thread already has checkpoints; delete it first", thread_id=dest)
            for _, cid, head, n, at_us, created, turn_end, meta, rest, head_id, base, depth, chain, fields, old in rows:
                try:
                    src_row = self._row((None, source, cid, None, n, created, meta))
                    intact = row_digest(source, cid, src_row.created_at, meta, head_id, n, fields) == old
                except CheckpointCorrupt:
                    src_row, intact = Row(source, cid, datetime.now(UTC), {}, n), False
                new_meta = orjson.dumps(metadata(src_row), option=orjson.OPT_NON_STR_KEYS)
                # a damaged (or moved-in) row is copied as it is, its digest still failing: a copy
                # never re-signs it into a valid one (the copy's loads and verify report it)
                digest = row_digest(dest, cid, src_row.created_at, new_meta, head_id, n, fields) if intact else old
                parent = orjson.loads(new_meta).get(PARENT_KEY)
                conn.execute(
                    "INSERT INTO checkpoints(thread, cid, parent, head, n, at_us, created_at, turn_end, metadata,"
                    " rest, base, depth, chain, fields, digest) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        dest,
                        cid,
                        parent if isinstance(parent, str) else None,
                        head,
                        n,
                        at_us,
                        created,
                        turn_end,
                        new_meta,
                        rest,
                        base,
                        depth,
                        chain,
                        fields,
                        digest,
                    ),
                )
                if head is not None:
                    conn.execute("UPDATE entries SET refs = refs + 1 WHERE rowid = ?", (head,))
            return len(rows)

    # -- load ---------------------------------------------------------------------------------
    def load_sync(self, thread_id: str, checkpoint_id: str | None) -> StoredCheckpoint | None:
        if not self.exists():
            if checkpoint_id is not None:
                raise CheckpointNotFound("no such checkpoint", thread_id=thread_id, checkpoint_id=checkpoint_id)
            return None
        with self._txn(write=False) as conn:
            return self._load(conn, thread_id, checkpoint_id)

    def _load(self, conn: sqlite3.Connection, thread_id: str, checkpoint_id: str | None) -> StoredCheckpoint | None:
        if checkpoint_id is None:
            r = conn.execute(
                f"SELECT {_COLS} FROM checkpoints WHERE thread = ? {_ORDER} LIMIT 1", (thread_id,)
            ).fetchone()
            if r is None:
                return None
        else:
            r = conn.execute(
                f"SELECT {_COLS} FROM checkpoints WHERE thread = ? AND cid = ?", (thread_id, checkpoint_id)
            ).fetchone()
            if r is None:
                raise CheckpointNotFound("no such checkpoint", thread_id=thread_id, checkpoint_id=checkpoint_id)
        head_rowid = r[3]
        # bounded: a damaged parent link (a loop) must end in an error, not run forever
        walk = conn.execute(_WALK, (head_rowid, int(r[4]) + 1)).fetchall() if head_rowid is not None else []
        head_id = walk[0][0] if walk else None
        return self._verified(conn, r, walk, head_id, head_rowid)

    def load_many_sync(
        self, thread_id: str, checkpoint_ids: Sequence[str]
    ) -> list[StoredCheckpoint | CheckpointCorrupt | CheckpointNotFound]:
        """Several checkpoints of one thread in one read transaction, each verified as :meth:`load_sync` does.

        Each history is walked from its head only down to the head of the checkpoint loaded just
        before it (consecutive checkpoints extend each other), and each row's fields are patched
        onto its base's when that was loaded just before, so loading a thread's checkpoints in
        order costs each message and each patch once (``verify_thread`` of a long thread is linear,
        not quadratic). The snapshot is the transaction's, so nothing verified can change under
        it. A checkpoint that is missing or corrupt is its error in the list; the others still load.
        """
        if not self.exists():
            return [
                CheckpointNotFound("no such checkpoint", thread_id=thread_id, checkpoint_id=c) for c in checkpoint_ids
            ]
        out: list[StoredCheckpoint | CheckpointCorrupt | CheckpointNotFound] = []
        known: tuple[int, list[bytes], list[Message]] | None = None  # the last head: rowid, ids, messages
        fields_of: OrderedDict[str, bytes] = OrderedDict()
        # a batch builds many objects and no cycles: no collection until it is done (measured: the
        # collector re-traversing a long thread's live messages took 10 of 14 s at 1,198 checkpoints)
        with self._txn(write=False) as conn, gc_paused():
            for cid in checkpoint_ids:
                try:
                    stored, known = self._load_after(conn, thread_id, cid, known, fields_of)
                except (CheckpointCorrupt, CheckpointNotFound) as e:
                    out.append(e)
                    continue
                out.append(stored)
        return out

    def _load_after(
        self,
        conn: sqlite3.Connection,
        thread_id: str,
        cid: str,
        known: tuple[int, list[bytes], list[Message]] | None,
        fields_of: OrderedDict[str, bytes],
    ) -> tuple[StoredCheckpoint, tuple[int, list[bytes], list[Message]] | None]:
        r = conn.execute(f"SELECT {_COLS} FROM checkpoints WHERE thread = ? AND cid = ?", (thread_id, cid)).fetchone()
        if r is None:
            raise CheckpointNotFound("no such checkpoint", thread_id=thread_id, checkpoint_id=cid)
        _, _, _, head_rowid, n, _, meta, rest_blob, digest, base, want, _, _ = r
        n = int(n)
        ctx: dict[str, Any] = {"thread_id": thread_id, "checkpoint_id": cid}
        where = str(self.path)
        ids: list[bytes] = []
        messages: list[Message] = []
        if head_rowid is not None:
            stop = known[0] if known is not None else -1
            walk = conn.execute(_WALK_TO, (head_rowid, stop, n + 1)).fetchall()
            if not walk:
                raise CheckpointCorrupt("the checkpoint's head entry is missing", path=where, **ctx)
            if known is not None and walk[-1][0] == stop and len(known[1]) + len(walk) - 1 == n:
                ids, messages = self._extend(known, walk[:-1], where, ctx)
            else:
                pairs = [(eid, data) for _, eid, data in walk]
                messages = self._verified_messages(pairs[0][0] if pairs else None, pairs, n, where, ctx)
                ids = [eid for eid, _ in reversed(pairs)]
        head_id = ids[-1] if ids else None
        when = self._row(r).created_at
        if row_digest(thread_id, cid, when, meta, head_id, n, want) != digest:
            raise CheckpointCorrupt("checkpoint row does not match its content digest", path=where, **ctx)
        self._check_derived(r)
        fields = self._fields_after(conn, thread_id, cid, rest_blob, base, want, fields_of)
        state = state_with(fields, list(messages), where=where, thread_id=thread_id)
        ckpt = Checkpoint(cid, thread_id, when, state, orjson.loads(meta))
        return StoredCheckpoint(ckpt, ids), ((int(head_rowid), ids, messages) if head_rowid is not None else known)

    def _extend(
        self,
        known: tuple[int, list[bytes], list[Message]],
        walk: list[tuple[int, bytes, bytes]],
        where: str,
        ctx: dict[str, Any],
    ) -> tuple[list[bytes], list[Message]]:
        """A verified history plus the entries ``walk`` adds on top of it (head first), each checked."""
        _, ids, messages = known
        if not walk:
            return ids, messages
        parent = ids[-1] if ids else None
        for k, (_, eid, data) in enumerate(walk):
            below = walk[k + 1][1] if k + 1 < len(walk) else parent
            if entry_id(below, data) != eid:
                raise CheckpointCorrupt(
                    f"message {len(ids) + len(walk) - 1 - k} no longer matches its entry id (stored bytes changed)",
                    path=where,
                    **ctx,
                )
        with gc_paused():
            try:
                added = messages_from_json(orjson.loads(b"[" + b",".join(d for _, _, d in reversed(walk)) + b"]"))
            except (orjson.JSONDecodeError, ValidationError) as e:
                raise CheckpointCorrupt(f"stored messages cannot be read: {e}", path=where, **ctx) from e
        return [*ids, *(eid for _, eid, _ in reversed(walk))], [*messages, *added]

    def _fields_after(
        self,
        conn: sqlite3.Connection,
        thread_id: str,
        cid: str,
        blob: bytes,
        base: str | None,
        want: bytes,
        fields_of: OrderedDict[str, bytes],
    ) -> dict[str, Any]:
        """A row's fields, patched onto its base's when that was rebuilt in this batch (checked by hash).

        The batch keeps the fields' canonical bytes, not objects, so no two loaded states share a
        mutable value.
        """
        have = fields_of.get(base) if base is not None else None
        if have is None:
            fields = self._rebuild(conn, thread_id, cid, blob, base, want)
            data = orjson.dumps(fields)
        else:
            try:
                fields = decode(blob, orjson.loads(have))
            except PatchError as e:
                raise CheckpointCorrupt(str(e), path=str(self.path), thread_id=thread_id, checkpoint_id=cid) from e
            data = orjson.dumps(fields)
            if fields_hash(data) != want:
                raise CheckpointCorrupt(
                    "the row's state fields do not match their hash",
                    path=str(self.path),
                    thread_id=thread_id,
                    checkpoint_id=cid,
                )
        fields_of[cid] = data
        while len(fields_of) > 4:
            fields_of.popitem(last=False)
        return fields

    # -- the projection -----------------------------------------------------------------------
    def _latest_turn_end(self, conn: sqlite3.Connection, thread_id: str) -> str | None:
        r = conn.execute(
            f"SELECT cid FROM checkpoints WHERE thread = ? AND turn_end = 1 {_ORDER} LIMIT 1", (thread_id,)
        ).fetchone()
        return str(r[0]) if r else None

    def latest_turn_end_sync(self, thread_id: str) -> str | None:
        """The id of the thread's newest turn end (the checkpoint tulip is shown), if any."""
        if not self.exists():
            return None
        with self._txn(write=False) as conn:
            return self._latest_turn_end(conn, thread_id)

    def project_sync(self, thread_id: str, fn: Callable[[str | None, Callable[[str], StoredCheckpoint]], _T]) -> _T:
        """Run ``fn(latest turn end id, loader)`` holding the store's write lock (no row changes).

        Writers of the projection are serialised by the same lock as the saves they follow, so
        the envelope tulip sees is always the latest committed turn end's, whoever wrote last.
        """
        with self._txn(write=True) as conn:

            def load(cid: str) -> StoredCheckpoint:
                got = self._load(conn, thread_id, cid)
                assert got is not None
                return got

            return fn(self._latest_turn_end(conn, thread_id), load)

    def project_every_sync(
        self, thread_id: str, fn: Callable[[list[str], Callable[[str], StoredCheckpoint]], _T]
    ) -> _T:
        """:meth:`project_sync` for ``layout="tulip"``: ``fn(every checkpoint id of the thread, loader)``."""
        with self._txn(write=True) as conn:

            def load(cid: str) -> StoredCheckpoint:
                got = self._load(conn, thread_id, cid)
                assert got is not None
                return got

            ids = [str(r[0]) for r in conn.execute("SELECT cid FROM checkpoints WHERE thread = ?", (thread_id,))]
            return fn(ids, load)

    def _verified(
        self,
        conn: sqlite3.Connection,
        r: tuple[Any, ...],
        walk: list[tuple[bytes, bytes]],
        head_id: bytes | None,
        head_rowid: int | None,
    ) -> StoredCheckpoint:
        _, thread_id, cid, _, n, _, meta, rest_blob, digest, base, want, _, _ = r
        ctx: dict[str, Any] = {"thread_id": thread_id, "checkpoint_id": cid}
        where = str(self.path)
        if head_rowid is not None and not walk:
            raise CheckpointCorrupt("the checkpoint's head entry is missing", path=where, **ctx)
        messages = self._verified_messages(head_id, walk, n, where, ctx)
        when = self._row(r).created_at
        if row_digest(thread_id, cid, when, meta, head_id, n, want) != digest:
            raise CheckpointCorrupt("checkpoint row does not match its content digest", path=where, **ctx)
        self._check_derived(r)
        fields = self._rebuild(conn, thread_id, cid, rest_blob, base, want)
        walk.reverse()
        state = state_with(fields, messages, where=where, thread_id=thread_id)
        metadata = orjson.loads(meta)
        return StoredCheckpoint(Checkpoint(cid, thread_id, when, state, metadata), [i for i, _ in walk])

    def _verified_messages(
        self, head: bytes | None, walk: list[tuple[bytes, bytes]], n: int, where: str, ctx: dict[str, Any]
    ) -> list[Message]:
        """The messages of an entry walk (head first), oldest first, each checked against its id.

        An entry this instance verified before (same id, same stored bytes, same parent) is not
        hashed or parsed again: its message object is reused (messages are immutable), so loading
        the consecutive checkpoints of a thread (``verify_thread``, a replay) costs each message
        once, not once per checkpoint; a stored byte that changed since is hashed and caught.
        """
        if len(walk) != n:
            raise CheckpointCorrupt(f"history has {len(walk)} messages, the checkpoint says {n}", path=where, **ctx)
        if n and walk[0][0] != head:
            raise CheckpointCorrupt("history does not start at the checkpoint's head entry", path=where, **ctx)
        cache = self._messages
        out: list[Message | None] = [None] * n
        fresh: list[int] = []
        for k, (eid, data) in enumerate(walk):
            parent = walk[k + 1][0] if k + 1 < n else None
            hit = cache.get(eid)
            if hit is not None and hit[0] == data and hit[1] == parent:
                out[n - 1 - k] = hit[2]
                continue
            if entry_id(parent, data) != eid:
                raise CheckpointCorrupt(
                    f"message {n - 1 - k} no longer matches its entry id (stored bytes changed)", path=where, **ctx
                )
            fresh.append(k)
        if fresh:
            with gc_paused():
                try:
                    parsed = messages_from_json(orjson.loads(b"[" + b",".join(walk[k][1] for k in fresh) + b"]"))
                except (orjson.JSONDecodeError, ValidationError) as e:
                    raise CheckpointCorrupt(f"stored messages cannot be read: {e}", path=where, **ctx) from e
            for k, message in zip(fresh, parsed, strict=True):
                out[n - 1 - k] = message
                parent = walk[k + 1][0] if k + 1 < n else None
                cache[walk[k][0]] = (walk[k][1], parent, message)
            while len(cache) > _CACHED_MESSAGES:
                cache.popitem(last=False)
        return [m for m in out if m is not None]

    # -- async primitives ---------------------------------------------------------------------
    async def save(self, thread_id: str, plan: SavePlanFn) -> Row:
        return (await self._run(self.save_sync, thread_id, plan))[0]

    async def load(self, thread_id: str, checkpoint_id: str | None = None) -> StoredCheckpoint | None:
        return await self._run(self.load_sync, thread_id, checkpoint_id)

    async def rows(self, thread_id: str, limit: int | None = None) -> list[Row]:
        return await self._run(self.rows_sync, thread_id, limit)

    async def all_rows(self) -> dict[str, list[Row]]:
        return await self._run(self.all_rows_sync)

    async def copy(self, source: str, dest: str, metadata: Callable[[Row], dict[str, Any]]) -> int:
        return await self._run(self.copy_sync, source, dest, metadata)

    async def rewrite(self, thread_id: str, plan: RewritePlanFn) -> int:
        return await self._run(self.rewrite_sync, thread_id, plan)

    async def delete_thread(self, thread_id: str) -> int:
        return await self._run(self.delete_sync, thread_id, None)

    def integrity_sync(self) -> list[str]:
        """SQLite's own ``integrity_check`` plus the entry reference counts; [] when all is well."""
        with self._txn(write=False) as conn:
            problems = [r[0] for r in conn.execute("PRAGMA integrity_check") if r[0] != "ok"]
            bad = conn.execute(
                "SELECT e.rowid, e.refs, (SELECT COUNT(*) FROM entries c WHERE c.parent = e.rowid)"
                " + (SELECT COUNT(*) FROM checkpoints k WHERE k.head = e.rowid) AS want FROM entries e"
                " WHERE e.refs != want"
            ).fetchall()
            problems += [f"entry {rid}: refs {refs}, reached {want} times" for rid, refs, want in bad]
            for r in conn.execute(f"SELECT {_COLS} FROM checkpoints ORDER BY thread, seq"):
                try:
                    self._check_derived(r)
                except CheckpointCorrupt as e:
                    problems.append(f"thread {r[1]!r} checkpoint {r[2]}: {e.message}")
            dangling = conn.execute(
                "SELECT COUNT(*) FROM checkpoints k WHERE k.head IS NOT NULL"
                " AND NOT EXISTS (SELECT 1 FROM entries e WHERE e.rowid = k.head)"
            ).fetchone()[0]
            if dangling:
                problems.append(f"{dangling} checkpoints name a head entry that is missing")
        return problems
