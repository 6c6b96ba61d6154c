"""The cross-thread store contract: :class:`BaseStore`, its items, capabilities and errors.

A checkpointer keeps *one thread's* state. A **store** keeps data that outlives any one thread:
a team playbook, a pricing-exception cache, facts about a customer that every future case should
know. Data is addressed by a **namespace** (a tuple of strings, most general first, e.g.
``("acme", "memory", "cust-4821")``) and a **key** inside it; the value is any JSON value.

Every store implements ``put`` / ``get`` / ``delete`` / ``list_keys`` (the seed's interface);
``get_item`` has a default built on ``get`` that stores with real bookkeeping override. The rest is
optional and advertised through :attr:`BaseStore.capabilities`; calling an operation whose flag is
off raises :class:`StoreCapabilityError` naming the capability (it is a ``NotImplementedError``, so
code written against tulip's stores keeps working)::

    store = InMemoryStore()
    await store.put(("acme", "memory"), "fact-1", {"content": "prefers store credit"})
    if store.capabilities.search:
        hits = await store.search(("acme", "memory"), query="store credit", limit=5)

Each item carries ``created_at`` / ``updated_at`` (aware UTC) and a ``version`` that starts at 1
and grows by one on every put of the same key. ``search`` returns only items that match the query
(best first, ``item.score`` set); ``query=None`` lists the namespace, most recently updated first.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime
from types import TracebackType
from typing import Any

import orjson

from tulip_nb.core import parse_datetime, utcnow
from tulip_nb.core.errors import CapabilityNotSupported, UserError

__all__ = [
    "NS_SEP",
    "cosine",
    "decode_value",
    "encode_value",
    "validate_embedding",
    "validate_key",
    "validate_namespace",
]

Namespace = tuple[str, ...]

NS_SEP = "\x1f"
"""Joins a namespace tuple into one string in SQL stores (the ASCII unit separator, as tulip)."""


class StoreCapabilityError(CapabilityNotSupported):
    """An optional store operation whose capability flag is off for this store.

    Carries ``capability``, ``store_class`` and ``hint`` (tulip's attributes) besides the
    :class:`~tulip_nb.core.errors.CapabilityNotSupported` ones; catch it as ``NotImplementedError``
    to fall back, e.g. from ``search`` to ``list_keys``.
    """

    def __init__(self, capability: str, store_class: str, hint: str | None = None, *, operation: str = "") -> None:
        self.store_class = store_class
        self.hint = hint
        super().__init__(store_class, capability, operation or capability)
        if hint:
            self.message = f"{self.message}. {hint}"
            self.args = (self.message,)

    def __str__(self) -> str:
        return self.message


@dataclass(frozen=True)
class StoreCapabilities:
    """Which optional operations a store supports (all off by default).

    ``search`` — ranked full-text :meth:`BaseStore.search`; ``semantic_search`` —
    :meth:`BaseStore.put_with_embedding` / :meth:`BaseStore.search_by_embedding` (cosine);
    ``embedding_dimension`` — the one vector width the store accepts (``None``: any, fixed per
    namespace by its first vector); ``list_namespaces``; ``batch_operations`` — ``put_batch`` in
    one transaction; ``transactions``; ``ttl``; ``durable`` — data survives the process.
    """

    search: bool = False
    semantic_search: bool = False
    embedding_dimension: int | None = None
    ttl: bool = False
    list_namespaces: bool = False
    batch_operations: bool = False
    transactions: bool = False
    durable: bool = False

    def enabled(self) -> list[str]:
        """Names of the boolean capabilities that are on."""
        return [f.name for f in fields(self) if getattr(self, f.name) is True]


@dataclass
class StoreItem:
    """One stored value with its bookkeeping (tulip's fields, plus ``score`` from searches)."""

    namespace: Namespace
    key: str
    value: Any
    metadata: dict[str, Any]
    created_at: datetime
    updated_at: datetime
    version: int = 1
    score: float | None = field(default=None, compare=False)
    """Relevance from :meth:`BaseStore.search` (higher is better; not comparable across stores)."""

    def to_dict(self) -> dict[str, Any]:
        """Tulip's JSON shape of an item."""
        return {
            "namespace": list(self.namespace),
            "key": self.key,
            "value": self.value,
            "metadata": self.metadata,
            "created_at": self.created_at.isoformat(),
            "updated_at": self.updated_at.isoformat(),
            "version": self.version,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> StoreItem:
        return cls(
            namespace=tuple(d["namespace"]),
            key=d["key"],
            value=d["value"],
            metadata=dict(d.get("metadata") or {}),
            created_at=parse_datetime(d["created_at"]),
            updated_at=parse_datetime(d["updated_at"]),
            version=int(d.get("version", 1)),
        )


@dataclass
class SemanticSearchResult:
    """One hit of :meth:`BaseStore.search_by_embedding`: the item, cosine ``score`` in [-1, 1]
    (higher is closer) and ``distance`` = ``1 - score`` (pgvector's ``<=>``)."""

    item: StoreItem
    score: float
    distance: float | None = None


# -- validation & encoding (shared by every store) -----------------------------------------------
def validate_namespace(namespace: object) -> Namespace:
    """``namespace`` as a tuple, or :class:`UserError`: non-empty strings without NUL or ``\\x1f``."""
    if isinstance(namespace, str) or not isinstance(namespace, Sequence) or not namespace:
        raise UserError(f"namespace must be a non-empty tuple of str, got {namespace!r}")
    for part in namespace:
        if not isinstance(part, str) or not part or "\x00" in part or NS_SEP in part:
            raise UserError(
                f"namespace parts must be non-empty str without NUL or \\x1f, got {part!r}", namespace=namespace
            )
    return tuple(namespace)


def validate_key(key: object, namespace: Namespace | None = None) -> str:
    if not isinstance(key, str) or not key or "\x00" in key:
        raise UserError(f"key must be a non-empty str without NUL, got {key!r}", namespace=namespace)
    return key


def encode_value(value: Any, *, namespace: Namespace, key: str) -> bytes:
    """The JSON bytes of ``value`` (and the check that it *is* JSON): :class:`UserError` if not."""
    try:
        return orjson.dumps(value)
    except TypeError as e:
        raise UserError(f"store values must be JSON-serialisable: {e}", namespace=namespace, key=key) from e


def decode_value(raw: bytes | str) -> Any:
    return orjson.loads(raw)


def validate_embedding(embedding: object, dimension: int | None, *, namespace: Namespace, key: str) -> list[float]:
    """A finite, non-zero vector of floats, of ``dimension`` when the store has a fixed one."""
    if isinstance(embedding, str | bytes) or not isinstance(embedding, Sequence) or not embedding:
        raise UserError("embedding must be a non-empty sequence of numbers", namespace=namespace, key=key)
    try:
        vec = [float(x) for x in embedding]
    except (TypeError, ValueError) as e:
        raise UserError(f"embedding must be numbers: {e}", namespace=namespace, key=key) from e
    if dimension is not None and len(vec) != dimension:
        raise UserError(
            f"embedding has {len(vec)} dimensions, this store holds {dimension}", namespace=namespace, key=key
        )
    if not all(math.isfinite(x) for x in vec) or not any(vec):
        raise UserError("embedding must be finite and not all zeros", namespace=namespace, key=key)
    return vec


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    """Cosine similarity of two equally long vectors (0.0 when either is all zeros)."""
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    na = math.sqrt(sum(x * x for x in a))
    nb = math.sqrt(sum(y * y for y in b))
    return dot / (na * nb) if na and nb else 0.0


def metadata_matches(metadata: Mapping[str, Any], wanted: Mapping[str, Any] | None) -> bool:
    """Equality on each top-level key of ``wanted`` (the ``metadata_filter`` of every store)."""
    return not wanted or all(k in metadata and metadata[k] == v for k, v in wanted.items())


class BaseStore(ABC):
    """Key-value data shared across threads; see the module docstring.

    Subclass it for your own store: implement the four abstract methods (``put``, ``get``,
    ``delete``, ``list_keys``), override ``get_item`` when the store keeps metadata, times and
    versions, override the optional ones you support and turn their flags on in
    :attr:`capabilities`. Stores are async context managers
    (``async with HolographicStore(path) as store: ...``) and must be closed.
    """

    @property
    def capabilities(self) -> StoreCapabilities:
        return StoreCapabilities()

    def _missing(self, capability: str, operation: str, hint: str | None = None) -> StoreCapabilityError:
        return StoreCapabilityError(capability, type(self).__name__, hint, operation=operation)

    # -- required ---------------------------------------------------------------------------------
    @abstractmethod
    async def put(self, namespace: Namespace, key: str, value: Any, metadata: dict[str, Any] | None = None) -> None:
        """Store ``value`` under ``(namespace, key)``; a new put of the key bumps ``version``.

        ``metadata`` replaces the item's metadata (as in tulip). An embedding stored earlier with
        :meth:`put_with_embedding` is dropped: it described the old value.
        """

    @abstractmethod
    async def get(self, namespace: Namespace, key: str) -> Any | None:
        """The value, or ``None`` when the key is absent."""

    async def get_item(self, namespace: Namespace, key: str) -> StoreItem | None:
        """The value with its metadata, times and version, or ``None``.

        The default wraps :meth:`get` for stores that keep only values: empty metadata, version 1
        and both times set to now (the store did not record them). Stores that keep bookkeeping
        override it.
        """
        value = await self.get(namespace, key)
        if value is None:
            return None
        now = utcnow()
        return StoreItem(tuple(namespace), key, value, {}, now, now)

    @abstractmethod
    async def delete(self, namespace: Namespace, key: str) -> bool:
        """Delete one key; ``True`` if it existed."""

    @abstractmethod
    async def list_keys(self, namespace: Namespace, limit: int | None = 100) -> list[str]:
        """Keys of exactly ``namespace`` (not its sub-namespaces), most recently updated first.

        ``limit=None``: every key.
        """

    # -- defaults built on the required ones -----------------------------------------------------
    async def exists(self, namespace: Namespace, key: str) -> bool:
        return await self.get_item(namespace, key) is not None

    async def get_batch(self, keys: list[tuple[Namespace, str]]) -> dict[tuple[Namespace, str], Any]:
        """``{(namespace, key): value}`` for the keys that exist."""
        out: dict[tuple[Namespace, str], Any] = {}
        for ns, key in keys:
            item = await self.get_item(ns, key)
            if item is not None:
                out[(tuple(ns), key)] = item.value
        return out

    async def put_batch(self, items: list[tuple[Namespace, str, Any, dict[str, Any] | None]]) -> None:
        """Put several items; atomic where ``capabilities.batch_operations`` is on."""
        for ns, key, value, metadata in items:
            await self.put(ns, key, value, metadata)

    async def clear_namespace(self, namespace: Namespace) -> int:
        """Delete every key of ``namespace``; returns how many were deleted."""
        count = 0
        while keys := await self.list_keys(namespace, limit=1000):
            for key in keys:
                count += await self.delete(namespace, key)
        return count

    # -- optional ---------------------------------------------------------------------------------
    async def search(self, namespace: Namespace, query: str | None = None, limit: int = 10) -> list[StoreItem]:
        """Items of ``namespace`` matching ``query``, best first (``capabilities.search``).

        Only matching items are returned; ``query=None`` (or blank) lists the namespace, most
        recently updated first.
        """
        raise self._missing("search", "search", "use list_keys(), or a store with capabilities.search")

    async def put_with_embedding(
        self,
        namespace: Namespace,
        key: str,
        value: Any,
        embedding: list[float],
        metadata: dict[str, Any] | None = None,
    ) -> None:
        """Put ``value`` with a vector for :meth:`search_by_embedding` (``semantic_search``)."""
        raise self._missing("semantic_search", "put_with_embedding")

    async def search_by_embedding(
        self,
        namespace: Namespace,
        query_embedding: list[float],
        limit: int = 10,
        threshold: float | None = None,
        metadata_filter: dict[str, Any] | None = None,
    ) -> list[SemanticSearchResult]:
        """Items of ``namespace`` with a vector, closest (cosine) first; ``threshold`` is a
        minimum score, ``metadata_filter`` equality on top-level metadata keys."""
        raise self._missing("semantic_search", "search_by_embedding")

    async def get_embedding(self, namespace: Namespace, key: str) -> list[float] | None:
        """The vector stored with the item, or ``None``."""
        raise self._missing("semantic_search", "get_embedding")

    async def list_namespaces(self, prefix: Namespace | None = None, limit: int = 100) -> list[Namespace]:
        """Namespaces holding at least one item (optionally under ``prefix``), sorted."""
        raise self._missing("list_namespaces", "list_namespaces")

    # -- lifecycle --------------------------------------------------------------------------------
    async def close(self) -> None:  # noqa: B027 - stores without resources need not override
        """Release connections and threads; the store is unusable afterwards."""

    async def aclose(self) -> None:
        await self.close()

    async def __aenter__(self) -> BaseStore:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()
