"""InMemoryStore: the in-process store for tests, notebooks and the REPL.

Everything lives in a dict and is gone when the process ends. It supports every optional
operation, so code written against it runs unchanged on :class:`HolographicStore` or
:class:`PgMemory`::

    store = InMemoryStore()
    await store.put(("memory", "cust-4821"), "fact-1", {"note": "prefers store credit"})
    hits = await store.search(("memory", "cust-4821"), query="store credit", limit=5)

Values are copied through JSON on the way in and out, so mutating a value after ``put`` (or a
returned value) never changes what is stored, exactly as with the durable stores.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from tulip_nb.core import utcnow
from tulip_nb.memory.store.base import (
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
from tulip_nb.memory.store.text import bm25_scores, query_terms, searchable_text

__all__ = ["InMemoryStore"]


@dataclass
class _Row:
    item: StoreItem  # value kept as decoded JSON; copied out through ``raw``
    raw: bytes
    metadata_raw: bytes
    text: str
    seq: int
    embedding: list[float] | None = None


class InMemoryStore(BaseStore):
    """A dict-backed :class:`BaseStore` with ranked search (BM25) and cosine vector search."""

    def __init__(self) -> None:
        self._rows: dict[Namespace, dict[str, _Row]] = {}
        self._seq = itertools.count()

    def __repr__(self) -> str:
        return f"InMemoryStore(namespaces={len(self._rows)}, items={sum(len(r) for r in self._rows.values())})"

    @property
    def capabilities(self) -> StoreCapabilities:
        return StoreCapabilities(search=True, semantic_search=True, list_namespaces=True, batch_operations=True)

    # -- helpers ----------------------------------------------------------------------------------
    @staticmethod
    def _copy(row: _Row, score: float | None = None) -> StoreItem:
        return replace(row.item, value=decode_value(row.raw), metadata=decode_value(row.metadata_raw), score=score)

    def _put(
        self, namespace: Namespace, key: str, value: Any, metadata: dict[str, Any] | None, embedding: list[float] | None
    ) -> None:
        ns = validate_namespace(namespace)
        validate_key(key, ns)
        raw = encode_value(value, namespace=ns, key=key)
        meta_raw = encode_value(dict(metadata or {}), namespace=ns, key=key)
        now = utcnow()
        rows = self._rows.setdefault(ns, {})
        old = rows.get(key)
        item = StoreItem(
            ns,
            key,
            decode_value(raw),
            decode_value(meta_raw),
            old.item.created_at if old else now,
            now,
            old.item.version + 1 if old else 1,
        )
        rows[key] = _Row(item, raw, meta_raw, searchable_text(item.value), next(self._seq), embedding)

    def _namespace_rows(self, namespace: Namespace) -> list[_Row]:
        rows = self._rows.get(validate_namespace(namespace), {})
        return sorted(rows.values(), key=lambda r: -r.seq)

    # -- required ---------------------------------------------------------------------------------
    async def put(self, namespace: Namespace, key: str, value: Any, metadata: dict[str, Any] | None = None) -> None:
        self._put(namespace, key, value, metadata, None)

    async def get(self, namespace: Namespace, key: str) -> Any | None:
        item = await self.get_item(namespace, key)
        return item.value if item is not None else None

    async def get_item(self, namespace: Namespace, key: str) -> StoreItem | None:
        ns = validate_namespace(namespace)
        row = self._rows.get(ns, {}).get(validate_key(key, ns))
        return self._copy(row) if row is not None else None

    async def delete(self, namespace: Namespace, key: str) -> bool:
        ns = validate_namespace(namespace)
        rows = self._rows.get(ns)
        if rows is None or rows.pop(validate_key(key, ns), None) is None:
            return False
        if not rows:
            del self._rows[ns]
        return True

    async def list_keys(self, namespace: Namespace, limit: int | None = 100) -> list[str]:
        rows = self._namespace_rows(namespace)
        return [r.item.key for r in (rows if limit is None else rows[: max(limit, 0)])]

    # -- optional ---------------------------------------------------------------------------------
    async def put_batch(self, items: list[tuple[Namespace, str, Any, dict[str, Any] | None]]) -> None:
        # Validate everything first so the batch is all-or-nothing.
        for ns, key, value, metadata in items:
            validate_key(key, validate_namespace(ns))
            encode_value(value, namespace=tuple(ns), key=key)
            encode_value(dict(metadata or {}), namespace=tuple(ns), key=key)
        for ns, key, value, metadata in items:
            self._put(ns, key, value, metadata, None)

    async def search(self, namespace: Namespace, query: str | None = None, limit: int = 10) -> list[StoreItem]:
        rows = self._namespace_rows(namespace)
        terms = query_terms(query)
        if not terms:
            if query is not None and query.strip():
                return []  # only stop words: nothing to match on
            return [self._copy(r) for r in rows[: max(limit, 0)]]
        scores = bm25_scores(terms, [r.text for r in rows])
        ranked = sorted(((s, r) for s, r in zip(scores, rows, strict=True) if s > 0), key=lambda p: (-p[0], -p[1].seq))
        return [self._copy(r, s) for s, r in ranked[: max(limit, 0)]]

    async def put_with_embedding(
        self,
        namespace: Namespace,
        key: str,
        value: Any,
        embedding: list[float],
        metadata: dict[str, Any] | None = None,
    ) -> None:
        ns = validate_namespace(namespace)
        vec = validate_embedding(embedding, self._dimension_of(ns), namespace=ns, key=key)
        self._put(ns, key, value, metadata, vec)

    def _dimension_of(self, namespace: Namespace) -> int | None:
        for row in self._rows.get(namespace, {}).values():
            if row.embedding is not None:
                return len(row.embedding)
        return None

    async def search_by_embedding(
        self,
        namespace: Namespace,
        query_embedding: list[float],
        limit: int = 10,
        threshold: float | None = None,
        metadata_filter: dict[str, Any] | None = None,
    ) -> list[SemanticSearchResult]:
        ns = validate_namespace(namespace)
        q = validate_embedding(query_embedding, self._dimension_of(ns), namespace=ns, key="<query>")
        hits = []
        for row in self._namespace_rows(ns):
            if row.embedding is None or not metadata_matches(row.item.metadata, metadata_filter):
                continue
            score = cosine(q, row.embedding)
            if threshold is None or score >= threshold:
                hits.append((score, row))
        hits.sort(key=lambda p: (-p[0], -p[1].seq))
        return [SemanticSearchResult(self._copy(r, s), s, 1.0 - s) for s, r in hits[: max(limit, 0)]]

    async def get_embedding(self, namespace: Namespace, key: str) -> list[float] | None:
        ns = validate_namespace(namespace)
        row = self._rows.get(ns, {}).get(validate_key(key, ns))
        return list(row.embedding) if row is not None and row.embedding is not None else None

    async def list_namespaces(self, prefix: Sequence[str] | None = None, limit: int = 100) -> list[Namespace]:
        p = validate_namespace(prefix) if prefix is not None else ()
        found = sorted(ns for ns, rows in self._rows.items() if rows and ns[: len(p)] == p)
        return found[: max(limit, 0)]
