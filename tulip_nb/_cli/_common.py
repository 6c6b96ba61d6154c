"""Helpers shared by the ``tulip-nb`` subcommands that open a checkpointer."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")

__all__ = ["one_line", "with_checkpointer"]


def with_checkpointer(url: str, work: Callable[[Any], Awaitable[T]]) -> T:
    """Build the checkpointer ``url`` names, run ``work(checkpointer)``, close it, return the result."""
    from tulip_nb.memory.urls import checkpointer_from_url

    async def main() -> T:
        cp = checkpointer_from_url(url)
        try:
            return await work(cp)
        finally:
            await cp.close()

    return asyncio.run(main())


def one_line(text: str | None, width: int = 100) -> str:
    """``text`` on one line, cut to ``width`` characters."""
    flat = " ".join((text or "").split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"
