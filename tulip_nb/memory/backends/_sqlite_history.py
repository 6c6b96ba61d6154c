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
                metadata, rest, digest, UNIQUE(thread, cid))

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
import zlib
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import orjson

from tulip_nb.core import iso_offset, parse_datetime
from tulip_nb.core.errors import BackendUnavailable, CheckpointConflict, CheckpointCorrupt, CheckpointNotFound
from tulip_nb.core.keys import PARENT_KEY
from tulip_nb.memory.backends._file_delta import is_turn_end
from tulip_nb.memory.checkpointer import Checkpoint, CheckpointInfo
from tulip_nb.memory.history import (
    HistoryStore,
    MessageChain,
    RewritePlanFn,
    Row,
    RowWrite,
    SavePlanFn,
    StoredCheckpoint,
    join_state,
    row_digest,
    verify_chain,
)

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
    turn_end INTEGER NOT NULL, metadata BLOB NOT NULL, rest BLOB NOT NULL, digest BLOB NOT NULL,
    UNIQUE(thread, cid));
CREATE INDEX IF NOT EXISTS checkpoints_by_time ON checkpoints(thread, at_us, cid);
"""
_COLS = "seq, thread, cid, head, n, created_at, metadata, rest, digest"
_ORDER = "ORDER BY at_us DESC, cid DESC"
_WALK = """
WITH RECURSIVE walk(rid, id, parent, data) AS (
    SELECT rowid, id, parent, data FROM entries WHERE rowid = ?
    UNION ALL
    SELECT e.rowid, e.id, e.parent, e.data FROM entries e JOIN walk w ON e.rowid = w.parent)
SELECT id, data FROM walk
"""
_COMPRESS_MIN = 512
"""``rest`` blobs of at least this many bytes are stored zlib-compressed (a ``\\x01`` prefix)."""


def _micros(when: datetime) -> int:
    delta = when.astimezone(UTC) - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _pack(rest: bytes) -> bytes:
    return b"\x01" + zlib.compress(rest, 1) if len(rest) >= _COMPRESS_MIN else b"\x00" + rest


def _unpack(blob: bytes, where: str, **ctx: Any) -> bytes:
    if blob[:1] == b"\x00":
        return blob[1:]
    try:
        if blob[:1] == b"\x01":
            return zlib.decompress(blob[1:])
    except zlib.error as e:
        raise CheckpointCorrupt(f"stored state fields cannot be read: {e}", path=where, **ctx) from e
    raise CheckpointCorrupt("stored state fields have an unknown encoding", path=where, **ctx)


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
        self._lock = threading.RLock()

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
        conn = sqlite3.connect(self.path, timeout=self.busy_timeout, isolation_level=None, check_same_thread=False)
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute(f"PRAGMA synchronous = {'FULL' if self.fsync else 'OFF'}")
            conn.execute("BEGIN IMMEDIATE")
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    conn.execute(statement)
            conn.execute("COMMIT")
        except BaseException:
            conn.close()
            raise
        return conn

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None or self._pid != os.getpid():
            self._conn = self._open()
            self._pid = os.getpid()
        return self._conn

    @contextlib.contextmanager
    def _txn(self, *, write: bool) -> Iterator[sqlite3.Connection]:
        """One transaction (``BEGIN IMMEDIATE`` for a write); SQLite errors become BackendUnavailable."""
        with self._lock:
            try:
                conn = self._connection()
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
        return BackendUnavailable(f"history store failed: {e}", path=str(self.path))

    async def _run(self, fn: Callable[..., _T], *args: Any) -> _T:
        try:
            return await asyncio.to_thread(fn, *args)
        except sqlite3.DatabaseError as e:  # a damaged file: say so, never an empty thread
            raise CheckpointCorrupt(f"history store is damaged: {e}", path=str(self.path)) from e
        except sqlite3.Error as e:
            raise self._unavailable(e) from e

    def close_sync(self) -> None:
        with self._lock:
            if self._conn is not None and self._pid == os.getpid():
                self._conn.close()
            self._conn = None

    async def close(self) -> None:
        self.close_sync()

    # -- rows ---------------------------------------------------------------------------------
    def _row(self, r: tuple[Any, ...]) -> Row:
        meta = orjson.loads(r[6])
        return Row(r[1], r[2], parse_datetime(r[5]), meta, r[4])

    def _latest(self, conn: sqlite3.Connection, thread_id: str) -> CheckpointInfo | None:
        r = conn.execute(f"SELECT {_COLS} FROM checkpoints WHERE thread = ? {_ORDER} LIMIT 1", (thread_id,)).fetchone()
        return self._row(r).info if r else None

    def rows_sync(self, thread_id: str, limit: int | None = None) -> list[Row]:
        with self._txn(write=False) as conn:
            sql = f"SELECT {_COLS} FROM checkpoints WHERE thread = ? {_ORDER}" + (
                " LIMIT ?" if limit is not None else ""
            )
            args: tuple[Any, ...] = (thread_id, limit) if limit is not None else (thread_id,)
            return [self._row(r) for r in conn.execute(sql, args)]

    def all_rows_sync(self) -> dict[str, list[Row]]:
        out: dict[str, list[Row]] = {}
        with self._txn(write=False) as conn:
            for r in conn.execute(f"SELECT {_COLS} FROM checkpoints ORDER BY thread, at_us DESC, cid DESC"):
                row = self._row(r)
                out.setdefault(row.thread_id, []).append(row)
        return out

    def threads_sync(self) -> list[str]:
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
        meta = orjson.dumps(write.metadata, option=orjson.OPT_NON_STR_KEYS)
        digest = row_digest(
            thread_id, write.checkpoint_id, write.created_at, meta, write.chain.head, write.chain.n, write.rest
        )
        parent = write.metadata.get(PARENT_KEY)
        conn.execute(
            "INSERT INTO checkpoints(thread, cid, parent, head, n, at_us, created_at, turn_end, metadata, rest, digest)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
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
                _pack(write.rest),
                digest,
            ),
        )

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
            conn.execute("UPDATE entries SET refs = refs + 1 WHERE rowid = ?", (parent,))
        for i in range(lo, chain.n):
            refs = 0 if i == chain.n - 1 else 1
            cur = conn.execute(
                "INSERT INTO entries(id, parent, refs, data) VALUES (?, ?, ?, ?)", (ids[i], parent, refs, chain.data(i))
            )
            parent = cur.lastrowid
        return parent

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
        for seq, head in found:
            conn.execute("DELETE FROM checkpoints WHERE seq = ?", (seq,))
            self._release(conn, head)
        return len(found)

    def delete_sync(self, thread_id: str, cids: list[str] | None) -> int:
        with self._txn(write=True) as conn:
            return self._drop_rows(conn, thread_id, cids)

    def rewrite_sync(self, thread_id: str, plan: RewritePlanFn) -> int:
        with self._txn(write=True) as conn:
            rows = [
                self._row(r)
                for r in conn.execute(f"SELECT {_COLS} FROM checkpoints WHERE thread = ? {_ORDER}", (thread_id,))
            ]
            change = plan([r.info for r in rows])
            for cid, meta in change.metadata.items():
                if cid not in change.drop:
                    self._set_metadata(conn, thread_id, cid, meta)
            return self._drop_rows(conn, thread_id, sorted(change.drop))

    def _set_metadata(self, conn: sqlite3.Connection, thread_id: str, cid: str, meta: dict[str, Any]) -> None:
        r = conn.execute(
            "SELECT c.seq, c.n, c.created_at, c.rest, e.id FROM checkpoints c LEFT JOIN entries e ON e.rowid = c.head"
            " WHERE c.thread = ? AND c.cid = ?",
            (thread_id, cid),
        ).fetchone()
        if r is None:
            return
        seq, n, created, rest, head = r
        where = str(self.path)
        blob = orjson.dumps(meta, option=orjson.OPT_NON_STR_KEYS)
        digest = row_digest(thread_id, cid, parse_datetime(created), blob, head, n, _unpack(rest, where))
        parent = meta.get(PARENT_KEY)
        conn.execute(
            "UPDATE checkpoints SET metadata = ?, digest = ?, parent = ?, turn_end = ? WHERE seq = ?",
            (blob, digest, parent if isinstance(parent, str) else None, int(is_turn_end(meta)), seq),
        )

    # -- copy ---------------------------------------------------------------------------------
    def copy_sync(self, source: str, dest: str, metadata: Callable[[Row], dict[str, Any]]) -> int:
        with self._txn(write=True) as conn:
            rows = conn.execute(
                "SELECT c.seq, c.cid, c.head, c.n, c.at_us, c.created_at, c.turn_end, c.metadata, c.rest, e.id"
                " FROM checkpoints c LEFT JOIN entries e ON e.rowid = c.head WHERE c.thread = ? ORDER BY c.seq",
                (source,),
            ).fetchall()
            if not rows:
                raise CheckpointNotFound("source thread has no checkpoints", thread_id=source)
            if conn.execute("SELECT 1 FROM checkpoints WHERE thread = ? LIMIT 1", (dest,)).fetchone():
                raise CheckpointConflict("destination thread already has checkpoints; delete it first", thread_id=dest)
            for _, cid, head, n, at_us, created, turn_end, meta, rest, head_id in rows:
                when = parse_datetime(created)
                src_row = Row(source, cid, when, orjson.loads(meta), n)
                new_meta = orjson.dumps(metadata(src_row), option=orjson.OPT_NON_STR_KEYS)
                digest = row_digest(dest, cid, when, new_meta, head_id, n, _unpack(rest, str(self.path)))
                parent = orjson.loads(new_meta).get(PARENT_KEY)
                conn.execute(
                    "INSERT INTO checkpoints(thread, cid, parent, head, n, at_us, created_at, turn_end, metadata,"
                    " rest, digest) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
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
                        digest,
                    ),
                )
                if head is not None:
                    conn.execute("UPDATE entries SET refs = refs + 1 WHERE rowid = ?", (head,))
            return len(rows)

    # -- load ---------------------------------------------------------------------------------
    def load_sync(self, thread_id: str, checkpoint_id: str | None) -> StoredCheckpoint | None:
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
        walk = conn.execute(_WALK, (head_rowid,)).fetchall() if head_rowid is not None else []
        head_id = walk[0][0] if walk else None
        return self._verified(r, walk, head_id, head_rowid)

    # -- the projection -----------------------------------------------------------------------
    def _latest_turn_end(self, conn: sqlite3.Connection, thread_id: str) -> str | None:
        r = conn.execute(
            f"SELECT cid FROM checkpoints WHERE thread = ? AND turn_end = 1 {_ORDER} LIMIT 1", (thread_id,)
        ).fetchone()
        return str(r[0]) if r else None

    def latest_turn_end_sync(self, thread_id: str) -> str | None:
        """The id of the thread's newest turn end (the checkpoint tulip is shown), if any."""
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

    def _verified(
        self, r: tuple[Any, ...], walk: list[tuple[bytes, bytes]], head_id: bytes | None, head_rowid: int | None
    ) -> StoredCheckpoint:
        _, thread_id, cid, _, n, created, meta, rest_blob, digest = r
        ctx: dict[str, Any] = {"thread_id": thread_id, "checkpoint_id": cid}
        where = str(self.path)
        if head_rowid is not None and not walk:
            raise CheckpointCorrupt("the checkpoint's head entry is missing", path=where, **ctx)
        verify_chain(head_id, walk, n, where=where, **ctx)
        rest = _unpack(rest_blob, where, **ctx)
        when = parse_datetime(created)
        if row_digest(thread_id, cid, when, meta, head_id, n, rest) != digest:
            raise CheckpointCorrupt("checkpoint row does not match its content digest", path=where, **ctx)
        walk.reverse()
        state = join_state(rest, [d for _, d in walk], where=where, thread_id=thread_id)
        metadata = orjson.loads(meta)
        return StoredCheckpoint(Checkpoint(cid, thread_id, when, state, metadata), [i for i, _ in walk])

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
            dangling = conn.execute(
                "SELECT COUNT(*) FROM checkpoints k WHERE k.head IS NOT NULL"
                " AND NOT EXISTS (SELECT 1 FROM entries e WHERE e.rowid = k.head)"
            ).fetchone()[0]
            if dangling:
                problems.append(f"{dangling} checkpoints name a head entry that is missing")
        return problems
