"""One module per backend family, each exporting ``FACTORIES`` (see ../conftest.py).

A factory is a :class:`tulip_nb.testing.CheckpointerFactory`: it sets up a fresh, empty store,
yields an opener (each call opens a new instance on that store, as another process would) and
removes the store afterwards.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable

from tulip_nb.memory.checkpointer import BaseCheckpointer
from tulip_nb.testing import CheckpointerFactory, Opener

Factory = CheckpointerFactory

__all__ = ["Factory", "Opener", "opener", "shared"]


def opener(make: Callable[[], BaseCheckpointer]) -> Opener:
    """An opener that builds a new instance with ``make()`` each time and closes it after."""

    @contextlib.asynccontextmanager
    async def open_instance() -> AsyncIterator[BaseCheckpointer]:
        cp = make()
        try:
            yield cp
        finally:
            await cp.close()

    return open_instance


def shared(cp: BaseCheckpointer) -> Opener:
    """An opener for a store that lives inside its one instance (memory): yields that instance."""

    @contextlib.asynccontextmanager
    async def open_instance() -> AsyncIterator[BaseCheckpointer]:
        yield cp

    return open_instance
