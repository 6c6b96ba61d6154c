"""Durable cross-thread stores (seed 001): where long-term memory lives.

- :class:`HolographicStore` — SQLite + FTS5 in one file, no infrastructure (``path=":memory:"``
  by default; give it a file path for durability);
- :class:`PgMemory` — PostgreSQL + pgvector with per-tenant row-level security
  (``pip install 'tulip_nb[postgres]'``).

Both are imported lazily, so ``import tulip_nb.memory.store_backends`` pulls in no driver.
The in-process :class:`~tulip_nb.memory.store.InMemoryStore` lives in :mod:`tulip_nb.memory.store`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tulip_nb._lazy import lazy_exports

if TYPE_CHECKING:
    from tulip_nb.memory.store_backends._holographic import HolographicStore
    from tulip_nb.memory.store_backends._pg import PgMemory

__all__ = ["HolographicStore", "PgMemory"]

_LAZY = {
    "HolographicStore": "._holographic",
    "PgMemory": "._pg",
}

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
