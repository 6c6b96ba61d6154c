"""Helpers shared by the ``tulip-nb`` subcommands that open a checkpointer."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")

__all__ = ["one_line", "require_existing", "with_checkpointer"]


def require_existing(cp: Any, url: str) -> None:
    """Refuse a file checkpointer whose directory does not exist: reading it would show "no threads"."""
    from tulip_nb.core.errors import UserError
    from tulip_nb.memory.backends.file import FileCheckpointer

    if isinstance(cp, FileCheckpointer) and not cp.base_dir.is_dir():
        raise UserError(f"no such directory {str(cp.base_dir)!r} (from {url!r}): there is no store to read")


def with_checkpointer(url: str, work: Callable[[Any], Awaitable[T]]) -> T:
    """Build the checkpointer ``url`` names, run ``work(checkpointer)``, close it, return the result.

    A directory store must exist already: every command that opens one this way reads it.
    """
    from tulip_nb.memory.backends import checkpointer_from_url

    async def main() -> T:
        cp = checkpointer_from_url(url)
        try:
            require_existing(cp, url)
            return await work(cp)
        finally:
            await cp.close()

    return asyncio.run(main())


def one_line(text: str | None, width: int = 100) -> str:
    """``text`` on one line, cut to ``width`` characters."""
    flat = " ".join((text or "").split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"
