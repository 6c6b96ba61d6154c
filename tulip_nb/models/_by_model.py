"""A per-process table keyed by model name, for what is known about models (limits, prices).

A model is named as a user writes it: ``"openai:gpt-4o-mini"``, ``"GPT-4o-mini"``,
``"gpt-4o-mini-2024-07-18"``. The table keys entries by the *bare* name (no ``provider:`` prefix,
lower case) and a lookup falls back to the name without its snapshot suffix (a date or
``-latest``), so a dated snapshot finds its family's entry unless it has its own.

>>> table = ByModel({"gpt-4o-mini": 1})
>>> table.get("openai:GPT-4o-mini-2024-07-18"), table.get("gpt-5"), table.get(None)
(1, None, None)
"""

from __future__ import annotations

import re
import threading
from collections.abc import Mapping
from typing import Generic, TypeVar

__all__ = ["ByModel", "bare_name"]

_T = TypeVar("_T")
_SNAPSHOT = re.compile(r"-(\d{4}-\d{2}-\d{2}|\d{4}|latest)$")


def bare_name(name: str) -> str:
    """``name`` without a ``provider:`` prefix, lower case."""
    name = name.strip()
    if ":" in name:
        name = name.split(":", 1)[1]
    return name.lower()


class ByModel(Generic[_T]):
    """Entries by bare model name, safe to read and change from several threads."""

    def __init__(self, entries: Mapping[str, _T] | None = None) -> None:
        self._lock = threading.Lock()
        self._entries: dict[str, _T] = {bare_name(k): v for k, v in (entries or {}).items()}

    def set(self, name: str, value: _T | None) -> None:
        """Set ``name``'s entry (None: remove it)."""
        with self._lock:
            if value is None:
                self._entries.pop(bare_name(name), None)
            else:
                self._entries[bare_name(name)] = value

    def get(self, name: str | None) -> _T | None:
        """``name``'s entry, else its snapshot family's, else None."""
        if not name:
            return None
        bare = bare_name(name)
        with self._lock:
            found = self._entries.get(bare)
            return found if found is not None else self._entries.get(_SNAPSHOT.sub("", bare))
