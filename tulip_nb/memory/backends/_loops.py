"""One connection pool (or lock) per event loop.

asyncpg pools, redis-py clients, mysql-connector connections and ``asyncio.Lock`` objects are bound
to the event loop that first used them. A checkpointer is often used from more than one loop: a
notebook awaits ``agent.run(...)`` on the kernel's loop and later calls ``agent.run_sync(...)``,
which runs on tulip_nb's background loop. :class:`PerLoop` keeps one resource per running loop, so
the same backend object works from both.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import weakref
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Generic, TypeVar

__all__ = ["PerLoop"]

T = TypeVar("T")
_CLOSE_GRACE_SECONDS = 10.0


class PerLoop(Generic[T]):
    """A resource per running event loop, created on first use in that loop."""

    def __init__(self) -> None:
        self._items: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, T] = weakref.WeakKeyDictionary()
        self._locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = weakref.WeakKeyDictionary()
        self._guard = threading.Lock()

    def lock(self) -> asyncio.Lock:
        """An ``asyncio.Lock`` private to the running loop."""
        loop = asyncio.get_running_loop()
        with self._guard:
            lock = self._locks.get(loop)
            if lock is None:
                lock = self._locks[loop] = asyncio.Lock()
            return lock

    def current(self) -> T | None:
        """The running loop's resource, if it was created."""
        with self._guard:
            return self._items.get(asyncio.get_running_loop())

    def get_sync(self, create: Callable[[], T]) -> T:
        """The running loop's resource, made by a sync ``create`` on first use."""
        loop = asyncio.get_running_loop()
        with self._guard:
            item = self._items.get(loop)
            if item is None:
                item = self._items[loop] = create()
            return item

    async def get(self, create: Callable[[], Awaitable[T]]) -> T:
        """The running loop's resource, made by an async ``create`` on first use (once per loop)."""
        item = self.current()
        if item is not None:
            return item
        async with self.lock():
            item = self.current()
            if item is None:
                item = await create()
                with self._guard:
                    self._items[asyncio.get_running_loop()] = item
            return item

    async def aclose(self, close: Callable[[T], Coroutine[Any, Any, None]]) -> None:
        """Close every loop's resource: here for this loop, on its own loop for a running one."""
        current = asyncio.get_running_loop()
        with self._guard:
            items = list(self._items.items())
            self._items.clear()
        for loop, item in items:
            if loop is current:
                await close(item)
            elif loop.is_running() and not loop.is_closed():
                future = asyncio.run_coroutine_threadsafe(close(item), loop)
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(asyncio.wrap_future(future), _CLOSE_GRACE_SECONDS)
            # a loop that is closed took its connections with it
