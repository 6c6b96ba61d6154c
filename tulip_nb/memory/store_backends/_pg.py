"""PgMemory: a shared store in PostgreSQL + pgvector, isolated per tenant by row-level security.

``namespace[0]`` is the **tenant**: a hard boundary. Every row carries it; a row-level-security
policy (``ENABLE`` + ``FORCE``, so it holds for the table owner too) admits only rows whose tenant
equals the transaction's ``tulip.tenant`` setting, which the store sets with ``set_config(...,
true)`` at the start of every transaction (so a pooled connection never carries one tenant's id
into another's work); every query also filters on the tenant explicitly. Connect as an ordinary
role: superusers and ``BYPASSRLS`` roles ignore every policy. Pass ``tenant=`` to pin a store to
one tenant, e.g. when handing it to code that must never name another::

    from tulip_nb.memory.store_backends import PgMemory

    store = PgMemory("postgresql://tulip_app@db/tulip", dim=256)
    await store.put(("acme", "memory", "cust-4821"), "fact-1", {"content": "prefers store credit"})
    hits = await store.search(("acme", "memory", "cust-4821"), query="store credit")
    await store.close()

What it offers: ranked full-text search (a generated ``tsvector`` with a GIN index, ``english``
stemming, ``ts_rank``; only matching rows), vectors of width ``dim`` in a ``vector(dim)`` column
with an HNSW cosine index (``search_by_embedding`` runs in the database, with pgvector's iterative
index scan so filters do not starve the result), ``list_namespaces`` and atomic ``put_batch``. The
table, index and policy are created on first use under an advisory lock (needs the ``vector``
extension to exist, or the right to create it).

The table layout is tulip's (``tulip_memories``: tenant, ns, key, value, metadata, content,
embedding, created_at, updated_at, version; RLS on ``tulip.tenant``), so both SDKs can share one;
tulip_nb adds the generated ``tsv`` column.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

from tulip_nb.core.errors import BackendUnavailable, UserError
from tulip_nb.memory._pools import PoolPerLoop
from tulip_nb.memory.store.base import (
    NS_SEP,
    BaseStore,
    Namespace,
    SemanticSearchResult,
    StoreCapabilities,
    StoreItem,
    decode_value,
    encode_value,
    validate_embedding,
    validate_key,
    validate_namespace,
)
from tulip_nb.memory.store.text import query_terms, searchable_text

try:
    import asyncpg  # type: ignore[import-untyped,unused-ignore]
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise ImportError("PgMemory needs asyncpg: pip install 'tulip_nb[postgres]'") from e

__all__ = ["PgMemory"]

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,50}$")
TENANT_SETTING = "tulip.tenant"
"""The setting the RLS policy reads (tulip's name, so both SDKs can share a table)."""
_ANN_MAX_DIM = 2000  # pgvector builds HNSW indexes up to 2000 dimensions


def _vector_literal(vec: Sequence[float]) -> str:
    return "[" + ",".join(repr(float(x)) for x in vec) + "]"


def _parse_vector(text: str) -> list[float]:
    return [float(x) for x in text.strip("[]").split(",") if x]


class PgMemory(BaseStore):
    """PostgreSQL + pgvector :class:`BaseStore`; see the module docstring.

    ``dsn`` is an asyncpg DSN; ``table`` a plain identifier; ``dim`` the width of stored vectors
    (an existing table's width must match); ``tenant`` pins the store to one tenant; ``pool_args``
    go to ``asyncpg.create_pool`` (e.g. ``max_size``).
    """

    def __init__(
        self,
        dsn: str,
        *,
        table: str = "tulip_memories",
        dim: int = 256,
        tenant: str | None = None,
        pool_args: dict[str, Any] | None = None,
    ) -> None:
        if not _IDENT.match(table):
            raise UserError(f"table must be a plain SQL identifier, got {table!r}")
        if not 1 <= dim <= 16000:
            raise UserError(f"dim must be between 1 and 16000, got {dim}")
        self.dsn = dsn
        self.table = table
        self.dim = dim
        self.tenant = tenant
        self._pool_args = {"min_size": 0, "max_size": 4, **(pool_args or {})}
        # asyncpg pools are bound to their event loop: one per loop, the schema once
        self._pools: PoolPerLoop[asyncpg.Pool] = PoolPerLoop(self._new_pool, lambda pool: pool.close(), self._setup)
        self._closed = False

    def __repr__(self) -> str:
        return f"PgMemory(table={self.table!r}, dim={self.dim}, tenant={self.tenant!r})"

    @property
    def capabilities(self) -> StoreCapabilities:
        return StoreCapabilities(
            search=True,
            semantic_search=True,
            embedding_dimension=self.dim,
            list_namespaces=True,
            batch_operations=True,
            transactions=True,
            durable=True,
        )

    # -- connection & schema ----------------------------------------------------------------------
    async def _new_pool(self) -> asyncpg.Pool:
        try:
            return await asyncpg.create_pool(self.dsn, **self._pool_args)
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as e:
            raise BackendUnavailable(f"cannot connect to PostgreSQL: {e}", table=self.table) from e

    async def _setup(self, pool: asyncpg.Pool) -> None:
        try:
            await self._ensure_schema(pool)
        except (OSError, asyncpg.PostgresConnectionError, asyncpg.InterfaceError) as e:
            raise BackendUnavailable(f"cannot connect to PostgreSQL: {e}", table=self.table) from e

    async def _get_pool(self) -> asyncpg.Pool:
        if self._closed:
            raise UserError("this PgMemory is closed")
        return await self._pools.get()

    async def _ensure_schema(self, pool: asyncpg.Pool) -> None:
        t = self.table
        async with pool.acquire() as conn, conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(hashtext($1))", f"tulip_nb.store.{t}")
            if not await conn.fetchval("SELECT 1 FROM pg_extension WHERE extname = 'vector'"):
                try:
                    await conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
                except asyncpg.PostgresError as e:
                    raise BackendUnavailable(
                        f"PgMemory needs the pgvector extension; run CREATE EXTENSION vector as a superuser ({e})",
                        table=t,
                    ) from e
            await conn.execute(
                f"CREATE TABLE IF NOT EXISTS {t} (tenant text NOT NULL, ns text NOT NULL, key text NOT NULL, "
                "value jsonb NOT NULL, metadata jsonb NOT NULL DEFAULT '{}', content text NOT NULL DEFAULT '', "
                f"embedding vector({self.dim}), created_at timestamptz NOT NULL DEFAULT now(), "
                "updated_at timestamptz NOT NULL DEFAULT now(), version integer NOT NULL DEFAULT 1, "
                "PRIMARY KEY (tenant, ns, key))"
            )
            width = await conn.fetchval(
                "SELECT atttypmod FROM pg_attribute WHERE attrelid = $1::regclass AND attname = 'embedding'", t
            )
            if width not in (None, -1, self.dim):
                raise UserError(
                    f"table {t} holds vectors of {width} dimensions, not {self.dim}: pass dim={width}", table=t
                )
            await conn.execute(
                f"ALTER TABLE {t} ADD COLUMN IF NOT EXISTS tsv tsvector "
                "GENERATED ALWAYS AS (to_tsvector('english', content)) STORED"
            )
            await conn.execute(f"CREATE INDEX IF NOT EXISTS {t}_tsv ON {t} USING gin (tsv)")
            await conn.execute(f"CREATE INDEX IF NOT EXISTS {t}_recent ON {t} (tenant, ns, updated_at DESC)")
            if self.dim <= _ANN_MAX_DIM:
                await conn.execute(
                    f"CREATE INDEX IF NOT EXISTS {t}_ann ON {t} USING hnsw (embedding vector_cosine_ops)"
                )
            await conn.execute(f"ALTER TABLE {t} ENABLE ROW LEVEL SECURITY")
            await conn.execute(f"ALTER TABLE {t} FORCE ROW LEVEL SECURITY")
            exists = await conn.fetchval(
                "SELECT 1 FROM pg_policies WHERE tablename = $1 AND policyname = 'tenant_isolation'", t
            )
            if not exists:
                await conn.execute(
                    f"CREATE POLICY tenant_isolation ON {t} "
                    f"USING (tenant = current_setting('{TENANT_SETTING}', true)) "
                    f"WITH CHECK (tenant = current_setting('{TENANT_SETTING}', true))"
                )

    def _tenant_of(self, namespace: Namespace) -> str:
        tenant = namespace[0]
        if self.tenant is not None and tenant != self.tenant:
            raise UserError(
                f"this PgMemory is pinned to tenant {self.tenant!r}; namespace[0] is {tenant!r}", namespace=namespace
            )
        return tenant

    @asynccontextmanager
    async def _tx(self, tenant: str) -> AsyncIterator[asyncpg.Connection]:
        """A transaction that RLS scopes to ``tenant``; driver errors become BackendUnavailable."""
        pool = await self._get_pool()
        try:
            async with pool.acquire() as conn, conn.transaction():
                await conn.execute(f"SELECT set_config('{TENANT_SETTING}', $1, true)", tenant)
                yield conn
        except (OSError, asyncpg.PostgresConnectionError, asyncpg.InterfaceError) as e:
            raise BackendUnavailable(f"PostgreSQL store error: {e}", table=self.table) from e

    def _key(self, namespace: Namespace, key: str) -> tuple[Namespace, str, str]:
        ns = validate_namespace(namespace)
        validate_key(key, ns)
        return ns, self._tenant_of(ns), NS_SEP.join(ns)

    def _item(self, namespace: Namespace, row: Any, score: float | None = None) -> StoreItem:
        return StoreItem(
            namespace,
            row["key"],
            decode_value(row["value"]),
            decode_value(row["metadata"]),
            row["created_at"],
            row["updated_at"],
            row["version"],
            score,
        )

    _SELECT = "SELECT key, value::text AS value, metadata::text AS metadata, created_at, updated_at, version"

    async def _upsert(
        self, conn: asyncpg.Connection, tenant: str, ns: str, key: str, value: Any, meta: Any, vec: str | None
    ) -> None:
        t = self.table
        await conn.execute(
            f"INSERT INTO {t} (tenant, ns, key, value, metadata, content, embedding, created_at, updated_at) "
            "SELECT $1, $2, $3, $4::jsonb, $5::jsonb, $6, $7::vector, c.ts, c.ts "
            "FROM (SELECT clock_timestamp() AS ts) c "
            "ON CONFLICT (tenant, ns, key) DO UPDATE SET value = EXCLUDED.value, metadata = EXCLUDED.metadata, "
            "content = EXCLUDED.content, embedding = EXCLUDED.embedding, updated_at = EXCLUDED.updated_at, "
            f"version = {t}.version + 1",
            tenant,
            ns,
            key,
            encode_value(value, namespace=(ns,), key=key).decode(),
            encode_value(dict(meta or {}), namespace=(ns,), key=key).decode(),
            searchable_text(value),
            vec,
        )

    # -- required ---------------------------------------------------------------------------------
    async def put(self, namespace: Namespace, key: str, value: Any, metadata: dict[str, Any] | None = None) -> None:
        ns, tenant, joined = self._key(namespace, key)
        encode_value(value, namespace=ns, key=key)  # fail before touching the network
        async with self._tx(tenant) as conn:
            await self._upsert(conn, tenant, joined, key, value, metadata, None)

    async def put_batch(self, items: list[tuple[Namespace, str, Any, dict[str, Any] | None]]) -> None:
        keyed = [(self._key(ns, key), key, value, meta) for ns, key, value, meta in items]
        tenants = {k[1] for k, *_ in keyed}
        if len(tenants) > 1:
            raise UserError(f"put_batch writes one tenant per call, got {sorted(tenants)}")
        if not keyed:
            return
        for (ns, _, _), key, value, meta in keyed:
            encode_value(value, namespace=ns, key=key)
            encode_value(dict(meta or {}), namespace=ns, key=key)
        async with self._tx(tenants.pop()) as conn:
            for (_, tenant, joined), key, value, meta in keyed:
                await self._upsert(conn, tenant, joined, key, value, meta, None)

    async def get(self, namespace: Namespace, key: str) -> Any | None:
        item = await self.get_item(namespace, key)
        return item.value if item is not None else None

    async def get_item(self, namespace: Namespace, key: str) -> StoreItem | None:
        ns, tenant, joined = self._key(namespace, key)
        async with self._tx(tenant) as conn:
            row = await conn.fetchrow(
                f"{self._SELECT} FROM {self.table} WHERE tenant = $1 AND ns = $2 AND key = $3", tenant, joined, key
            )
        return self._item(ns, row) if row is not None else None

    async def delete(self, namespace: Namespace, key: str) -> bool:
        _, tenant, joined = self._key(namespace, key)
        async with self._tx(tenant) as conn:
            status = await conn.execute(
                f"DELETE FROM {self.table} WHERE tenant = $1 AND ns = $2 AND key = $3", tenant, joined, key
            )
        return bool(status.rsplit(maxsplit=1)[-1] != "0")

    async def list_keys(self, namespace: Namespace, limit: int | None = 100) -> list[str]:
        ns = validate_namespace(namespace)
        tenant = self._tenant_of(ns)
        async with self._tx(tenant) as conn:
            rows = await conn.fetch(
                f"SELECT key FROM {self.table} WHERE tenant = $1 AND ns = $2 ORDER BY updated_at DESC, key LIMIT $3",
                tenant,
                NS_SEP.join(ns),
                None if limit is None else max(limit, 0),  # LIMIT NULL: no limit
            )
        return [r["key"] for r in rows]

    # -- optional ---------------------------------------------------------------------------------
    async def search(self, namespace: Namespace, query: str | None = None, limit: int = 10) -> list[StoreItem]:
        ns = validate_namespace(namespace)
        tenant = self._tenant_of(ns)
        terms = query_terms(query)
        where = f"FROM {self.table} WHERE tenant = $1 AND ns = $2"
        async with self._tx(tenant) as conn:
            if not terms:
                if query is not None and query.strip():
                    return []
                rows = await conn.fetch(
                    f"{self._SELECT} {where} ORDER BY updated_at DESC, key LIMIT $3",
                    tenant,
                    NS_SEP.join(ns),
                    max(limit, 0),
                )
                return [self._item(ns, r) for r in rows]
            # Each term goes through plainto_tsquery (stemmed, stop words dropped, no syntax to
            # inject), then the terms are OR-ed: an item matches when it has any of them.
            rows = await conn.fetch(
                f"WITH q AS (SELECT string_agg(t::text, ' | ')::tsquery AS q FROM "
                "(SELECT plainto_tsquery('english', w) AS t FROM unnest($4::text[]) AS w) s "
                "WHERE t::text <> '') "
                f"{self._SELECT}, ts_rank(tsv, q.q) AS rank FROM {self.table}, q "
                "WHERE tenant = $1 AND ns = $2 AND q.q IS NOT NULL AND tsv @@ q.q "
                "ORDER BY rank DESC, updated_at DESC LIMIT $3",
                tenant,
                NS_SEP.join(ns),
                max(limit, 0),
                terms,
            )
        return [self._item(ns, r, float(r["rank"])) for r in rows]

    async def put_with_embedding(
        self,
        namespace: Namespace,
        key: str,
        value: Any,
        embedding: list[float],
        metadata: dict[str, Any] | None = None,
    ) -> None:
        ns, tenant, joined = self._key(namespace, key)
        vec = validate_embedding(embedding, self.dim, namespace=ns, key=key)
        encode_value(value, namespace=ns, key=key)
        async with self._tx(tenant) as conn:
            await self._upsert(conn, tenant, joined, key, value, metadata, _vector_literal(vec))

    async def search_by_embedding(
        self,
        namespace: Namespace,
        query_embedding: list[float],
        limit: int = 10,
        threshold: float | None = None,
        metadata_filter: dict[str, Any] | None = None,
    ) -> list[SemanticSearchResult]:
        ns = validate_namespace(namespace)
        tenant = self._tenant_of(ns)
        q = validate_embedding(query_embedding, self.dim, namespace=ns, key="<query>")
        filt = encode_value(dict(metadata_filter or {}), namespace=ns, key="<filter>").decode()
        async with self._tx(tenant) as conn:
            # Keep scanning the HNSW graph until LIMIT rows pass the tenant/ns/metadata filters.
            await conn.execute("SELECT set_config('hnsw.iterative_scan', 'strict_order', true)")
            rows = await conn.fetch(
                f"SELECT * FROM ({self._SELECT}, embedding <=> $3::vector AS distance FROM {self.table} "
                "WHERE tenant = $1 AND ns = $2 AND embedding IS NOT NULL AND metadata @> $5::jsonb "
                "ORDER BY embedding <=> $3::vector LIMIT $4) hits WHERE $6::float8 IS NULL OR 1 - distance >= $6",
                tenant,
                NS_SEP.join(ns),
                _vector_literal(q),
                max(limit, 0),
                filt,
                threshold,
            )
        out = []
        for r in rows:
            score = 1.0 - float(r["distance"])
            out.append(SemanticSearchResult(self._item(ns, r, score), score, float(r["distance"])))
        return out

    async def get_embedding(self, namespace: Namespace, key: str) -> list[float] | None:
        _, tenant, joined = self._key(namespace, key)
        async with self._tx(tenant) as conn:
            text = await conn.fetchval(
                f"SELECT embedding::text FROM {self.table} WHERE tenant = $1 AND ns = $2 AND key = $3",
                tenant,
                joined,
                key,
            )
        return _parse_vector(text) if text is not None else None

    async def list_namespaces(self, prefix: Sequence[str] | None = None, limit: int = 100) -> list[Namespace]:
        """Namespaces under ``prefix``, which must name the tenant (``prefix[0]``) unless the store
        is pinned to one: RLS shows a transaction one tenant's rows, never all."""
        if prefix is None:
            if self.tenant is None:
                raise UserError("PgMemory.list_namespaces needs prefix=(tenant, ...) or PgMemory(tenant=...)")
            prefix = (self.tenant,)
        p = validate_namespace(prefix)
        tenant = self._tenant_of(p)
        joined = NS_SEP.join(p)
        async with self._tx(tenant) as conn:
            rows = await conn.fetch(
                f"SELECT DISTINCT ns FROM {self.table} WHERE tenant = $1 AND (ns = $2 OR starts_with(ns, $3)) "
                "ORDER BY ns LIMIT $4",
                tenant,
                joined,
                joined + NS_SEP,
                max(limit, 0),
            )
        return sorted(tuple(r["ns"].split(NS_SEP)) for r in rows)

    # -- lifecycle --------------------------------------------------------------------------------
    async def close(self) -> None:
        """Close the connection pool (idempotent)."""
        self._closed = True
        await self._pools.aclose()
