"""Opening a store from what a lab call was given: a checkpointer, or its URL.

The lowest piece of the lab: a :class:`~tulip_nb.lab.Thread`, the corpus, the executors' workers
and the export all open stores this way. Its public home is :mod:`tulip_nb.lab.export`.
"""

from __future__ import annotations

from tulip_nb.core.errors import UserError
from tulip_nb.memory.checkpointer import BaseCheckpointer

__all__ = ["open_checkpointer"]


def open_checkpointer(where: BaseCheckpointer | str) -> tuple[BaseCheckpointer, bool]:
    """``(checkpointer, opened_here)`` for a checkpointer or a URL (those opened here get closed)."""
    if isinstance(where, BaseCheckpointer):
        return where, False
    if not isinstance(where, str):
        raise UserError(f"expected a checkpointer or a URL, got {type(where).__name__}")
    if where.startswith(("tulip-pg://", "postgresql+tulip://")):
        from tulip_nb.memory.backends.tulip_pg import tulip_pg_from_url

        return tulip_pg_from_url(where), True
    from tulip_nb.memory.backends import checkpointer_from_url

    return checkpointer_from_url(where), True
