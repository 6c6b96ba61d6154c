"""HolographicStore: a durable store in one SQLite file, with FTS5 search and cosine search.

No server, no extra package: Python's ``sqlite3`` with the FTS5 extension (built into CPython's
SQLite). Give it a file path for durability; the default ``":memory:"`` lives and dies with the
store object, as the seed says::

    from tulip_nb.memory.store_backends import HolographicStore

    async with HolographicStore("./memory.db") as store:
        await store.put(("acme", "playbook"), "refunds", {"content": "Refunds over $500 need approval"})
        hits = await store.search(("acme", "playbook"), query="refund approval")   # bm25-ranked

How it stays correct and out of the way:

- **Never blocks the event loop.** Every call runs on the store's own worker thread (one thread,
  one connection), so a notebook stays responsive while SQLite waits on a lock or the disk.
- **Safe under concurrent writers.** The file is in WAL mode (readers never block the writer) with
  a busy timeout; each write is one ``BEGIN IMMEDIATE`` transaction, so two processes putting the
  same key serialise and the version counts every put.
- **Search returns only matches.** ``search(ns, query)`` is an FTS5 ``MATCH`` of any query term
  (Porter-stemmed), ranked by ``bm25()``; ``item.score`` is ``-bm25`` (higher is better).
- **Embeddings are optional.** :meth:`put_with_embedding` stores a float vector beside the row;
  :meth:`search_by_embedding` ranks the namespace's vectors by cosine in the worker thread (a linear
  scan: fine for the thousands of items a personal memory holds; use :class:`PgMemory` for more).

The file layout is tulip's (tables ``items`` and ``items_fts``, namespace joined with ``\\x1f``),
so tulip and tulip_nb can open each other's memory files; tulip_nb adds an ``embedding`` column.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from array import array
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from tulip_nb.core import parse_datetime, utcnow
from tulip_nb.core.errors import BackendUnavailable, UserError
from tulip_nb.memory.store.base import (
    NS_SEP,
    BaseStore,
    Namespace,
    SemanticSearchResult,
    StoreCapabilities,
    StoreItem,
    cosine,
    decode_value,
    encode_value,
    metadata_matches,
    validate_embedding,
    validate_key,
    validate_namespace,
)
from tulip_nb.memory.store.text import fts5_query, query_terms, searchable_text

__all__ = ["HolographicStore"]

T = TypeVar("T")

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS items (ns TEXT, key TEXT, value TEXT, metadata TEXT, created_at TEXT, "
    "updated_at TEXT, version INTEGER, content TEXT, hrr BLOB, PRIMARY KEY (ns, key))",
    "CREATE VIRTUAL TABLE IF NOT EXISTS items_fts USING fts5(ns UNINDEXED, key UNINDEXED, content, "
    "tokenize='porter unicode61')",
    "CREATE INDEX IF NOT EXISTS items_ns_updated ON items (ns, updated_at)",
)
_COLUMNS = "key, value, metadata, created_at, updated_at, version"


def _stamp() -> str:
    return utcnow().isoformat(timespec="microseconds")


def _pack(vec: Sequence[float]) -> bytes:
    return array("d", vec).tobytes()


def _unpack(blob: bytes) -> list[float]:
    out = array("d")
    out.frombytes(blob)
    return out.tolist()


class HolographicStore(BaseStore):
    """SQLite + FTS5 :class:`BaseStore`; see the module docstring.

    ``path`` is a file (created with its directory) or ``":memory:"``; ``busy_timeout`` is how long
    a write waits for another writer (seconds) before :class:`BackendUnavailable`.
    """

    def __init__(self, path: str | Path = ":memory:", *, busy_timeout: float = 10.0) -> None:
        self.path = str(path)
        self.busy_timeout = busy_timeout
        self._executor: ThreadPoolExecutor | None = ThreadPoolExecutor(1, thread_name_prefix="HolographicStore")
        self._conn: sqlite3.Connection | None = None
        self._closing = threading.Lock()
        try:
            self._executor.submit(self._open).result()
        except BaseException:
            self._executor.shutdown(wait=True)
            self._executor = None
            raise

    def __repr__(self) -> str:
        return f"HolographicStore({self.path!r})"

    @property
    def capabilities(self) -> StoreCapabilities:
        return StoreCapabilities(
            search=True,
            semantic_search=True,
            list_namespaces=True,
            batch_operations=True,
            transactions=True,
            durable=self.path != ":memory:",
        )

    # -- the worker thread ------------------------------------------------------------------------
    def _open(self) -> None:
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        try:
            conn = sqlite3.connect(self.path, timeout=self.busy_timeout, isolation_level=None)
        except sqlite3.Error as e:
            raise BackendUnavailable(f"cannot open the SQLite store: {e}", path=self.path) from e
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")
            if self.path != ":memory:":
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("BEGIN IMMEDIATE")
            for statement in _SCHEMA:
                conn.execute(statement)
            columns = {row[1] for row in conn.execute("PRAGMA table_info(items)")}
            if "embedding" not in columns:  # a file written by tulip, or by an older tulip_nb
                conn.execute("ALTER TABLE items ADD COLUMN embedding BLOB")
            conn.execute("COMMIT")
        except sqlite3.Error as e:
            conn.close()
            raise BackendUnavailable(f"cannot prepare the SQLite store: {e}", path=self.path) from e
        self._conn = conn

    async def _run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        executor = self._executor
        if executor is None:
            raise UserError("this HolographicStore is closed", path=self.path)

        def call() -> T:
            conn = self._conn
            if conn is None:
                raise UserError("this HolographicStore is closed", path=self.path)
            try:
                return fn(conn)
            except sqlite3.Error as e:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise BackendUnavailable(f"SQLite store error: {e}", path=self.path) from e

        return await asyncio.get_running_loop().run_in_executor(executor, call)

    @staticmethod
    def _write(conn: sqlite3.Connection, body: Callable[[], T]) -> T:
        conn.execute("BEGIN IMMEDIATE")
        try:
            out = body()
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
        return out

    @staticmethod
    def _upsert(
        conn: sqlite3.Connection, ns: str, key: str, raw: bytes, meta: bytes, text: str, emb: bytes | None
    ) -> None:
        old = conn.execute("SELECT created_at, version FROM items WHERE ns=? AND key=?", (ns, key)).fetchone()
        now = _stamp()
        conn.execute(
            "INSERT OR REPLACE INTO items (ns, key, value, metadata, created_at, updated_at, version, content, "
            "hrr, embedding) VALUES (?,?,?,?,?,?,?,?,NULL,?)",
            (ns, key, raw.decode(), meta.decode(), old[0] if old else now, now, old[1] + 1 if old else 1, text, emb),
        )
        conn.execute("DELETE FROM items_fts WHERE ns=? AND key=?", (ns, key))
        conn.execute("INSERT INTO items_fts (ns, key, content) VALUES (?,?,?)", (ns, key, text))

    @staticmethod
    def _item(namespace: Namespace, row: Sequence[Any], score: float | None = None) -> StoreItem:
        return StoreItem(
            namespace,
            row[0],
            decode_value(row[1]),
            decode_value(row[2]) if row[2] else {},
            parse_datetime(row[3]),
            parse_datetime(row[4]),
            int(row[5]),
            score,
        )

    # -- required ---------------------------------------------------------------------------------
    def _prepare(
        self, namespace: Namespace, key: str, value: Any, metadata: dict[str, Any] | None
    ) -> tuple[str, str, bytes, bytes, str]:
        ns = validate_namespace(namespace)
        validate_key(key, ns)
        raw = encode_value(value, namespace=ns, key=key)
        meta = encode_value(dict(metadata or {}), namespace=ns, key=key)
        return NS_SEP.join(ns), key, raw, meta, searchable_text(value)

    async def put(self, namespace: Namespace, key: str, value: Any, metadata: dict[str, Any] | None = None) -> None:
        args = self._prepare(namespace, key, value, metadata)
        await self._run(lambda c: self._write(c, lambda: self._upsert(c, *args, None)))

    async def put_batch(self, items: list[tuple[Namespace, str, Any, dict[str, Any] | None]]) -> None:
        prepared = [self._prepare(*item) for item in items]

        def body(c: sqlite3.Connection) -> None:
            for args in prepared:
                self._upsert(c, *args, None)

        await self._run(lambda c: self._write(c, lambda: body(c)))

    async def get(self, namespace: Namespace, key: str) -> Any | None:
        item = await self.get_item(namespace, key)
        return item.value if item is not None else None

    async def get_item(self, namespace: Namespace, key: str) -> StoreItem | None:
        ns = validate_namespace(namespace)
        validate_key(key, ns)
        row = await self._run(
            lambda c: c.execute(f"SELECT {_COLUMNS} FROM items WHERE ns=? AND key=?", (NS_SEP.join(ns), key)).fetchone()
        )
        return self._item(ns, row) if row is not None else None

    async def delete(self, namespace: Namespace, key: str) -> bool:
        ns = validate_namespace(namespace)
        validate_key(key, ns)
        joined = NS_SEP.join(ns)

        def body(c: sqlite3.Connection) -> bool:
            gone = c.execute("DELETE FROM items WHERE ns=? AND key=?", (joined, key)).rowcount
            c.execute("DELETE FROM items_fts WHERE ns=? AND key=?", (joined, key))
            return gone > 0

        return await self._run(lambda c: self._write(c, lambda: body(c)))

    async def list_keys(self, namespace: Namespace, limit: int | None = 100) -> list[str]:
        ns = NS_SEP.join(validate_namespace(namespace))
        cap = -1 if limit is None else max(limit, 0)  # SQLite: a negative LIMIT is no limit
        rows = await self._run(
            lambda c: c.execute(
                "SELECT key FROM items WHERE ns=? ORDER BY updated_at DESC, key LIMIT ?", (ns, cap)
            ).fetchall()
        )
        return [r[0] for r in rows]

    # -- optional ---------------------------------------------------------------------------------
    async def search(self, namespace: Namespace, query: str | None = None, limit: int = 10) -> list[StoreItem]:
        ns = validate_namespace(namespace)
        joined = NS_SEP.join(ns)
        terms = query_terms(query)
        if not terms:
            if query is not None and query.strip():
                return []
            rows = await self._run(
                lambda c: c.execute(
                    f"SELECT {_COLUMNS} FROM items WHERE ns=? ORDER BY updated_at DESC, key LIMIT ?",
                    (joined, max(limit, 0)),
                ).fetchall()
            )
            return [self._item(ns, r) for r in rows]
        sql = (
            "SELECT i.key, i.value, i.metadata, i.created_at, i.updated_at, i.version, bm25(items_fts) AS rank "
            "FROM items_fts JOIN items i ON i.ns = items_fts.ns AND i.key = items_fts.key "
            "WHERE items_fts MATCH ? AND items_fts.ns = ? ORDER BY rank, i.updated_at DESC LIMIT ?"
        )
        match = fts5_query(terms)
        rows = await self._run(lambda c: c.execute(sql, (match, joined, max(limit, 0))).fetchall())
        return [self._item(ns, r[:6], -float(r[6])) for r in rows]

    async def put_with_embedding(
        self,
        namespace: Namespace,
        key: str,
        value: Any,
        embedding: list[float],
        metadata: dict[str, Any] | None = None,
    ) -> None:
        args = self._prepare(namespace, key, value, metadata)
        vec = validate_embedding(embedding, None, namespace=tuple(namespace), key=key)

        def body(c: sqlite3.Connection) -> None:
            self._check_dimension(c, args[0], len(vec), key)
            self._upsert(c, *args, _pack(vec))

        await self._run(lambda c: self._write(c, lambda: body(c)))

    def _check_dimension(self, c: sqlite3.Connection, ns: str, dim: int, key: str) -> None:
        row = c.execute(
            "SELECT length(embedding) / 8 FROM items WHERE ns=? AND embedding IS NOT NULL AND key<>? LIMIT 1",
            (ns, key),
        ).fetchone()
        if row is not None and row[0] != dim:
            raise UserError(
                f"embedding has {dim} dimensions, this namespace holds {row[0]}",
                namespace=tuple(ns.split(NS_SEP)),
                key=key,
            )

    async def search_by_embedding(
        self,
        namespace: Namespace,
        query_embedding: list[float],
        limit: int = 10,
        threshold: float | None = None,
        metadata_filter: dict[str, Any] | None = None,
    ) -> list[SemanticSearchResult]:
        ns = validate_namespace(namespace)
        q = validate_embedding(query_embedding, None, namespace=ns, key="<query>")

        def scan(c: sqlite3.Connection) -> list[tuple[float, tuple[Any, ...]]]:
            self._check_dimension(c, NS_SEP.join(ns), len(q), "\x00")
            hits = []
            rows = c.execute(
                f"SELECT {_COLUMNS}, embedding FROM items WHERE ns=? AND embedding IS NOT NULL "
                "ORDER BY updated_at DESC",
                (NS_SEP.join(ns),),
            )
            for row in rows:
                if metadata_filter and not metadata_matches(decode_value(row[2] or "{}"), metadata_filter):
                    continue
                score = cosine(q, _unpack(row[6]))
                if threshold is None or score >= threshold:
                    hits.append((score, tuple(row[:6])))
            hits.sort(key=lambda h: -h[0])
            return hits[: max(limit, 0)]

        return [SemanticSearchResult(self._item(ns, r, s), s, 1.0 - s) for s, r in await self._run(scan)]

    async def get_embedding(self, namespace: Namespace, key: str) -> list[float] | None:
        ns = validate_namespace(namespace)
        validate_key(key, ns)
        row = await self._run(
            lambda c: c.execute("SELECT embedding FROM items WHERE ns=? AND key=?", (NS_SEP.join(ns), key)).fetchone()
        )
        return _unpack(row[0]) if row is not None and row[0] is not None else None

    async def list_namespaces(self, prefix: Sequence[str] | None = None, limit: int = 100) -> list[Namespace]:
        if prefix is None:
            sql, args = "SELECT DISTINCT ns FROM items ORDER BY ns LIMIT ?", (max(limit, 0),)
        else:
            p = NS_SEP.join(validate_namespace(prefix))
            sql = "SELECT DISTINCT ns FROM items WHERE ns = ? OR substr(ns, 1, ?) = ? ORDER BY ns LIMIT ?"
            args = (p, len(p) + 1, p + NS_SEP, max(limit, 0))  # type: ignore[assignment]
        rows = await self._run(lambda c: c.execute(sql, args).fetchall())
        return sorted(tuple(r[0].split(NS_SEP)) for r in rows)

    # -- lifecycle --------------------------------------------------------------------------------
    async def close(self) -> None:
        """Close the connection and stop the worker thread (idempotent)."""
        with self._closing:
            executor, self._executor = self._executor, None
        if executor is None:
            return

        def shut() -> None:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

        await asyncio.get_running_loop().run_in_executor(executor, shut)
        executor.shutdown(wait=True)

    def close_sync(self) -> None:
        """:meth:`close` for sync code (scripts, ``atexit``)."""
        with self._closing:
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.submit(lambda: self._conn.close() if self._conn is not None else None).result()
            self._conn = None
            executor.shutdown(wait=True)
