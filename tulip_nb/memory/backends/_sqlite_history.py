"""The history model (:mod:`tulip_nb.memory.history`) on SQLite: one database per ``base_dir``.

The queries are :class:`~._sql_history.SQLHistory`'s (shared with PostgreSQL and MySQL); this
module is the SQLite dialect: where the database is, how it is opened, how a transaction starts and
what a SQLite error means.

``<base_dir>/.tulip_nb/history.sqlite3``, in WAL mode, opened with the stdlib :mod:`sqlite3`.
Every read-modify-write is one ``BEGIN IMMEDIATE`` transaction, so several processes share the
store: a writer waits for the others (``busy_timeout``, 60 s by default) instead of failing, and
SQLite's journal makes each transaction whole or absent after a crash or a power cut
(``synchronous=FULL``; with ``fsync=False``, ``OFF``: fast, and a power cut may lose the last
saves). **WAL needs a local file system**: its shared-memory index (``-shm``) is a memory-mapped
file, which network file systems (NFS, SMB) do not keep coherent between hosts; put ``base_dir``
on a local disk (several processes on one host are fine).

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
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

from tulip_nb.core.errors import BackendUnavailable, CheckpointCorrupt
from tulip_nb.memory.backends._sql_history import Conn, Cursor, Dialect, SQLHistory

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
_ERRNO = (
    ("SQLITE_FULL", "ENOSPC"),
    ("SQLITE_READONLY", "EROFS"),
    ("SQLITE_IOERR", "EIO"),
    ("SQLITE_CANTOPEN", "EACCES"),
    ("SQLITE_BUSY", "EBUSY"),
    ("SQLITE_PERM", "EPERM"),
)
"""SQLite's error names as the errno names the other stores' errors carry."""


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


class _SQLiteConn:
    """A :class:`~._sql_history.Conn` over a ``sqlite3`` connection (SQLite's spelling is the queries')."""

    __slots__ = ("_conn",)

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def execute(self, sql: str, args: Sequence[Any] = ()) -> Cursor:
        return self._conn.execute(sql, args)

    def insert(self, sql: str, args: Sequence[Any]) -> int:
        rowid = self._conn.execute(sql, args).lastrowid
        assert rowid is not None
        return rowid


class SQLiteDialect(Dialect):
    """The database of one ``base_dir`` (see the module docstring)."""

    def __init__(self, base_dir: Path, *, fsync: bool = True, busy_timeout: float = 60.0) -> None:
        self.directory = base_dir / DB_DIR
        self.path = self.directory / DB_NAME
        self.where = str(self.path)
        self.fsync = fsync
        self.busy_timeout = busy_timeout
        self._conn: sqlite3.Connection | None = None
        self._pid = 0
        self._read_only = False
        self._lock = threading.RLock()

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
    def txn(self, *, write: bool) -> Iterator[Conn]:
        """One transaction (``BEGIN IMMEDIATE`` for a write); SQLite errors become BackendUnavailable."""
        with self._lock:
            try:
                conn = self._connection(write=write)
                conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            except sqlite3.Error as e:
                raise self._unavailable(e) from e
            try:
                yield _SQLiteConn(conn)
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

    async def run(self, fn: Callable[..., _T], *args: Any) -> _T:
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

    def integrity(self, conn: Conn) -> list[str]:
        return [r[0] for r in conn.execute("PRAGMA integrity_check") if r[0] != "ok"]


class SQLiteHistory(SQLHistory):
    """The history store of one ``base_dir``: :class:`~._sql_history.SQLHistory` on SQLite."""

    dialect: SQLiteDialect

    def __init__(self, base_dir: Path, *, fsync: bool = True, busy_timeout: float = 60.0) -> None:
        super().__init__(SQLiteDialect(base_dir, fsync=fsync, busy_timeout=busy_timeout))
        self.directory = self.dialect.directory
        self.path = self.dialect.path
        self.fsync = fsync
