"""PostgreSQLBackend: tulip's key-value layout in one PostgreSQL table (asyncpg).

The table is tulip's, so a tulip agent and tulip_nb share it::

    CREATE TABLE <schema>.<table> (
        thread_id     TEXT PRIMARY KEY,          -- the logical key, e.g. "ticket-42:<cid>"
        checkpoint_id TEXT,                      -- a random id per write (tulip's choice)
        data          JSONB NOT NULL,            -- the flattened state, :latest copy or index
        created_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
        updated_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
        metadata      JSONB DEFAULT '{}'         -- the save metadata on checkpoint rows
    )

plus tulip's indexes (``updated_at DESC``, GIN on ``metadata``). Over those rows,
``list_threads(pattern)`` lists keys (glob, as ``LIKE``), ``vacuum(older_than_days)`` removes old
checkpoints (index and ``:latest`` kept consistent) and rows not written since, and
``search_data(path, value)`` matches the ``data`` column with JSONB containment (``@>``). ``search`` is PostgreSQL
full-text search over the message text of each thread's ``:latest`` row (``websearch_to_tsquery``
syntax: ``refund -card "store credit"``). By default the tsvector is computed at query time;
``fts_index=True`` adds a GIN expression index (tulip ignores it) that makes search an index
lookup but costs every save a re-index of the whole thread (~4x a save at 2000 messages).

A save is one transaction: it takes the row lock of the thread's index row (creating the row if
the thread is new), writes the record, copies it into ``:latest`` server side, rewrites the index
and commits, so concurrent writers in any process are serialised per thread.

The table is created on first use; call :meth:`PostgreSQLBackend.setup` from a deployment script
to create schema, table and indexes ahead of time.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import datetime
from typing import Any, TypeVar

from tulip_nb.core.errors import BackendUnavailable, InvalidThreadId
from tulip_nb.memory._pools import PoolPerLoop
from tulip_nb.memory.backends._kv import EMPTY_INDEX, INDEX_SUFFIX, Copy, Delete, KVStore, Put, Txn, glob_to_like

try:
    import asyncpg
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError("PostgreSQLBackend needs asyncpg: pip install 'tulip_nb[postgres]'") from e

__all__ = ["PostgreSQLBackend", "kv_table_ddl"]

T = TypeVar("T")
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
_CONNECTION_ERRORS = (
    OSError,
    asyncio.TimeoutError,
    asyncpg.PostgresConnectionError,
    asyncpg.InterfaceError,
    asyncpg.CannotConnectNowError,
)
# the message text of a record, as one tsvector ('simple': no stemming, any language)
_FTS = "to_tsvector('simple'::regconfig, jsonb_path_query_array(data, '$.messages[*].content')::text)"
_LATEST_ROWS = "thread_id LIKE '%:latest'"


def _ident(name: str, what: str) -> str:
    if not _IDENT.match(name):
        raise ValueError(f"{what} {name!r} is not a plain SQL identifier ([A-Za-z_][A-Za-z0-9_]*)")
    return f'"{name}"'


def _jsonb_encode(value: bytes | str) -> bytes:
    return b"\x01" + (value.encode() if isinstance(value, str) else value)


def _jsonb_decode(value: bytes) -> bytes:
    return value[1:]


async def _init_connection(conn: Any) -> None:
    # JSONB travels as raw JSON bytes (binary format = version byte + text): no str round trip
    await conn.set_type_codec(
        "jsonb", encoder=_jsonb_encode, decoder=_jsonb_decode, schema="pg_catalog", format="binary"
    )


def kv_table_ddl(table: str, name: str, *, fts_index: bool = False, table_exists: bool = False) -> list[str]:
    """The statements that create tulip's table ``table`` (quoted, schema-qualified) and its indexes."""
    ddl = []
    if not table_exists:
        ddl += [
            f"""CREATE TABLE IF NOT EXISTS {table} (
                thread_id TEXT PRIMARY KEY,
                checkpoint_id TEXT,
                data JSONB NOT NULL,
                created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
                updated_at TIMESTAMPTZ NOT NULL DEFAULT now(),
                metadata JSONB DEFAULT '{{}}'::jsonb)""",
            f'CREATE INDEX IF NOT EXISTS "idx_{name}_updated" ON {table} (updated_at DESC)',
            f'CREATE INDEX IF NOT EXISTS "idx_{name}_metadata" ON {table} USING gin (metadata)',
        ]
    if fts_index:
        ddl.append(f'CREATE INDEX IF NOT EXISTS "idx_{name}_fts" ON {table} USING gin ({_FTS}) WHERE {_LATEST_ROWS}')
    return ddl


class _PgTxn(Txn):
    def __init__(self, conn: Any, select: str, lock_key: str, locked_value: bytes | None) -> None:
        super().__init__()
        self._conn, self._select = conn, select
        self._lock_key, self._locked_value = lock_key, locked_value

    async def get(self, key: str) -> bytes | None:
        if key == self._lock_key:
            return self._locked_value
        value: bytes | None = await self._conn.fetchval(self._select, key)
        return value


class PostgreSQLBackend(KVStore):
    """Stores JSON values as rows of ``<schema_name>.<table_name>`` (see the module docstring)."""

    backend_name = "PostgreSQLBackend"
    supports_metadata_query = True

    def __init__(
        self,
        dsn: str = "postgresql://postgres@localhost:5432/tulip",
        *,
        schema_name: str = "public",
        table_name: str = "checkpoints",
        min_pool_size: int = 1,
        max_pool_size: int = 10,
        fts_index: bool = False,
        **pool_kwargs: Any,
    ) -> None:
        self.dsn = dsn
        self.schema_name, self.table_name = schema_name, table_name
        self.table = f"{_ident(schema_name, 'schema_name')}.{_ident(table_name, 'table_name')}"
        self.supports_search = True
        self.fts_index = fts_index
        self._pool_args = {"min_size": min_pool_size, "max_size": max_pool_size, **pool_kwargs}
        # asyncpg pools are bound to their event loop: one per loop, the DDL once
        self._pools: PoolPerLoop[Any] = PoolPerLoop(self._new_pool, lambda pool: pool.close(), self._create_schema)
        t = self.table
        self._sql_select = f"SELECT data FROM {t} WHERE thread_id = $1"
        self._sql_put = (
            f"INSERT INTO {t} (thread_id, checkpoint_id, data, metadata) VALUES ($1, $2, $3, $4) "
            "ON CONFLICT (thread_id) DO UPDATE SET checkpoint_id = EXCLUDED.checkpoint_id, "
            "data = EXCLUDED.data, updated_at = now(), metadata = EXCLUDED.metadata"
        )
        self._sql_copy = (
            f"INSERT INTO {t} (thread_id, checkpoint_id, data, metadata) "
            f"SELECT $2, $3, data, '{{}}'::jsonb FROM {t} WHERE thread_id = $1 "
            "ON CONFLICT (thread_id) DO UPDATE SET checkpoint_id = EXCLUDED.checkpoint_id, "
            "data = EXCLUDED.data, updated_at = now(), metadata = EXCLUDED.metadata"
        )
        self._sql_delete = f"DELETE FROM {t} WHERE thread_id = $1"

    def __repr__(self) -> str:
        return f"PostgreSQLBackend(table={self.schema_name}.{self.table_name})"

    # -- connections and DDL ------------------------------------------------------------------
    @contextlib.asynccontextmanager
    async def _errors(self, key: str | None = None) -> AsyncIterator[None]:
        try:
            yield
        except _CONNECTION_ERRORS as e:
            raise BackendUnavailable(f"PostgreSQLBackend: cannot reach PostgreSQL: {e}", path=key) from e
        except asyncpg.ProgramLimitExceededError as e:
            raise InvalidThreadId(f"key too long for PostgreSQLBackend's index: {e}", path=key) from e
        except asyncpg.PostgresError as e:
            raise BackendUnavailable(f"PostgreSQLBackend: the server refused the operation: {e}", path=key) from e

    async def _new_pool(self) -> Any:
        async with self._errors():
            return await asyncpg.create_pool(self.dsn, init=_init_connection, **self._pool_args)

    async def _conn_pool(self) -> Any:
        return await self._pools.get()

    async def setup(self) -> None:
        """Create the schema, table and indexes now (idempotent), instead of on first use."""
        await self._conn_pool()

    async def _create_schema(self, pool: Any) -> None:
        async with self._errors(), pool.acquire() as conn:
            exists = await conn.fetchval("SELECT to_regclass($1) IS NOT NULL", f"{self.table}")
            ddl = [] if exists else [f"CREATE SCHEMA IF NOT EXISTS {_ident(self.schema_name, 'schema_name')}"]
            ddl += kv_table_ddl(self.table, self.table_name, fts_index=self.fts_index, table_exists=bool(exists))
            if not ddl:
                return
            async with conn.transaction():
                # concurrent first saves in several processes: one runs the DDL, the others wait
                await conn.execute("SELECT pg_advisory_xact_lock(hashtext($1))", f"tulip_nb:{self.table}")
                for stmt in ddl:
                    try:
                        async with conn.transaction():
                            await conn.execute(stmt)
                    except asyncpg.InsufficientPrivilegeError:
                        if "_fts" not in stmt:  # search still works without its index
                            raise

    async def close(self) -> None:
        await self._pools.aclose()

    # -- KVStore ------------------------------------------------------------------------------
    async def get(self, key: str) -> bytes | None:
        pool = await self._conn_pool()
        async with self._errors(key):
            value: bytes | None = await pool.fetchval(self._sql_select, key)
            return value

    async def get_many(self, keys: list[str]) -> list[bytes | str | None]:
        if not keys:
            return []
        pool = await self._conn_pool()
        async with self._errors():
            rows = await pool.fetch(f"SELECT thread_id, data FROM {self.table} WHERE thread_id = ANY($1)", keys)
        found = {r["thread_id"]: r["data"] for r in rows}
        return [found.get(k) for k in keys]

    async def transact(self, lock_key: str, body: Callable[[Txn], Awaitable[T]]) -> T:
        pool = await self._conn_pool()
        async with self._errors(lock_key), pool.acquire() as conn, conn.transaction():
            created = await conn.fetchval(
                f"INSERT INTO {self.table} (thread_id, checkpoint_id, data) VALUES ($1, $2, $3) "
                "ON CONFLICT (thread_id) DO NOTHING RETURNING true",
                lock_key,
                uuid.uuid4().hex,
                EMPTY_INDEX,
            )
            locked = None if created else await conn.fetchval(self._sql_select + " FOR UPDATE", lock_key)
            txn = _PgTxn(conn, self._sql_select, lock_key, locked)
            result = await body(txn)
            for op in txn.ops:
                match op:
                    case Put(key, value, meta):
                        await conn.execute(self._sql_put, key, uuid.uuid4().hex, value, meta)
                    case Copy(source, dest):
                        await conn.execute(self._sql_copy, source, dest, uuid.uuid4().hex)
                    case Delete(key):
                        await conn.execute(self._sql_delete, key)
            if created and not txn.writes(lock_key):
                await conn.execute(self._sql_delete, lock_key)  # the lock row was only a lock
            return result

    async def index_keys(self) -> list[str]:
        pool = await self._conn_pool()
        async with self._errors():
            rows = await pool.fetch(
                f"SELECT thread_id FROM {self.table} WHERE right(thread_id, $1) = $2",
                len(INDEX_SUFFIX),
                INDEX_SUFFIX,
            )
        return [r["thread_id"] for r in rows]

    async def keys(self, pattern: str = "*") -> list[str]:
        like = "%" if "[" in pattern else glob_to_like(pattern)
        pool = await self._conn_pool()
        async with self._errors():
            rows = await pool.fetch(f"SELECT thread_id FROM {self.table} WHERE thread_id LIKE $1", like)
        return [r["thread_id"] for r in rows]

    async def stale_keys(self, cutoff: datetime) -> list[str]:
        pool = await self._conn_pool()
        async with self._errors():
            rows = await pool.fetch(f"SELECT thread_id FROM {self.table} WHERE updated_at < $1", cutoff)
        return [r["thread_id"] for r in rows]

    async def search_data(self, path: str, value: Any, limit: int = 100) -> list[dict[str, Any]]:
        """Rows whose ``data`` contains ``{path: value}`` (JSONB ``@>``), newest first."""
        import orjson

        probe = orjson.dumps({path: value}, option=orjson.OPT_NON_STR_KEYS)
        pool = await self._conn_pool()
        async with self._errors():
            rows = await pool.fetch(
                f"SELECT thread_id, data, updated_at FROM {self.table} WHERE data @> $1 "
                "ORDER BY updated_at DESC, thread_id LIMIT $2",
                probe,
                max(limit, 0),
            )
        return [
            {"thread_id": r["thread_id"], "data": orjson.loads(r["data"]), "updated_at": r["updated_at"].isoformat()}
            for r in rows
        ]

    async def search_latest(self, query: str, limit: int) -> list[tuple[str, float]]:
        pool = await self._conn_pool()
        async with self._errors():
            rows = await pool.fetch(
                f"SELECT thread_id, ts_rank({_FTS}, q) AS score "
                f"FROM {self.table}, websearch_to_tsquery('simple', $1) q "
                f"WHERE {_LATEST_ROWS} AND {_FTS} @@ q ORDER BY score DESC, thread_id LIMIT $2",
                query,
                limit,
            )
        return [(r["thread_id"], float(r["score"])) for r in rows]

    async def metadata_candidates(self, key: str, value: Any, limit: int) -> list[str]:
        import orjson

        probe = orjson.dumps({key: value})
        pool = await self._conn_pool()
        async with self._errors():
            rows = await pool.fetch(
                f"SELECT thread_id FROM {self.table} "
                "WHERE (metadata @> $1 OR data -> 'metadata' @> $1) AND data ? '_checkpoint_id' "
                f"AND NOT {_LATEST_ROWS} ORDER BY created_at DESC LIMIT $2",
                probe,
                limit,
            )
        return [r["thread_id"] for r in rows]
