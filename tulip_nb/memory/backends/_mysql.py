"""MySQLBackend: tulip's key-value layout in one MySQL / MariaDB table (Connector/Python asyncio).

The table has tulip's columns, so a tulip agent and tulip_nb share it::

    CREATE TABLE `<table>` (
        thread_id     VARCHAR(768) COLLATE utf8mb4_nopad_bin PRIMARY KEY,  -- the logical key ("t:<cid>")
        checkpoint_id VARCHAR(128),
        data          JSON NOT NULL,               -- LONGTEXT + JSON_VALID check on MariaDB
        created_at    TIMESTAMP(6), updated_at TIMESTAMP(6),   -- naive UTC
        metadata      JSON NULL                    -- the save metadata on checkpoint rows
    ) DEFAULT CHARSET=utf8mb4

Two differences from the table tulip creates, both invisible to it: the key is
``VARCHAR(768)`` (tulip: 512, too short for a long thread id plus ``:<checkpoint id>``) and compares
bytes, trailing spaces included: a NO PAD binary collation, ``utf8mb4_nopad_bin`` on MariaDB
(10.2 and later) or ``utf8mb4_0900_bin`` on MySQL 8. tulip's ``utf8mb4_unicode_ci`` makes ``"Case"``
and ``"case"`` (or ``"é"`` and ``"e"``) one thread. ``utf8mb4_bin``, which older tulip_nb
versions used, is PAD SPACE: it makes checkpoint ids ``"c1"`` and ``"c1 "`` one key. The column stays
text, so tulip reads and writes it as before. On a server with neither collation the key is
``utf8mb4_bin``, with the checks below.

An existing table keeps working: one tulip created (case-insensitive), one an older tulip_nb
created (``utf8mb4_bin``), or one on a server without a NO PAD binary collation. Every read
compares the stored key with the requested one byte for byte. A delete removes only the row with
exactly that key. A write whose key the column's collation equates with a different stored key
(``"c1 "`` after ``"c1"``, ``"A"`` after ``"a"``) is rolled back and raises
:class:`~tulip_nb.core.errors.InvalidThreadId`; it never overwrites the other key's row.
:meth:`MySQLBackend.migrate_key_column` converts such a table to the NO PAD collation in place. It
is safe: keys that are distinct under the old collation are distinct byte for byte too, so the
ALTER cannot meet a duplicate key. After that both ids can be stored. Keys longer than the
table's column (tulip's is 512) raise :class:`~tulip_nb.core.errors.InvalidThreadId`.

Over those rows, ``list_threads(pattern)`` lists keys (glob, as ``LIKE``), ``vacuum(older_than_days)``
removes old checkpoints (index and ``:latest`` kept consistent) and rows not written since, and
``search_data(path, value)`` matches the ``data`` column with ``JSON_CONTAINS``.

A save is one transaction (READ COMMITTED) that holds the row lock of the thread's index row,
writes the record, copies it into ``:latest`` with ``INSERT … SELECT`` and rewrites the index.

TLS is used when the server offers it (``ssl=preferred``, the default), so
``mysql://root@127.0.0.1:3306/db`` works against a MariaDB without TLS as it is; ``?ssl=required``
never connects without TLS and ``?ssl=disabled`` never uses it (the connector's ``ssl_disabled=``
and certificate options still work; :mod:`~tulip_nb.memory.backends._mysql_tls` has the rules).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, TypeVar
from urllib.parse import parse_qsl, unquote, urlparse

import orjson

from tulip_nb.core.errors import BackendUnavailable, InvalidThreadId, TulipNBError
from tulip_nb.memory._pools import PoolPerLoop
from tulip_nb.memory.backends._kv import (
    EMPTY_INDEX,
    INDEX_SUFFIX,
    LATEST_SUFFIX,
    Copy,
    Delete,
    KVStore,
    Put,
    Txn,
    glob_to_like,
)
from tulip_nb.memory.backends._mysql_tls import TlsMode, server_offers_tls, tls_choice

try:
    from mysql.connector import errors as mysql_errors
    from mysql.connector.aio import connect
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError("MySQLBackend needs mysql-connector-python: pip install 'tulip_nb[mysql]'") from e

__all__ = ["MySQLBackend", "kv_table_ddl", "parse_mysql_dsn"]

T = TypeVar("T")
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
_RETRY_ERRNOS = {1213, 1205}  # deadlock, lock wait timeout: the transaction is rolled back; re-run it
_MAX_RETRIES = 20
# NO PAD binary collations, most preferred first: trailing spaces and case both count
_NOPAD_BIN = ("utf8mb4_nopad_bin", "utf8mb4_0900_bin")


def parse_mysql_dsn(dsn: str) -> dict[str, Any]:
    """``mysql://user:pass@host:port/db?opt=val`` -> Connector/Python keyword arguments."""
    parsed = urlparse(dsn)
    if parsed.scheme not in {"mysql", "mysql+connector"}:
        raise ValueError("MySQL DSN must use the mysql:// scheme")
    out: dict[str, Any] = {"host": parsed.hostname or "localhost", "port": parsed.port or 3306}
    if parsed.username:
        out["user"] = unquote(parsed.username)
    if parsed.password:
        out["password"] = unquote(parsed.password)
    if parsed.path and parsed.path != "/":
        out["database"] = unquote(parsed.path.lstrip("/"))
    for key, value in parse_qsl(parsed.query, keep_blank_values=True):
        low = value.lower()
        out[key] = True if low in ("true", "1", "yes") else False if low in ("false", "0", "no") else value
    return out


def kv_table_ddl(table: str, name: str, nopad: str | None, charset: str, collation: str) -> str:
    """The statement that creates tulip's table ``table`` (quoted); ``nopad``: the key's NO PAD
    binary collation (None: the server has none, ``utf8mb4_bin``)."""
    return f"""CREATE TABLE IF NOT EXISTS {table} (
        thread_id VARCHAR(768) CHARACTER SET utf8mb4 COLLATE {nopad or "utf8mb4_bin"}
            PRIMARY KEY,
        checkpoint_id VARCHAR(128),
        data JSON NOT NULL,
        created_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
        updated_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
            ON UPDATE CURRENT_TIMESTAMP(6),
        metadata JSON NULL,
        KEY `idx_{name[:52]}_updated` (updated_at DESC)
    ) ENGINE=InnoDB DEFAULT CHARSET={charset} COLLATE={collation}"""


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _naive_utc() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


class _Tls:
    """One backend's TLS decision (:mod:`~tulip_nb.memory.backends._mysql_tls`), shared by its pools.

    The server's greeting is read once, before the first connection; ``required`` also checks
    every connection the driver makes.
    """

    def __init__(self, mode: TlsMode, why: str, kwargs: dict[str, Any]) -> None:
        self.mode, self._why = mode, why
        self._host, self._port = str(kwargs.get("host", "localhost")), int(kwargs.get("port", 3306))
        self._timeout = float(kwargs.get("connection_timeout") or 10)
        self._socket = bool(kwargs.get("unix_socket"))  # the driver never uses TLS on a Unix socket
        self.offered: bool | None = None
        """Whether the server offers TLS (None: not asked yet, or it could not be told)."""

    @property
    def where(self) -> str:
        return f"{self._host}:{self._port}"

    async def options(self) -> dict[str, Any]:
        """The driver's TLS options for the next connection."""
        if self.mode == "disabled":
            return {"ssl_disabled": True}
        if self._socket:
            return {}
        if self.offered is None:
            self.offered = await server_offers_tls(self._host, self._port, self._timeout)
        if self.offered is False:
            if self.mode == "required":
                raise BackendUnavailable(self._not_offered())
            return {"ssl_disabled": True}  # preferred: plain TCP, what the server offers
        return {}

    def check(self, conn: Any) -> None:
        """Refuse a connection without TLS when TLS is required."""
        if self.mode == "required" and not conn.is_secure:
            raise BackendUnavailable(self._not_offered())

    def _not_offered(self) -> str:
        return (
            f"MySQLBackend: TLS is required ({self._why}) but the server at {self.where} does not offer "
            "it: enable TLS on the server, or connect with ?ssl=preferred (TLS when offered) or ?ssl=disabled"
        )


class _Pool:
    """A small connection pool that waits (never fails) when every connection is busy."""

    def __init__(self, kwargs: dict[str, Any], max_size: int, tls: _Tls) -> None:
        self._kwargs = kwargs
        self._tls = tls
        self._idle: list[Any] = []
        self._sem = asyncio.Semaphore(max_size)

    async def _connect(self) -> Any:
        kwargs = {**self._kwargs, **await self._tls.options()}
        try:
            conn = await connect(**kwargs)
        except TypeError as e:  # the aio connector, connected without TLS the greeting did not rule out
            if kwargs.get("ssl_disabled"):
                raise
            raise BackendUnavailable(
                f"MySQLBackend: the connector failed while setting up TLS with {self._tls.where} "
                "(a server without TLS?): connect with ?ssl=disabled"
            ) from e
        try:
            self._tls.check(conn)
        except BackendUnavailable:
            with contextlib.suppress(Exception):
                await conn.close()
            raise
        return conn

    @contextlib.asynccontextmanager
    async def acquire(self) -> AsyncIterator[Any]:
        async with self._sem:
            conn = self._idle.pop() if self._idle else await self._connect()
            keep = False
            try:
                yield conn
                keep = True
            except TulipNBError:
                keep = True  # the body's own error (conflict, corrupt data): the connection is fine
                raise
            finally:
                if keep:
                    self._idle.append(conn)
                else:
                    with contextlib.suppress(Exception):
                        await conn.close()

    async def close(self) -> None:
        idle, self._idle = self._idle, []
        for conn in idle:
            with contextlib.suppress(Exception):
                await conn.close()


class _MySQLTxn(Txn):
    def __init__(self, backend: MySQLBackend, cur: Any, lock_key: str, locked: bytes | str | None) -> None:
        super().__init__()
        self._backend, self._cur = backend, cur
        self._lock_key, self._locked = lock_key, locked

    async def get(self, key: str) -> bytes | str | None:
        if key == self._lock_key:
            return self._locked
        await self._cur.execute(self._backend._sql_select, (key,))
        return _exact_data(await self._cur.fetchone(), key)


def _exact_data(row: Any, key: str) -> bytes | str | None:
    """``data`` of a ``(thread_id, data)`` row, only if its key is ``key`` byte for byte (a PAD SPACE
    or case-insensitive column also returns ``"c1"`` for ``"c1 "``, ``"A"`` for ``"a"``)."""
    return row[1] if row and _text(row[0]) == key else None


class MySQLBackend(KVStore):
    """Stores JSON values as rows of one MySQL / MariaDB table (see the module docstring)."""

    backend_name = "MySQLBackend"
    supports_metadata_query = True

    def __init__(
        self,
        dsn: str = "mysql://root@localhost:3306/tulip",
        *,
        table_name: str = "checkpoints",
        max_pool_size: int = 10,
        charset: str = "utf8mb4",
        collation: str = "utf8mb4_unicode_ci",
        **connect_kwargs: Any,
    ) -> None:
        if not _IDENT.match(table_name):
            raise ValueError(f"table_name {table_name!r} is not a plain SQL identifier")
        self.dsn, self.table_name = dsn, table_name
        self.table = f"`{table_name}`"
        kwargs = {**parse_mysql_dsn(dsn), **connect_kwargs}
        self._tls = _Tls(*tls_choice(kwargs), kwargs)  # removes ssl=: not a driver option
        kwargs.setdefault("charset", charset)
        kwargs.setdefault("collation", collation)
        kwargs["autocommit"] = True  # plain reads see fresh data; writes use explicit transactions
        self._charset, self._collation = charset, collation
        self._pool_args, self._max_pool_size = kwargs, max_pool_size
        # connections are bound to their event loop: a pool per loop, the DDL once
        self._pools: PoolPerLoop[_Pool] = PoolPerLoop(self._new_pool, lambda pool: pool.close(), self._create_table)
        self._key_width = 768
        # what the DDL finds: the key column's collation, and whether it compares bytes exactly
        self.key_collation: str | None = None
        self._exact = False  # until the table is inspected: check every key
        self._nopad: str | None = None
        t = self.table
        cols = "(thread_id, checkpoint_id, data, created_at, updated_at, metadata)"
        upsert = (
            " ON DUPLICATE KEY UPDATE checkpoint_id = VALUES(checkpoint_id), data = VALUES(data), "
            "updated_at = VALUES(updated_at), metadata = VALUES(metadata)"
        )
        self._sql_select = f"SELECT thread_id, data FROM {t} WHERE thread_id = %s"
        self._sql_put = f"INSERT INTO {t} {cols} VALUES (%s, %s, %s, %s, %s, %s)" + upsert
        self._sql_copy = (
            f"INSERT INTO {t} {cols} SELECT %s, %s, data, %s, %s, '{{}}' FROM {t} WHERE thread_id = %s" + upsert
        )
        self._sql_delete = f"DELETE FROM {t} WHERE thread_id = %s"

    async def _new_pool(self) -> _Pool:
        return _Pool(self._pool_args, self._max_pool_size, self._tls)

    def __repr__(self) -> str:
        return f"MySQLBackend(table={self.table_name!r})"

    @contextlib.asynccontextmanager
    async def _errors(self, key: str | None = None) -> AsyncIterator[None]:
        try:
            yield
        except BackendUnavailable:
            raise  # ours already says what and where (an OSError too)
        except (OSError, mysql_errors.InterfaceError, mysql_errors.OperationalError) as e:
            raise BackendUnavailable(f"MySQLBackend: cannot reach MySQL: {e}", path=key) from e
        except mysql_errors.Error as e:
            raise BackendUnavailable(f"MySQLBackend: the server refused the operation: {e}", path=key) from e

    @contextlib.asynccontextmanager
    async def _cursor(self, key: str | None = None) -> AsyncIterator[Any]:
        pool = await self._pools.get()
        async with self._errors(key), pool.acquire() as conn:
            cur = await conn.cursor(buffered=True)
            try:
                yield cur
            finally:
                await cur.close()

    # -- DDL ----------------------------------------------------------------------------------
    async def setup(self) -> None:
        """Create the table and its index now (idempotent), instead of on first use."""
        await self._pools.get()

    async def _create_table(self, pool: _Pool) -> None:
        async with self._errors(), pool.acquire() as conn:
            cur = await conn.cursor(buffered=True)
            try:
                await cur.execute(
                    "SELECT COLLATION_NAME FROM information_schema.COLLATIONS WHERE COLLATION_NAME IN (%s, %s)",
                    _NOPAD_BIN,
                )
                found = {_text(r[0]) for r in await cur.fetchall()}
                self._nopad = next((c for c in _NOPAD_BIN if c in found), None)
                await cur.execute(
                    kv_table_ddl(self.table, self.table_name, self._nopad, self._charset, self._collation)
                )
                await self._inspect_key_column(cur)
            finally:
                await cur.close()

    async def _inspect_key_column(self, cur: Any) -> None:
        await cur.execute(
            "SELECT CHARACTER_MAXIMUM_LENGTH, COLLATION_NAME, DATA_TYPE FROM information_schema.COLUMNS "
            "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = %s AND COLUMN_NAME = 'thread_id'",
            (self.table_name,),
        )
        row = await cur.fetchone()
        if not row:
            return
        if row[0]:
            self._key_width = int(row[0])
        collation = _text(row[1]) if row[1] is not None else None
        self.key_collation = collation
        self._exact = _text(row[2]).lower() == "varbinary" or (
            collation is not None and (collation in _NOPAD_BIN or collation.endswith("_nopad_bin"))
        )

    @property
    def byte_exact_keys(self) -> bool:
        """Whether the table's key column itself compares bytes (known after :meth:`setup`). When
        it does not, every read and write checks the key (see the module docstring)."""
        return self._exact

    async def migrate_key_column(self) -> bool:
        """Make an existing table's key column byte-exact: ``ALTER TABLE … MODIFY thread_id …
        COLLATE utf8mb4_nopad_bin`` (or ``utf8mb4_0900_bin``). Returns False if it already was.

        Safe on any table this layout uses: a finer comparison cannot merge two stored keys, and tulip
        reads the column as before. The ALTER rebuilds the table (it blocks writers while it runs).
        """
        pool = await self._pools.get()
        if self._exact:
            return False
        if self._nopad is None:
            raise BackendUnavailable(
                "MySQLBackend: this server has no NO PAD binary collation (utf8mb4_nopad_bin, "
                "utf8mb4_0900_bin); keys stay checked byte for byte on every read and write"
            )
        async with self._errors(), pool.acquire() as conn:
            cur = await conn.cursor(buffered=True)
            try:
                await cur.execute(
                    f"ALTER TABLE {self.table} MODIFY thread_id VARCHAR({self._key_width}) "
                    f"CHARACTER SET utf8mb4 COLLATE {self._nopad} NOT NULL"
                )
                await self._inspect_key_column(cur)
            finally:
                await cur.close()
        return True

    async def _stored_key(self, cur: Any, key: str, *, lock: bool = False) -> str | None:
        """The stored key the column's collation equates with ``key`` (``None``: no such row)."""
        await cur.execute(
            f"SELECT thread_id FROM {self.table} WHERE thread_id = %s" + (" FOR UPDATE" if lock else ""), (key,)
        )
        row = await cur.fetchone()
        return _text(row[0]) if row else None

    async def _check_written(self, cur: Any, key: str) -> None:
        """After an upsert on a column that is not byte-exact: did it land on ``key``'s own row?"""
        if self._exact:
            return
        stored = await self._stored_key(cur, key)
        if stored is not None and stored != key:
            raise self._collision(key, stored)

    def _collision(self, key: str, stored: str) -> InvalidThreadId:
        return InvalidThreadId(
            f"key {key!r} and the stored key {stored!r} are one key in table {self.table_name!r}: its "
            f"thread_id column's collation ({self.key_collation}) ignores trailing spaces or case. "
            "Nothing was written. MySQLBackend.migrate_key_column() makes the column byte-exact",
            path=key[:200],
        )

    def _check_key(self, key: str) -> None:
        if len(key) > self._key_width:
            raise InvalidThreadId(
                f"key is {len(key)} characters; the table's thread_id column holds {self._key_width}",
                path=key[:60] + "...",
            )

    async def close(self) -> None:
        await self._pools.aclose()

    # -- KVStore ------------------------------------------------------------------------------
    async def get(self, key: str) -> bytes | str | None:
        if len(key) > self._key_width:
            return None
        async with self._cursor(key) as cur:
            await cur.execute(self._sql_select, (key,))
            return _exact_data(await cur.fetchone(), key)

    async def get_many(self, keys: list[str]) -> list[bytes | str | None]:
        found: dict[str, Any] = {}
        async with self._cursor() as cur:
            for i in range(0, len(keys), 500):
                chunk = keys[i : i + 500]
                marks = ", ".join(["%s"] * len(chunk))
                await cur.execute(
                    f"SELECT thread_id, data FROM {self.table} WHERE thread_id IN ({marks})", tuple(chunk)
                )
                for tid, data in await cur.fetchall():
                    found[_text(tid)] = data
        return [found.get(k) for k in keys]

    async def transact(self, lock_key: str, body: Callable[[Txn], Awaitable[T]]) -> T:
        await self._pools.get()  # the table (and its key width) first
        self._check_key(lock_key)
        for attempt in range(_MAX_RETRIES):
            try:
                async with self._cursor(lock_key) as cur:
                    return await self._transact_once(cur, lock_key, body)
            except BackendUnavailable as e:
                cause = e.__cause__
                if getattr(cause, "errno", None) in _RETRY_ERRNOS and attempt < _MAX_RETRIES - 1:
                    await asyncio.sleep(0.005 * (attempt + 1))
                    continue
                raise
        raise AssertionError("unreachable")

    async def _transact_once(self, cur: Any, lock_key: str, body: Callable[[Txn], Awaitable[T]]) -> T:
        await cur.execute("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
        await cur.execute("START TRANSACTION")
        try:
            now = _naive_utc()
            await cur.execute(
                f"INSERT INTO {self.table} (thread_id, checkpoint_id, data, created_at, updated_at, metadata) "
                "VALUES (%s, %s, %s, %s, %s, '{}') ON DUPLICATE KEY UPDATE thread_id = thread_id",
                (lock_key, uuid.uuid4().hex, EMPTY_INDEX.decode(), now, now),
            )
            created = cur.rowcount == 1
            locked = None
            if not created:
                await cur.execute(self._sql_select + " FOR UPDATE", (lock_key,))
                row = await cur.fetchone()
                if row and _text(row[0]) != lock_key:
                    raise self._collision(lock_key, _text(row[0]))
                locked = row[1] if row else None
            txn = _MySQLTxn(self, cur, lock_key, locked)
            result = await body(txn)
            for op in txn.ops:
                match op:
                    case Put(key, value, meta):
                        self._check_key(key)
                        now = _naive_utc()
                        await cur.execute(self._sql_put, (key, uuid.uuid4().hex, _text(value), now, now, _text(meta)))
                        await self._check_written(cur, key)
                    case Copy(source, dest):
                        self._check_key(dest)
                        if self._exact or await self._stored_key(cur, source) == source:
                            now = _naive_utc()
                            await cur.execute(self._sql_copy, (dest, uuid.uuid4().hex, now, now, source))
                            await self._check_written(cur, dest)
                    case Delete(key):
                        if self._exact or await self._stored_key(cur, key, lock=True) == key:
                            await cur.execute(self._sql_delete, (key,))
            if created and not txn.writes(lock_key):
                await cur.execute(self._sql_delete, (lock_key,))
            await cur.execute("COMMIT")
            return result
        except BaseException:
            with contextlib.suppress(Exception):
                await cur.execute("ROLLBACK")
            raise

    async def index_keys(self) -> list[str]:
        async with self._cursor() as cur:
            await cur.execute(
                f"SELECT thread_id FROM {self.table} WHERE RIGHT(thread_id, %s) = %s", (len(INDEX_SUFFIX), INDEX_SUFFIX)
            )
            return [k for r in await cur.fetchall() if (k := _text(r[0])).endswith(INDEX_SUFFIX)]

    async def keys(self, pattern: str = "*") -> list[str]:
        like = "%" if "[" in pattern else glob_to_like(pattern)
        async with self._cursor() as cur:
            await cur.execute(f"SELECT thread_id FROM {self.table} WHERE thread_id LIKE %s", (like,))
            return [_text(r[0]) for r in await cur.fetchall()]

    async def stale_keys(self, cutoff: datetime) -> list[str]:
        naive = cutoff.astimezone(UTC).replace(tzinfo=None)
        async with self._cursor() as cur:
            await cur.execute(f"SELECT thread_id FROM {self.table} WHERE updated_at < %s", (naive,))
            return [_text(r[0]) for r in await cur.fetchall()]

    async def search_data(self, path: str, value: Any, limit: int = 100) -> list[dict[str, Any]]:
        """Rows whose ``data`` contains ``{path: value}`` (``JSON_CONTAINS``), newest first."""
        probe = orjson.dumps({path: value}, option=orjson.OPT_NON_STR_KEYS).decode()
        async with self._cursor() as cur:
            await cur.execute(
                f"SELECT thread_id, data, updated_at FROM {self.table} WHERE JSON_CONTAINS(data, %s) "
                "ORDER BY updated_at DESC, thread_id LIMIT %s",
                (probe, max(limit, 0)),
            )
            rows = await cur.fetchall()
        return [
            {
                "thread_id": _text(tid),
                "data": orjson.loads(data),
                "updated_at": stamp.replace(tzinfo=UTC).isoformat() if stamp is not None else None,
            }
            for tid, data, stamp in rows
        ]

    async def metadata_candidates(self, key: str, value: Any, limit: int) -> list[str]:
        probe = orjson.dumps({key: value}).decode()
        async with self._cursor() as cur:
            await cur.execute(
                f"SELECT thread_id FROM {self.table} "
                "WHERE (JSON_CONTAINS(metadata, %s) OR JSON_CONTAINS(data, %s, '$.metadata')) "
                "AND JSON_EXISTS(data, '$._checkpoint_id') AND RIGHT(thread_id, %s) <> %s "
                "ORDER BY created_at DESC LIMIT %s",
                (probe, probe, len(LATEST_SUFFIX), LATEST_SUFFIX, limit),
            )
            return [_text(r[0]) for r in await cur.fetchall()]
