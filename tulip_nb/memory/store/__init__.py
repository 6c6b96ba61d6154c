"""tulip_nb.memory.store: the cross-thread store (seed 001, "Cross-thread store").

Checkpointers persist one case's state; a :class:`BaseStore` persists key-value data *across*
cases — a team playbook, a pricing-exception cache, facts about a customer::

    import asyncio
    from tulip_nb.memory.store import InMemoryStore   # tests / REPL

    async def main():
        store = InMemoryStore()
        await store.put(("tulip_memory", "support"), "refund_policy",
                        {"content": "Refunds over $500 need manager approval"})
        hit = await store.get(("tulip_memory", "support"), "refund_policy")

    asyncio.run(main())

Durable stores live in :mod:`tulip_nb.memory.store_backends`: :class:`HolographicStore` (SQLite +
FTS5, no infrastructure) and :class:`PgMemory` (PostgreSQL + pgvector, per-tenant row-level
security). :class:`~tulip_nb.memory.llm_memory.LLMMemoryManager` builds long-term memory on any
of them.
"""

from __future__ import annotations

from tulip_nb.memory.store._memory import InMemoryStore
from tulip_nb.memory.store.base import (
    BaseStore,
    Namespace,
    SemanticSearchResult,
    StoreCapabilities,
    StoreCapabilityError,
    StoreItem,
)

__all__ = [
    "BaseStore",
    "InMemoryStore",
    "Namespace",
    "SemanticSearchResult",
    "StoreCapabilities",
    "StoreCapabilityError",
    "StoreItem",
]
