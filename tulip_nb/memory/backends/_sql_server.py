"""The history store's dialects on database servers: PostgreSQL (psycopg 3) and MySQL / MariaDB.

The history's tables live beside tulip's key-value table, in the same database, named after it::

    <table>_h_entries   the entries (:mod:`._sql_history`)
    <table>_h_rows      the checkpoint rows
    <table>_h_lock      one row: the store's write lock

Every write transaction first locks that one row (``SELECT ... FOR UPDATE``), exactly as SQLite's
``BEGIN IMMEDIATE`` serialises writers, so the reference counts of shared entries are only ever
changed by one transaction at a time; it runs at READ COMMITTED, so after the lock it sees every
commit before it. A read runs at REPEATABLE READ (one snapshot for all its statements). The same
connection writes tulip's keys (the projection, :mod:`._history_kv`) in the same transaction.

The drivers are synchronous and run in a worker thread (as SQLite's), over a small pool per
process. A deadlock or serialization failure re-runs the operation (it rolled back whole); a lost
connection is :class:`~tulip_nb.core.errors.BackendUnavailable`, never an empty thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import threading
import time
import weakref
from abc import abstractmethod
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from tulip_nb.core.errors import BackendUnavailable, InvalidThreadId, TulipNBError
from tulip_nb.memory.backends._kv import Copy, Delete, Op, Put
from tulip_nb.memory.backends._mysql_tls import server_offers_tls
from tulip_nb.memory.backends._sql_history import Conn, Cursor, Dialect

__all__ = ["MySQLDialect", "PostgresDialect", "ServerDialect"]

_T = TypeVar("_T")
_MAX_RETRIES = 20
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SIDE = ("_h_entries", "_h_rows", "_h_lock")


def _ident(name: str, what: str, limit: int) -> str:
    if not _IDENT.match(name) or len(name) > limit:
        raise ValueError(f"{what} {name!r} is not a plain SQL identifier of at most {limit} characters")
    return name


class _Rows:
    """A fetched result (MySQL: binary values as ``bytes``, never ``bytearray``)."""

    __slots__ = ("_rows",)

    def __init__(self, rows: list[Any]) -> None:
        self._rows = rows

    def fetchone(self) -> Any:
        return self._rows[0] if self._rows else None

    def fetchall(self) -> list[Any]:
        return self._rows

    def __iter__(self) -> Iterator[Any]:
        return iter(self._rows)


class ServerDialect(Dialect):
    """What the PostgreSQL and MySQL dialects share: the pool, transactions, retries, tulip's keys."""

    name = "SQL"

    def __init__(self, where: str, *, pool_size: int) -> None:
        self.where = where
        self._pool_size = pool_size
        self._idle: list[Any] = []
        self._open: weakref.WeakSet[Any] = weakref.WeakSet()
        self._inherited: list[Any] = []
        """A forked child's copies of the parent's connections: kept, never used nor closed."""
        self._sem = threading.BoundedSemaphore(pool_size)
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._ready = False
        self._sql: dict[str, str] = {}

    # -- engine specifics ---------------------------------------------------------------------
    @abstractmethod
    def _connect(self) -> Any:
        """A new driver connection in autocommit mode (transactions are begun explicitly)."""

    @abstractmethod
    def _create(self, raw: Any) -> None:
        """Create the side tables, the lock row and tulip's table when missing (idempotent)."""

    @abstractmethod
    def _begin(self, raw: Any, write: bool) -> None:
        """Begin a transaction (a write takes the lock row)."""

    @abstractmethod
    def _wrap(self, raw: Any) -> Conn:
        """The connection as a :class:`~._sql_history.Conn`."""

    def _end(self, raw: Any, commit: bool) -> None:
        """Commit or roll back the transaction :meth:`_begin` began."""
        raw.commit() if commit else raw.rollback()

    @abstractmethod
    def _classify(self, e: BaseException) -> str | None:
        """``"retry"``, ``"lost"`` (the connection), ``"refused"`` or None (not a driver error)."""

    @abstractmethod
    def _broken(self, raw: Any) -> bool:
        """Whether a pooled connection can no longer be used."""

    def _user_error(self, e: BaseException) -> TulipNBError | None:
        """The caller's mistake a driver error stands for (a key too long for an index), if any."""
        return None

    def translate(self, sql: str) -> str:
        """A query in SQLite's spelling, in this engine's (cached per statement)."""
        out = self._sql.get(sql)
        if out is None:
            out = self._translate(sql)
            self._sql[sql] = out
        return out

    @abstractmethod
    def _translate(self, sql: str) -> str: ...

    # tulip's key-value table, through the same connection (the projection's writes)
    @abstractmethod
    def kv_get_many(self, conn: Conn, keys: Sequence[str]) -> dict[str, bytes]:
        """The values of ``keys`` that exist (JSON bytes)."""

    @abstractmethod
    def kv_marks(self, conn: Conn, keys: Sequence[str]) -> dict[str, str | None]:
        """Of the records ``keys`` that exist: the value of their projection mark (None: unmarked)."""

    @abstractmethod
    def kv_index_keys(self, conn: Conn) -> list[str]:
        """Every key ending in ``:_checkpoints``."""

    @abstractmethod
    def kv_apply(self, conn: Conn, ops: Sequence[Op]) -> None:
        """Write ``ops`` (Put / Copy / Delete), in order."""

    # -- pool ---------------------------------------------------------------------------------
    def _acquire(self) -> Any:
        if self._pid != os.getpid():  # a forked child: the parent's sockets are not ours
            with self._lock:  # (never closed here: that would end the parent's sessions)
                self._inherited = [*self._idle, *self._open]
                self._idle, self._pid, self._ready = [], os.getpid(), False
                self._open = weakref.WeakSet()
                self._sem = threading.BoundedSemaphore(self._pool_size)
        self._sem.acquire()
        raw = None
        try:
            with self._lock:
                raw = self._idle.pop() if self._idle else None
            if raw is None or self._broken(raw):
                if raw is not None:
                    with contextlib.suppress(Exception):
                        raw.close()
                raw = None
                raw = self._connect()
                self._open.add(raw)
            if not self._ready:
                self._create(raw)
                self._ready = True
            return raw
        except BaseException:
            if raw is not None:
                with contextlib.suppress(Exception):
                    raw.close()
            self._sem.release()
            raise

    def _release(self, raw: Any, keep: bool) -> None:
        try:
            if keep and not self._broken(raw):
                with self._lock:
                    self._idle.append(raw)
            else:
                with contextlib.suppress(Exception):
                    raw.close()
        finally:
            self._sem.release()

    @contextlib.contextmanager
    def txn(self, *, write: bool) -> Iterator[Conn]:
        raw = self._acquire()
        keep = False
        try:
            self._begin(raw, write)
            try:
                yield self._wrap(raw)
            except BaseException:
                with contextlib.suppress(Exception):
                    self._end(raw, False)
                    keep = True
                raise
            self._end(raw, True)
            keep = True
        finally:
            self._release(raw, keep)

    async def run(self, fn: Callable[..., _T], *args: Any) -> _T:
        return await asyncio.to_thread(self.call, fn, *args)

    def call(self, fn: Callable[..., _T], *args: Any) -> _T:
        """``fn(*args)`` with the engine's errors as tulip_nb's; aborted transactions run again."""
        for attempt in range(_MAX_RETRIES + 1):
            try:
                return fn(*args)
            except TulipNBError:
                raise
            except Exception as e:
                mistake = self._user_error(e)
                if mistake is not None:
                    raise mistake from e
                kind = self._classify(e)
                if kind == "retry" and attempt < _MAX_RETRIES:
                    time.sleep(min(0.005 * 2**attempt, 0.2))
                    continue
                if kind == "lost" or isinstance(e, OSError):
                    raise BackendUnavailable(f"history store: cannot reach {self.name}: {e}", path=self.where) from e
                if kind is not None:
                    raise BackendUnavailable(
                        f"history store: {self.name} refused the operation: {e}", path=self.where
                    ) from e
                raise
        raise AssertionError("unreachable")

    def close_sync(self) -> None:
        with self._lock:
            every = [*self._idle, *self._open]
            self._idle = []
        for raw in every:
            with contextlib.suppress(Exception):
                raw.close()


# -- PostgreSQL --------------------------------------------------------------------------------
class _PgConn:
    __slots__ = ("_d", "_raw")

    def __init__(self, d: PostgresDialect, raw: Any) -> None:
        self._d, self._raw = d, raw

    def execute(self, sql: str, args: Sequence[Any] = ()) -> Cursor:
        cur: Cursor = self._raw.execute(self._d.translate(sql), args or None)
        return cur

    def insert(self, sql: str, args: Sequence[Any]) -> int:
        return int(self._raw.execute(self._d.translate(sql + " RETURNING rowid"), args).fetchone()[0])

    def native(self, sql: str, args: Sequence[Any] = ()) -> Cursor:
        """A statement in the engine's own spelling (``%s``), not translated."""
        cur: Cursor = self._raw.execute(sql, args or None)
        return cur


class PostgresDialect(ServerDialect):
    """The history beside tulip's table ``<schema>.<table>`` on PostgreSQL (psycopg 3)."""

    name = "PostgreSQL"

    def __init__(
        self,
        dsn: str,
        *,
        schema_name: str,
        table_name: str,
        kv_ddl: Sequence[str],
        pool_size: int = 4,
        connect_kwargs: dict[str, Any] | None = None,
    ) -> None:
        try:
            import psycopg
        except ImportError as e:  # pragma: no cover - depends on the environment
            raise ImportError("the PostgreSQL history store needs psycopg: pip install 'tulip_nb[postgres]'") from e
        self._psycopg = psycopg
        schema = _ident(schema_name, "schema_name", 63)
        table = _ident(table_name, "table_name", 63 - len("_h_entries"))
        super().__init__(f"postgresql:{schema}.{table}", pool_size=pool_size)
        self.dsn = dsn
        self._connect_kwargs = connect_kwargs or {}
        self.kv_table = f'"{schema}"."{table}"'
        self._schema = schema
        self.entries, self.rows, self.lock = (f'"{schema}"."{table}{s}"' for s in _SIDE)
        self._names = {"entries": self.entries, "checkpoints": self.rows}
        self._kv_ddl = list(kv_ddl)
        self._ddl = [
            f"""CREATE TABLE IF NOT EXISTS {self.entries}(
                rowid BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY, id BYTEA NOT NULL UNIQUE,
                parent BIGINT, refs BIGINT NOT NULL, data BYTEA NOT NULL)""",
            f"""CREATE TABLE IF NOT EXISTS {self.rows}(
                seq BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY, thread TEXT COLLATE "C" NOT NULL,
                cid TEXT COLLATE "C" NOT NULL, parent TEXT, head BIGINT, n INTEGER NOT NULL, at_us BIGINT NOT NULL,
                created_at TEXT NOT NULL, turn_end INTEGER NOT NULL, metadata BYTEA NOT NULL, rest BYTEA NOT NULL,
                base TEXT COLLATE "C", depth INTEGER NOT NULL, chain INTEGER NOT NULL, fields BYTEA NOT NULL,
                digest BYTEA NOT NULL, UNIQUE(thread, cid))""",
            f'CREATE INDEX IF NOT EXISTS "{table}_h_by_time" ON {self.rows}(thread, at_us, cid)',
            f'CREATE INDEX IF NOT EXISTS "{table}_h_by_base" ON {self.rows}(thread, base) WHERE base IS NOT NULL',
            f"CREATE TABLE IF NOT EXISTS {self.lock}(id INTEGER PRIMARY KEY)",
            f"INSERT INTO {self.lock}(id) VALUES (1) ON CONFLICT DO NOTHING",
        ]

    def _connect(self) -> Any:
        try:
            return self._psycopg.connect(self.dsn, autocommit=True, **self._connect_kwargs)
        except self._psycopg.Error as e:
            raise BackendUnavailable(f"history store: cannot reach PostgreSQL: {e}", path=self.where) from e

    def _have_tables(self, raw: Any) -> bool:
        # the lock table is created last, so with it there the others are too
        names = (self.kv_table, self.entries, self.rows, self.lock)
        sql = "SELECT " + " AND ".join(["to_regclass(%s) IS NOT NULL"] * len(names))
        return bool(raw.execute(sql, names).fetchone()[0])

    def _create(self, raw: Any) -> None:
        if self._have_tables(raw):
            return
        with raw.transaction():
            # concurrent first uses in several processes: one runs the DDL, the others wait, then
            # find it done (DDL on tables in use by then would take locks that deadlock with saves)
            raw.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"tulip_nb:{self.kv_table}",))
            if self._have_tables(raw):
                return
            raw.execute(f'CREATE SCHEMA IF NOT EXISTS "{self._schema}"')
            for stmt in (*self._kv_ddl, *self._ddl):
                raw.execute(stmt)

    def _begin(self, raw: Any, write: bool) -> None:
        if write:
            raw.execute("BEGIN ISOLATION LEVEL READ COMMITTED")
            raw.execute(f"SELECT id FROM {self.lock} WHERE id = 1 FOR UPDATE")
        else:
            raw.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")

    def _wrap(self, raw: Any) -> _PgConn:
        return _PgConn(self, raw)

    def _end(self, raw: Any, commit: bool) -> None:
        raw.execute("COMMIT" if commit else "ROLLBACK")

    def _broken(self, raw: Any) -> bool:
        return bool(raw.closed or raw.broken)

    def _user_error(self, e: BaseException) -> TulipNBError | None:
        if isinstance(e, self._psycopg.errors.ProgramLimitExceeded):
            return InvalidThreadId(f"a key too long for PostgreSQL's index: {e}", path=self.where)
        return None

    def _classify(self, e: BaseException) -> str | None:
        errors = self._psycopg.errors
        if isinstance(e, errors.SerializationFailure | errors.DeadlockDetected):
            return "retry"
        if isinstance(e, self._psycopg.OperationalError | self._psycopg.InterfaceError):
            return "lost"
        if isinstance(e, self._psycopg.Error):
            return "refused"
        return None

    def _translate(self, sql: str) -> str:
        out = re.sub(r"\b(entries|checkpoints)\b", lambda m: self._names[m.group(1)], sql)
        return out.replace("?", "%s")

    # -- tulip's table ------------------------------------------------------------------------
    def kv_get_many(self, conn: Conn, keys: Sequence[str]) -> dict[str, bytes]:
        if not keys:
            return {}
        assert isinstance(conn, _PgConn)
        sql = f"SELECT thread_id, data::text FROM {self.kv_table} WHERE thread_id = ANY(%s)"
        rows = conn.native(sql, (list(keys),))
        return {str(k): v.encode() for k, v in rows}

    def kv_marks(self, conn: Conn, keys: Sequence[str]) -> dict[str, str | None]:
        if not keys:
            return {}
        assert isinstance(conn, _PgConn)
        rows = conn.native(
            f"SELECT thread_id, data->>'tulip_nb_projection' FROM {self.kv_table} WHERE thread_id = ANY(%s)",
            (list(keys),),
        )
        return {str(k): v for k, v in rows}

    def kv_index_keys(self, conn: Conn) -> list[str]:
        assert isinstance(conn, _PgConn)
        rows = conn.native(f"SELECT thread_id FROM {self.kv_table} WHERE right(thread_id, 13) = ':_checkpoints'")
        return [str(r[0]) for r in rows]

    def kv_apply(self, conn: Conn, ops: Sequence[Op]) -> None:
        assert isinstance(conn, _PgConn)
        t = self.kv_table
        upsert = (
            " ON CONFLICT (thread_id) DO UPDATE SET checkpoint_id = EXCLUDED.checkpoint_id, "
            "data = EXCLUDED.data, updated_at = now(), metadata = EXCLUDED.metadata"
        )
        for op in ops:
            match op:
                case Put(key, value, meta):
                    conn.native(
                        f"INSERT INTO {t} (thread_id, checkpoint_id, data, metadata)"
                        " VALUES (%s, md5(random()::text), %s::jsonb, %s::jsonb)" + upsert,
                        (key, value.decode(), meta.decode()),
                    )
                case Copy(source, dest):
                    conn.native(
                        f"INSERT INTO {t} (thread_id, checkpoint_id, data, metadata)"
                        f" SELECT %s, md5(random()::text), data, '{{}}'::jsonb FROM {t} WHERE thread_id = %s" + upsert,
                        (dest, source),
                    )
                case Delete(key):
                    conn.native(f"DELETE FROM {t} WHERE thread_id = %s", (key,))


# -- MySQL / MariaDB ---------------------------------------------------------------------------
class _MyConn:
    __slots__ = ("_cur", "_d")

    def __init__(self, d: MySQLDialect, cur: Any) -> None:
        self._d, self._cur = d, cur

    def execute(self, sql: str, args: Sequence[Any] = ()) -> Cursor:
        return self.native(self._d.translate(sql), args)

    def insert(self, sql: str, args: Sequence[Any]) -> int:
        self._cur.execute(self._d.translate(sql), tuple(args))
        return int(self._cur.lastrowid)

    def native(self, sql: str, args: Sequence[Any] = ()) -> _Rows:
        cur = self._cur
        cur.execute(sql, tuple(args) if args else None)
        if not cur.with_rows:
            return _Rows([])
        rows = cur.fetchall()
        return _Rows([tuple(bytes(v) if type(v) is bytearray else v for v in r) for r in rows])


class MySQLDialect(ServerDialect):
    """The history beside tulip's table ``<table>`` on MySQL 8 / MariaDB 10.5+ (mysql-connector)."""

    name = "MySQL"

    def __init__(
        self,
        connect_kwargs: dict[str, Any],
        *,
        table_name: str,
        kv_ddl: Callable[[str | None], str],
        pool_size: int = 4,
        tls_required: str | None = None,
    ) -> None:
        try:
            import mysql.connector
        except ImportError as e:  # pragma: no cover - depends on the environment
            raise ImportError(
                "the MySQL history store needs mysql-connector-python: pip install 'tulip_nb[mysql]'"
            ) from e
        self._mysql = mysql.connector
        table = _ident(table_name, "table_name", 64 - len("_h_entries"))
        where = f"mysql:{connect_kwargs.get('host', 'localhost')}:{connect_kwargs.get('port', 3306)}/{table}"
        super().__init__(where, pool_size=pool_size)
        self._kwargs = {**connect_kwargs, "autocommit": True}
        self.kv_table = f"`{table}`"
        self._table = table
        self.entries, self.rows, self.lock = (f"`{table}{s}`" for s in _SIDE)
        self._names = {"entries": self.entries, "checkpoints": self.rows}
        self._kv_ddl = kv_ddl
        self._tls_required = tls_required
        """Why TLS is required (``ssl='required'``, a certificate option), or None: TLS when offered."""
        self._mariadb: bool | None = None
        self._exact_keys = False
        """Whether tulip's key column compares bytes (NO PAD binary); until known, every write checks."""
        self._key_width = 768

    def _refuse_without_tls(self) -> None:
        """With TLS required, ask the server's greeting before the driver connects (never a silent
        plain connection, and a clear error instead of the driver's)."""
        if not self._tls_required or self._kwargs.get("unix_socket"):
            return
        host, port = str(self._kwargs.get("host", "localhost")), int(self._kwargs.get("port", 3306))
        timeout = float(self._kwargs.get("connection_timeout") or 10)
        if asyncio.run(server_offers_tls(host, port, timeout)) is False:
            raise BackendUnavailable(
                f"history store: TLS is required ({self._tls_required}) but the server at {host}:{port} does not"
                " offer it: enable TLS on the server, or connect with ?ssl=preferred (TLS when offered) or"
                " ?ssl=disabled",
                path=self.where,
            )

    def _connect(self) -> Any:
        self._refuse_without_tls()
        try:
            raw = self._mysql.connect(**self._kwargs)
        except self._mysql.Error as e:
            raise BackendUnavailable(f"history store: cannot reach MySQL: {e}", path=self.where) from e
        if self._tls_required and not raw.is_secure:
            raw.close()
            raise BackendUnavailable(
                f"history store: TLS is required ({self._tls_required}) but the connection to {self.where} is not"
                " encrypted: the server does not offer it",
                path=self.where,
            )
        cur = raw.cursor()
        cur.execute("SELECT VERSION()")
        row: Any = cur.fetchone()
        version = str(row[0])
        self._mariadb = "mariadb" in version.lower()
        # both cap a recursive CTE at 1,000 rounds by default, and a history walk is one per message
        # (every walk is bounded by its own depth counter)
        if self._mariadb:
            cur.execute("SET SESSION max_recursive_iterations = 4294967295")
        else:
            cur.execute("SET SESSION cte_max_recursion_depth = 4294967295")
        cur.close()
        return raw

    def _create(self, raw: Any) -> None:
        cur = raw.cursor()
        try:
            cur.execute(
                "SELECT COLLATION_NAME FROM information_schema.COLLATIONS"
                " WHERE COLLATION_NAME IN ('utf8mb4_nopad_bin', 'utf8mb4_0900_bin')"
            )
            found = {str(r[0]) for r in cur.fetchall()}
            nopad = next((c for c in ("utf8mb4_nopad_bin", "utf8mb4_0900_bin") if c in found), None)
            key = f"CHARACTER SET utf8mb4 COLLATE {nopad or 'utf8mb4_bin'}"
            t = self._table[:40]
            for stmt in (
                self._kv_ddl(nopad),
                f"""CREATE TABLE IF NOT EXISTS {self.entries}(
                    rowid BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, id VARBINARY(32) NOT NULL,
                    parent BIGINT NULL, refs BIGINT NOT NULL, data LONGBLOB NOT NULL,
                    UNIQUE KEY `{t}_h_id` (id)) ENGINE=InnoDB""",
                f"""CREATE TABLE IF NOT EXISTS {self.rows}(
                    seq BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, thread VARCHAR(600) {key} NOT NULL,
                    cid VARCHAR(128) {key} NOT NULL, parent TEXT {key} NULL, head BIGINT NULL, n INT NOT NULL,
                    at_us BIGINT NOT NULL, created_at VARCHAR(64) NOT NULL, turn_end INT NOT NULL,
                    metadata LONGBLOB NOT NULL, rest LONGBLOB NOT NULL, base VARCHAR(128) {key} NULL,
                    depth INT NOT NULL, chain INT NOT NULL, fields VARBINARY(64) NOT NULL,
                    digest VARBINARY(64) NOT NULL, UNIQUE KEY `{t}_h_tc` (thread, cid),
                    KEY `{t}_h_time` (thread, at_us, cid), KEY `{t}_h_base` (thread, base)) ENGINE=InnoDB""",
                f"CREATE TABLE IF NOT EXISTS {self.lock}(id INT NOT NULL PRIMARY KEY) ENGINE=InnoDB",
                f"INSERT IGNORE INTO {self.lock}(id) VALUES (1)",
            ):
                cur.execute(stmt)
            cur.execute(
                "SELECT CHARACTER_MAXIMUM_LENGTH, COLLATION_NAME, DATA_TYPE FROM information_schema.COLUMNS"
                " WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = %s AND COLUMN_NAME = 'thread_id'",
                (self._table,),
            )
            row: Any = cur.fetchone()
            if row:
                self._key_width = int(row[0] or self._key_width)
                collation = str(row[1]) if row[1] is not None else ""
                self._exact_keys = str(row[2]).lower() == "varbinary" or collation.endswith(
                    ("_nopad_bin", "utf8mb4_0900_bin")
                )
        finally:
            cur.close()

    def _begin(self, raw: Any, write: bool) -> None:
        cur = raw.cursor()
        try:
            if write:
                cur.execute("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
                cur.execute("START TRANSACTION")
                cur.execute(f"SELECT id FROM {self.lock} WHERE id = 1 FOR UPDATE")
                cur.fetchall()
            else:
                cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY")
        finally:
            cur.close()

    def _wrap(self, raw: Any) -> _MyConn:
        return _MyConn(self, raw.cursor())

    def _broken(self, raw: Any) -> bool:
        try:
            return not raw.is_connected()
        except Exception:
            return True

    def _classify(self, e: BaseException) -> str | None:
        errors = self._mysql.errors
        if isinstance(e, errors.Error) and getattr(e, "errno", None) in (1213, 1205):
            return "retry"
        if isinstance(e, errors.OperationalError | errors.InterfaceError):
            return "lost"
        if isinstance(e, errors.Error):
            return "refused"
        return None

    def _translate(self, sql: str) -> str:
        out = re.sub(r"\b(entries|checkpoints)\b", lambda m: self._names[m.group(1)], sql)
        return out.replace("?", "%s")

    # -- tulip's table ------------------------------------------------------------------------
    def kv_get_many(self, conn: Conn, keys: Sequence[str]) -> dict[str, bytes]:
        if not keys:
            return {}
        assert isinstance(conn, _MyConn)
        marks = ", ".join(["%s"] * len(keys))
        rows = conn.native(f"SELECT thread_id, data FROM {self.kv_table} WHERE thread_id IN ({marks})", keys)
        want = set(keys)
        out: dict[str, bytes] = {}
        for k, v in rows:
            if k in want:  # compared byte for byte (a table with a padding or folding collation)
                out[k] = v.encode() if isinstance(v, str) else bytes(v)
        return out

    def kv_marks(self, conn: Conn, keys: Sequence[str]) -> dict[str, str | None]:
        if not keys:
            return {}
        assert isinstance(conn, _MyConn)
        marks = ", ".join(["%s"] * len(keys))
        rows = conn.native(
            "SELECT thread_id, JSON_UNQUOTE(JSON_EXTRACT(data, '$.tulip_nb_projection'))"
            f" FROM {self.kv_table} WHERE thread_id IN ({marks})",
            keys,
        )
        want = set(keys)
        return {k: (None if v is None or v == "null" else str(v)) for k, v in rows if k in want}

    def kv_index_keys(self, conn: Conn) -> list[str]:
        assert isinstance(conn, _MyConn)
        rows = conn.native(f"SELECT thread_id FROM {self.kv_table} WHERE RIGHT(thread_id, 13) = ':_checkpoints'")
        return [str(r[0]) for r in rows if str(r[0]).endswith(":_checkpoints")]

    def _check_key(self, conn: _MyConn, key: str) -> None:
        """Refuse a key the table cannot hold apart: too long, or one its collation equates with a
        different stored key (a table tulip or an older tulip_nb created: trailing spaces or case
        ignored). Nothing is written: the transaction rolls back."""
        if len(key) > self._key_width:
            raise InvalidThreadId(
                f"key is {len(key)} characters; the table's thread_id column holds {self._key_width}",
                path=key[:60] + "...",
            )
        if self._exact_keys:
            return
        for (stored,) in conn.native(f"SELECT thread_id FROM {self.kv_table} WHERE thread_id = %s", (key,)):
            if stored != key:
                raise InvalidThreadId(
                    f"key {key!r} and the stored key {stored!r} are one key in table {self._table!r}: its"
                    " thread_id column's collation ignores trailing spaces or case. Nothing was written."
                    " MySQLBackend.migrate_key_column() makes the column byte-exact",
                    path=key[:200],
                )

    def kv_apply(self, conn: Conn, ops: Sequence[Op]) -> None:
        assert isinstance(conn, _MyConn)
        t = self.kv_table
        cols = "(thread_id, checkpoint_id, data, created_at, updated_at, metadata)"
        upsert = (
            " ON DUPLICATE KEY UPDATE checkpoint_id = VALUES(checkpoint_id), data = VALUES(data), "
            "updated_at = VALUES(updated_at), metadata = VALUES(metadata)"
        )
        now = "UTC_TIMESTAMP(6)"
        exact = "thread_id = %s AND CAST(thread_id AS BINARY) = CAST(%s AS BINARY)"
        # every key is checked against the table as it was, before any op: a record put where the
        # collation equates it with one deleted in the same ops is refused too (nothing written)
        for op in ops:
            if isinstance(op, (Put, Copy)):
                self._check_key(conn, op.key if isinstance(op, Put) else op.dest)
        for op in ops:
            match op:
                case Put(key, value, meta):
                    conn.native(
                        f"INSERT INTO {t} {cols} VALUES (%s, MD5(RAND()), %s, {now}, {now}, %s)" + upsert,
                        (key, value.decode(), meta.decode()),
                    )
                case Copy(source, dest):
                    conn.native(
                        f"INSERT INTO {t} {cols} SELECT %s, MD5(RAND()), data, {now}, {now}, '{{}}'"
                        f" FROM {t} WHERE {exact}" + upsert,
                        (dest, source, source),
                    )
                case Delete(key):
                    conn.native(f"DELETE FROM {t} WHERE {exact}", (key, key))
