"""TulipPgCheckpointer: threads in tulip's native ``PgCheckpointer`` table, read and written.

tulip-agents' ``PgCheckpointer`` keeps one row per checkpoint, apart per *tenant*::

    tulip_checkpoints(tenant, thread_id, checkpoint_id, seq bigint identity, data jsonb (the bare
                      state), metadata jsonb, oldest_at, created_at, updated_at,
                      PRIMARY KEY (tenant, thread_id, checkpoint_id))

with row-level security admitting only rows whose ``tenant`` equals the transaction's
``tulip.tenant`` setting. A thread's latest checkpoint is the one with the highest ``seq``. This
class speaks that layout, so a thread a tulip agent saved there can be loaded, continued, or
exported to any other checkpointer (and back) with :func:`tulip_nb.lab.export_threads`::

    cp = TulipPgCheckpointer("postgresql://app@db/prod", tenant="acme")
    await cp.list_threads()                       # the tenant's threads only
    state = await cp.load("support/42")

Every call pins the tenant for its transaction (``set_config('tulip.tenant', ..., true)``) *and*
filters on it, as tulip does. Which tenant: ``tenant_of(thread_id)`` when given, else ``tenant``.
Saves record ``parent_checkpoint_id`` (tulip ignores the extra key) and keep ``seq`` in
``created_at`` order, so "highest seq" and "newest created_at" always agree; ``expected_parent=``
is compare-and-swap under a per-thread advisory lock. :meth:`put_checkpoint` writes a checkpoint
verbatim (an import), renumbering ``seq`` when it lands before newer checkpoints.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator, Callable
from datetime import datetime
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import orjson

from tulip_nb.core import parse_datetime, utcnow
from tulip_nb.core.errors import BackendUnavailable, CheckpointConflict, CheckpointNotFound, UserError
from tulip_nb.core.state import AgentState, state_json_bytes
from tulip_nb.memory._envelope import info_row, state_from_obj
from tulip_nb.memory._pools import PoolPerLoop
from tulip_nb.memory.backends._base import InTreeCheckpointer
from tulip_nb.memory.checkpointer import (
    Capabilities,
    Checkpoint,
    CheckpointInfo,
    check_expected_parent,
    new_checkpoint_id,
    save_metadata,
    validate_checkpoint,
    validate_checkpoint_id,
    validate_thread_id,
)

__all__ = ["TENANT_GUC", "tulip_pg_from_url"]

TENANT_GUC = "tulip.tenant"
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
_TICK_US = 1


def _ident(name: str, what: str) -> str:
    if not _IDENT.match(name):
        raise UserError(f"{what} {name!r} is not a plain SQL identifier ([A-Za-z_][A-Za-z0-9_]*)")
    return name


def _import_asyncpg() -> Any:
    try:
        import asyncpg
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("TulipPgCheckpointer needs asyncpg: pip install 'tulip_nb[postgres]'") from e
    return asyncpg


def _oldest_at(state: AgentState) -> datetime | None:
    """The earliest ``tulip_at`` stamp on the messages (tulip's retention column), if any."""
    stamps = []
    for m in state.messages:
        raw = m.metadata.get("tulip_at") if m.metadata else None
        if isinstance(raw, str):
            with contextlib.suppress(ValueError):
                stamps.append(parse_datetime(raw))
    return min(stamps) if stamps else None


def _json_obj(raw: Any) -> Any:
    return orjson.loads(raw) if isinstance(raw, str | bytes) else raw


class TulipPgCheckpointer(InTreeCheckpointer):
    """tulip's ``PgCheckpointer`` table as a tulip_nb checkpointer (see the module docstring).

    Args:
        dsn: a libpq URL, ``postgresql://user@host:5432/db``.
        table, schema: where the table lives (tulip's defaults).
        tenant: the tenant of every call that ``tenant_of`` does not place.
        tenant_of: ``thread_id -> tenant`` for thread ids that carry their tenant.
        create_schema: create the table, indexes and policy when missing (tulip's DDL).
    """

    def __init__(
        self,
        dsn: str = "postgresql://postgres@localhost:5432/tulip",
        *,
        table: str = "tulip_checkpoints",
        schema: str = "public",
        tenant: str = "default",
        tenant_of: Callable[[str], str] | None = None,
        create_schema: bool = True,
        min_pool_size: int = 1,
        max_pool_size: int = 10,
        sign: bool = True,
    ) -> None:
        self.sign = sign
        if not tenant:
            raise UserError("tenant must be a non-empty string")
        self._asyncpg = _import_asyncpg()
        self.dsn = dsn
        self.table_name = _ident(table, "table")
        self.schema = _ident(schema, "schema")
        self.table = f"{self.schema}.{self.table_name}"
        self.tenant = tenant
        self.tenant_of = tenant_of
        self.create_schema = create_schema
        self._pool_args = {"min_size": min_pool_size, "max_size": max_pool_size}
        # asyncpg pools are bound to their event loop: one per loop, the DDL once
        self._pools: PoolPerLoop[Any] = PoolPerLoop(self._new_pool, lambda pool: pool.close(), self._create_schema)

    def __repr__(self) -> str:
        return f"TulipPgCheckpointer(table={self.table!r}, tenant={self.tenant!r})"

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(metadata_query=True, list_threads=True, branching=True, persistent_checkpoint_ids=True)

    # -- plumbing -----------------------------------------------------------------------------
    def tenant_for(self, thread_id: str) -> str:
        if self.tenant_of is None:
            return self.tenant
        found = self.tenant_of(thread_id)
        if not found:
            raise UserError(f"tenant_of placed thread {thread_id!r} in no tenant")
        return str(found)

    def ddl(self) -> list[str]:
        """The statements that create tulip's table, indexes and tenant policy."""
        t, n = self.table, self.table_name
        return [
            *([] if self.schema == "public" else [f"CREATE SCHEMA IF NOT EXISTS {self.schema}"]),
            f"CREATE TABLE IF NOT EXISTS {t} (tenant text NOT NULL, thread_id text NOT NULL, "
            "checkpoint_id text NOT NULL, seq bigint GENERATED BY DEFAULT AS IDENTITY, data jsonb NOT NULL, "
            "metadata jsonb NOT NULL DEFAULT '{}'::jsonb, oldest_at timestamptz, "
            "created_at timestamptz NOT NULL DEFAULT now(), updated_at timestamptz NOT NULL DEFAULT now(), "
            "PRIMARY KEY (tenant, thread_id, checkpoint_id))",
            f"CREATE INDEX IF NOT EXISTS idx_{n}_latest ON {t} (tenant, thread_id, seq DESC)",
            f"CREATE INDEX IF NOT EXISTS idx_{n}_oldest ON {t} (tenant, oldest_at)",
            f"ALTER TABLE {t} ENABLE ROW LEVEL SECURITY",
            f"ALTER TABLE {t} FORCE ROW LEVEL SECURITY",
            f"DROP POLICY IF EXISTS tenant_isolation ON {t}",
            f"CREATE POLICY tenant_isolation ON {t} USING (tenant = current_setting('{TENANT_GUC}', true)) "
            f"WITH CHECK (tenant = current_setting('{TENANT_GUC}', true))",
        ]

    async def _new_pool(self) -> Any:
        try:
            return await self._asyncpg.create_pool(self.dsn, **self._pool_args)
        except (TimeoutError, OSError, self._asyncpg.PostgresError) as e:
            raise BackendUnavailable(f"TulipPgCheckpointer cannot connect: {e}", path=self.table) from e

    async def _create_schema(self, pool: Any) -> None:
        async with pool.acquire() as conn:
            exists = await conn.fetchval("SELECT to_regclass($1)", self.table)
            if exists is None:
                if not self.create_schema:
                    raise UserError(f"table {self.table} does not exist and create_schema=False")
                async with conn.transaction():
                    await conn.execute("SELECT pg_advisory_xact_lock(hashtext($1))", self.table)
                    for stmt in self.ddl():
                        await conn.execute(stmt)

    async def _get_pool(self) -> Any:
        return await self._pools.get()

    @contextlib.asynccontextmanager
    async def _tx(
        self, thread_id: str | None, *, lock: bool = False, also: str | None = None
    ) -> AsyncIterator[tuple[Any, str]]:
        """A connection in a transaction with the tenant pinned (and the thread locked; with
        ``also``, that thread of the same tenant too, the two locks taken in one order)."""
        tenant = self.tenant_for(thread_id) if thread_id is not None else self.tenant
        pool = await self._get_pool()
        try:
            async with pool.acquire() as conn, conn.transaction():
                await conn.execute(f"SELECT set_config('{TENANT_GUC}', $1, true)", tenant)
                if lock and thread_id is not None:
                    for tid in sorted({thread_id, *([also] if also is not None else [])}):
                        await conn.execute(
                            "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))",
                            f"{self.table}\x1f{tenant}\x1f{tid}",
                        )
                yield conn, tenant
        except (OSError, self._asyncpg.PostgresConnectionError, self._asyncpg.InterfaceError) as e:
            raise BackendUnavailable(
                f"TulipPgCheckpointer I/O failed: {e}", path=self.table, thread_id=thread_id
            ) from e

    async def close(self) -> None:
        await self._pools.aclose()

    # -- contract -----------------------------------------------------------------------------
    async def save(
        self,
        state: AgentState,
        thread_id: str,
        checkpoint_id: str | None = None,
        metadata: dict[str, Any] | None = None,
        *,
        expected_parent: str | None = None,
    ) -> str:
        validate_thread_id(thread_id)
        cid = validate_checkpoint_id(checkpoint_id, thread_id) if checkpoint_id else new_checkpoint_id()
        data = state_json_bytes(state).decode()
        async with self._tx(thread_id, lock=True) as (conn, tenant):
            row = await conn.fetchrow(
                f"SELECT checkpoint_id, created_at, metadata::text AS metadata FROM {self.table} "
                "WHERE tenant = $1 AND thread_id = $2 "
                "ORDER BY seq DESC LIMIT 1",
                tenant,
                thread_id,
            )
            latest_id = row["checkpoint_id"] if row else None
            check_expected_parent(expected_parent, latest_id, thread_id)
            now = utcnow()
            if row is not None and now <= row["created_at"]:
                from datetime import timedelta

                now = row["created_at"] + timedelta(microseconds=_TICK_US)
            meta = save_metadata(
                metadata,
                latest_id,
                state=state,
                parent_metadata=(_json_obj(row["metadata"]) or {}) if row else None,
                thread_id=thread_id,
                sign=self.sign,
                created_at=now,
            )
            await self._upsert(conn, tenant, thread_id, cid, data, meta, now, _oldest_at(state))
        return cid

    async def _upsert(
        self,
        conn: Any,
        tenant: str,
        thread_id: str,
        cid: str,
        data: str,
        meta: dict[str, Any],
        created: datetime,
        oldest: datetime | None,
    ) -> None:
        await conn.execute(
            f"INSERT INTO {self.table} (tenant, thread_id, checkpoint_id, data, metadata, oldest_at, created_at) "
            "VALUES ($1, $2, $3, $4::jsonb, $5::jsonb, $6, $7) "
            "ON CONFLICT (tenant, thread_id, checkpoint_id) DO UPDATE SET data = EXCLUDED.data, "
            "metadata = EXCLUDED.metadata, oldest_at = EXCLUDED.oldest_at, created_at = EXCLUDED.created_at, "
            "seq = DEFAULT, updated_at = now()",
            tenant,
            thread_id,
            cid,
            data,
            orjson.dumps(meta, option=orjson.OPT_NON_STR_KEYS).decode(),
            oldest,
            created,
        )

    async def put_checkpoint(self, checkpoint: Checkpoint) -> None:
        ckpt = validate_checkpoint(checkpoint)
        tid, cid = ckpt.thread_id, ckpt.checkpoint_id
        data = state_json_bytes(ckpt.state).decode()
        async with self._tx(tid, lock=True) as (conn, tenant):
            await self._upsert(
                conn, tenant, tid, cid, data, dict(ckpt.metadata), ckpt.created_at, _oldest_at(ckpt.state)
            )
            # keep "highest seq" == "newest created_at": re-sequence what is newer than this one
            newer = await conn.fetch(
                f"SELECT checkpoint_id FROM {self.table} WHERE tenant = $1 AND thread_id = $2 "
                "AND created_at > $3 ORDER BY created_at, checkpoint_id",
                tenant,
                tid,
                ckpt.created_at,
            )
            for r in newer:
                await conn.execute(
                    f"UPDATE {self.table} SET seq = DEFAULT WHERE tenant = $1 AND thread_id = $2 "
                    "AND checkpoint_id = $3",
                    tenant,
                    tid,
                    r["checkpoint_id"],
                )

    async def load_checkpoint(self, thread_id: str, checkpoint_id: str | None = None) -> Checkpoint | None:
        validate_thread_id(thread_id)
        cols = "checkpoint_id, data::text AS data, metadata::text AS metadata, created_at"
        async with self._tx(thread_id) as (conn, tenant):
            if checkpoint_id is None:
                row = await conn.fetchrow(
                    f"SELECT {cols} FROM {self.table} WHERE tenant = $1 AND thread_id = $2 ORDER BY seq DESC LIMIT 1",
                    tenant,
                    thread_id,
                )
            else:
                row = await conn.fetchrow(
                    f"SELECT {cols} FROM {self.table} WHERE tenant = $1 AND thread_id = $2 AND checkpoint_id = $3",
                    tenant,
                    thread_id,
                    checkpoint_id,
                )
        if row is None:
            if checkpoint_id is not None:
                raise CheckpointNotFound("no such checkpoint", thread_id=thread_id, checkpoint_id=checkpoint_id)
            return None
        where = f"{self.table}[{tenant}/{thread_id}/{row['checkpoint_id']}]"
        state = state_from_obj(_json_obj(row["data"]), where=where, thread_id=thread_id)
        meta = _json_obj(row["metadata"]) or {}
        return Checkpoint(row["checkpoint_id"], thread_id, row["created_at"], state, dict(meta))

    async def list_checkpoint_infos(self, thread_id: str, limit: int | None = 10) -> list[CheckpointInfo]:
        validate_thread_id(thread_id)
        async with self._tx(thread_id) as (conn, tenant):
            rows = await conn.fetch(
                f"SELECT checkpoint_id, created_at, metadata::text AS metadata FROM {self.table} "
                "WHERE tenant = $1 AND thread_id = $2 ORDER BY seq DESC LIMIT $3",
                tenant,
                thread_id,
                limit,
            )
        return [
            CheckpointInfo(r["checkpoint_id"], thread_id, r["created_at"], dict(_json_obj(r["metadata"]) or {}))
            for r in rows
        ]

    async def delete(self, thread_id: str, checkpoint_id: str | None = None) -> bool:
        validate_thread_id(thread_id)
        async with self._tx(thread_id, lock=True) as (conn, tenant):
            if checkpoint_id is None:
                status = await conn.execute(
                    f"DELETE FROM {self.table} WHERE tenant = $1 AND thread_id = $2", tenant, thread_id
                )
            else:
                status = await conn.execute(
                    f"DELETE FROM {self.table} WHERE tenant = $1 AND thread_id = $2 AND checkpoint_id = $3",
                    tenant,
                    thread_id,
                    checkpoint_id,
                )
        return not str(status).endswith(" 0")

    async def copy_thread(self, source_thread_id: str, dest_thread_id: str) -> bool:
        """Copy every row of the source to an empty destination thread of the same tenant, in one
        transaction holding both threads' locks (a prune or delete of the source is before or after
        it, never half seen); each row's metadata records ``copied_from``."""
        validate_thread_id(source_thread_id)
        validate_thread_id(dest_thread_id)
        tenant = self.tenant_for(source_thread_id)
        if self.tenant_for(dest_thread_id) != tenant:
            raise UserError(
                f"copy_thread cannot move a thread between tenants ({tenant!r} -> {self.tenant_for(dest_thread_id)!r})",
                thread_id=dest_thread_id,
            )
        async with self._tx(source_thread_id, lock=True, also=dest_thread_id) as (conn, tenant):
            if await conn.fetchval(
                f"SELECT 1 FROM {self.table} WHERE tenant = $1 AND thread_id = $2 LIMIT 1", tenant, dest_thread_id
            ):
                raise CheckpointConflict(
                    "destination thread already has checkpoints; delete it first", thread_id=dest_thread_id
                )
            status = await conn.execute(
                f"INSERT INTO {self.table} (tenant, thread_id, checkpoint_id, data, metadata, oldest_at, created_at) "
                "SELECT tenant, $3, checkpoint_id, data, metadata || jsonb_build_object('copied_from', "
                "jsonb_build_object('thread_id', thread_id, 'checkpoint_id', checkpoint_id)), oldest_at, created_at "
                f"FROM {self.table} WHERE tenant = $1 AND thread_id = $2 ORDER BY seq",
                tenant,
                source_thread_id,
                dest_thread_id,
            )
        if str(status).endswith(" 0"):
            raise CheckpointNotFound("source thread has no checkpoints", thread_id=source_thread_id)
        return True

    async def query_by_metadata(self, key: str, value: Any, limit: int | None = 100) -> list[dict[str, Any]]:
        """The tenant's checkpoints with ``key == value`` in the save metadata (else the state's)."""
        probe = orjson.dumps({key: value}, option=orjson.OPT_NON_STR_KEYS).decode()
        async with self._tx(None) as (conn, tenant):
            rows = await conn.fetch(
                f"SELECT thread_id, checkpoint_id, created_at, metadata::text AS metadata FROM {self.table} "
                "WHERE tenant = $1 AND (metadata @> $2::jsonb "
                "OR (NOT metadata ? $3 AND data->'metadata' @> $2::jsonb)) "
                "ORDER BY created_at DESC LIMIT $4",
                tenant,
                probe,
                key,
                limit,
            )
        return [
            info_row(
                CheckpointInfo(
                    r["checkpoint_id"], r["thread_id"], r["created_at"], dict(_json_obj(r["metadata"]) or {})
                )
            )
            for r in rows
        ]

    async def _thread_ids(self) -> list[str]:
        """The threads of ``tenant`` (``tenant_of`` cannot enumerate: it places known ids)."""
        async with self._tx(None) as (conn, tenant):
            rows = await conn.fetch(f"SELECT DISTINCT thread_id FROM {self.table} WHERE tenant = $1", tenant)
        return [r["thread_id"] for r in rows]


def tulip_pg_from_url(url: str) -> TulipPgCheckpointer:
    """``tulip-pg://user@host:5432/db?tenant=acme&table=...&schema=...`` -> a checkpointer.

    (``postgresql+tulip://`` is accepted too.) The scheme becomes ``postgresql://`` for asyncpg.
    """
    parts = urlsplit(url)
    if parts.scheme not in ("tulip-pg", "postgresql+tulip"):
        raise UserError(f"not a tulip-pg URL: {url!r} (use tulip-pg://user@host:5432/db?tenant=...)")
    query = parse_qsl(parts.query, keep_blank_values=True)
    names = {"tenant", "table", "schema"}
    options = {k: v for k, v in query if k in names}
    rest = [(k, v) for k, v in query if k not in names]
    dsn = urlunsplit(("postgresql", parts.netloc, parts.path, urlencode(rest), ""))
    return TulipPgCheckpointer(
        dsn,
        tenant=options.get("tenant", "default"),
        table=options.get("table", "tulip_checkpoints"),
        schema=options.get("schema", "public"),
    )
