"""Connections bound to an event loop: one resource per loop, and one pool + one-time schema.

asyncpg pools, redis-py clients, mysql-connector connections, aiohttp sessions and ``asyncio.Lock``
objects are bound to the event loop that first used them. A backend or store is often used from
more than one loop: a notebook awaits ``agent.run(...)`` on the kernel's loop and later calls
``agent.run_sync(...)``, which runs on tulip_nb's background loop, or a script calls
``asyncio.run`` twice. :class:`PerLoop` keeps one resource per running loop, and
:class:`PoolPerLoop` builds on it what every pool-owning backend and store needs: a pool per loop,
made on first use there, the schema step (create table / index / policy) run once per object, and
each pool closed when its loop shuts down (``asyncio.run`` ending), so a finished loop leaves no
connection behind.

Shared by :mod:`tulip_nb.memory.backends` and :mod:`tulip_nb.memory.store_backends`.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import weakref
from collections.abc import AsyncGenerator, Awaitable, Callable, Coroutine
from typing import Any, Generic, TypeVar

__all__ = ["PerLoop", "PoolPerLoop"]

T = TypeVar("T")
P = TypeVar("P")
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

    def discard(self, item: T) -> bool:
        """Forget the running loop's resource if it is ``item`` (the caller closes it)."""
        loop = asyncio.get_running_loop()
        with self._guard:
            if self._items.get(loop) is not item:
                return False
            del self._items[loop]
            return True

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


class PoolPerLoop(Generic[P]):
    """A connection pool per event loop, and a schema step run once for all of them.

    ``create()`` makes a pool on the running loop; ``setup(pool)`` (optional) creates what the
    backend needs on the server and runs until it succeeds once (on failure the new pool is closed
    and the error raised; the next call tries again); ``close(pool)`` releases one pool.
    :meth:`get` returns the running loop's pool, ready to use.
    """

    def __init__(
        self,
        create: Callable[[], Awaitable[P]],
        close: Callable[[P], Coroutine[Any, Any, None]],
        setup: Callable[[P], Awaitable[None]] | None = None,
    ) -> None:
        self._pools: PerLoop[P] = PerLoop()
        self._watchers: PerLoop[list[AsyncGenerator[None, None]]] = PerLoop()
        self._create, self._close, self._setup = create, close, setup
        self.ready = setup is None
        """Whether the schema step has run (always true without one)."""

    def current(self) -> P | None:
        """The running loop's pool, if one was made (schema or not)."""
        return self._pools.current()

    async def get(self) -> P:
        pool = self._pools.current()
        if pool is not None and self.ready:
            return pool
        pool = await self._pools.get(self._create_watched)
        if not self.ready and self._setup is not None:
            async with self._pools.lock():
                if not self.ready:
                    try:
                        await self._setup(pool)
                    except BaseException:
                        if self._pools.discard(pool):
                            with contextlib.suppress(Exception):
                                await self._close(pool)
                        raise
                    self.ready = True
        return pool

    async def _create_watched(self) -> P:
        pool = await self._create()
        watcher = self._on_loop_shutdown(pool)
        await watcher.__anext__()  # now the loop tracks it, and closes it in shutdown_asyncgens()
        self._watchers.get_sync(list).append(watcher)  # the loop holds it weakly; keep it alive
        return pool

    async def _on_loop_shutdown(self, pool: P) -> AsyncGenerator[None, None]:
        """An async generator that never finishes: its ``finally`` runs when the loop shuts down."""
        try:
            yield
        finally:
            if self._pools.discard(pool):
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(self._close(pool), _CLOSE_GRACE_SECONDS)

    async def aclose(self) -> None:
        """Close every loop's pool (the schema stays done)."""
        await self._pools.aclose(self._close)
