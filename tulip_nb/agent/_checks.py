"""Argument checks for ``Agent(...)`` that deserve a clear message."""

from __future__ import annotations

import inspect
from typing import Any

from tulip_nb.agent._errors import NotACheckpointer
from tulip_nb.memory.checkpointer import BaseCheckpointer

__all__ = ["check_checkpointer"]

_FACTORIES = (
    ("redis", "redis_checkpointer"),
    ("postgres", "postgresql_checkpointer"),
    ("mysql", "mysql_checkpointer"),
    ("opensearch", "opensearch_checkpointer"),
    ("s3", "s3_checkpointer"),
)


def _factory_for(obj: Any) -> str:
    name = type(obj).__name__.lower()
    for needle, factory in _FACTORIES:
        if needle in name:
            return factory
    return "the matching *_checkpointer"


def check_checkpointer(obj: Any) -> BaseCheckpointer | None:
    """``obj`` if it is a checkpointer; :class:`NotACheckpointer` (a TypeError) otherwise.

    A storage backend (``save(thread_id, data)``) is the seed's classic mistake: the message names
    the ``*_checkpointer()`` factory that wraps it.
    """
    if obj is None or isinstance(obj, BaseCheckpointer):
        return obj
    save = getattr(obj, "save", None)
    kind = type(obj).__name__
    if callable(save):
        try:
            params = [p for p in inspect.signature(save).parameters if p != "self"]
        except (TypeError, ValueError):
            params = []
        if params and params[0] in ("thread_id", "key", "namespace"):
            factory = _factory_for(obj)
            raise NotACheckpointer(
                f"{kind} is a storage backend with save(thread_id, data), not a checkpointer; the agent "
                f"calls save(state, thread_id). Wrap it: checkpointer={factory}(...) "
                "(from tulip_nb.memory.backends)"
            )
    raise NotACheckpointer(
        f"{kind} is not a tulip_nb checkpointer: pass a BaseCheckpointer such as FileCheckpointer or "
        "MemoryCheckpointer (tulip_nb.memory.backends)"
    )
